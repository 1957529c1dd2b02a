"""A restart right after a crash, on the same ports (what a supervisor does after a kill -9).

The broker accepts through io_uring, and the kernel tears a dead process's rings down after it
has exited: for some milliseconds its listening sockets still listen, held by no process. A
restart in that moment used to exit with "Address already in use"; it now waits for the
release (bounded, one log line), while a port a live process listens on is still refused at
once, naming that process.

CRASH_RESTARTS=N sets how many kill-and-restart rounds the loop test runs (default 3; the
repetition run uses 200):

    CRASH_RESTARTS=200 tests/.venv/bin/python -m pytest tests/python/test_crash_restart.py \
        -q --shards 2 -k loop
"""

import json
import os
import signal
import socket
import subprocess
import tempfile
import time

import pytest

from brokerhttp import http
from conftest import Broker, broker_bin
from nsqwire import Conn

ROUNDS = int(os.environ.get("CRASH_RESTARTS", "3"))
TOPIC = "crash_restart"


def _channel(broker):
    status, body = http(broker, "GET", "/stats?format=json&topic=%s" % TOPIC)
    assert status == 200, body
    topics = json.loads(body)["topics"]
    assert topics and topics[0]["channels"], body
    return topics[0]["channels"][0]


@pytest.mark.timeout(60 + 5 * ROUNDS)
def test_a_restart_at_once_after_a_kill_comes_up_on_the_same_ports_loop(shards):
    """Each round: publish (acknowledged once on disk: --durable), hold a consumer with a
    message in flight, SIGKILL, reap, start again at once on the same TCP and HTTP ports. Every
    start must come up there and hold every message published so far."""
    workdir = tempfile.mkdtemp(prefix="broker-crash-restart-")
    first = Broker(shards, ["--durable"], workdir)
    brokers = [first]
    try:
        first.start()
        tcp_port, http_port = first.port, first.http_port
        # Answered once on disk, so the channel is there after every kill.
        assert http(first, "POST", "/topic/create?topic=%s" % TOPIC)[0] == 200
        assert http(first, "POST", "/channel/create?topic=%s&channel=c" % TOPIC)[0] == 200
        broker, published, waited = first, 0, 0
        for round_no in range(ROUNDS):
            with Conn(broker.addr) as p:
                for i in range(3):
                    p.pub(TOPIC, b"round %d message %d" % (round_no, i))
            published += 3
            consumer = Conn(broker.addr)
            consumer.sub(TOPIC, "c", rdy=1)
            consumer.read_message()
            broker.proc.send_signal(signal.SIGKILL)
            broker.proc.wait(timeout=10)
            broker.stop()

            again = Broker(shards, ["--durable"], workdir)
            again.args[1] = "--tcp-address=127.0.0.1:%d" % tcp_port
            again.args[2] = "--http-address=127.0.0.1:%d" % http_port
            brokers.append(again)
            again.start()
            consumer.close()
            broker = again
            assert (broker.port, broker.http_port) == (tcp_port, http_port)
            log = broker.stderr()
            for flag in ("--tcp-address", "--http-address"):
                assert log.count("%s 127.0.0.1:" % flag) <= 1, \
                    "the wait is logged once per address:\n" + log
            waited += "still held by a listening socket of a process that has exited" in log
            assert http(broker, "GET", "/ping") == (200, b"OK")
            c = _channel(broker)
            assert c["depth"] + c["in_flight_count"] == published, (round_no, c)
        # Shown with -s: how often the dead run's listener was still there at the restart.
        print("%d kill-and-restart rounds at --shards %d; %d restarts waited for the release"
              % (ROUNDS, shards, waited))
    finally:
        for b in brokers:
            b.stop()
        subprocess.run(["rm", "-rf", workdir], check=False)


@pytest.mark.parametrize("flag", ["--tcp-address", "--http-address"])
def test_a_port_a_live_process_listens_on_is_refused_at_once_naming_it(flag, tmp_path):
    """A live listener is no dying broker's: start-up stops at once, naming the address and the
    process that listens there (here, this test's own)."""
    live = socket.socket()
    live.bind(("127.0.0.1", 0))
    live.listen()
    port = live.getsockname()[1]
    other = "--http-address" if flag == "--tcp-address" else "--tcp-address"
    started = time.monotonic()
    try:
        r = subprocess.run(
            [broker_bin(), "%s=127.0.0.1:%d" % (flag, port), "%s=127.0.0.1:0" % other,
             "--data-path=%s" % tmp_path],
            stdin=subprocess.DEVNULL, capture_output=True, timeout=30)
    finally:
        live.close()
    took = time.monotonic() - started
    log = (r.stdout + r.stderr).decode(errors="replace")
    assert r.returncode == 1, log
    assert "cannot listen on %s 127.0.0.1:%d: Address already in use" % (flag, port) in log, log
    assert "process %d (" % os.getpid() in log, log
    assert "waiting" not in log, log
    assert took < 5, "refused after %.1fs, not at once:\n%s" % (took, log)
