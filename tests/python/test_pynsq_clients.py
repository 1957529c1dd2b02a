"""The broker through pynsq (tornado): nsq.Writer and nsq.Reader with nsqd_tcp_addresses.

Each test runs its scenario as a coroutine on a fresh asyncio loop (tornado 6's IOLoop wraps
it), bounded by asyncio.wait_for.
"""

import asyncio
import collections
import logging
import time

import nsq

from nsqwire import Conn
from aio import run, until  # noqa: E402

logging.getLogger("nsq").setLevel(logging.CRITICAL)







def make_channels(broker, topic, channels):
    """Creates the channels (SUB, then leave) so no message published next can miss them."""
    for ch in channels:
        with Conn(broker.addr) as c:
            c.identify()
            c.sub(topic, ch)


async def writer_for(broker):
    w = nsq.Writer([broker.tcp_address], reconnect_interval=60.0)
    await until(lambda: any(c.connected() for c in w.conns.values()), 10, "Writer connection")
    return w


async def publish(w, method, *args):
    """Calls Writer.pub/mpub/dpub and waits for the broker's answer; returns it."""
    fut = asyncio.get_running_loop().create_future()

    def cb(conn, data):
        if not fut.done():
            fut.set_result(data)

    getattr(w, method)(*args, callback=cb)
    data = await asyncio.wait_for(fut, 10)
    assert not isinstance(data, Exception), "%s failed: %r" % (method, data)
    assert data == b"OK", "%s answered %r" % (method, data)
    return data


def close_writer(w):
    for c in list(w.conns.values()):
        c.close()


def reader(broker, topic, channel, handler, **kw):
    kw.setdefault("max_in_flight", 1)
    return nsq.Reader(topic=topic, channel=channel, message_handler=handler,
                      nsqd_tcp_addresses=[broker.tcp_address], lookupd_poll_interval=60,
                      **kw)


async def reader_ready(r):
    await until(lambda: any(c.connected() for c in r.conns.values()), 10, "Reader connection")


def test_pub_mpub_dpub_two_channels_each_get_everything(broker):
    topic = "pynsq_fanout"
    make_channels(broker, topic, ["a", "b"])
    got = {"a": [], "b": []}

    def handler_for(ch):
        def h(msg):
            got[ch].append((msg.body, msg.attempts))
            return True
        return h

    async def scenario():
        ra = reader(broker, topic, "a", handler_for("a"), max_in_flight=10)
        rb = reader(broker, topic, "b", handler_for("b"), max_in_flight=10)
        await reader_ready(ra)
        await reader_ready(rb)
        w = await writer_for(broker)
        await publish(w, "pub", topic, b"single")
        await publish(w, "mpub", topic, [b"multi-%d" % i for i in range(5)])
        await publish(w, "dpub", topic, 300, b"deferred")
        await until(lambda: len(got["a"]) >= 7 and len(got["b"]) >= 7, 15, "7 messages each")
        await asyncio.sleep(0.3)
        ra.close()
        rb.close()
        close_writer(w)

    run(scenario)
    want = sorted([(b"single", 1), (b"deferred", 1)] + [(b"multi-%d" % i, 1) for i in range(5)])
    assert sorted(got["a"]) == want
    assert sorted(got["b"]) == want


def test_two_readers_one_channel_split_nothing_lost(broker):
    topic = "pynsq_split"
    make_channels(broker, topic, ["ch"])
    n = 100
    got = {1: [], 2: []}

    def handler_for(k):
        def h(msg):
            msg.enable_async()
            got[k].append(msg.body)
            asyncio.get_running_loop().call_later(0.01, msg.finish)
        return h

    async def scenario():
        r1 = reader(broker, topic, "ch", handler_for(1), max_in_flight=5)
        r2 = reader(broker, topic, "ch", handler_for(2), max_in_flight=5)
        await reader_ready(r1)
        await reader_ready(r2)
        await asyncio.sleep(0.2)
        w = await writer_for(broker)
        await publish(w, "mpub", topic, [b"s%03d" % i for i in range(n // 2)])
        for i in range(n // 2, n):
            await publish(w, "pub", topic, b"s%03d" % i)
        await until(lambda: len(got[1]) + len(got[2]) >= n, 20, "%d messages" % n)
        await asyncio.sleep(0.3)
        r1.close()
        r2.close()
        close_writer(w)

    run(scenario)
    everything = collections.Counter(got[1] + got[2])
    assert sorted(everything) == [b"s%03d" % i for i in range(n)], "messages lost"
    assert max(everything.values()) == 1, "duplicates: %r" % [
        b for b, c in everything.items() if c > 1]
    assert got[1] and got[2], "one reader got nothing: %d / %d" % (len(got[1]), len(got[2]))


def test_failing_handler_requeues_with_attempts_plus_one(broker):
    topic = "pynsq_requeue"
    make_channels(broker, topic, ["ch"])
    seen = []

    def handler(msg):
        seen.append((msg.id, msg.body, msg.attempts))
        return msg.attempts >= 2  # fail the first delivery: pynsq sends REQ

    async def scenario():
        r = reader(broker, topic, "ch", handler, requeue_delay=0, max_backoff_duration=0.5)
        await reader_ready(r)
        w = await writer_for(broker)
        await publish(w, "pub", topic, b"flaky")
        await until(lambda: len(seen) >= 2, 15, "redelivery after requeue")
        await asyncio.sleep(1.0)
        r.close()
        close_writer(w)

    run(scenario)
    assert len(seen) == 2, seen
    (id1, body1, a1), (id2, body2, a2) = seen
    assert (id1, body1, a1) == (id2, b"flaky", 1)
    assert a2 == 2


def test_unanswered_message_comes_back_after_msg_timeout(start_broker):
    b = start_broker("--msg-timeout=2s")
    topic = "pynsq_timeout"
    make_channels(b, topic, ["ch"])
    seen = []

    def handler(msg):
        seen.append((msg.id, msg.attempts, time.monotonic()))
        if msg.attempts == 1:
            msg.enable_async()  # never answered
            return None
        return True

    async def scenario():
        r = reader(b, topic, "ch", handler)
        await reader_ready(r)
        w = await writer_for(b)
        await publish(w, "pub", topic, b"slow")
        await until(lambda: len(seen) >= 2, 10, "redelivery after msg-timeout")
        await asyncio.sleep(0.5)
        r.close()
        close_writer(w)

    run(scenario)
    assert len(seen) == 2, seen
    assert seen[0][0] == seen[1][0]
    assert [s[1] for s in seen] == [1, 2]
    elapsed = seen[1][2] - seen[0][2]
    assert 1.5 <= elapsed <= 7, "redelivered after %.2fs with --msg-timeout=2s" % elapsed


def test_touch_holds_message_then_fin(start_broker):
    b = start_broker("--msg-timeout=2s")
    topic = "pynsq_touch"
    make_channels(b, topic, ["ch"])
    seen = []

    def handler(msg):
        seen.append(msg)
        msg.enable_async()

    async def scenario():
        r = reader(b, topic, "ch", handler)
        await reader_ready(r)
        w = await writer_for(b)
        await publish(w, "pub", topic, b"touch-me")
        await until(lambda: seen, 10, "first delivery")
        for _ in range(5):
            await asyncio.sleep(1.0)
            assert len(seen) == 1, "redelivered while being touched"
            seen[0].touch()
        seen[0].finish()
        await asyncio.sleep(2.5)
        r.close()
        close_writer(w)

    run(scenario)
    assert len(seen) == 1, [(m.id, m.attempts) for m in seen]
    assert seen[0].attempts == 1 and seen[0].body == b"touch-me"


def test_dpub_not_delivered_before_delay(broker):
    topic = "pynsq_dpub"
    make_channels(broker, topic, ["ch"])
    seen = []

    def handler(msg):
        seen.append((msg.body, time.monotonic()))
        return True

    async def scenario():
        r = reader(broker, topic, "ch", handler)
        await reader_ready(r)
        w = await writer_for(broker)
        t0 = time.monotonic()
        await publish(w, "dpub", topic, 1500, b"later")
        await until(lambda: seen, 8, "deferred message")
        r.close()
        close_writer(w)
        return t0

    t0 = run(scenario)
    assert seen[0][0] == b"later"
    assert seen[0][1] - t0 >= 1.4, "DPUB 1500 delivered after %.2fs" % (seen[0][1] - t0)


def test_writer_sees_error_for_bad_message(start_broker):
    """pynsq reports E_BAD_MESSAGE to the publish callback (the connection is then closed).
    (Not an empty body: pynsq 0.9.1 then sends no size at all, so the broker waits for it.)"""
    bad = b"x" * 2048
    b = start_broker("--max-msg-size=1024")
    result = {}

    async def scenario():
        w = await writer_for(b)
        fut = asyncio.get_running_loop().create_future()
        w.pub("pynsq_bad", bad, callback=lambda conn, data: fut.done() or fut.set_result(data))
        result["data"] = await asyncio.wait_for(fut, 10)
        close_writer(w)

    run(scenario)
    data = result["data"]
    assert isinstance(data, nsq.Error), data
    assert "E_BAD_MESSAGE" in str(data) and "message too big 2048 > 1024" in str(data), str(data)
