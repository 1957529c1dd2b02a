"""Connections against the process's limits: one file descriptor per connection, clean
refusal at the descriptor limit, and memory that closed connections give back for reuse."""

import resource
import socket
import struct
import time

import pytest

from procstat import fd_count, rss_kib
from nsqwire import MAGIC_V2, Conn, cmd_bytes

TOPIC = "conn_limits"
PUB = MAGIC_V2 + cmd_bytes("PUB %s" % TOPIC, b"hello")
OK_FRAME = struct.pack(">II", 6, 0) + b"OK"






def try_publish(addr, timeout=5.0):
    """Connects and publishes once. Returns the open socket when the PUB was answered OK,
    None when the broker closed the connection; fails the test if it does neither."""
    s = socket.create_connection(addr, timeout=timeout)
    try:
        s.sendall(PUB)
        got = b""
        while len(got) < len(OK_FRAME):
            chunk = s.recv(len(OK_FRAME) - len(got))
            if not chunk:
                s.close()
                return None
            got += chunk
    except (ConnectionResetError, BrokenPipeError):
        s.close()
        return None
    except socket.timeout:
        s.close()
        raise AssertionError("connection neither served nor closed within %.0fs" % timeout)
    assert got == OK_FRAME, got
    return s


def test_at_the_descriptor_limit_new_connections_are_refused_and_old_ones_served(
        start_broker, shards):
    b = start_broker()
    pid = b.proc.pid
    consumer = Conn(b.addr)
    consumer.identify()
    consumer.pub(TOPIC, b"first")  # the topic and its files exist before the limit
    consumer.sub(TOPIC, "ch", rdy=100)
    assert consumer.read_message().body == b"first"
    time.sleep(0.5)
    base = fd_count(pid)
    room = 120
    resource.prlimit(pid, resource.RLIMIT_NOFILE, (base + room, base + room))
    served, refused = [], 0
    log_before = b.stderr(limit=10 ** 7).count("accept failed")
    try:
        # Until refused five times in a row (a descriptor the broker holds for a moment, a
        # metadata file being written, can refuse one connection and not the next).
        in_a_row = 0
        for _ in range(2 * room):
            s = try_publish(b.addr)
            if s is None:
                refused += 1
                in_a_row += 1
                if in_a_row == 5:
                    break
                continue
            in_a_row = 0
            served.append(s)
        assert in_a_row == 5, "%d connections with room for %d descriptors" % (len(served), room)
        per_conn = (fd_count(pid) - base) / len(served)
        assert len(served) >= room - 10, \
            "only %d connections fit in %d descriptors" % (len(served), room)
        assert per_conn <= 1.05, "%.2f descriptors per connection" % per_conn
        # Refused promptly (never left waiting), again and again, for a few seconds.
        t0 = time.monotonic()
        tries, late = 0, 0
        while time.monotonic() - t0 < 3:
            tries += 1
            s = try_publish(b.addr)
            if s is not None:
                late += 1
                served.append(s)
            time.sleep(0.05)
        elapsed = time.monotonic() - t0
        assert late <= tries // 10, "%d of %d connections past the limit served" % (late, tries)
        lines = b.stderr(limit=10 ** 7).count("accept failed") - log_before
        assert lines <= b.shards * (elapsed + 2), \
            "%d log lines about failed accepts in %.1fs" % (lines, elapsed)
        # Connections already open still publish, and the consumer still gets messages.
        for s in served[:5]:
            s.sendall(cmd_bytes("PUB %s" % TOPIC, b"still"))
            assert s.recv(len(OK_FRAME)) == OK_FRAME
        bodies = set()
        for _ in range(len(served) + 5):  # the PUB of each connection, then 5 more
            m = consumer.read_message()
            bodies.add(m.body)
            consumer.fin(m.id)
        assert bodies == {b"hello", b"still"}
        # Closing some makes room for new ones.
        for s in served[:20]:
            s.close()
        del served[:20]
        time.sleep(0.5)
        again = try_publish(b.addr)
        assert again is not None, "no connection accepted after others closed"
        served.append(again)
    finally:
        for s in served:
            s.close()
        consumer.close()


@pytest.mark.slow
def test_idle_connections_are_cheap_and_their_memory_is_reused(start_broker):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    n = min(2000, hard // 2 - 100)
    assert n >= 500, "RLIMIT_NOFILE hard limit %d is too low for this test" % hard
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    b = start_broker()
    pid = b.proc.pid
    try:
        time.sleep(0.5)
        before = rss_kib(pid)
        closed = []
        cost = None
        for r in range(5):
            socks = []
            for _ in range(n):
                s = socket.create_connection(b.addr, timeout=10)
                s.sendall(MAGIC_V2)
                socks.append(s)
            time.sleep(0.5)
            if r == 0:
                cost = (rss_kib(pid) - before) / n
            for s in socks:
                s.close()
            time.sleep(1.0)
            closed.append(rss_kib(pid))
        assert cost <= 8, "an idle connection costs %.1f KiB" % cost
        # What one round took, the next ones reuse (generous: the shards' arenas differ).
        growth = closed[-1] - closed[0]
        assert growth <= max(cost * n, 4096), \
            "RSS after closing: %r KiB (one round's connections: %.0f KiB)" % (closed, cost * n)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_an_http_keep_alive_connection_holds_one_descriptor(start_broker):
    b = start_broker()
    pid = b.proc.pid
    time.sleep(0.3)
    base = fd_count(pid)
    socks = []
    try:
        for _ in range(100):
            s = socket.create_connection((b.host, b.http_port), timeout=5)
            s.sendall(b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n")
            assert s.recv(1000).startswith(b"HTTP/1.1 200"), "no answer to /ping"
            socks.append(s)
        time.sleep(0.3)
        per_conn = (fd_count(pid) - base) / len(socks)
        assert per_conn <= 1.05, "%.2f descriptors per HTTP connection" % per_conn
    finally:
        for s in socks:
            s.close()
