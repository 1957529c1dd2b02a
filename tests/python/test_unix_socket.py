"""Unix-socket listeners, as nsqd 1.3 opens them: a --tcp-address or --http-address that is not
host:port is a path. V2 (IDENTIFY, PUB, MPUB, SUB, receive, FIN) and the HTTP API (/ping, /pub,
/info, /stats) over the sockets, with --shards from the command line; /info reports -1 for
their ports as nsqd; a stale socket file left by a killed broker is replaced, a live one and a
missing directory are clear start-up errors; a clean stop removes the files.
"""

import http.client as httpclient
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

import pytest

from conftest import broker_bin
from brokerhttp import per_shard
from nsqwire import Conn, wait_for
from test_lookup import Lookup


class UnixHTTPConnection(httpclient.HTTPConnection):
    """http.client over AF_UNIX."""

    def __init__(self, path, timeout=10):
        super().__init__("localhost", timeout=timeout)
        self.path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.path)


def request(path, method, target, body=None):
    conn = UnixHTTPConnection(path)
    try:
        conn.request(method, target, body=body)
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


class UnixBroker:
    """A broker whose TCP and HTTP listeners are unix sockets in a scratch directory."""

    def __init__(self, shards, tcp=True, http=True, extra=()):
        self.dir = tempfile.mkdtemp(prefix="broker-unix-")
        self.tcp = os.path.join(self.dir, "tcp.sock")
        self.http = os.path.join(self.dir, "http.sock")
        self.log = os.path.join(self.dir, "broker.log")
        os.mkdir(os.path.join(self.dir, "data"))
        self.args = [broker_bin(), "--data-path=" + os.path.join(self.dir, "data"),
                     "--shards=%d" % shards,
                     "--tcp-address=" + (self.tcp if tcp else "127.0.0.1:0"),
                     "--http-address=" + (self.http if http else "127.0.0.1:0")] + list(extra)
        self.proc = None

    def start(self, timeout=10):
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(self.args, stdout=subprocess.DEVNULL, stderr=log,
                                         stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while "HTTP: listening" not in self.stderr():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("broker did not start (%s):\n%s"
                                   % (self.proc.poll(), self.stderr()))
            time.sleep(0.05)
        return self

    def stderr(self):
        with open(self.log, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode if self.proc else None

    def cleanup(self):
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def unix_broker(shards):
    brokers = []

    def start(**kw):
        b = UnixBroker(shards, **kw)
        brokers.append(b)
        return b.start()
    yield start
    for b in brokers:
        b.cleanup()


def test_v2_and_http_over_unix_sockets(unix_broker):
    b = unix_broker()
    assert request(b.http, "GET", "/ping") == (200, b"OK")
    info = json.loads(request(b.http, "GET", "/info")[1])
    assert (info["tcp_port"], info["http_port"]) == (-1, -1), info
    # Topics on every shard (their owners differ), published over HTTP and V2.
    topics = ["unix_%d" % i for i in range(8)]
    for t in topics:
        assert request(b.http, "POST", "/pub?topic=" + t, b"over http") == (200, b"OK")
    with Conn(b.tcp) as pub:
        pub.identify()
        for t in topics:
            pub.pub(t, b"over v2")
        pub.mpub(topics[0], [b"m1", b"m2"])
    for t in topics:
        with Conn(b.tcp) as sub:
            sub.identify()
            sub.sub(t, "c", rdy=10)
            want = [b"over http", b"over v2"] + ([b"m1", b"m2"] if t == topics[0] else [])
            msgs = sub.read_messages(len(want))
            assert [m.body for m in msgs] == want, t
            for m in msgs:
                sub.fin(m.id)
            sub.expect_nothing(0.2)
    status, body = request(b.http, "GET", "/stats?format=json")
    stats = json.loads(body)
    counts = {t["topic_name"]: t["message_count"] for t in stats["topics"]}
    assert counts[topics[0]] == 4 and all(counts[t] == 2 for t in topics[1:]), counts
    # nsqd (Go) writes a unix client's address `@`.
    with Conn(b.tcp) as held:
        held.identify(client_id="unix-client")
        held.sub("unix_held", "c")

        def listed():
            doc = json.loads(request(b.http, "GET", "/stats?format=json&topic=unix_held")[1])
            return [c for t in doc["topics"] for ch in t["channels"] for c in ch["clients"]]
        wait_for(lambda: listed(), 10, what="the unix client in /stats")
        assert listed()[0]["remote_address"] == "@", listed()
    assert b.stop() == 0
    assert not os.path.exists(b.tcp) and not os.path.exists(b.http), "removed at a clean stop"


def _per_shard(http_path, family):
    text = request(http_path, "GET", "/metrics")[1].decode()
    return per_shard(text, family)


def test_connections_are_dealt_to_every_shard(unix_broker, shards):
    """Shard 0 accepts on the socket and gives the connections to the shards in turn."""
    if shards < 2:
        pytest.skip("one shard")
    b = unix_broker()
    held = [Conn(b.tcp) for _ in range(2 * shards)]
    try:
        for c in held:
            c.identify()
        wait_for(lambda: all(n >= 2 for n in
                             _per_shard(b.http, "nsq_shard_tcp_connections").values()),
                 10, what="TCP connections on every shard")
        keep = []
        for _ in range(2 * shards):
            c = UnixHTTPConnection(b.http)
            c.request("GET", "/ping")
            assert c.getresponse().read() == b"OK"
            keep.append(c)
        counts = _per_shard(b.http, "nsq_shard_http_connections")
        assert len(counts) == shards and all(n >= 1 for n in counts.values()), counts
        for c in keep:
            c.close()
        # Each serves V2 wherever it landed: a publish on each, consumed on one.
        for c in held:
            c.pub("dealt", b"x")
        with Conn(b.tcp) as sub:
            sub.identify()
            sub.sub("dealt", "c", rdy=100)
            assert len(sub.read_messages(len(held))) == len(held)
    finally:
        for c in held:
            c.close()


def test_one_unix_socket_beside_tcp(unix_broker):
    """A path for HTTP only: TCP stays on every shard; /info gives the TCP port and -1."""
    b = unix_broker(tcp=False)
    info = json.loads(request(b.http, "GET", "/info")[1])
    assert info["tcp_port"] > 0 and info["http_port"] == -1, info


def test_lookups_hear_the_broadcast_ports(unix_broker, tmp_path):
    """A unix socket has no port; lookups refuse port 0 (nsqd would register it and be refused
    for ever), so with lookups a broadcast port is required, and registered."""
    lookup = Lookup(str(tmp_path)).start()
    try:
        code, err = _start_fails("--tcp-address=" + str(tmp_path / "t.sock"),
                                 "--http-address=127.0.0.1:0",
                                 "--lookupd-tcp-address=" + lookup.tcp_address)
        assert code != 0 and "--broadcast-tcp-port" in err, err
        b = unix_broker(extra=["--lookupd-tcp-address=" + lookup.tcp_address,
                               "--broadcast-address=127.0.0.1", "--broadcast-tcp-port=14150",
                               "--broadcast-http-port=14151"])
        assert request(b.http, "POST", "/pub?topic=unix_registered", b"x") == (200, b"OK")

        def registered():
            status, body = lookup.get("/nodes")
            return [p for p in json.loads(body)["producers"] if "unix_registered" in p["topics"]]
        wait_for(lambda: registered(), 10, what="the broker's registration")
        node = registered()[0]
        assert (node["tcp_port"], node["http_port"]) == (14150, 14151), node
    finally:
        lookup.stop()


def _start_fails(*flags):
    d = tempfile.mkdtemp(prefix="broker-unix-fail-")
    os.mkdir(os.path.join(d, "data"))
    try:
        p = subprocess.run([broker_bin(), "--data-path=" + os.path.join(d, "data")] + list(flags),
                           stdin=subprocess.DEVNULL, capture_output=True, timeout=20)
    finally:
        shutil.rmtree(d, ignore_errors=True)
    return p.returncode, p.stderr.decode("utf-8", "replace")


def test_stale_socket_file_is_replaced_a_live_one_refused(unix_broker):
    first = unix_broker()
    # A broker killed outright leaves its socket files behind.
    first.proc.kill()
    first.proc.wait()
    assert os.path.exists(first.tcp) and os.path.exists(first.http)
    # The same paths and data directory, started again.
    again = UnixBroker.__new__(UnixBroker)
    again.__dict__.update(first.__dict__, proc=None, log=os.path.join(first.dir, "again.log"))
    try:
        again.start()
        assert request(again.http, "GET", "/ping") == (200, b"OK")
        assert "removing a stale socket file" in again.stderr()
        # Something listens there now: a second broker is refused, the files stay.
        code, err = _start_fails("--tcp-address=" + again.tcp, "--http-address=127.0.0.1:0")
        assert code != 0 and "something is listening there" in err and again.tcp in err, err
        assert request(again.http, "GET", "/ping") == (200, b"OK")
    finally:
        again.stop()


def test_missing_directory_or_a_plain_file_is_a_clear_error(tmp_path):
    missing = str(tmp_path / "no-such-dir" / "tcp.sock")
    code, err = _start_fails("--tcp-address=" + missing, "--http-address=127.0.0.1:0")
    assert code != 0 and "--tcp-address" in err and "does not exist" in err, err
    plain = tmp_path / "http.sock"
    plain.write_text("not a socket")
    code, err = _start_fails("--tcp-address=127.0.0.1:0", "--http-address=" + str(plain))
    assert code != 0 and "not a socket" in err, err
    assert plain.read_text() == "not a socket"
