#!/usr/bin/env python3
"""Idle cost of many topics: creates N topics with one channel each (over HTTP), waits for the
broker to settle, then samples its CPU (utime+stime from /proc/PID/stat) over an idle window
and its RSS (VmRSS, RssAnon from /proc/PID/status).

usage: idle_topics.py [--bin target/release/broker] [--topics 10000] [--idle 10] [--shards 2]
Prints one line of results; exits non-zero if the broker fails. Bounded in time; loopback only.
"""
import argparse
import http.client
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def proc_cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks  # utime, stime


def proc_status(pid):
    out = {}
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("VmRSS", "RssAnon", "VmHWM"):
                out[k] = int(v.split()[0]) / 1024.0  # MiB
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(os.path.dirname(__file__), "..", "..", "target", "release", "broker"))
    ap.add_argument("--topics", type=int, default=10000)
    ap.add_argument("--idle", type=float, default=10.0)
    ap.add_argument("--shards", type=int, default=2)
    ap.add_argument("--keep", action="store_true", help="keep the data directory")
    a = ap.parse_args()

    work = tempfile.mkdtemp(prefix="idle-topics-")
    tcp, http_port = free_port(), free_port()
    proc = subprocess.Popen([a.bin, "--tcp-address=127.0.0.1:%d" % tcp,
                             "--http-address=127.0.0.1:%d" % http_port,
                             "--data-path=%s" % work, "--shards=%d" % a.shards,
                             "--log-level=warn"], stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", http_port), timeout=0.5).close()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise SystemExit("broker did not start")
                time.sleep(0.05)
        conn = http.client.HTTPConnection("127.0.0.1", http_port, timeout=10)
        t0 = time.monotonic()
        for i in range(a.topics):
            for path in ("/topic/create?topic=idle%05d" % i,
                         "/channel/create?topic=idle%05d&channel=c" % i):
                conn.request("POST", path)
                r = conn.getresponse()
                r.read()
                if r.status != 200:
                    raise SystemExit("%s -> %d" % (path, r.status))
        created = time.monotonic() - t0
        conn.close()
        time.sleep(3)  # let checkpoints of the new channels finish
        cpu0 = proc_cpu_seconds(proc.pid)
        w0 = time.monotonic()
        time.sleep(a.idle)
        cpu1 = proc_cpu_seconds(proc.pid)
        wall = time.monotonic() - w0
        st = proc_status(proc.pid)
        share = 100.0 * (cpu1 - cpu0) / wall
        print("topics=%d channels=%d shards=%d created_in=%.1fs idle_window=%.1fs "
              "cpu=%.3f%% of one core (%.3fs) VmRSS=%.1fMiB RssAnon=%.1fMiB VmHWM=%.1fMiB"
              % (a.topics, a.topics, a.shards, created, wall, share, cpu1 - cpu0,
                 st.get("VmRSS", 0), st.get("RssAnon", 0), st.get("VmHWM", 0)))
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        if proc.returncode not in (0, None):
            sys.stderr.write(proc.stderr.read().decode(errors="replace")[-4000:])
            sys.exit(1)
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
