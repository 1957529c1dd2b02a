"""statsd (`--statsd-address`): the broker pushes nsqd's metric names and types, with the same
figures as /stats, in UDP packets no larger than `--statsd-udp-packet-size`.

A UDP listener in the test receives every packet from the broker's start. Counters (`|c`) are
differences since the previous push, so their sum over every push is the /stats count; gauges
(`|g`) of the last push equal /stats once nothing moves. Topics are owned by whichever shard
their name hashes to: every topic's lines must come whole from its owner.
"""

import json
import socket
import threading
import time

import pytest

from brokerhttp import http
from nsqwire import Conn, wait_for

PACKET = 200
TOPIC = "statsd-orders"
CHANNELS = ("billing", "audit")
NSQD_TOPIC = ("message_count", "message_bytes", "depth", "backend_depth",
              "e2e_processing_latency_99")
NSQD_CHANNEL = ("message_count", "depth", "backend_depth", "in_flight_count", "deferred_count",
                "requeue_count", "timeout_count", "clients", "e2e_processing_latency_99")
COUNTERS = {"message_count", "message_bytes", "requeue_count", "timeout_count", "gc_runs"}
NSQD_MEM = ("heap_objects", "heap_idle_bytes", "heap_in_use_bytes", "heap_released_bytes",
            "gc_pause_usec_100", "gc_pause_usec_99", "gc_pause_usec_95", "next_gc_bytes",
            "gc_runs")


class Listener:
    """Collects every statsd packet sent to it, with its arrival time."""

    def __init__(self):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.packets = []
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self.done.is_set():
            try:
                data, _ = self.sock.recvfrom(65536)
            except socket.timeout:
                continue
            except OSError:
                return
            with self.lock:
                self.packets.append((time.monotonic(), data))

    def snapshot(self):
        with self.lock:
            return list(self.packets)

    def close(self):
        self.done.set()
        self.thread.join(timeout=2)
        self.sock.close()


def parse(packets):
    """[(name, value, kind)] of every line, in order."""
    lines = []
    for _, data in packets:
        for raw in data.decode().split("\n"):
            if not raw:
                continue
            name, rest = raw.split(":", 1)
            value, kind = rest.split("|", 1)
            lines.append((name, int(value), kind))
    return lines


@pytest.fixture
def listener():
    lst = Listener()
    yield lst
    lst.close()


@pytest.mark.timeout(90)
def test_statsd_sends_every_nsqd_metric_with_its_value_and_type(start_broker, listener):
    broker = start_broker(
        "--statsd-address=127.0.0.1:%d" % listener.port,
        "--statsd-interval=1s",
        "--statsd-udp-packet-size=%d" % PACKET,
        "--broadcast-address=test.host",
        "--e2e-processing-latency-percentile=0.99",
    )
    prefix = "nsq.test_host_%d." % broker.http_port
    status, body = http(broker, "POST", "/topic/create?topic=%s" % TOPIC)
    assert status == 200, body
    for ch in CHANNELS:
        status, body = http(broker, "POST", "/channel/create?topic=%s&channel=%s" % (TOPIC, ch))
        assert status == 200, body
    bodies = [b"m%03d" % i for i in range(30)]
    with Conn(broker.addr) as producer:
        producer.mpub(TOPIC, bodies)
    with Conn(broker.addr) as consumer:
        consumer.sub(TOPIC, CHANNELS[0], rdy=10)
        msgs = consumer.read_messages(10)
        consumer.cmd("RDY 0")
        for m in msgs[:8]:
            consumer.fin(m.id)
        consumer.req(msgs[8].id, 0)
        # The last one stays in flight while the gauges are read.
        time.sleep(0.3)
        stats = json.loads(http(broker, "GET", "/stats?format=json&topic=%s" % TOPIC)[1])
        # Two whole pushes after everything settled.
        settled = time.monotonic()
        wait_for(lambda: sum(1 for t, _ in listener.snapshot() if t > settled + 2.2) > 0,
                 timeout=10, what="two pushes after the figures settled")
        time.sleep(0.3)
        packets = listener.snapshot()
    assert packets, "no statsd packet received"
    assert all(len(d) <= PACKET for _, d in packets), [len(d) for _, d in packets]
    lines = parse(packets)
    names = {n for n, _, _ in lines}
    topic = next(t for t in stats["topics"] if t["topic_name"] == TOPIC)
    base = prefix + "topic.%s." % TOPIC
    expected = {base + m for m in NSQD_TOPIC}
    for ch in CHANNELS:
        expected |= {base + "channel.%s.%s" % (ch, m) for m in NSQD_CHANNEL}
    expected |= {prefix + "mem." + m for m in NSQD_MEM}
    assert expected <= names, sorted(expected - names)
    for name, _, kind in lines:
        metric = name.rsplit(".", 1)[1]
        assert kind == ("c" if metric in COUNTERS else "g"), (name, kind)

    def last(name):
        return [v for n, v, _ in lines if n == name][-1]

    def total(name):
        return sum(v for n, v, _ in lines if n == name)

    assert total(base + "message_count") == topic["message_count"] == 30
    assert total(base + "message_bytes") == topic["message_bytes"]
    assert last(base + "depth") == topic["depth"]
    assert last(base + "backend_depth") == topic["backend_depth"]
    for ch in topic["channels"]:
        cb = base + "channel.%s." % ch["channel_name"]
        assert total(cb + "message_count") == ch["message_count"], ch
        assert total(cb + "requeue_count") == ch["requeue_count"], ch
        assert total(cb + "timeout_count") == ch["timeout_count"], ch
        for gauge, field in (("depth", "depth"), ("backend_depth", "backend_depth"),
                             ("in_flight_count", "in_flight_count"),
                             ("deferred_count", "deferred_count"), ("clients", "client_count")):
            assert last(cb + gauge) == ch[field], (gauge, ch)
    billing = next(c for c in topic["channels"] if c["channel_name"] == CHANNELS[0])
    assert billing["in_flight_count"] == 1 and billing["requeue_count"] == 1
    assert billing["client_count"] == 1


@pytest.mark.timeout(60)
def test_statsd_flags_checked_and_ephemeral_left_out(start_broker, listener):
    broker = start_broker(
        "--statsd-address=127.0.0.1:%d" % listener.port,
        "--statsd-interval=1s",
        "--statsd-prefix=",
        "--statsd-mem-stats=false",
        "--statsd-exclude-ephemeral",
    )
    with Conn(broker.addr) as producer:
        producer.pub("kept", b"x")
        producer.pub("gone#ephemeral", b"x")
    start = time.monotonic()
    wait_for(lambda: any(t > start + 1.1 for t, _ in listener.snapshot()), timeout=10,
             what="a push")
    names = {n for n, _, _ in parse(listener.snapshot())}
    assert "topic.kept.message_count" in names, sorted(names)
    assert not any("ephemeral" in n for n in names), sorted(names)
    assert not any(n.startswith("mem.") for n in names), sorted(names)
