#!/usr/bin/env python3
"""The broker's memory while one consumer never reads: publishes N messages of S bytes, then a
raw consumer subscribes with RDY 1000, never reads (4 KiB receive buffer) and sends NOP every
second; the broker runs with --msg-timeout 1s, so the messages it holds time out and are
delivered again every second. Samples the broker's RSS (VmRSS) every second. (With the default
30 s heartbeat interval the broker closes the consumer once its socket has taken nothing for
that long; the script notes when.)

usage: stuck_consumer.py [--bin target/release/broker] [--seconds 60] [--messages 1200]
                         [--size 65536] [--shards 2]
Prints RSS samples and first/min/max. Loopback only; bounded in time.
"""
import argparse
import json
import os
import re
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time


def rss(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    raise RuntimeError("no VmRSS")


def cmd(line, body=None):
    out = line.encode() + b"\n"
    if body is not None:
        out += struct.pack(">I", len(body)) + body
    return out


def read_frames(sock, n):
    buf = b""
    frames = []
    while len(frames) < n:
        while len(buf) < 4 or len(buf) < 4 + struct.unpack(">I", buf[:4])[0]:
            chunk = sock.recv(65536)
            if not chunk:
                raise RuntimeError("closed")
            buf += chunk
        size = struct.unpack(">I", buf[:4])[0]
        frames.append(buf[4:4 + size])
        buf = buf[4 + size:]
    return frames


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(here, "..", "..", "target", "release", "broker"))
    ap.add_argument("--seconds", type=int, default=60)
    ap.add_argument("--messages", type=int, default=1200)
    ap.add_argument("--size", type=int, default=64 * 1024)
    ap.add_argument("--shards", type=int, default=2)
    a = ap.parse_args()

    work = tempfile.mkdtemp(prefix="stuck-consumer-")
    err_path = os.path.join(work, "stderr")
    err = open(err_path, "wb")
    proc = subprocess.Popen([a.bin, "--tcp-address=127.0.0.1:0", "--http-address=127.0.0.1:0",
                             "--data-path=%s" % work, "--shards=%d" % a.shards,
                             "--msg-timeout=1s"],
                            stdout=subprocess.DEVNULL, stderr=err, stdin=subprocess.DEVNULL)
    try:
        port = None
        deadline = time.monotonic() + 15
        while port is None and time.monotonic() < deadline:
            with open(err_path, "rb") as f:
                m = re.search(rb"TCP: listening tcp=[^ ]*:(\d+)", f.read())
            port = int(m.group(1)) if m else None
            time.sleep(0.1)
        if port is None:
            raise RuntimeError("broker did not start")
        time.sleep(0.3)
        p = socket.create_connection(("127.0.0.1", port))
        p.sendall(b"  V2")
        for start in range(0, a.messages, 16):
            k = min(16, a.messages - start)
            body = struct.pack(">I", k) + b"".join(
                struct.pack(">I", a.size) + b"x" * a.size for _ in range(k))
            p.sendall(b"MPUB stuck\n" + struct.pack(">I", len(body)) + body)
            read_frames(p, 1)
        p.close()
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.connect(("127.0.0.1", port))
        s.sendall(b"  V2" + cmd("IDENTIFY", json.dumps({}).encode()) + cmd("SUB stuck ch"))
        read_frames(s, 2)
        s.sendall(b"RDY 1000\n")
        samples = []
        open_ = True
        for i in range(a.seconds):
            time.sleep(1)
            if open_:
                try:
                    s.sendall(b"NOP\n")
                except OSError:
                    open_ = False
                    print("t=%2ds the broker closed the consumer (write deadline)" % (i + 1))
            samples.append(rss(proc.pid))
            print("t=%2ds RSS %.1f MiB" % (i + 1, samples[-1]), flush=True)
        print("RSS over %d s: first %.1f, min %.1f, max %.1f, last %.1f MiB" % (
            a.seconds, samples[0], min(samples), max(samples), samples[-1]))
        s.close()
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
