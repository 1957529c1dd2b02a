"""A client "host" of the cluster test: runs inside a network namespace (`ip netns exec`).

    agent.py publish --broker H:P [--broker H:P ...] --topic T --name N --out FILE
                     [--per-broker COUNT | --rate PER_SECOND]
    agent.py consume --lookupd http://H:P [--lookupd ...] --topic T --channel C --out FILE

publish: raw NSQ TCP (`  V2`, PUB), one message at a time, waiting for its answer. With
--per-broker, COUNT messages to each broker in turn (a failure is retried on the same broker
until 20 s have passed, then the run fails). Otherwise it runs until SIGTERM at --rate messages/s
in round robin over the brokers: a PUB that fails (refused, timed out, connection closed) is
retried with the same body on the next broker, and the failed broker is skipped for a while
(backoff 0.25 s doubling to 2 s). Only a PUB answered OK counts as acknowledged.

consume: pynsq Reader configured only with lookup addresses (polled every second); every message
is finished once handled (--delay-ms: the time handling takes, so that a backlog can build).

Both write one line per event to --out (line-buffered), times from CLOCK_MONOTONIC, which every
namespace shares with the test process:
    A <t> <broker> <body>       publish acknowledged
    F <t> <broker> <error>      publish failed (the body is retried elsewhere)
    L <t> <broker> <seconds>    how long the first acknowledged PUB to that broker took
    R <t> <broker> <body> <id> <attempts>   message received (broker: the connection's host:port)
    E <t> <event> <broker>      consumer connection ready/close
    END <t> <summary>           clean exit
"""

import argparse
import signal
import socket
import struct
import sys
import time

STOP = False


def _on_term(signum, frame):
    global STOP
    STOP = True


def now():
    return time.monotonic()


class PubConn:
    """One publishing connection to a broker."""

    # Bounds connecting and each answer. Above 1 s: a broker holds the first PUB of a new topic
    # while it asks the lookups for the topic's channels (1 s bound).
    IO_TIMEOUT = 2.5

    def __init__(self, addr):
        host, port = addr.rsplit(":", 1)
        self.addr = addr
        self.sock = socket.create_connection((host, int(port)), timeout=self.IO_TIMEOUT)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.sendall(b"  V2")
        self.buf = b""

    def _read(self, n):
        while len(self.buf) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("connection closed by the broker")
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def pub(self, topic, body):
        self.sock.sendall(b"PUB %s\n%s%s" % (topic.encode(), struct.pack(">i", len(body)), body))
        while True:
            size, = struct.unpack(">i", self._read(4))
            frame = self._read(size)
            ftype, data = struct.unpack(">i", frame[:4])[0], frame[4:]
            if ftype == 0 and data == b"_heartbeat_":
                self.sock.sendall(b"NOP\n")
                continue
            if ftype == 0 and data == b"OK":
                return
            raise ConnectionError("answer %d %r" % (ftype, data[:200]))

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


def publish(args, out):
    conns = {}
    down_until = {b: 0.0 for b in args.broker}
    backoff = {b: 0.25 for b in args.broker}
    acked = {b: 0 for b in args.broker}
    failed = 0

    first = set()

    def try_pub(broker, body):
        nonlocal failed
        t0 = now()
        try:
            if broker not in conns:
                conns[broker] = PubConn(broker)
            conns[broker].pub(args.topic, body)
        except (OSError, ConnectionError, struct.error) as e:
            failed += 1
            out.write("F\t%.6f\t%s\t%s\n" % (now(), broker, str(e).replace("\t", " ")[:200]))
            c = conns.pop(broker, None)
            if c is not None:
                c.close()
            down_until[broker] = now() + backoff[broker]
            backoff[broker] = min(backoff[broker] * 2, 2.0)
            return False
        backoff[broker] = 0.25
        acked[broker] += 1
        t = now()
        out.write("A\t%.6f\t%s\t%s\n" % (t, broker, body.decode()))
        if broker not in first:
            first.add(broker)
            out.write("L\t%.6f\t%s\t%.6f\n" % (t, broker, t - t0))
        return True

    seq = 0
    if args.per_broker:
        for broker in args.broker:
            for _ in range(args.per_broker):
                body = ("%s-%d" % (args.name, seq)).encode()
                deadline = now() + 20
                while not try_pub(broker, body):
                    if now() > deadline or STOP:
                        raise SystemExit("cannot publish to %s" % broker)
                    time.sleep(0.1)
                seq += 1
    else:
        interval = 1.0 / args.rate
        nxt = now()
        rr = 0
        while not STOP:
            body = ("%s-%d" % (args.name, seq)).encode()
            sent = False
            while not sent and not STOP:
                t = now()
                ready = [b for b in args.broker if down_until[b] <= t]
                if not ready:
                    time.sleep(0.05)
                    continue
                broker = ready[rr % len(ready)]
                rr += 1
                sent = try_pub(broker, body)
            if not sent:
                break
            seq += 1
            nxt += interval
            delay = nxt - now()
            if delay > 0:
                time.sleep(delay)
            else:
                nxt = now()
    for c in conns.values():
        c.close()
    out.write("END\t%.6f\tacked=%s failed=%d\n" % (now(), acked, failed))


def consume(args, out):
    import nsq
    import tornado.ioloop

    class Reader(nsq.Reader):
        def _on_connection_ready(self, conn, **kwargs):
            out.write("E\t%.6f\tready\t%s\n" % (now(), conn.id))
            return super()._on_connection_ready(conn, **kwargs)

        def _on_connection_close(self, conn, **kwargs):
            out.write("E\t%.6f\tclose\t%s\n" % (now(), conn.id))
            return super()._on_connection_close(conn, **kwargs)

        def _on_message(self, conn, message, **kwargs):
            message._cluster_from = conn.id
            return super()._on_message(conn, message, **kwargs)

    received = [0]

    def handler(message):
        received[0] += 1
        if args.delay_ms:
            time.sleep(args.delay_ms / 1000.0)  # a consumer with work to do: a backlog builds
        out.write("R\t%.6f\t%s\t%s\t%s\t%d\n" % (now(), message._cluster_from,
                                                message.body.decode(), message.id.decode(),
                                                message.attempts))
        return True

    reader = Reader(topic=args.topic, channel=args.channel, message_handler=handler,
           lookupd_http_addresses=args.lookupd, lookupd_poll_interval=1,
           lookupd_poll_jitter=0.1, max_in_flight=args.max_in_flight,
           heartbeat_interval=args.heartbeat, max_tries=0)
    loop = tornado.ioloop.IOLoop.current()

    def check_stop():
        if STOP:
            loop.stop()

    tornado.ioloop.PeriodicCallback(check_stop, 100).start()
    # pynsq closes a connection silent for two heartbeat intervals, but looks only once a
    # minute; look every second so that a host cut off is noticed within seconds.
    tornado.ioloop.PeriodicCallback(reader._check_last_recv_timestamps, 1000).start()
    loop.start()
    out.write("END\t%.6f\treceived=%d\n" % (now(), received[0]))


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    pp = sub.add_parser("publish")
    pp.add_argument("--broker", action="append", required=True)
    pp.add_argument("--topic", required=True)
    pp.add_argument("--name", required=True)
    pp.add_argument("--out", required=True)
    pp.add_argument("--per-broker", type=int, default=0)
    pp.add_argument("--rate", type=float, default=100.0)
    pc = sub.add_parser("consume")
    pc.add_argument("--lookupd", action="append", required=True)
    pc.add_argument("--topic", required=True)
    pc.add_argument("--channel", required=True)
    pc.add_argument("--out", required=True)
    pc.add_argument("--max-in-flight", type=int, default=60)
    pc.add_argument("--heartbeat", type=int, default=2, help="heartbeat interval, seconds")
    pc.add_argument("--delay-ms", type=float, default=0.0, help="time spent on each message")
    args = p.parse_args()
    signal.signal(signal.SIGTERM, _on_term)
    signal.signal(signal.SIGINT, _on_term)
    with open(args.out, "w", buffering=1) as out:
        if args.cmd == "publish":
            publish(args, out)
        else:
            consume(args, out)


if __name__ == "__main__":
    sys.exit(main())
