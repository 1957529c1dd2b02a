"""The broker through gnsq (gevent): gnsq.Producer and gnsq.Consumer with nsqd_tcp_addresses.

gevent is used without monkey-patching: waits go through gevent.sleep so the library's
greenlets run, and every wait is bounded.
"""

import collections
import logging
import time

import gevent
import gnsq
import gnsq.errors
import pytest

from nsqwire import Conn

logging.getLogger("gnsq").setLevel(logging.CRITICAL)


def gwait(pred, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        gevent.sleep(0.02)
    raise AssertionError("timed out after %.1fs waiting for %s" % (timeout, what))


def gsleep(seconds):
    gevent.sleep(seconds)


def make_channels(broker, topic, channels):
    for ch in channels:
        with Conn(broker.addr) as c:
            c.identify()
            c.sub(topic, ch)


class Clients:
    """Starts gnsq clients and closes them all at the end."""

    def __init__(self, broker):
        self.broker = broker
        self.items = []

    def producer(self):
        p = gnsq.Producer(nsqd_tcp_addresses=[self.broker.tcp_address])
        p.start()
        self.items.append(p)
        assert p.is_running
        return p

    def consumer(self, topic, channel, handler, **kw):
        kw.setdefault("max_in_flight", 1)
        c = gnsq.Consumer(topic, channel, nsqd_tcp_addresses=[self.broker.tcp_address],
                          message_handler=handler, **kw)
        c.start(block=False)
        self.items.append(c)
        gwait(lambda: len(c._connections) > 0, 10, "consumer connection")
        return c

    def close(self):
        for item in reversed(self.items):
            try:
                item.close()
            except Exception:
                pass
        for item in self.items:
            try:
                item.join(timeout=2)
            except Exception:
                pass


@pytest.fixture
def clients():
    made = []

    def make(broker):
        c = Clients(broker)
        made.append(c)
        return c

    yield make
    for c in made:
        c.close()


def publish(p, topic, data, defer=None):
    res = p.publish(topic, data, defer=defer, timeout=10, raise_error=False).get(timeout=10)
    assert res == b"OK", res


def multipublish(p, topic, messages):
    res = p.multipublish(topic, messages, timeout=10, raise_error=False).get(timeout=10)
    assert res == b"OK", res


def test_publish_multipublish_defer_two_channels(broker, clients):
    topic = "gnsq_fanout"
    make_channels(broker, topic, ["a", "b"])
    got = {"a": [], "b": []}
    cl = clients(broker)
    for ch in ("a", "b"):
        cl.consumer(topic, ch, lambda consumer, message, ch=ch:
                    got[ch].append((message.body, message.attempts)), max_in_flight=10)
    p = cl.producer()
    publish(p, topic, b"single")
    multipublish(p, topic, [b"multi-%d" % i for i in range(5)])
    publish(p, topic, b"deferred", defer=300)
    gwait(lambda: len(got["a"]) >= 7 and len(got["b"]) >= 7, 15, "7 messages per channel")
    gsleep(0.3)
    want = sorted([(b"single", 1), (b"deferred", 1)] + [(b"multi-%d" % i, 1) for i in range(5)])
    assert sorted(got["a"]) == want
    assert sorted(got["b"]) == want


def test_two_consumers_one_channel_split_nothing_lost(broker, clients):
    topic = "gnsq_split"
    make_channels(broker, topic, ["ch"])
    n = 100
    got = {1: [], 2: []}

    def handler_for(k):
        def h(consumer, message):
            got[k].append(message.body)
            gevent.sleep(0.01)  # slow enough that one consumer cannot take everything
        return h

    cl = clients(broker)
    cl.consumer(topic, "ch", handler_for(1), max_in_flight=5)
    cl.consumer(topic, "ch", handler_for(2), max_in_flight=5)
    gsleep(0.3)
    p = cl.producer()
    multipublish(p, topic, [b"s%03d" % i for i in range(n // 2)])
    for i in range(n // 2, n):
        publish(p, topic, b"s%03d" % i)
    gwait(lambda: len(got[1]) + len(got[2]) >= n, 30, "%d messages" % n)
    gsleep(0.3)
    everything = collections.Counter(got[1] + got[2])
    assert sorted(everything) == [b"s%03d" % i for i in range(n)], "messages lost"
    assert max(everything.values()) == 1, [b for b, c in everything.items() if c > 1]
    assert got[1] and got[2], "one consumer got nothing: %d / %d" % (len(got[1]), len(got[2]))


def test_failing_handler_requeues_with_attempts_plus_one(broker, clients):
    topic = "gnsq_requeue"
    make_channels(broker, topic, ["ch"])
    seen = []

    def handler(consumer, message):
        seen.append((message.id, message.body, message.attempts))
        if message.attempts == 1:
            raise RuntimeError("handler failure: gnsq requeues")

    cl = clients(broker)
    cl.consumer(topic, "ch", handler, requeue_delay=0, max_backoff_duration=0.5)
    p = cl.producer()
    publish(p, topic, b"flaky")
    gwait(lambda: len(seen) >= 2, 15, "redelivery after requeue")
    gsleep(1.0)
    assert len(seen) == 2, seen
    assert seen[0] == (seen[1][0], b"flaky", 1)
    assert seen[1][2] == 2


def test_unanswered_message_comes_back_after_msg_timeout(start_broker, clients):
    b = start_broker("--msg-timeout=2s")
    topic = "gnsq_timeout"
    make_channels(b, topic, ["ch"])
    seen = []

    def handler(consumer, message):
        seen.append((message.id, message.attempts, time.monotonic()))
        if message.attempts == 1:
            message.enable_async()  # never answered

    cl = clients(b)
    cl.consumer(topic, "ch", handler)
    p = cl.producer()
    publish(p, topic, b"slow")
    gwait(lambda: len(seen) >= 2, 10, "redelivery after msg-timeout")
    gsleep(0.5)
    assert len(seen) == 2, seen
    assert seen[0][0] == seen[1][0]
    assert [s[1] for s in seen] == [1, 2]
    elapsed = seen[1][2] - seen[0][2]
    assert 1.5 <= elapsed <= 7, "redelivered after %.2fs with --msg-timeout=2s" % elapsed


def test_touch_holds_message_then_finish(start_broker, clients):
    b = start_broker("--msg-timeout=2s")
    topic = "gnsq_touch"
    make_channels(b, topic, ["ch"])
    seen = []

    def handler(consumer, message):
        message.enable_async()
        seen.append(message)

    cl = clients(b)
    cl.consumer(topic, "ch", handler)
    p = cl.producer()
    publish(p, topic, b"touch-me")
    gwait(lambda: seen, 10, "first delivery")
    for _ in range(5):
        gsleep(1.0)
        assert len(seen) == 1, "redelivered while being touched"
        seen[0].touch()
    seen[0].finish()
    gsleep(2.5)
    assert len(seen) == 1, [(m.id, m.attempts) for m in seen]
    assert seen[0].attempts == 1 and seen[0].body == b"touch-me"


def test_deferred_publish_not_delivered_before_delay(broker, clients):
    topic = "gnsq_defer"
    make_channels(broker, topic, ["ch"])
    seen = []
    cl = clients(broker)
    cl.consumer(topic, "ch", lambda consumer, message: seen.append(
        (message.body, time.monotonic())))
    p = cl.producer()
    t0 = time.monotonic()
    publish(p, topic, b"later", defer=1500)
    gwait(lambda: seen, 8, "deferred message")
    assert seen[0][0] == b"later"
    assert seen[0][1] - t0 >= 1.4, "deferred 1500 ms, delivered after %.2fs" % (seen[0][1] - t0)


def test_producer_error_is_raised(start_broker, clients):
    b = start_broker("--max-msg-size=1024")
    cl = clients(b)
    p = cl.producer()
    with pytest.raises(gnsq.errors.NSQBadMessage) as info:
        p.publish("gnsq_bad", b"x" * 2048, timeout=10, raise_error=False).get(timeout=10)
    assert "message too big 2048 > 1024" in str(info.value), repr(info.value)
