#!/usr/bin/env python3
"""The broker's memory when one consumer of a channel holds its messages while the others
finish theirs: a publisher sends MPUBs of 100 messages of 2,000 bytes (one 200 KB buffer
each), paced; N raw consumers share one channel with RDY 2500; all but one FIN every message
at once, the slow one never does (--msg-timeout 300s, so nothing times out). The slow one
ends up holding 2,500 messages, one from nearly every MPUB. Prints what it holds and the
broker's RSS and peak RSS at the end.

usage: slow_consumer_among_many.py BROKER_BINARY [--nsqd] [--consumers 20] [--mpubs 600]
                                   [--pace 0.01]
--nsqd: the binary is nsqd (no --shards). Loopback only; bounded by --mpubs x --pace.
"""
import argparse
import os
import select
import socket
import struct
import subprocess
import tempfile
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Conn:
    def __init__(self, port):
        self.s = socket.create_connection(("127.0.0.1", port))
        self.s.sendall(b"  V2")
        self.buf = b""

    def frames(self):
        try:
            self.buf += self.s.recv(1 << 20)
        except BlockingIOError:
            pass
        out = []
        while len(self.buf) >= 8:
            size, kind = struct.unpack(">ii", self.buf[:8])
            if len(self.buf) < 4 + size:
                break
            out.append((kind, self.buf[8:4 + size]))
            self.buf = self.buf[4 + size:]
        return out

    def one(self, timeout=10):
        end = time.time() + timeout
        while time.time() < end:
            f = self.frames()
            if f:
                return f[0]
        raise TimeoutError("no answer")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("binary")
    p.add_argument("--nsqd", action="store_true")
    p.add_argument("--consumers", type=int, default=20)
    p.add_argument("--mpubs", type=int, default=600)
    p.add_argument("--pace", type=float, default=0.01)
    a = p.parse_args()
    data = tempfile.TemporaryDirectory(prefix="slow-consumer-")
    tcp, http = free_port(), free_port()
    cmd = [a.binary] + ([] if a.nsqd else ["--shards", "2"]) + [
        f"--tcp-address=127.0.0.1:{tcp}", f"--http-address=127.0.0.1:{http}",
        f"--data-path={data.name}", "--msg-timeout=300s"]
    broker = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.7)
        pub = Conn(tcp)
        pub.s.sendall(b"PUB t\n" + struct.pack(">i", 1) + b"x")
        pub.one()
        consumers = []
        for _ in range(a.consumers):
            c = Conn(tcp)
            c.s.sendall(b"SUB t c\n")
            c.one()
            c.s.sendall(b"RDY 2500\n")
            c.s.setblocking(False)
            consumers.append(c)
        slow = consumers[0]
        held = 0

        def serve(wait):
            nonlocal held
            ready, _, _ = select.select([c.s for c in consumers], [], [], wait)
            for c in consumers:
                if c.s not in ready:
                    continue
                for kind, f in c.frames():
                    if kind != 2:
                        continue
                    if c is slow:
                        held += 1
                    else:
                        c.s.sendall(b"FIN " + f[10:26] + b"\n")

        body = b"y" * 2000
        mpub = b"MPUB t\n" + struct.pack(">ii", 4 + 100 * (4 + len(body)), 100) + \
            (struct.pack(">i", len(body)) + body) * 100
        for _ in range(a.mpubs):
            pub.s.sendall(mpub)
            pub.one()
            serve(0)
            time.sleep(a.pace)
        end = time.time() + 2
        while time.time() < end:
            serve(0.1)
        status = {}
        with open(f"/proc/{broker.pid}/status") as f:
            for line in f:
                k, _, v = line.partition(":")
                status[k] = v.strip()
        print(f"{os.path.basename(a.binary)}: the slow consumer holds {held} messages; "
              f"RSS {status['VmRSS']}, peak {status['VmHWM']}")
    finally:
        broker.terminate()
        broker.wait()


if __name__ == "__main__":
    main()
