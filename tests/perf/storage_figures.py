#!/usr/bin/env python3
"""Storage figures for issue 4, measured through the wire against a release broker.

  disk   : bytes written (/proc/PID/io write_bytes, and the data directory's size) for N
           messages of 200 bytes, with 1 channel and with 5 channels.
  memory : RssAnon (/proc/PID/status) sampled while publishing a backlog of N messages with
           --mem-queue-size 1000, and while draining it.

usage: storage_figures.py disk [--messages 1000000]
       storage_figures.py memory [--messages 5000000]
Loopback only; every phase is bounded in time.
"""
import argparse
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
from nsqwire import Conn, FRAME_MESSAGE, mpub_bytes  # noqa: E402

BIN = os.environ.get("BROKER_BIN") or os.path.join(HERE, "..", "..", "target", "release", "broker")
BODY = b"x" * 200
TOPIC = "figures"


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def start(data, *flags):
    tcp, http = free_port(), free_port()
    p = subprocess.Popen([BIN, "--tcp-address=127.0.0.1:%d" % tcp, "--http-address=127.0.0.1:%d" % http,
                          "--data-path=%s" % data, "--shards=2", "--log-level=warn"] + list(flags),
                         stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while True:
        try:
            socket.create_connection(("127.0.0.1", tcp), timeout=0.5).close()
            return p, ("127.0.0.1", tcp)
        except OSError:
            if time.monotonic() > deadline:
                raise SystemExit("broker did not start")
            time.sleep(0.05)


def stop(p):
    p.send_signal(signal.SIGTERM)
    p.wait(timeout=60)
    assert p.returncode == 0, p.returncode


def write_bytes(pid):
    with open("/proc/%d/io" % pid) as f:
        for line in f:
            if line.startswith("write_bytes:"):
                return int(line.split()[1])
    return 0


def rss_anon_mib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) / 1024.0
    return 0.0


def dir_bytes(path):
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            total += os.path.getsize(os.path.join(root, f))
    return total


def publish(addr, n, batch=1000, deadline_s=600):
    frame = mpub_bytes(TOPIC, [BODY] * batch)
    deadline = time.monotonic() + deadline_s
    with Conn(addr, timeout=30) as c:
        sent = 0
        while sent < n:
            assert time.monotonic() < deadline, "publishing took too long"
            c.send(frame)
            c.expect_ok("MPUB")
            sent += batch


def disk(n):
    out = {}
    for channels in (1, 5):
        data = tempfile.mkdtemp(prefix="figures-disk-")
        p, addr = start(data)
        try:
            for i in range(channels):
                with Conn(addr) as c:
                    c.sub(TOPIC, "c%d" % i)
            before = write_bytes(p.pid)
            t0 = time.monotonic()
            publish(addr, n)
            stop(p)
            wb = write_bytes(p.pid) if os.path.exists("/proc/%d" % p.pid) else None
        finally:
            if p.poll() is None:
                p.kill()
        size = dir_bytes(data)
        out[channels] = size
        print("disk: messages=%d channels=%d data_dir_bytes=%d (%.1f bytes/message) publish_s=%.1f"
              % (n, channels, size, size / n, time.monotonic() - t0))
        shutil.rmtree(data, ignore_errors=True)
    diff = abs(out[5] - out[1]) / out[1] * 100
    print("disk: 5 channels vs 1 channel: %+.3f%%" % diff)


def memory(n):
    data = tempfile.mkdtemp(prefix="figures-mem-")
    p, addr = start(data, "--mem-queue-size=1000")
    peak = {"publish": 0.0, "drain": 0.0}
    phase = {"name": "publish"}
    done = threading.Event()

    def sample():
        while not done.is_set():
            try:
                v = rss_anon_mib(p.pid)
            except OSError:
                return
            peak[phase["name"]] = max(peak[phase["name"]], v)
            time.sleep(0.2)

    threading.Thread(target=sample, daemon=True).start()
    try:
        with Conn(addr) as c:
            c.sub(TOPIC, "drain")
        t0 = time.monotonic()
        publish(addr, n)
        pub_s = time.monotonic() - t0
        phase["name"] = "drain"
        t1 = time.monotonic()
        got = 0
        with Conn(addr, timeout=30) as c:
            c.sub(TOPIC, "drain", rdy=2500)
            deadline = time.monotonic() + 900
            while got < n:
                assert time.monotonic() < deadline, "draining took too long (%d of %d)" % (got, n)
                ftype, d = c.read_frame()
                if ftype == FRAME_MESSAGE:
                    got += 1
                    c.sock.sendall(b"FIN " + bytes(d[10:26]) + b"\n")
        drain_s = time.monotonic() - t1
        done.set()
        print("memory: messages=%d mem_queue_size=1000 publish_s=%.1f drain_s=%.1f "
              "peak_RssAnon_publish=%.1fMiB peak_RssAnon_drain=%.1fMiB"
              % (n, pub_s, drain_s, peak["publish"], peak["drain"]))
        stop(p)
    finally:
        done.set()
        if p.poll() is None:
            p.kill()
        shutil.rmtree(data, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["disk", "memory"])
    ap.add_argument("--messages", type=int)
    a = ap.parse_args()
    if a.what == "disk":
        disk(a.messages or 1_000_000)
    else:
        memory(a.messages or 5_000_000)


if __name__ == "__main__":
    main()
