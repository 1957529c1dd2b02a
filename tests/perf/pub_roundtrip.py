"""One-at-a-time PUB round trips from a plain blocking socket: the floor a client pays for
wake-ups. Run it pinned to the broker's CPU and to another one to see what a cross-CPU wake-up
costs on the machine:

    taskset -c 0 python3 tests/perf/pub_roundtrip.py PORT [N] [--spin]

PORT is a running broker's TCP port; N round trips (default 30000). `--spin` polls a
non-blocking socket instead of sleeping in recv, so the client's own wake-up drops out of the
round trip. Prints msgs/s and µs per round trip; exits 1 if any answer is not OK.
"""

import socket
import struct
import sys
import time


def main():
    spin = "--spin" in sys.argv
    args = [a for a in sys.argv[1:] if a != "--spin"]
    port = int(args[0])
    n = int(args[1]) if len(args) > 1 else 30000
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.sendall(b"  V2")
    body = b"x" * 200
    cmd = b"PUB bench\n" + struct.pack(">I", len(body)) + body
    ok = struct.pack(">II", 6, 0) + b"OK"
    if spin:
        s.setblocking(False)
    start = time.time()
    for _ in range(n):
        sent = 0
        while sent < len(cmd):
            try:
                sent += s.send(cmd[sent:])
            except BlockingIOError:
                pass
        answer = b""
        while len(answer) < len(ok):
            try:
                chunk = s.recv(64)
            except BlockingIOError:
                continue
            if not chunk:
                sys.exit("connection closed")
            answer += chunk
        if answer != ok:
            sys.exit("unexpected answer %r" % answer)
    elapsed = time.time() - start
    print("%.0f msg/s, %.1f us per round trip" % (n / elapsed, elapsed / n * 1e6))


if __name__ == "__main__":
    main()
