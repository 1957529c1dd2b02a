"""What tests/perf/*_vs_sub.py share: a tool's messages/s against `shard-bench sub` on the same
topic, in one sitting, alternating runs. Not a test module: it asserts nothing.

A topic gets one channel per run (`prepare`), then `shard-bench pub` fills it with `count`
200-byte messages, so every run (sub or tool) drains the same backlog from its own channel.
`run_sub` runs shard-bench sub (one connection, RDY `max_in_flight`, FIN at once);
`drain_with` starts a tool and times it from its start until its channel holds nothing (depth
and in flight 0, polled every 20 ms), and reads the CPU time it used (from /proc) before
stopping it. `summary` prints the medians and the ratio.
"""

import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
from conftest import Broker, REPO  # noqa: E402,F401  (Broker is for the scripts)
from brokerhttp import http  # noqa: E402

BIN = os.path.join(REPO, "target", "release")


def channel(broker, topic, name):
    """The channel's /stats object, or None."""
    _, answer = http(broker, "GET", "/stats?format=json&topic=%s" % topic)
    stats = json.loads(answer)
    for t in stats.get("topics") or []:
        for c in t.get("channels") or []:
            if c["channel_name"] == name:
                return c
    return None


def prepare(broker, topic, kinds, runs, count):
    """Creates the topic and a channel per run of each kind (alternating), fills the topic;
    the (kind, channel) list in run order."""
    names = []
    http(broker, "POST", "/topic/create?topic=%s" % topic)
    for i in range(runs):
        for kind in kinds:
            names.append((kind, "%s%d" % (kind, i)))
            http(broker, "POST", "/channel/create?topic=%s&channel=%s" % (topic, names[-1][1]))
    subprocess.run([os.path.join(BIN, "shard-bench"), "pub", "--nsqd-tcp-address",
                    broker.tcp_address, "--topic", topic, "--count", str(count),
                    "--size", "200", "--duration", "600s", "--quiet"],
                   check=True, capture_output=True)
    return names


def run_sub(broker, topic, name, count, max_in_flight):
    """One shard-bench sub run: the row to print."""
    out = os.path.join(tempfile.mkdtemp(), "sub.json")
    start = time.monotonic()
    subprocess.run([os.path.join(BIN, "shard-bench"), "sub", "--nsqd-tcp-address",
                    broker.tcp_address, "--topic", topic, "--channel", name, "--count",
                    str(count), "--sub-connections", "1", "--max-in-flight",
                    str(max_in_flight), "--duration", "600s", "--json", out, "--quiet"],
                   check=True, capture_output=True)
    wall = count / (time.monotonic() - start)
    with open(out) as f:
        result = json.load(f)
    return {"run": name, "msgs_per_s": round(result["consumed"]["msgs_per_s"]),
            "wall_msgs_per_s": round(wall), "host_load": result.get("host_load")}


def cpu_seconds(pid):
    """User + system CPU time of a running process."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def drain_with(broker, topic, name, count, argv):
    """Runs the tool `argv` until the channel is drained: the row to print (wall msg/s and CPU
    µs per message)."""
    start = time.monotonic()
    p = subprocess.Popen(argv, stderr=subprocess.DEVNULL)
    while True:
        c = channel(broker, topic, name)
        if c and c["depth"] == 0 and c["in_flight_count"] == 0:
            break
        time.sleep(0.02)
    elapsed = time.monotonic() - start
    cpu = cpu_seconds(p.pid)
    p.terminate()
    p.wait(60)
    return {"run": name, "wall_msgs_per_s": round(count / elapsed),
            "cpu_us_per_msg": round(cpu * 1e6 / count, 3)}


def summary(rows, kind, tool):
    """Prints the medians of the sub runs and of the `kind` runs, and the ratio."""
    med = lambda v: sorted(v)[len(v) // 2]  # noqa: E731
    sub = med([r["msgs_per_s"] for r in rows if r["run"].startswith("sub")])
    sub_wall = med([r["wall_msgs_per_s"] for r in rows if r["run"].startswith("sub")])
    ours = med([r["wall_msgs_per_s"] for r in rows if r["run"].startswith(kind)])
    cpu = med([r["cpu_us_per_msg"] for r in rows if r["run"].startswith(kind)])
    print("median: shard-bench sub %d msg/s (its own clock; %d by wall time from process "
          "start), %s %d msg/s (wall time from process start; %.2f us CPU per message): "
          "ratio %.2f (%.2f by wall time)" % (sub, sub_wall, tool, ours, cpu, ours / sub,
                                              ours / sub_wall))
