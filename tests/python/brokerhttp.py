"""HTTP helpers the wire tests share: one request to the broker's API, reading an option of
/config as nsqd answers it, reading its /metrics,
publishing over one keep-alive connection a request at a time, and which shard owns a topic.

Every request is bounded by a timeout; nothing here can block forever.
"""

import json
import re
import urllib.error
import urllib.request
import zlib


def http(broker, method, target, data=None, timeout=10):
    """(status, body) of one request to the broker's HTTP API; an error status is an answer."""
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (broker.http_port, target),
                                 data=data, method=method)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def config_value(broker, name, opener=None):
    """`GET /config/<name>` read as nsqd answers it: a string as its bare text (text/plain, or
    no body and no Content-Type when empty), anything else as JSON. `opener(target)` gives
    (status, headers, body) for another transport (HTTPS)."""
    target = "/config/%s" % name
    if opener is None:
        url = "http://127.0.0.1:%d%s" % (broker.http_port, target)
        with urllib.request.urlopen(url, timeout=10) as resp:
            status, headers, body = resp.status, resp.headers, resp.read()
    else:
        status, headers, body = opener(target)
    assert status == 200, (name, status, body)
    assert headers.get("X-NSQ-Content-Type") == "nsq; version=1.0", (name, dict(headers))
    kind = headers.get("Content-Type")
    if kind == "application/json; charset=utf-8":
        value = json.loads(body)
        assert not isinstance(value, str), "%s: a string answered as JSON: %r" % (name, body)
        return value
    if body == b"":
        assert kind is None, (name, kind)
        return ""
    assert kind == "text/plain; charset=utf-8", (name, kind, body)
    return body.decode()


def metrics_text(broker):
    """The broker's /metrics page, as text."""
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % broker.http_port, timeout=5) as r:
        return r.read().decode()


def per_shard(text, family):
    """{shard: value} of a per-shard family (`family{shard="N"} value`) in /metrics text."""
    return {int(m.group(1)): int(m.group(2))
            for m in re.finditer(r'^%s\{shard="(\d+)"\} (\d+)$' % re.escape(family), text, re.M)}


def keepalive_pub(sock, topic, body):
    """POSTs `body` to /pub?topic=`topic` on the open keep-alive `sock` and checks its 200 OK."""
    sock.sendall(b"POST /pub?topic=%s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s"
                 % (topic.encode(), len(body), body))
    resp = b""
    while not resp.endswith(b"\r\n\r\nOK"):
        chunk = sock.recv(4096)
        assert chunk, "HTTP connection closed"
        resp += chunk
    assert resp.startswith(b"HTTP/1.1 200 OK"), resp


def owner_of(topic, shards):
    """The broker's `Config::owner_of`: murmur3's finalizer over the name's crc32."""
    h = zlib.crc32(topic.encode())
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & 0xFFFFFFFF
    h ^= h >> 16
    return h % shards
