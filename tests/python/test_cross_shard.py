"""Many connections, several topics: with --shards 2 or 4 the kernel spreads connections over
shards (SO_REUSEPORT), so publishers and consumers end up on shards that do not own the topic.
Every message must reach every channel exactly once when consumers FIN.

The brokers here run with --move-to-owner=false, so connections stay on the shard that
accepted them and their publishes, deliveries, FINs and REQs cross shards
(test_move_to_owner.py covers the moves)."""

import collections
import socket
import threading
import time

import pytest

from nsqwire import FRAME_MESSAGE, Conn, Message

TOPICS = ["xs_%d" % i for i in range(4)]
CHANNELS = ["a", "b"]


class ConsumerThread(threading.Thread):
    """Reads messages on one raw connection and answers each with `decide(msg)`:
    'fin' or 'req'. Records every delivery."""

    def __init__(self, conn, decide=None, name=""):
        super().__init__(daemon=True, name=name)
        self.conn = conn
        self.decide = decide or (lambda m: "fin")
        self.deliveries = []
        self.errors = []
        self.stop = threading.Event()

    def run(self):
        try:
            while not self.stop.is_set():
                try:
                    ftype, data = self.conn.read_frame(timeout=0.3)
                except (socket.timeout, TimeoutError):
                    continue
                if ftype != FRAME_MESSAGE:
                    self.errors.append((ftype, data))
                    continue
                m = Message.parse(data)
                self.deliveries.append(m)
                if self.decide(m) == "req":
                    self.conn.req(m.id, 0)
                else:
                    self.conn.fin(m.id)
        except Exception as e:  # reported by the test
            if not self.stop.is_set():
                self.errors.append(repr(e))


def start_consumer(broker, topic, channel, rdy, decide=None):
    c = Conn(broker.addr)
    c.identify()
    c.sub(topic, channel, rdy=rdy)
    t = ConsumerThread(c, decide, name="%s/%s" % (topic, channel))
    t.start()
    return t


def wait_total(threads, expected, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if sum(len(t.deliveries) for t in threads) >= expected:
            return
        time.sleep(0.05)


@pytest.fixture
def broker(start_broker):
    """Connections stay where the kernel put them."""
    return start_broker("--move-to-owner=false")


def stop_all(threads):
    for t in threads:
        t.stop.set()
    for t in threads:
        t.join(timeout=5)
        t.conn.close()


def test_many_connections_many_topics_exactly_once_per_channel(broker):
    n_publishers = 12
    per_pub_per_topic = 20  # 10 single PUBs and one MPUB of 10
    consumers = {(t, ch): [start_consumer(broker, t, ch, rdy=25) for _ in range(2)]
                 for t in TOPICS for ch in CHANNELS}
    all_threads = [th for ths in consumers.values() for th in ths]
    try:
        pubs = [Conn(broker.addr) for _ in range(n_publishers)]
        expected = collections.defaultdict(list)
        errors = []

        def publish(i, conn):
            try:
                for ti, topic in enumerate(TOPICS):
                    bodies = [("p%02d-%s-%02d" % (i, topic, k)).encode()
                              for k in range(per_pub_per_topic)]
                    for body in bodies[:10]:
                        conn.pub(topic, body)
                    conn.mpub(topic, bodies[10:])
            except Exception as e:
                errors.append((i, repr(e)))

        for i in range(n_publishers):
            for topic in TOPICS:
                expected[topic].extend(("p%02d-%s-%02d" % (i, topic, k)).encode()
                                       for k in range(per_pub_per_topic))
        pthreads = [threading.Thread(target=publish, args=(i, c), daemon=True)
                    for i, c in enumerate(pubs)]
        for t in pthreads:
            t.start()
        for t in pthreads:
            t.join(timeout=30)
        assert not errors, errors
        assert not any(t.is_alive() for t in pthreads), "publishers stuck"

        total = sum(len(v) for v in expected.values()) * len(CHANNELS)
        wait_total(all_threads, total, timeout=30)
        time.sleep(0.5)  # anything extra (duplicates) would show up now
        for (topic, ch), ths in consumers.items():
            got = collections.Counter(m.body for th in ths for m in th.deliveries)
            want = collections.Counter(expected[topic])
            missing = want - got
            extra = got - want
            assert not missing, "%s/%s: %d messages missing, e.g. %r" % (
                topic, ch, sum(missing.values()), list(missing)[:5])
            assert not extra, "%s/%s: %d duplicates or strangers, e.g. %r" % (
                topic, ch, sum(extra.values()), list(extra)[:5])
            for th in ths:
                assert not th.errors, th.errors
                assert all(m.attempts == 1 for m in th.deliveries)
        for c in pubs:
            c.close()
    finally:
        stop_all(all_threads)


def test_req_and_fin_travel_back_to_owner_shard(broker):
    """8 consumer connections on one channel REQ every first delivery and FIN the second one:
    every message comes back exactly once more, with attempts 2, and is then gone."""
    topic = "xs_req"
    n = 40
    threads = [start_consumer(broker, topic, "ch", rdy=1,
                              decide=lambda m: "req" if m.attempts == 1 else "fin")
               for _ in range(8)]
    try:
        with Conn(broker.addr) as p:
            bodies = [("r%02d" % i).encode() for i in range(n)]
            p.mpub(topic, bodies[:20])
            for b in bodies[20:]:
                p.pub(topic, b)
        wait_total(threads, 2 * n, timeout=30)
        time.sleep(0.5)
        by_body = collections.defaultdict(list)
        for th in threads:
            assert not th.errors, th.errors
            for m in th.deliveries:
                by_body[m.body].append(m.attempts)
        assert sorted(by_body) == sorted(bodies), "missing: %r" % sorted(set(bodies) - set(by_body))
        bad = {b: a for b, a in by_body.items() if sorted(a) != [1, 2]}
        assert not bad, "deliveries per message should be attempts [1, 2]: %r" % bad
    finally:
        stop_all(threads)


def test_disconnect_returns_in_flight_across_shards(start_broker):
    """6 consumers take messages and disconnect without FIN; 6 new ones get them all back at
    once (attempts 2), long before the 60 s msg-timeout."""
    b = start_broker("--msg-timeout=60s", "--move-to-owner=false")
    topic = "xs_disc"
    n = 30
    takers = []
    for _ in range(6):
        c = Conn(b.addr)
        c.identify()
        c.sub(topic, "ch", rdy=5)
        takers.append(c)
    with Conn(b.addr) as p:
        p.mpub(topic, [("d%02d" % i).encode() for i in range(n)])
    taken = []
    deadline = time.monotonic() + 15
    while len(taken) < n and time.monotonic() < deadline:
        for c in takers:
            try:
                taken.append(c.read_message(timeout=0.1))
            except (socket.timeout, TimeoutError):
                pass
    assert len(taken) == n, "only %d of %d delivered to 6 consumers with RDY 5" % (len(taken), n)
    for c in takers:
        c.close()
    t0 = time.monotonic()
    threads = [start_consumer(b, topic, "ch", rdy=10) for _ in range(6)]
    try:
        wait_total(threads, n, timeout=10)
        got = [m for th in threads for m in th.deliveries]
        assert time.monotonic() - t0 < 10
        assert sorted(m.body for m in got) == sorted(m.body for m in taken)
        assert all(m.attempts == 2 for m in got), [(m.body, m.attempts) for m in got]
    finally:
        stop_all(threads)
