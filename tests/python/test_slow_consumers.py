"""Consumers that do not read their socket: the broker's memory stays bounded, the client is
dropped once its socket takes nothing for a write deadline, and its messages go to others.

The stuck consumer is a raw socket with a small receive buffer that sends RDY and then only
ever writes (NOPs, so the heartbeat read timeout does not close it) and never reads.
"""

import json
import socket
import struct
import time

import pytest

from procstat import rss_kib
from nsqwire import MAGIC_V2, Conn, cmd_bytes

BODY = 64 * 1024




def publish(broker, topic, count, tag):
    """MPUBs `count` 64 KiB messages, 16 to a command; each body starts with its number."""
    with Conn(broker.addr) as p:
        for start in range(0, count, 16):
            bodies = [(b"%s-%06d-" % (tag, i)).ljust(BODY, b"x")
                      for i in range(start, min(count, start + 16))]
            p.mpub(topic, bodies)


class StuckConsumer:
    """Subscribes, sends RDY, then never reads again."""

    def __init__(self, addr, topic, channel, rdy, identify=None):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        self.sock.connect(addr)
        self.sock.settimeout(5)
        self.sock.sendall(MAGIC_V2 + cmd_bytes("IDENTIFY", json.dumps(identify or {}).encode())
                          + cmd_bytes("SUB %s %s" % (topic, channel)))
        want = 2 * 10  # two OK frames: [size 6][type 0]OK
        got = b""
        while len(got) < want:
            chunk = self.sock.recv(want - len(got))
            assert chunk, "closed before SUB was answered"
            got += chunk
        assert got == (struct.pack(">II", 6, 0) + b"OK") * 2, got
        self.sock.sendall(b"RDY %d\n" % rdy)

    def nop(self):
        """True while the connection still takes what we send."""
        try:
            self.sock.sendall(b"NOP\n")
            return True
        except OSError:
            return False

    def close(self):
        self.sock.close()


def drain(broker, topic, channel, want, timeout, tag):
    """A well-behaved consumer: FINs everything; returns the distinct message numbers seen."""
    seen = set()
    with Conn(broker.addr) as c:
        c.identify()
        c.sub(topic, channel, rdy=50)
        deadline = time.monotonic() + timeout
        while len(seen) < want and time.monotonic() < deadline:
            try:
                m = c.read_message(timeout=max(0.1, deadline - time.monotonic()))
            except socket.timeout:
                break
            assert m.body.startswith(tag + b"-"), m.body[:32]
            seen.add(int(m.body.split(b"-")[1]))
            c.fin(m.id)
    return seen


@pytest.mark.slow
def test_a_consumer_that_never_reads_keeps_memory_bounded_and_others_get_its_messages(
        start_broker):
    b = start_broker("--msg-timeout=1s")
    topic, n = "stuck_memory", 1200
    publish(b, topic, n, b"m")
    stuck = StuckConsumer(b.addr, topic, "ch", rdy=1000)
    try:
        # Every second its in-flight messages time out and are delivered again; without a
        # bound each round re-encodes up to RDY x 64 KiB into its output buffer (64 MiB/s).
        for _ in range(3):
            time.sleep(1)
            assert stuck.nop()
        base = rss_kib(b.proc.pid)
        peak = base
        for _ in range(20):
            time.sleep(1)
            assert stuck.nop(), "heartbeats are 30 s: the broker has no reason to drop it yet"
            peak = max(peak, rss_kib(b.proc.pid))
        growth_mib = (peak - base) / 1024
        assert growth_mib < 100, "RSS grew %.0f MiB in 20 s (from %.0f MiB)" % (
            growth_mib, base / 1024)
        # Another consumer of the channel gets every message, those the stuck one held too
        # (they time out and are not given to it again while it has not read).
        seen = drain(b, topic, "ch", n, 30, b"m")
        assert len(seen) == n, "missing %d of %d" % (n - len(seen), n)
    finally:
        stuck.close()


def test_a_client_whose_socket_stays_full_is_closed_after_its_heartbeat_interval(start_broker):
    # Messages time out only after a minute: within the test only the close returns them.
    b = start_broker("--msg-timeout=60s")
    topic, n = "stuck_deadline", 200
    stuck = StuckConsumer(b.addr, topic, "ch", rdy=1000,
                          identify={"heartbeat_interval": 1000})
    try:
        publish(b, topic, n, b"d")
        # NOPs keep its reads alive; only its socket is full.
        deadline = time.monotonic() + 20
        closed = False
        while time.monotonic() < deadline:
            time.sleep(0.3)
            if not stuck.nop():
                closed = True
                break
        assert closed, "a client that took nothing for 20 s with 1 s heartbeats is still open"
        seen = drain(b, topic, "ch", n, 15, b"d")
        assert len(seen) == n, "missing %d of %d" % (n - len(seen), n)
    finally:
        stuck.close()
