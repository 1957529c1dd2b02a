"""nsq_to_file's messages/s (no gzip, 200-byte messages) against `shard-bench sub` on the same
topic, one sitting, alternating runs. Not a test: it asserts nothing, it prints figures.

    tests/.venv/bin/python tests/perf/nsq_to_file_vs_sub.py [--count 1000000] [--runs 3]
        [--max-in-flight 2500] [--shards 2] [--sync-interval 20ms]

A broker (target/release/broker) starts on ephemeral ports; one channel per run is created,
then `shard-bench pub` fills the topic with --count messages (each channel gets them all), so
every run drains the same backlog from its own channel. shard-bench sub uses one connection
with RDY --max-in-flight, FINning each message at once; nsq_to_file uses one connection with
--max-in-flight and FINs each batch after its write and fdatasync. nsq_to_file's time is from
its start until its channel holds nothing (depth and in flight 0), polled every 20 ms; the
last batch waits for the --sync-interval tick (a batch smaller than --max-in-flight, from a
consumer that is not starved, is synced on the tick, as NSQ), hence 20ms here: under load
the syncs come from full batches, the tick only ends the run.
"""

import argparse
import json
import os
import subprocess
import tempfile

from vs_sub import BIN, Broker, drain_with, prepare, run_sub, summary

TOPIC = "tofile_bench"


def run_file(broker, name, args):
    out = tempfile.mkdtemp(prefix="tofile-bench-")
    row = drain_with(broker, TOPIC, name, args.count, [
        os.path.join(BIN, "nsq_to_file"), "--nsqd-tcp-address", broker.tcp_address, "--topic",
        TOPIC, "--channel", name, "--max-in-flight", str(args.max_in_flight), "--output-dir",
        out, "--sync-interval", args.sync_interval, "--log-level", "warn"])
    row["bytes"] = sum(os.path.getsize(os.path.join(out, f)) for f in os.listdir(out))
    subprocess.run(["rm", "-rf", out])
    return row


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--count", type=int, default=1000000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--max-in-flight", type=int, default=2500)
    ap.add_argument("--shards", type=int, default=2)
    # The last batch (fewer than --max-in-flight, consumer not starved) waits for this tick.
    ap.add_argument("--sync-interval", default="20ms")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="tofile-bench-broker-")
    broker = Broker(args.shards, [], work)
    broker.start()
    try:
        names = prepare(broker, TOPIC, ("sub", "file"), args.runs, args.count)
        rows = []
        for kind, name in names:
            if kind == "sub":
                rows.append(run_sub(broker, TOPIC, name, args.count, args.max_in_flight))
            else:
                rows.append(run_file(broker, name, args))
            print(json.dumps(rows[-1]), flush=True)
        summary(rows, "file", "nsq_to_file")
    finally:
        broker.stop()


if __name__ == "__main__":
    main()
