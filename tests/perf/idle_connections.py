#!/usr/bin/env python3
"""Memory and descriptors of idle connections: opens N TCP connections (V2 magic sent, then
idle), samples the broker's RSS (VmRSS) and descriptor count, closes them all, samples again;
repeats for R rounds.

usage: idle_connections.py [--bin target/release/broker] [--conns 10000] [--rounds 10]
                           [--shards 2] [--settle 1.0]
Prints one line per round and a summary: per idle connection cost = (RSS with N open - RSS
before the first round) / N, descriptors per connection, RSS after round 1 and after the last.
Raises its own RLIMIT_NOFILE soft limit to the hard limit; the broker's is raised the same way
(it inherits it). Loopback only; bounded in time.
"""
import argparse
import os
import re
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import time


def status(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    raise RuntimeError("no VmRSS")


def fds(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


def start(binary, shards, work):
    err_path = os.path.join(work, "stderr")
    err = open(err_path, "wb")
    proc = subprocess.Popen([binary, "--tcp-address=127.0.0.1:0", "--http-address=127.0.0.1:0",
                             "--data-path=%s" % work, "--shards=%d" % shards],
                            stdout=subprocess.DEVNULL, stderr=err, stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        with open(err_path, "rb") as f:
            m = re.search(rb"TCP: listening tcp=[^ ]*:(\d+)", f.read())
        if m:
            time.sleep(0.3)
            return proc, int(m.group(1))
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError("broker did not start")


def open_conns(port, n):
    socks = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        s.sendall(b"  V2")
        socks.append(s)
    return socks


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(here, "..", "..", "target", "release", "broker"))
    ap.add_argument("--conns", type=int, default=10000)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--shards", type=int, default=2)
    ap.add_argument("--settle", type=float, default=1.0)
    a = ap.parse_args()

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    work = tempfile.mkdtemp(prefix="idle-conns-")
    proc, port = start(a.bin, a.shards, work)
    pid = proc.pid
    try:
        time.sleep(a.settle)
        before, base_fds = status(pid), fds(pid)
        print("before: RSS %.1f MiB, %d fds" % (before, base_fds))
        after = []
        cost = per_conn_fds = None
        deadline = time.monotonic() + 600
        for r in range(1, a.rounds + 1):
            if time.monotonic() > deadline:
                print("time bound reached")
                break
            socks = open_conns(port, a.conns)
            time.sleep(a.settle)
            with_open, open_fds = status(pid), fds(pid)
            if r == 1:
                cost = (with_open - before) * 1024 / a.conns
                per_conn_fds = (open_fds - base_fds) / a.conns
            for s in socks:
                s.close()
            del socks
            time.sleep(a.settle + 1)
            closed = status(pid)
            after.append(closed)
            print("round %2d: RSS %.1f MiB with %d open (%d fds), %.1f MiB after closing"
                  % (r, with_open, a.conns, open_fds, closed))
        print("per idle connection: %.1f KiB, %.2f fds; RSS after round 1 %.1f MiB, after round "
              "%d %.1f MiB (%+.0f%%)" % (cost, per_conn_fds, after[0], len(after), after[-1],
                                          100.0 * (after[-1] - after[0]) / after[0]))
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(work, ignore_errors=True)
    return 0 if proc.returncode in (0, -15) else 1


if __name__ == "__main__":
    sys.exit(main())
