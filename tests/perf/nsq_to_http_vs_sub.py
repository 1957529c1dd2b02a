"""nsq_to_http's messages/s against `shard-bench sub` on the same topic, one sitting,
alternating runs. Not a test: it asserts nothing, it prints figures.

    tests/.venv/bin/python tests/perf/nsq_to_http_vs_sub.py [--count 200000] [--runs 3]
        [--max-in-flight 2500] [--shards 2] [-n 100]

Two brokers (target/release/broker) start on ephemeral ports: the source, whose topic is
filled by `shard-bench pub` with --count 200-byte messages (one channel per run, each gets them
all), and the endpoint: nsq_to_http POSTs each message to the second broker's HTTP `/pub`
(a keep-alive HTTP/1.1 server that answers once the message is stored), with -n requests under
way. shard-bench sub uses one connection with RDY --max-in-flight, FINning each message at
once. nsq_to_http's time is from its start until its channel holds nothing (depth and in
flight 0), polled every 20 ms.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
from conftest import Broker, REPO  # noqa: E402
from brokerhttp import http  # noqa: E402

BIN = os.path.join(REPO, "target", "release")
TOPIC = "tohttp_bench"


def channel(broker, name):
    _, answer = http(broker, "GET", "/stats?format=json&topic=%s" % TOPIC)
    stats = json.loads(answer)
    for t in stats.get("topics") or []:
        for c in t.get("channels") or []:
            if c["channel_name"] == name:
                return c
    return None


def run_sub(broker, name, args):
    out = os.path.join(tempfile.mkdtemp(), "sub.json")
    start = time.monotonic()
    subprocess.run([os.path.join(BIN, "shard-bench"), "sub", "--nsqd-tcp-address",
                    broker.tcp_address, "--topic", TOPIC, "--channel", name, "--count",
                    str(args.count), "--sub-connections", "1", "--max-in-flight",
                    str(args.max_in_flight), "--duration", "600s", "--json", out, "--quiet"],
                   check=True, capture_output=True)
    wall = args.count / (time.monotonic() - start)
    with open(out) as f:
        result = json.load(f)
    return result["consumed"]["msgs_per_s"], wall, result.get("host_load")


def run_http(broker, sink, name, args):
    start = time.monotonic()
    p = subprocess.Popen([os.path.join(BIN, "nsq_to_http"), "--nsqd-tcp-address",
                          broker.tcp_address, "--topic", TOPIC, "--channel", name,
                          "--max-in-flight", str(args.max_in_flight), "-n", str(args.n),
                          "--status-every", "0", "--post",
                          "http://127.0.0.1:%d/pub?topic=sink" % sink.http_port],
                         stderr=subprocess.DEVNULL)
    while True:
        c = channel(broker, name)
        if c and c["depth"] == 0 and c["in_flight_count"] == 0:
            break
        time.sleep(0.02)
    elapsed = time.monotonic() - start
    p.terminate()
    p.wait(60)
    return args.count / elapsed


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--count", type=int, default=200000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--max-in-flight", type=int, default=2500)
    ap.add_argument("--shards", type=int, default=2)
    ap.add_argument("-n", type=int, default=100)
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="tohttp-bench-broker-")
    broker = Broker(args.shards, [], work)
    broker.start()
    sink = Broker(args.shards, [], tempfile.mkdtemp(prefix="tohttp-bench-sink-"))
    sink.start()
    try:
        names = []
        http(broker, "POST", "/topic/create?topic=%s" % TOPIC)
        for i in range(args.runs):
            for kind in ("sub", "http"):
                names.append((kind, "%s%d" % (kind, i)))
                http(broker, "POST", "/channel/create?topic=%s&channel=%s" % (TOPIC, names[-1][1]))
        subprocess.run([os.path.join(BIN, "shard-bench"), "pub", "--nsqd-tcp-address",
                        broker.tcp_address, "--topic", TOPIC, "--count", str(args.count),
                        "--size", "200", "--duration", "600s", "--quiet"],
                       check=True, capture_output=True)
        rows = []
        for kind, name in names:
            if kind == "sub":
                rate, wall, load = run_sub(broker, name, args)
                rows.append({"run": name, "msgs_per_s": round(rate),
                             "wall_msgs_per_s": round(wall), "host_load": load})
            else:
                rate = run_http(broker, sink, name, args)
                rows.append({"run": name, "wall_msgs_per_s": round(rate)})
            print(json.dumps(rows[-1]), flush=True)
        sub = sorted(r["msgs_per_s"] for r in rows if r["run"].startswith("sub"))
        sub_wall = sorted(r["wall_msgs_per_s"] for r in rows if r["run"].startswith("sub"))
        tohttp = sorted(r["wall_msgs_per_s"] for r in rows if r["run"].startswith("http"))
        med = lambda v: v[len(v) // 2]  # noqa: E731
        print("median: shard-bench sub %d msg/s (its own clock; %d by wall time from process "
              "start), nsq_to_http %d msg/s (wall time from process start): ratio %.2f (%.2f "
              "by wall time)" % (med(sub), med(sub_wall), med(tohttp), med(tohttp) / med(sub),
                                 med(tohttp) / med(sub_wall)))
    finally:
        broker.stop()
        sink.stop()


if __name__ == "__main__":
    main()
