"""A publisher of the nsqd replacement run (replace_nsqd.py), on the client host.

    publisher.py --broker H:P [--broker H:P ...] --topic T [--topic T ...] --name N --out FILE
                 [--rate PER_SECOND] [--first K]

A real client library (gnsq): one gnsq.Producer per broker, all started at once and never
restarted; gnsq reconnects a Producer whose broker went away by itself. Until SIGTERM, message
`<name>-<seq>` goes to topic `seq mod len(topics)`, at --rate messages/s, in round robin over the
brokers (starting at broker K): a PUB that fails (no connection, an error answer, no answer
within 3 s, the connection closed) is logged and sent again, same body, on the next broker; the
failed broker is skipped for a while (0.25 s doubling to 2 s). Only a PUB answered OK counts as
acknowledged, so a PUB whose answer was lost may be delivered twice (at least once).

One line per event in --out (line-buffered), times from CLOCK_MONOTONIC (shared by every
namespace with the harness):
    A <t> <broker> <topic> <body>     publish acknowledged
    F <t> <broker> <topic> <error>    publish failed (the body is sent again elsewhere)
    END <t> <summary>                 clean exit
"""

import argparse
import logging
import signal
import sys
import time

import gevent
import gnsq

STOP = False
ANSWER_TIMEOUT = 3.0  # seconds for a PUB's answer; the brokers answer in milliseconds
CONNECTION_WAIT = 0.5  # seconds to wait for a ready connection to a broker


def _on_term():
    global STOP
    STOP = True


def publish(args, out):
    producers = {}
    for addr in args.broker:
        # timeout: socket reads; with 1 s heartbeats a silent connection is noticed within it.
        p = gnsq.Producer(nsqd_tcp_addresses=[addr], max_backoff_duration=1.0, timeout=5.0,
                          heartbeat_interval=1)
        p.start()
        producers[addr] = p
    down_until = {b: 0.0 for b in args.broker}
    backoff = {b: 0.25 for b in args.broker}
    acked = {b: 0 for b in args.broker}
    failed = 0

    def try_pub(broker, topic, body):
        nonlocal failed
        try:
            result = producers[broker].publish(topic, body, block=True, timeout=CONNECTION_WAIT,
                                               raise_error=False)
            result.get(timeout=ANSWER_TIMEOUT)
        except (gnsq.errors.NSQException, gevent.Timeout, OSError) as e:
            failed += 1
            err = ("%s: %s" % (type(e).__name__, e)).replace("\t", " ").replace("\n", " ")
            out.write("F\t%.6f\t%s\t%s\t%s\n" % (time.monotonic(), broker, topic, err[:200]))
            down_until[broker] = time.monotonic() + backoff[broker]
            backoff[broker] = min(backoff[broker] * 2, 2.0)
            return False
        backoff[broker] = 0.25
        acked[broker] += 1
        out.write("A\t%.6f\t%s\t%s\t%s\n" % (time.monotonic(), broker, topic, body.decode()))
        return True

    interval = 1.0 / args.rate
    nxt = time.monotonic()
    rr = args.first
    seq = 0
    while not STOP:
        body = ("%s-%d" % (args.name, seq)).encode()
        topic = args.topic[seq % len(args.topic)]
        sent = False
        while not sent and not STOP:
            t = time.monotonic()
            ready = [b for b in args.broker if down_until[b] <= t]
            if not ready:
                gevent.sleep(0.05)
                continue
            broker = ready[rr % len(ready)]
            rr += 1
            sent = try_pub(broker, topic, body)
        if not sent:
            break
        seq += 1
        nxt += interval
        delay = nxt - time.monotonic()
        if delay > 0:
            gevent.sleep(delay)
        else:
            nxt = time.monotonic()
            gevent.sleep(0)
    for p in producers.values():
        p.close()
    out.write("END\t%.6f\tacked=%s failed=%d\n" % (time.monotonic(), acked, failed))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--broker", action="append", required=True)
    p.add_argument("--topic", action="append", required=True)
    p.add_argument("--name", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--rate", type=float, default=100.0)
    p.add_argument("--first", type=int, default=0, help="index of the first broker to use")
    args = p.parse_args()
    # gnsq logs every reconnection attempt at WARNING; the F lines already say what failed.
    logging.basicConfig(level=logging.ERROR)
    gevent.signal_handler(signal.SIGTERM, _on_term)
    gevent.signal_handler(signal.SIGINT, _on_term)
    with open(args.out, "w", buffering=1) as out:
        publish(args, out)


if __name__ == "__main__":
    sys.exit(main())
