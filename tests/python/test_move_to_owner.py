"""--move-to-owner: a TCP connection moves, once, to the shard that owns the topic of its SUB or
of its first publish, carrying what it has said (IDENTIFY) and what it sent
after that command, and the client sees nothing of it but its answers in command order.

Connections are opened from a thread pinned to one CPU, so that connection steering puts them
all on that CPU's shard; the topics are chosen by their owner (the broker's hash, below).
Read back through /metrics (nsq_shard_tcp_connections, nsq_shard_tcp_handovers_total).
"""

import json
import os
import threading
import time
import zlib

import pytest

from brokerhttp import http, metrics_text, owner_of, per_shard
from nsqwire import FRAME_MESSAGE, FRAME_RESPONSE, Conn, Message, cmd_bytes, mpub_bytes, wait_for

pytestmark = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs")


def topic_owned_by(shard, prefix, shards=2):
    for i in range(1000):
        t = "%s_%d" % (prefix, i)
        if owner_of(t, shards) == shard:
            return t
    raise AssertionError("no topic for shard %d" % shard)


def connect_on_shard(broker, shard):
    """A V2 connection opened from the CPU of `shard` (shard i runs on the i-th allowed CPU)."""
    cpu = sorted(os.sched_getaffinity(0))[shard]
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {cpu})
    try:
        return Conn(broker.addr)
    finally:
        os.sched_setaffinity(0, before)


def connections(broker):
    return per_shard(metrics_text(broker), "nsq_shard_tcp_connections")


def handovers(broker):
    return per_shard(metrics_text(broker), "nsq_shard_tcp_handovers_total")


def read_answers(conn, n):
    """The next n non-heartbeat frames, as (type, data)."""
    return [conn.read_frame() for _ in range(n)]


def stats(broker, query=""):
    status, body = http(broker, "GET", "/stats?format=json" + query)
    assert status == 200, body
    return json.loads(body)


def stats_topic(broker, topic):
    topics = stats(broker, "&topic=" + topic)["topics"]
    return next((t for t in topics if t["topic_name"] == topic), None)


def test_producer_moves_with_its_pipelined_commands(start_broker):
    broker = start_broker("--connection-steering", "cpu", shards=2)
    topic = topic_owned_by(1, "mv_pub")
    other = topic_owned_by(0, "mv_other")
    c = connect_on_shard(broker, 0)
    wait_for(lambda: connections(broker).get(0) == 1, 5, what="connection on shard 0")
    # IDENTIFY first (its answer written by shard 0), then one write holding the publish that
    # moves the connection and commands after it, one cut in the middle of its body.
    c.cmd("IDENTIFY", json.dumps({"client_id": "mover", "feature_negotiation": True}).encode())
    ftype, data = c.read_frame()
    assert ftype == FRAME_RESPONSE and json.loads(data)["max_rdy_count"] > 0
    burst = (cmd_bytes("PUB %s" % topic, b"m1") + cmd_bytes("NOP") + mpub_bytes(topic, [b"m2", b"m3"])
             + cmd_bytes("DPUB %s 0" % topic, b"m4") + cmd_bytes("PUB %s" % other, b"o1")
             + cmd_bytes("PUB %s" % topic, b"m5"))
    cut = len(burst) - 2
    c.send(burst[:cut])
    time.sleep(0.05)
    c.send(burst[cut:])
    assert read_answers(c, 5) == [(FRAME_RESPONSE, b"OK")] * 5
    wait_for(lambda: connections(broker) == {0: 0, 1: 1}, 5, what="the connection on shard 1")
    assert handovers(broker) == {0: 1, 1: 0}
    # It moves once: publishing to shard 0's topic now hops, and the connection stays.
    c.pub(other, b"o2")
    assert connections(broker) == {0: 0, 1: 1}
    wait_for(lambda: (stats_topic(broker, topic) or {}).get("message_count") == 5, 5,
             what="5 messages in %s" % topic)
    assert stats_topic(broker, other)["message_count"] == 2
    # /stats lists the producer under its own name, with every publish counted.
    (p,) = stats(broker)["producers"]
    assert p["client_id"] == "mover", p
    assert {c["topic"]: c["count"] for c in p["pub_counts"]} == {topic: 5, other: 2}, p
    c.close()


def test_consumer_moves_at_sub_and_gets_every_message(start_broker):
    broker = start_broker("--connection-steering", "cpu", "--msg-timeout=60s", shards=2)
    topic = topic_owned_by(1, "mv_sub")
    with connect_on_shard(broker, 1) as p:
        for i in range(50):
            p.pub(topic, b"msg%d" % i)
    c = connect_on_shard(broker, 0)
    c.identify(client_id="consumer", heartbeat_interval=1000)
    # SUB and RDY in one write: RDY arrives at the owner with the connection.
    c.send(cmd_bytes("SUB %s ch" % topic) + cmd_bytes("RDY 100"))
    c.expect_ok("SUB")
    got = c.read_messages(50)
    assert sorted(m.body for m in got) == sorted(b"msg%d" % i for i in range(50))
    for m in got:
        c.fin(m.id)
    assert handovers(broker) == {0: 1, 1: 0}
    wait_for(lambda: connections(broker) == {0: 0, 1: 1}, 5, what="the consumer alone, on shard 1")
    def finished():
        (ch,) = stats_topic(broker, topic)["channels"]
        (client,) = ch["clients"]
        return (ch["depth"], ch["in_flight_count"], client["finish_count"]) == (0, 0, 50)
    wait_for(finished, 5, what="50 FINs")
    # Heartbeats negotiated on shard 0 keep going from shard 1 (1 s interval).
    c.expect_nothing(2.5)
    assert c.heartbeats >= 1
    c.close()


def test_batches_move_compressed_connections_and_flag_off_stay(start_broker):
    broker = start_broker("--connection-steering", "cpu", shards=2)
    topic = topic_owned_by(1, "mv_batch")
    # A batch moves like a single publish; one compressed by IDENTIFY stays (its layers are
    # this shard's).
    c = connect_on_shard(broker, 0)
    c.mpub(topic, [b"x%d" % i for i in range(50)])
    wait_for(lambda: connections(broker) == {0: 0, 1: 1}, 5, what="the batcher on shard 1")
    c.close()
    d = connect_on_shard(broker, 0)
    d.identify(feature_negotiation=True, deflate=True, deflate_level=1)
    # From here both directions are raw deflate streams.
    out = zlib.compressobj(1, zlib.DEFLATED, -15)
    d.send(out.compress(cmd_bytes("PUB %s" % topic, b"deflated")) + out.flush(zlib.Z_SYNC_FLUSH))
    inflate = zlib.decompressobj(-15)
    # What followed the IDENTIFY answer in the same read is already deflated.
    plain = inflate.decompress(bytes(d.buf))
    d.buf.clear()
    deadline = time.time() + 5
    while plain.count(b"OK") < 2 and time.time() < deadline:
        d.sock.settimeout(max(0.01, deadline - time.time()))
        plain += inflate.decompress(d.sock.recv(4096))
    # The upgrade's OK, then the PUB's.
    assert plain == (b"\0\0\0\x06\0\0\0\0OK") * 2, plain
    assert connections(broker) == {0: 1, 1: 0}
    assert handovers(broker) == {0: 1, 1: 0}
    d.close()

    off = start_broker("--connection-steering", "cpu", "--move-to-owner=false", shards=2)
    p = connect_on_shard(off, 0)
    p.pub(topic, b"one")
    s = connect_on_shard(off, 0)
    s.sub(topic, "ch", rdy=1)
    assert s.read_message().body == b"one"
    assert connections(off) == {0: 2, 1: 0}
    assert handovers(off) == {0: 0, 1: 0}
    p.close()
    s.close()


def test_many_movers_at_once_lose_nothing(start_broker):
    """Producers and consumers on both shards and topics of both, moving while they work."""
    broker = start_broker("--connection-steering", "cpu", "--msg-timeout=60s", shards=2)
    topics = [topic_owned_by(0, "mv_many_a"), topic_owned_by(1, "mv_many_b")]
    per_producer = 200
    consumers = []
    for i, t in enumerate(topics):
        for shard in (0, 1):
            c = connect_on_shard(broker, shard)
            c.sub(t, "ch")
            c.cmd("RDY 1000")
            consumers.append((t, c))
    errors = []

    def produce(shard, t, k):
        try:
            with connect_on_shard(broker, shard) as p:
                for j in range(per_producer):
                    p.pub(t, b"%d-%d" % (k, j))
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=produce, args=(shard, t, k))
               for k, (shard, t) in enumerate((s, t) for s in (0, 1) for t in topics)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(30)
    assert not errors, errors
    want = {t: {b"%d-%d" % (k, j) for k, (s, tt) in enumerate((s, tt) for s in (0, 1) for tt in topics)
                if tt == t for j in range(per_producer)} for t in topics}
    got = {t: [] for t in topics}
    deadline = time.time() + 20
    while any(len(got[t]) < len(want[t]) for t in topics) and time.time() < deadline:
        for t, c in consumers:
            try:
                ftype, data = c.read_frame(timeout=0.05)
            except (TimeoutError, OSError):
                continue
            if ftype == FRAME_MESSAGE:
                m = Message.parse(data)
                got[t].append(m.body)
                c.fin(m.id)
    for t in topics:
        assert sorted(got[t]) == sorted(want[t]), t
    # Every connection that could move did: all now sit on their topic's owner.
    assert connections(broker) == {0: 2, 1: 2}
    for _, c in consumers:
        c.close()
