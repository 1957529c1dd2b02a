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
import tempfile

from vs_sub import BIN, Broker, drain_with, prepare, run_sub, summary

TOPIC = "tohttp_bench"


def run_http(broker, sink, name, args):
    return drain_with(broker, TOPIC, name, args.count, [
        os.path.join(BIN, "nsq_to_http"), "--nsqd-tcp-address", broker.tcp_address, "--topic",
        TOPIC, "--channel", name, "--max-in-flight", str(args.max_in_flight), "-n", str(args.n),
        "--status-every", "0", "--post", "http://127.0.0.1:%d/pub?topic=sink" % sink.http_port])


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
        names = prepare(broker, TOPIC, ("sub", "http"), args.runs, args.count)
        rows = []
        for kind, name in names:
            if kind == "sub":
                rows.append(run_sub(broker, TOPIC, name, args.count, args.max_in_flight))
            else:
                rows.append(run_http(broker, sink, name, args))
            print(json.dumps(rows[-1]), flush=True)
        summary(rows, "http", "nsq_to_http")
    finally:
        broker.stop()
        sink.stop()


if __name__ == "__main__":
    main()
