"""The HTTP API with pynsq: messages published over HTTP (/pub, /mpub, binary /mpub, deferred
/pub) reach an nsq.Reader over TCP, and /stats counts them; pausing a channel over HTTP holds
its messages from a connected Reader until it is unpaused.

Each scenario runs on a fresh asyncio loop, bounded by asyncio.wait_for; HTTP calls use
urllib with a timeout.
"""

import asyncio
import json
import logging
import struct
import time
import urllib.error
import urllib.request

import nsq
from aio import run, until  # noqa: E402

logging.getLogger("nsq").setLevel(logging.CRITICAL)

HTTP_TIMEOUT = 10






def http(broker, method, target, body=None):
    """(status, body bytes) of one HTTP request to the broker."""
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (broker.http_port, target),
                                 data=body, method=method)
    try:
        with urllib.request.urlopen(req, timeout=HTTP_TIMEOUT) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def post_ok(broker, target, body=b""):
    status, data = http(broker, "POST", target, body)
    assert status == 200, "%s: %d %r" % (target, status, data)
    return data


def stats(broker, topic):
    status, data = http(broker, "GET", "/stats?format=json&topic=%s" % topic)
    assert status == 200
    return json.loads(data)


def reader(broker, topic, channel, handler, **kw):
    kw.setdefault("max_in_flight", 10)
    return nsq.Reader(topic=topic, channel=channel, message_handler=handler,
                      nsqd_tcp_addresses=[broker.tcp_address], lookupd_poll_interval=60, **kw)


async def reader_ready(r):
    await until(lambda: any(c.connected() for c in r.conns.values()), 10, "Reader connection")
    # Give the SUB and RDY time to reach the topic's owner.
    await asyncio.sleep(0.2)


def test_http_published_messages_reach_a_pynsq_reader(broker):
    topic = "http_pynsq"
    got = []

    def handler(msg):
        got.append((msg.body, msg.attempts))
        return True

    binary = struct.pack(">I", 2)
    for body in (b"bin-1", b"bin\n2"):
        binary += struct.pack(">I", len(body)) + body

    async def scenario():
        post_ok(broker, "/topic/create?topic=%s" % topic)
        post_ok(broker, "/channel/create?topic=%s&channel=ch" % topic)
        r = reader(broker, topic, "ch", handler)
        await reader_ready(r)
        assert post_ok(broker, "/pub?topic=%s" % topic, b"single") == b"OK"
        post_ok(broker, "/mpub?topic=%s" % topic, b"line-1\nline-2\n\nline-3")
        post_ok(broker, "/mpub?topic=%s&binary=true" % topic, binary)
        post_ok(broker, "/pub?topic=%s&defer=300" % topic, b"deferred")
        await until(lambda: len(got) >= 7, 15, "7 messages")
        await asyncio.sleep(0.3)
        r.close()

    run(scenario)
    want = sorted([(b"single", 1), (b"line-1", 1), (b"line-2", 1), (b"line-3", 1),
                   (b"bin-1", 1), (b"bin\n2", 1), (b"deferred", 1)])
    assert sorted(got) == want
    t = stats(broker, topic)["topics"][0]
    assert t["message_count"] == 7
    ch = t["channels"][0]
    assert ch["message_count"] == 7
    assert ch["in_flight_count"] == 0


def test_http_pause_holds_messages_from_a_connected_pynsq_reader(broker):
    topic = "http_pynsq_pause"
    got = []

    def handler(msg):
        got.append(msg.body)
        return True

    async def scenario():
        post_ok(broker, "/topic/create?topic=%s" % topic)
        post_ok(broker, "/channel/create?topic=%s&channel=ch" % topic)
        r = reader(broker, topic, "ch", handler)
        await reader_ready(r)
        post_ok(broker, "/channel/pause?topic=%s&channel=ch" % topic)
        for i in range(3):
            post_ok(broker, "/pub?topic=%s" % topic, b"held-%d" % i)
        await asyncio.sleep(0.5)
        assert got == [], "a paused channel delivered %r" % got
        ch = stats(broker, topic)["topics"][0]["channels"][0]
        assert ch["paused"] is True and ch["depth"] == 3
        post_ok(broker, "/channel/unpause?topic=%s&channel=ch" % topic)
        await until(lambda: len(got) >= 3, 10, "3 messages after unpause")
        r.close()

    run(scenario)
    assert sorted(got) == [b"held-0", b"held-1", b"held-2"]
