"""A Python client of a fault run, started by run.py inside the client namespace.

    agent.py publish --broker H:P [--broker H:P ...] --topic T --name N --out FILE
                     [--rate R] [--timeout S] [--stop-file P] [--max-seconds S]
    agent.py consume --lookupd http://H:P [...] --topic T --channel C --out FILE
                     [--rate R] [--max-in-flight N] [--fast-file P] [--stop-file P]
                     [--max-seconds S]

publish: gnsq's connection class (`gnsq.NsqdTCPClient`: connect, IDENTIFY, PUB, its frame
reader), one PUB at a time, each with a new body `N-<seq>`, round robin over the brokers; a broker
that failed is skipped for a while (0.25 s doubling to 2 s). gnsq's `Producer` is not used: its
`publish()` waits for the answer without a time bound, and a paused broker must give `U`.

consume: pynsq's Reader configured only with lookup HTTP addresses, polled every second
(`lookupd_poll_interval=1`, pynsq's default is 60 s); every message is finished; at most --rate
messages a second until --fast-file exists (a backlog builds while faults run), then unpaced.

History lines: the same format as the Rust agent (client/examples/fault_agent.rs), see
checker.py. Times are seconds since the epoch (one host clock for every process). The agent ends
when --stop-file exists or after --max-seconds, whichever comes first.
"""

import argparse
import os
import sys
import time


def now():
    return time.time()


def clean(text):
    return str(text).replace("\t", " ").replace("\n", " ")[:200]


class Control:
    def __init__(self, args):
        self.stop_file = args.stop_file
        self.deadline = time.monotonic() + args.max_seconds

    def stop(self):
        return time.monotonic() >= self.deadline or (
            self.stop_file is not None and os.path.exists(self.stop_file))


def publish(args, out, ctl):
    import gnsq
    import gnsq.errors
    import gnsq.protocol as proto

    conns = {}
    down_until = {b: 0.0 for b in args.broker}
    backoff = {b: 0.25 for b in args.broker}
    seq = acked = 0
    rr = 0
    interval = 1.0 / args.rate
    nxt = time.monotonic()

    def attempt(broker, body):
        conn = conns.get(broker)
        if conn is None or not conn.is_connected:
            host, port = broker.rsplit(":", 1)
            try:
                conn = gnsq.NsqdTCPClient(host, int(port), timeout=args.timeout)
                conn.connect()
                conn.identify()
            except Exception as e:  # noqa: BLE001 - any failure here means nothing was sent
                return "F", e
            conns[broker] = conn
        try:
            conn.publish(args.topic, body)
            while True:
                frame, data = conn.read_response()
                if frame == proto.FRAME_TYPE_RESPONSE and data == proto.HEARTBEAT:
                    continue  # gnsq answered it with NOP
                if frame == proto.FRAME_TYPE_RESPONSE and data == proto.OK:
                    return "A", ""
                if frame == proto.FRAME_TYPE_ERROR:
                    return "E", data
                return "U", "unexpected frame %r %r" % (frame, data)
        except Exception as e:  # noqa: BLE001 - timeout, reset, closed: the PUB may have landed
            return "U", e

    while not ctl.stop():
        t = time.monotonic()
        ready = [b for b in args.broker if down_until[b] <= t]
        if not ready:
            time.sleep(0.05)
            continue
        broker = ready[rr % len(ready)]
        rr += 1
        body = "%s-%d" % (args.name, seq)
        seq += 1
        t0 = time.monotonic()
        kind, detail = attempt(broker, body.encode())
        if kind == "A":
            acked += 1
            backoff[broker] = 0.25
            detail = "%.6f" % (time.monotonic() - t0)
        else:
            conn = conns.pop(broker, None)
            if conn is not None:
                try:
                    conn.close_stream()
                except Exception:  # noqa: BLE001
                    pass
            down_until[broker] = time.monotonic() + backoff[broker]
            backoff[broker] = min(backoff[broker] * 2, 2.0)
        out.write("%s\t%.6f\t%s\t%s\t%s\n" % (kind, now(), broker, body, clean(detail)))
        nxt += interval
        delay = nxt - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        else:
            nxt = time.monotonic()
    for conn in conns.values():
        try:
            conn.close_stream()
        except Exception:  # noqa: BLE001
            pass
    return "published=%d acked=%d" % (seq, acked)


def consume(args, out, ctl):
    import nsq
    import tornado.ioloop

    class Reader(nsq.Reader):
        def _on_message(self, conn, message, **kwargs):
            message._fault_from = conn.id
            return super()._on_message(conn, message, **kwargs)

    received = [0]
    slot = [time.monotonic()]
    per_message = 1.0 / args.rate

    def handler(message):
        if args.fast_file is None or not os.path.exists(args.fast_file):
            # One message per slot: the consumer's rate stays below the publishers'.
            slot[0] = max(slot[0], time.monotonic()) + per_message
            time.sleep(max(0.0, slot[0] - time.monotonic()))
        received[0] += 1
        out.write("R\t%.6f\t%s\t%s\t%d\n" % (now(), message._fault_from,
                                            clean(message.body.decode("utf-8", "replace")),
                                            message.attempts))
        return True

    reader = Reader(topic=args.topic, channel=args.channel, message_handler=handler,
                    lookupd_http_addresses=args.lookupd, lookupd_poll_interval=1,
                    lookupd_poll_jitter=0.1, lookupd_request_timeout=2,
                    max_in_flight=args.max_in_flight, heartbeat_interval=2, max_tries=0,
                    max_backoff_duration=2)
    loop = tornado.ioloop.IOLoop.current()

    def check_stop():
        if ctl.stop():
            reader.close()
            loop.stop()

    tornado.ioloop.PeriodicCallback(check_stop, 100).start()
    # pynsq closes a connection silent for two heartbeat intervals but checks only once a
    # minute; check every second so that a broker cut off is left within seconds.
    tornado.ioloop.PeriodicCallback(reader._check_last_recv_timestamps, 1000).start()
    loop.start()
    return "received=%d" % received[0]


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    for name in ("publish", "consume"):
        s = sub.add_parser(name)
        s.add_argument("--topic", required=True)
        s.add_argument("--out", required=True)
        s.add_argument("--rate", type=float, default=50.0)
        s.add_argument("--stop-file")
        s.add_argument("--max-seconds", type=float, default=3600.0)
        if name == "publish":
            s.add_argument("--broker", action="append", required=True)
            s.add_argument("--name", required=True)
            s.add_argument("--timeout", type=float, default=2.5)
        else:
            s.add_argument("--lookupd", action="append", required=True)
            s.add_argument("--channel", required=True)
            s.add_argument("--max-in-flight", type=int, default=20)
            s.add_argument("--fast-file")
    args = p.parse_args()
    if args.rate <= 0:
        p.error("--rate must be positive")
    ctl = Control(args)
    with open(args.out, "w", buffering=1) as out:
        out.write("START\t%.6f\n" % now())
        summary = publish(args, out, ctl) if args.cmd == "publish" else consume(args, out, ctl)
        out.write("END\t%.6f\t%s\n" % (now(), summary))


if __name__ == "__main__":
    sys.exit(main())
