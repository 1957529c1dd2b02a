"""How long deleting a 100 MiB file stalls O_DIRECT appends to another file on the same file
system: at once (unlink) or cut down 4 MiB at a time first (what the broker's background
deletion does, `storage::shrink_then_remove`).

    python3 tests/perf/unlink_stall.py [DIR] [ROUNDS]

DIR (default: the current directory) must be on the file system that holds the data path.
Prints, per mode and round, how long the deletion took and the appender's worst write.
"""

import mmap
import os
import sys
import tempfile
import threading
import time

STEP = 4 << 20


def one(where, mode):
    big = os.path.join(where, "big")
    with open(big, "wb") as f:
        chunk = b"x" * (1 << 20)
        for _ in range(100):
            f.write(chunk)
        f.flush()
        os.fsync(f.fileno())
    fd = os.open(os.path.join(where, "appended"), os.O_CREAT | os.O_WRONLY | os.O_DIRECT, 0o644)
    buf = mmap.mmap(-1, 65536)
    buf.write(b"y" * 65536)
    stop = threading.Event()
    lat = []

    def appender():
        off = 0
        while not stop.is_set():
            t = time.perf_counter()
            os.pwrite(fd, buf, off)
            lat.append(time.perf_counter() - t)
            off += len(buf)

    th = threading.Thread(target=appender)
    th.start()
    time.sleep(0.3)
    t = time.perf_counter()
    if mode == "shrink":
        f = os.open(big, os.O_WRONLY)
        n = os.fstat(f).st_size
        while n > STEP:
            n -= STEP
            os.ftruncate(f, n)
            os.sched_yield()
        os.close(f)
    os.unlink(big)
    took = time.perf_counter() - t
    time.sleep(0.3)
    stop.set()
    th.join()
    os.close(fd)
    os.unlink(os.path.join(where, "appended"))
    lat.sort()
    print("%-6s delete %.1f ms; 64 KiB O_DIRECT appends: %d, worst %.1f ms, p99.9 %.2f ms"
          % (mode, took * 1e3, len(lat), lat[-1] * 1e3, lat[int(len(lat) * 0.999)] * 1e3))


def main():
    base = sys.argv[1] if len(sys.argv) > 1 else "."
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    where = tempfile.mkdtemp(prefix="unlink-stall-", dir=base)
    try:
        for _ in range(rounds):
            for mode in ("unlink", "shrink"):
                one(where, mode)
    finally:
        os.rmdir(where)


if __name__ == "__main__":
    main()
