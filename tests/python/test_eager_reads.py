"""Eager reads: after answering, a connection's reader takes the client's next command straight
from the socket when it is already there (broker/src/eager_read.rs).

A one-at-a-time publisher on the CPU of the topic's owner is the case it is for: the OK wakes the
publisher on that CPU, which sends its next PUB before the shard reads again. These tests check
that what is read that way is exactly what was sent, in order, mixed with pipelined commands
and frames split across reads; that other connections of the same shard are still served
meanwhile; and, through /metrics, that the path was taken.
"""

import multiprocessing
import os
import re
import socket
import struct
import threading
import urllib.request

import pytest

from brokerhttp import keepalive_pub, metrics_text, per_shard
from nsqwire import Conn, cmd_bytes, mpub_bytes

TOPIC = "eager"


def shard_counter(text, name, shard):
    counts = per_shard(text, name)
    assert shard in counts, "%s for shard %d not in /metrics" % (name, shard)
    return counts[shard]


def owner_shard(broker, topic):
    req = urllib.request.Request(
        "http://127.0.0.1:%d/topic/create?topic=%s" % (broker.http_port, topic), method="POST"
    )
    with urllib.request.urlopen(req, timeout=5) as r:
        assert r.status == 200
    m = re.search(r'^nsq_topic_shard\{topic="%s"\} (\d+)$' % topic, metrics_text(broker), re.M)
    assert m, "no nsq_topic_shard for %s" % topic
    return int(m.group(1))


def read_response(sock):
    """One frame off a blocking socket: (frame type, data)."""
    head = b""
    while len(head) < 8:
        chunk = sock.recv(8 - len(head))
        assert chunk, "connection closed"
        head += chunk
    size, ftype = struct.unpack(">ii", head)
    data = b""
    while len(data) < size - 4:
        chunk = sock.recv(size - 4 - len(data))
        assert chunk, "connection closed"
        data += chunk
    return ftype, data


def expect_ok(sock):
    ftype, data = read_response(sock)
    assert (ftype, data) == (0, b"OK"), (ftype, data)


def publish_on_cpu(host, port, cpu, bodies):
    """Publishes `bodies` from this process pinned to `cpu`, mostly one PUB at a time (waiting for
    each OK), with a pipelined pair, an MPUB and a PUB sent in two pieces along the way."""
    os.sched_setaffinity(0, {cpu})
    s = socket.create_connection((host, port), timeout=10)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.sendall(b"  V2")
    i = 0
    while i < len(bodies):
        if i % 500 == 250 and i + 2 <= len(bodies):
            # Two PUBs in one write: two OKs, in order.
            s.sendall(cmd_bytes("PUB " + TOPIC, bodies[i]) + cmd_bytes("PUB " + TOPIC, bodies[i + 1]))
            expect_ok(s)
            expect_ok(s)
            i += 2
        elif i % 500 == 400 and i + 5 <= len(bodies):
            s.sendall(mpub_bytes(TOPIC, bodies[i:i + 5]))
            expect_ok(s)
            i += 5
        elif i % 500 == 450:
            # A frame split across two writes: the first read gets half a command.
            frame = cmd_bytes("PUB " + TOPIC, bodies[i])
            s.sendall(frame[:7])
            s.sendall(frame[7:])
            expect_ok(s)
            i += 1
        else:
            s.sendall(cmd_bytes("PUB " + TOPIC, bodies[i]))
            expect_ok(s)
            i += 1
    s.close()


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs")
def test_one_at_a_time_publisher_on_the_owners_cpu_is_read_eagerly_and_exactly(start_broker):
    broker = start_broker(shards=2)
    owner = owner_shard(broker, TOPIC)
    cpu = sorted(os.sched_getaffinity(0))[owner]
    before = metrics_text(broker)
    hits_before = shard_counter(before, "nsq_shard_eager_reads_total", owner)

    # A consumer on the same shard: its deliveries and FINs must keep flowing while the
    # publisher is answered eagerly.
    before_aff = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {cpu})
    try:
        consumer = Conn(broker.addr)
    finally:
        os.sched_setaffinity(0, before_aff)
    consumer.sub(TOPIC, "c", rdy=100)

    n = 3000
    bodies = [b"m%05d-" % k + os.urandom(8).hex().encode() for k in range(n)]
    got = []
    errors = []
    done = threading.Event()

    def consume():
        try:
            while len(got) < n:
                m = consumer.read_message(timeout=20)
                got.append(m.body)
                consumer.fin(m.id)
        except Exception as e:  # reported by the main thread
            errors.append(e)
        done.set()

    t = threading.Thread(target=consume, daemon=True)
    t.start()
    # In a process of its own, so that the consumer thread's GIL does not pace it.
    publisher = multiprocessing.get_context("fork").Process(
        target=publish_on_cpu, args=(broker.host, broker.port, cpu, bodies)
    )
    publisher.start()
    publisher.join(60)
    assert publisher.exitcode == 0, "publisher exit code %r" % publisher.exitcode
    assert done.wait(30), "consumer got %d of %d" % (len(got), n)
    assert not errors, errors
    t.join(5)
    consumer.close()
    assert got == bodies

    text = metrics_text(broker)
    hits = shard_counter(text, "nsq_shard_eager_reads_total", owner) - hits_before
    misses = shard_counter(text, "nsq_shard_eager_read_misses_total", owner)
    assert hits > 0, "no eager reads on shard %d (misses %d)" % (owner, misses)


def test_eager_reads_are_counted_per_shard_in_metrics(start_broker, shards):
    broker = start_broker()
    text = metrics_text(broker)
    for name in ("nsq_shard_eager_reads_total", "nsq_shard_eager_read_misses_total"):
        assert "# TYPE %s counter" % name in text
        for s in range(shards):
            shard_counter(text, name, s)  # asserts that the shard's sample is there


def test_http_keep_alive_publishes_one_at_a_time_all_arrive(start_broker):
    """Eager reads on the HTTP side: a keep-alive client publishing one request at a time."""
    broker = start_broker()
    owner_shard(broker, TOPIC)
    s = socket.create_connection(("127.0.0.1", broker.http_port), timeout=10)
    n = 500
    for k in range(n):
        keepalive_pub(s, TOPIC, b"h%04d" % k)
    s.close()
    with Conn(broker.addr) as c:
        c.sub(TOPIC, "h", rdy=n)
        msgs = c.read_messages(n)
    assert [m.body for m in msgs] == [b"h%04d" % k for k in range(n)]
