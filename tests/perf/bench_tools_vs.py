#!/usr/bin/env python3
"""NSQ's own bench tools (bench_writer, bench_reader) against two broker commands, alternately.

Rows (a fresh broker and data directory per run, medians over --runs):
  pubsub  bench_reader and bench_writer at once (batch 200): in and out msg/s, out/in
  pub1    bench_writer --batch-size 1 (one message per round trip)
  ingest  bench_writer (batch 200) alone

Per run it also reads the broker's CPU (utime + stime from /proc over its life, per message
published for pub rows, per message delivered for pubsub) and its peak RSS (VmHWM).

--split adds where the host's CPU goes in the middle half of each run (from a quarter of
--runfor to three quarters), as ns a message counted as above at the run's rate: the server's
(all its threads, io_uring workers included), bench_writer's and softirq's (loopback TCP,
block completions); and the share of the host's CPUs and of CPU 0 idle or in iowait. --topic
names the topic (`te#ephemeral` keeps nothing on disk).

A COMMAND may take {port} (the TCP port alone) instead of {tcp}, as tests/perf/pub_sink.c and
tests/perf/uring_sink.c do: the ceilings of a publish per round trip on this host.

--connect-cpu N starts bench_writer pinned to CPU N and unpins it a moment later, once it has
connected: with `--connection-steering cpu` each of its connections then lands on the shard
of CPU N, so a run measures one placement of the connections, not the scheduler's pick.

Example (the bench tools and nsqd built from NSQ's source outside the repository):
  python3 tests/perf/bench_tools_vs.py --tools /work/nsqd-build/bin \
    --broker "ours=target/release/broker --shards 2 --tcp-address={tcp} --http-address={http} --data-path={data}" \
    --broker "nsqd=/work/nsqd-build/bin/nsqd --tcp-address={tcp} --http-address={http} --data-path={data}" \
    --rows pubsub,pub1 --runs 3 --runfor 5s
"""

import argparse
import os
import re
import shlex
import socket
import statistics
import subprocess
import tempfile
import time
import urllib.request

CLK = os.sysconf("SC_CLK_TCK")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK


def peak_rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


class Broker:
    def __init__(self, template):
        self.tcp = f"127.0.0.1:{free_port()}"
        self.http = f"127.0.0.1:{free_port()}"
        self.dir = tempfile.TemporaryDirectory(prefix="bench-tools-")
        cmd = template.format(tcp=self.tcp, http=self.http, data=self.dir.name,
                              port=self.tcp.rsplit(":", 1)[1])
        self.log = open(os.path.join(self.dir.name, "broker.log"), "w")
        self.proc = subprocess.Popen(shlex.split(cmd), stdout=self.log, stderr=subprocess.STDOUT)
        # Ready once its TCP port takes connections (a sink has no HTTP), and /ping if it has.
        host, port = self.tcp.rsplit(":", 1)
        deadline = time.time() + 10
        while time.time() < deadline:
            try:
                socket.create_connection((host, int(port)), timeout=1).close()
                if "{http}" in template:
                    urllib.request.urlopen(f"http://{self.http}/ping", timeout=1).read()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"broker did not start: {cmd}")

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()
        self.dir.cleanup()


OPS = re.compile(r"([0-9.]+)ops/s")


def ops(out):
    m = OPS.search(out)
    if not m:
        raise RuntimeError(f"no ops/s in: {out!r}")
    return float(m.group(1))


def cpu_line(name):
    """The fields of /proc/stat's line NAME (`cpu` for the host, `cpu0`), in ticks."""
    with open("/proc/stat") as f:
        for line in f:
            fields = line.split()
            if fields[0] == name:
                return [int(x) for x in fields[1:]]
    raise RuntimeError(f"no {name} in /proc/stat")


class Split:
    """Samples the server, the client and /proc/stat at the start and the end of the middle
    half of a run (`during`, called with the client's pid while the client runs)."""

    def __init__(self, server_pid, runfor):
        self.server_pid, self.runfor = server_pid, runfor
        self.starts_at = None  # the run's start (epoch seconds) when the tools wait for it
        self.at = []

    def sample(self, client_pid):
        self.at.append((cpu_seconds(self.server_pid), cpu_seconds(client_pid),
                        cpu_line("cpu"), cpu_line("cpu0"), time.monotonic()))

    def during(self, client_pid):
        if self.starts_at is not None:
            time.sleep(max(self.starts_at - time.time(), 0))
        time.sleep(self.runfor / 4)
        self.sample(client_pid)
        time.sleep(self.runfor / 2)
        self.sample(client_pid)

    def figures(self, rate):
        (s0, c0, h0, z0, t0), (s1, c1, h1, z1, t1) = self.at
        msgs = max(rate * (t1 - t0), 1)
        def idle(a, b):  # /proc/stat: user nice system idle iowait irq softirq ...
            return (b[3] - a[3]) + (b[4] - a[4])

        ticks = (t1 - t0) * CLK
        return {
            "server_ns": (s1 - s0) * 1e9 / msgs,
            "client_ns": (c1 - c0) * 1e9 / msgs,
            "softirq_ns": (h1[6] - h0[6]) / CLK * 1e9 / msgs,
            "idle": idle(h0, h1) / (ticks * os.cpu_count()),
            "idle_cpu0": idle(z0, z1) / ticks,
        }


def run_tool(cmd, env, args, during=None):
    """Runs one bench tool to its end; returns its stderr (where it reports). `during`, if
    given, is called with the tool's pid while it runs."""
    pinned = args.connect_cpu is not None
    if pinned:
        cmd = ["taskset", "-c", str(args.connect_cpu), *cmd]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, env=env)
    if pinned:
        time.sleep(0.25)
        every_cpu = f"0-{os.cpu_count() - 1}"
        subprocess.run(["taskset", "-a", "-p", "-c", every_cpu, str(proc.pid)],
                       stdout=subprocess.DEVNULL, check=True)
    if during:
        during(proc.pid)
    _, err = proc.communicate(timeout=120)
    if proc.returncode:
        raise RuntimeError(f"{cmd[0]} failed: {err}")
    return err


def run_row(row, template, args):
    b = Broker(template)
    try:
        tools = args.tools
        addr = f"--nsqd-tcp-address={b.tcp}"
        common = [f"--runfor={args.runfor}", f"--size={args.size}", f"--topic={args.topic}"]
        runfor = float(args.runfor.rstrip("s"))
        split = Split(b.proc.pid, runfor) if args.split else None
        during = split.during if split else None
        env = dict(os.environ, GOMAXPROCS=str(args.gomaxprocs))
        cpu0 = cpu_seconds(b.proc.pid)
        result = {}
        if row == "pubsub":
            # Both start at the same second (the tools' --deadline, in UTC), so in and
            # out are measured over the same window.
            starts_at = int(time.time() + 2)
            start = time.gmtime(starts_at)
            if split:
                split.starts_at = starts_at
            at = f"--deadline={time.strftime('%Y-%m-%d %H:%M:%S', start)}"
            reader = subprocess.Popen(
                [f"{tools}/bench_reader", addr, *common, at],
                stderr=subprocess.PIPE, text=True, env=env)
            werr = run_tool([f"{tools}/bench_writer", addr, *common, at], env, args, during)
            _, rerr = reader.communicate(timeout=120)
            result["in"] = ops(werr)
            result["out"] = ops(rerr)
            result["out/in"] = result["out"] / result["in"]
            counted = result["out"]
        else:
            batch = "1" if row == "pub1" else str(args.batch)
            werr = run_tool([f"{tools}/bench_writer", addr, *common, f"--batch-size={batch}"],
                            env, args, during)
            result["in"] = ops(werr)
            counted = result["in"]
        # Per message delivered (pubsub) or published, over the run.
        cpu = cpu_seconds(b.proc.pid) - cpu0
        result["cpu_us"] = cpu * 1e6 / max(counted * runfor, 1)
        result["rss"] = peak_rss_mib(b.proc.pid)
        if split:
            result.update(split.figures(counted))
        return result
    finally:
        b.stop()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tools", required=True, help="directory with bench_writer and bench_reader")
    p.add_argument("--broker", action="append", required=True, help="NAME=COMMAND with {tcp} {http} {data}")
    p.add_argument("--rows", default="pubsub,pub1")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--runfor", default="5s")
    p.add_argument("--size", type=int, default=200)
    p.add_argument("--batch", type=int, default=200)
    p.add_argument("--gomaxprocs", type=int, default=2)
    p.add_argument("--connect-cpu", type=int, help="make bench_writer's connections from this CPU")
    p.add_argument("--topic", default="sub_bench", help="the tools' topic (theirs by default)")
    p.add_argument("--split", action="store_true",
                   help="where the host's CPU goes in the middle half of each run")
    args = p.parse_args()
    brokers = [b.split("=", 1) for b in args.broker]
    for row in args.rows.split(","):
        results = {name: [] for name, _ in brokers}
        for i in range(args.runs):
            order = brokers if i % 2 == 0 else list(reversed(brokers))
            for name, template in order:
                r = run_row(row, template, args)
                results[name].append(r)
                print(f"{row} run {i + 1} {name}: " + ", ".join(
                    f"{k} {v:,.2f}" for k, v in r.items()), flush=True)
        for name, rs in results.items():
            med = {k: statistics.median(r[k] for r in rs) for k in rs[0]}
            print(f"== {row} {name} median: " + ", ".join(f"{k} {v:,.2f}" for k, v in med.items()))
        first = brokers[0][0]
        for name, _ in brokers[1:]:
            a = statistics.median(r["in"] for r in results[first])
            b = statistics.median(r["in"] for r in results[name])
            line = f"== {row} {first}/{name} in {a / b:.2f}x"
            if row == "pubsub":
                a = statistics.median(r["out"] for r in results[first])
                b = statistics.median(r["out"] for r in results[name])
                line += f", out {a / b:.2f}x"
            print(line, flush=True)


if __name__ == "__main__":
    main()
