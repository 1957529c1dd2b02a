"""Connection steering: which shard the kernel hands a new connection to.

With --connection-steering cpu (the default) a connection goes to a shard pinned to the CPU
that received it; on loopback that is the CPU the client connected from. With `hash` the
kernel spreads connections by their addresses. Read back through /metrics'
nsq_shard_tcp_connections{shard="N"}.
"""

import os
import re
import socket
import time
import urllib.request

import pytest

from brokerhttp import keepalive_pub, metrics_text, per_shard

CONNS = 12


def shard_connections(broker):
    return per_shard(metrics_text(broker), "nsq_shard_tcp_connections")


def connect_from_cpu(broker, cpu, n):
    """Opens n V2 connections from a thread pinned to `cpu`; returns them open."""
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {cpu})
    try:
        conns = []
        for _ in range(n):
            s = socket.create_connection((broker.host, broker.port), timeout=5)
            s.sendall(b"  V2")
            conns.append(s)
    finally:
        os.sched_setaffinity(0, before)
    return conns


def wait_for_total(broker, total):
    deadline = time.time() + 5
    counts = shard_connections(broker)
    while sum(counts.values()) != total and time.time() < deadline:
        time.sleep(0.05)
        counts = shard_connections(broker)
    assert sum(counts.values()) == total, counts
    return counts


def usable_cpus():
    return sorted(os.sched_getaffinity(0))


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs")
def test_cpu_steering_keeps_a_connection_on_its_cpus_shard(start_broker):
    cpus = usable_cpus()[:2]
    broker = start_broker("--connection-steering", "cpu", shards=2)
    # Shard i is pinned to the broker's i-th allowed CPU, which are ours.
    for shard, cpu in enumerate(cpus):
        conns = connect_from_cpu(broker, cpu, CONNS)
        try:
            counts = wait_for_total(broker, CONNS)
            assert counts.get(shard) == CONNS, (cpu, counts)
        finally:
            for c in conns:
                c.close()
        wait_for_total(broker, 0)


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs")
def test_hash_steering_spreads_connections_from_one_cpu(start_broker):
    broker = start_broker("--connection-steering", "hash", shards=2)
    conns = connect_from_cpu(broker, usable_cpus()[0], 32)
    try:
        counts = wait_for_total(broker, 32)
        # 32 connections all hashing to one of two shards: about 1 in 2^31.
        assert all(counts.get(s, 0) > 0 for s in (0, 1)), counts
    finally:
        for c in conns:
            c.close()


def test_bad_steering_value_is_refused_at_start(tmp_path):
    import subprocess
    from conftest import broker_bin

    r = subprocess.run(
        [broker_bin(), "--connection-steering", "round-robin", "--data-path", str(tmp_path)],
        capture_output=True, timeout=10,
    )
    assert r.returncode == 2
    assert b"--connection-steering" in r.stderr and b"round-robin" in r.stderr


def topic_shards(broker):
    text = metrics_text(broker)
    owners = {}
    for m in re.finditer(r'^nsq_topic_shard\{topic="([^"]+)"\} (\d+)$', text, re.M):
        assert m.group(1) not in owners, "two owners for %s" % m.group(1)
        owners[m.group(1)] = int(m.group(2))
    return owners


def test_metrics_name_each_topics_owner_and_similar_names_spread(start_broker):
    """nsq_topic_shard says which shard owns a topic. Owners come from a hash of the name;
    names that differ in the low bits of one character used to land on one shard (crc32's bits
    are linear in its input)."""
    b = start_broker(shards=2)
    names = ["e2e1", "e2e2", "e2e3", "e2eX", "e2eY", "e2eZ"]
    for name in names:
        req = urllib.request.Request(
            "http://127.0.0.1:%d/topic/create?topic=%s" % (b.http_port, name), method="POST"
        )
        with urllib.request.urlopen(req, timeout=5) as r:
            assert r.status == 200
    owners = topic_shards(b)
    assert sorted(owners) == sorted(names), owners
    assert set(owners.values()) == {0, 1}, owners


def http_connections(broker):
    return per_shard(metrics_text(broker), "nsq_shard_http_connections")


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs")
def test_http_connection_follows_its_client_to_another_cpu(start_broker):
    """A keep-alive HTTP connection accepted by the shard of CPU A, whose client then sends from
    CPU B, is handed over to B's shard between two requests; no request is lost or reordered."""
    cpus = usable_cpus()[:2]
    broker = start_broker(shards=2)
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {cpus[0]})
    try:
        s = socket.create_connection(("127.0.0.1", broker.http_port), timeout=10)
        keepalive_pub(s, "follow", b"first")
        # Our own /metrics requests come from a fresh connection each: count ours out.
        assert http_connections(broker).get(0, 0) >= 1
        os.sched_setaffinity(0, {cpus[1]})
        bodies = [b"m%04d" % i for i in range(400)]
        for b in bodies:
            keepalive_pub(s, "follow", b)
        deadline = time.time() + 5
        while http_connections(broker).get(1, 0) < 2 and time.time() < deadline:
            keepalive_pub(s, "follow", b"extra")
            bodies.append(b"extra")
            time.sleep(0.01)
        counts = http_connections(broker)
        # On shard 1: our publishing connection and the /metrics request itself.
        assert counts.get(1, 0) == 2 and counts.get(0, 0) == 0, counts
        # Shard 0 counted the one hand-over; shard 1 handed nothing back.
        moved = per_shard(metrics_text(broker), "nsq_shard_http_handovers_total")
        assert moved == {0: 1, 1: 0}, moved
        keepalive_pub(s, "follow", b"last")
        s.close()
    finally:
        os.sched_setaffinity(0, before)
    from nsqwire import Conn

    with Conn(broker.addr) as c:
        c.sub("follow", "c", rdy=len(bodies) + 2)
        got = [m.body for m in c.read_messages(len(bodies) + 2)]
    assert got == [b"first"] + bodies + [b"last"]
