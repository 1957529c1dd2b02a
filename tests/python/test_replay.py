"""Replay through the wire (ours; nsqd has none): `POST /channel/rewind` to a time, an offset or
the earliest message kept, `POST /channel/create?from=` for a new channel starting in the past,
with gnsq consumers and producers. A rewound channel receives exactly what was published from
its new position, in order, while the topic's other channels are untouched; in-flight messages
finish normally; the rewind is durable once answered (kill -9 and a restart with another
`--shards` keep it); positions in /stats; errors refused with a 400/404 that says what is
wrong, a position before the history saying how far back it goes; a dry run
(`dry_run=true`) answers the position and how many messages the rewind would deliver again,
moving nothing."""

import glob
import json
import os
import logging
import time
import urllib.parse

import gevent
import gnsq
import pytest

from brokerhttp import http
from nsqwire import Conn, FRAME_MESSAGE, Message

logging.getLogger("gnsq").setLevel(logging.CRITICAL)

TOPIC = "replayed"
N = 10_000
# Small segments and a small memory window: the seek and the replay read segment files back
# through the block cache and the fetcher.
FLAGS = ("--max-bytes-per-file=65536", "--mem-queue-size=100")


def post(broker, path, **args):
    return http(broker, "POST", "%s?%s" % (path, urllib.parse.urlencode(args)))


def ok(broker, path, **args):
    status, body = post(broker, path, **args)
    assert status == 200, (path, args, status, body)


def refused(broker, path, status, **args):
    got, body = post(broker, path, **args)
    assert got == status, (path, args, got, body)
    return json.loads(body)["message"]


def channel_stats(broker, topic, channel, positions=False):
    q = "/stats?format=json&topic=%s&channel=%s" % (topic, channel)
    if positions:
        q += "&include_positions=true"
    status, body = http(broker, "GET", q)
    assert status == 200, body
    (t,) = json.loads(body)["topics"]
    (c,) = t["channels"]
    return c


def gwait(pred, timeout, what):
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, "timed out waiting for " + what
        gevent.sleep(0.02)


def body(i):
    return "m-%05d" % i


def publish(broker, first, count):
    """Publishes bodies first..first+count with gnsq's producer (MPUB in batches of 500)."""
    p = gnsq.Producer(nsqd_tcp_addresses=[broker.tcp_address])
    p.start()
    try:
        for i in range(first, first + count, 500):
            p.multipublish(TOPIC, [body(j).encode() for j in range(i, min(i + 500, first + count))])
    finally:
        p.close()
        p.join(timeout=5)


class Receiver:
    """A gnsq consumer recording the bodies it receives, in order (each FINished by gnsq)."""

    def __init__(self, broker, channel, max_in_flight=200):
        self.bodies = []
        self.consumer = gnsq.Consumer(TOPIC, channel, nsqd_tcp_addresses=[broker.tcp_address],
                                      max_in_flight=max_in_flight,
                                      message_handler=lambda _c, message: self.bodies.append(message.body.decode()))
        self.consumer.start(block=False)
        gwait(lambda: len(self.consumer._connections) > 0, 10, "consumer connection")

    def wait(self, count, timeout=60):
        gwait(lambda: len(self.bodies) >= count, timeout,
              "%d messages (got %d)" % (count, len(self.bodies)))
        return self.bodies

    def close(self):
        self.consumer.close()
        self.consumer.join(timeout=5)


def settled(broker, channel, offset):
    """Waits until `channel` has taken everything up to `offset` and owes nothing."""
    def done():
        c = channel_stats(broker, TOPIC, channel, positions=True)
        return c["offset"] == offset and c["depth"] == 0 and c["in_flight_count"] == 0
    deadline = time.monotonic() + 30
    while not done():
        assert time.monotonic() < deadline, channel_stats(broker, TOPIC, channel, True)
        time.sleep(0.05)


def history_split(r):
    """Publishes N messages in two halves with a time between them (the broker stamps each
    message with its clock at publication); returns that time in unix nanoseconds."""
    publish(r.broker, 0, N // 2)
    time.sleep(0.05)
    middle = time.time_ns()
    time.sleep(0.05)
    publish(r.broker, N // 2, N // 2)
    return middle


def consume_all(broker, channel):
    rec = Receiver(broker, channel)
    try:
        got = rec.wait(N)
    finally:
        rec.close()
    assert sorted(got) == [body(i) for i in range(N)]
    settled(broker, channel, N)


def with_retention(restartable, channels=(), **retention):
    """A started broker (FLAGS) with TOPIC under `retention` (a /topic/config argument) and
    `channels` created; returns the restartable and its broker."""
    r = restartable(*FLAGS)
    r.start()
    b = r.broker
    ok(b, "/topic/create", topic=TOPIC)
    ok(b, "/topic/config", topic=TOPIC, **retention)
    for ch in channels:
        ok(b, "/channel/create", topic=TOPIC, channel=ch)
    return r, b


@pytest.mark.slow
def test_rewind_to_a_time_replays_exactly_what_came_after_it(restartable):
    r, b = with_retention(restartable, ("a", "b"), retention_time="1h")
    middle = history_split(r)
    consume_all(b, "a")
    consume_all(b, "b")
    # Positions are shown: the topic has a retention limit in force.
    c = channel_stats(b, TOPIC, "a")
    assert c["offset"] == N and c["oldest_owed_timestamp"] == 0
    ok(b, "/channel/rewind", topic=TOPIC, channel="a", timestamp=str(middle))
    c = channel_stats(b, TOPIC, "a")
    assert c["offset"] == N // 2 and c["depth"] == N // 2
    assert c["oldest_owed_timestamp"] > 0
    rec = Receiver(b, "a", max_in_flight=1)
    try:
        got = rec.wait(N // 2)
        settled(b, "a", N)
    finally:
        rec.close()
    assert got == [body(i) for i in range(N // 2, N)], "exactly what came after, in order"
    b_after = channel_stats(b, TOPIC, "b")
    assert (b_after["offset"], b_after["depth"], b_after["message_count"]) == (N, 0, N)
    # An RFC 3339 time an hour before the first message: the topic's history starts at its
    # first message (offset 0), so that is where the channel goes.
    an_hour_before = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(middle // 10**9 - 3600))
    ok(b, "/channel/rewind", topic=TOPIC, channel="a", timestamp=an_hour_before)
    assert channel_stats(b, TOPIC, "a")["offset"] == 0


def test_a_dry_run_counts_what_a_rewind_would_deliver_again_and_moves_nothing(restartable):
    r, b = with_retention(restartable, ("a", "fresh"), retention_time="1h")
    middle = history_split(r)
    consume_all(b, "a")

    def dry_run(channel, **at):
        status, answer = post(b, "/channel/rewind", topic=TOPIC, channel=channel,
                              dry_run="true", **at)
        assert status == 200, (at, status, answer)
        return json.loads(answer)

    assert dry_run("a", timestamp=str(middle)) == {"offset": N // 2, "redelivered": N // 2}
    assert dry_run("a", earliest="true") == {"offset": 0, "redelivered": N}
    assert dry_run("a", offset="9000") == {"offset": 9000, "redelivered": N - 9000}
    # a channel that has taken nothing yet would deliver nothing again
    assert dry_run("fresh", earliest="true") == {"offset": 0, "redelivered": 0}
    # nothing moved: "a" still owes nothing, "fresh" everything
    a = channel_stats(b, TOPIC, "a")
    assert (a["offset"], a["depth"]) == (N, 0), a
    assert channel_stats(b, TOPIC, "fresh")["offset"] == 0
    # the same checks as a rewind, and a bad dry_run value
    assert refused(b, "/channel/rewind", 400, topic=TOPIC, channel="a", offset=str(N + 5),
                   dry_run="true").startswith("REWIND_PAST_END")
    assert refused(b, "/channel/rewind", 400, topic=TOPIC, channel="a", offset="1",
                   dry_run="maybe").startswith("INVALID_ARG_DRY_RUN")
    assert refused(b, "/channel/rewind", 404, topic=TOPIC, channel="nope", earliest="true",
                   dry_run="true") == "CHANNEL_NOT_FOUND"
    # dry_run=false is a rewind
    ok(b, "/channel/rewind", topic=TOPIC, channel="a", timestamp=str(middle), dry_run="false")
    assert channel_stats(b, TOPIC, "a")["offset"] == N // 2


def test_a_channel_created_from_earliest_receives_the_whole_history(restartable):
    r, b = with_retention(restartable, ("a",), retention_bytes="100MiB")
    middle = history_split(r)
    consume_all(b, "a")
    ok(b, "/channel/create", topic=TOPIC, channel="late", **{"from": "earliest"})
    ok(b, "/channel/create", topic=TOPIC, channel="half", **{"from": str(middle)})
    ok(b, "/channel/create", topic=TOPIC, channel="tail", **{"from": "offset:%d" % (N - 10)})
    for channel, first in (("late", 0), ("half", N // 2), ("tail", N - 10)):
        rec = Receiver(b, channel, max_in_flight=1)
        try:
            got = rec.wait(N - first)
            settled(b, channel, N)
        finally:
            rec.close()
        assert got == [body(i) for i in range(first, N)], channel
    # Without from=, a new channel starts from now, as in nsqd.
    ok(b, "/channel/create", topic=TOPIC, channel="now")
    c = channel_stats(b, TOPIC, "now")
    assert (c["offset"], c["depth"]) == (N, 0)
    assert refused(b, "/channel/create", 400, topic=TOPIC, channel="late",
                   **{"from": "earliest"}).startswith("CHANNEL_EXISTS")


@pytest.mark.parametrize("how", ["kill", "stop"])
def test_a_rewind_survives_a_restart_with_another_shard_count(restartable, shards, how):
    r, b = with_retention(restartable, ("a", "b"), retention_time="1h")
    history_split(r)
    consume_all(b, "a")
    consume_all(b, "b")
    ok(b, "/channel/rewind", topic=TOPIC, channel="a", offset="4000")
    # Answered: the cursor is in meta.json. A kill -9 right now keeps it.
    if how == "kill":
        r.kill()
    else:
        r.stop()
    other = 1 if shards > 1 else 2
    r.start(shards=other)
    b = r.broker
    c = channel_stats(b, TOPIC, "a", positions=True)
    assert c["offset"] == 4000, c
    rec = Receiver(b, "a", max_in_flight=1)
    try:
        got = rec.wait(N - 4000)
        settled(b, "a", N)
    finally:
        rec.close()
    assert got == [body(i) for i in range(4000, N)]
    # The other channel kept its place (after a kill, its last checkpoint: at most a
    # redelivery of what it finished in the last seconds, at-least-once).
    c = channel_stats(b, TOPIC, "b", positions=True)
    if how == "stop":
        assert (c["offset"], c["depth"]) == (N, 0)
    # A rewind on the restarted broker, with the other shard count, works too.
    ok(b, "/channel/rewind", topic=TOPIC, channel="a", earliest="true")
    assert channel_stats(b, TOPIC, "a")["offset"] == 0


def test_in_flight_messages_finish_normally_across_a_rewind(restartable):
    r, b = with_retention(restartable, retention_time="1h")
    with Conn(b.addr) as c:
        c.sub(TOPIC, "a", rdy=10)
        publish(b, 0, 100)
        held = c.read_messages(10)
        assert [m.body.decode() for m in held] == [body(i) for i in range(10)]
        ok(b, "/channel/rewind", topic=TOPIC, channel="a", earliest="")
        # FIN of messages delivered before the rewind: accepted (no error frame), and the
        # replay then delivers every message from the start again, once each, in order.
        for m in held:
            c.fin(m.id)
        got = []
        deadline = time.monotonic() + 30
        while len(got) < 100:
            assert time.monotonic() < deadline, got
            ftype, data = c.read_frame(timeout=10)
            assert ftype == FRAME_MESSAGE, (ftype, data)
            m = Message.parse(data)
            got.append(m)
            c.fin(m.id)
        assert [m.body.decode() for m in got] == [body(i) for i in range(100)]
        assert all(m.attempts == 1 for m in got), "attempts start over"
        # Messages in flight when the replay reaches them are not handed out twice at once;
        # the rewind owes them again: once each delivery ends, by a REQ or a FIN, the message
        # comes again, once, its attempts starting over.
        c.cmd("RDY 5")
        ok(b, "/channel/rewind", topic=TOPIC, channel="a", offset="95")
        held = c.read_messages(5)
        assert [m.body.decode() for m in held] == [body(i) for i in range(95, 100)]
        ok(b, "/channel/rewind", topic=TOPIC, channel="a", offset="95")
        c.cmd("RDY 10")
        c.expect_nothing(0.3)
        c.req(held[2].id)
        again = c.read_message()
        assert (again.body.decode(), again.attempts) == (body(97), 1)
        for m in held[:2] + held[3:]:
            c.fin(m.id)
        rest = c.read_messages(4)
        assert sorted(m.body.decode() for m in rest) == [body(i) for i in (95, 96, 98, 99)]
        assert all(m.attempts == 1 for m in rest), "attempts start over"
        for m in [again] + rest:
            c.fin(m.id)
        c.expect_nothing(0.3)
    settled(b, "a", 100)


def test_positions_in_stats_only_where_replay_matters_or_asked(restartable):
    r = restartable()
    r.start()
    b = r.broker
    ok(b, "/topic/create", topic=TOPIC)
    ok(b, "/channel/create", topic=TOPIC, channel="a")
    publish(b, 0, 10)
    c = channel_stats(b, TOPIC, "a")
    assert "offset" not in c and "oldest_owed_timestamp" not in c, "nsqd's keys exactly"
    c = channel_stats(b, TOPIC, "a", positions=True)
    assert c["offset"] == 0 and c["depth"] == 10
    assert abs(c["oldest_owed_timestamp"] - time.time_ns()) < 600 * 10**9
    ok(b, "/topic/config", topic=TOPIC, retention_time="10m")
    assert channel_stats(b, TOPIC, "a")["offset"] == 0


def test_errors(restartable):
    r = restartable("--max-bytes-per-file=4096", "--mem-queue-size=10")
    r.start()
    b = r.broker
    ok(b, "/topic/create", topic=TOPIC)
    ok(b, "/channel/create", topic=TOPIC, channel="a")
    rw = "/channel/rewind"
    assert refused(b, rw, 400, channel="a", offset="0") == "MISSING_ARG_TOPIC"
    assert refused(b, rw, 400, topic=TOPIC, offset="0") == "MISSING_ARG_CHANNEL"
    assert refused(b, rw, 400, topic="bad topic", channel="a", offset="0") == "INVALID_ARG_TOPIC"
    assert refused(b, rw, 404, topic="nope", channel="a", offset="0") == "TOPIC_NOT_FOUND"
    assert refused(b, rw, 404, topic=TOPIC, channel="nope", offset="0") == "CHANNEL_NOT_FOUND"
    assert refused(b, rw, 400, topic=TOPIC, channel="a").startswith("MISSING_ARG_POSITION")
    assert refused(b, rw, 400, topic=TOPIC, channel="a", offset="0",
                   earliest="").startswith("INVALID_ARG_POSITION")
    assert refused(b, rw, 400, topic=TOPIC, channel="a",
                   timestamp="yesterday").startswith("INVALID_ARG_TIMESTAMP")
    assert refused(b, rw, 400, topic=TOPIC, channel="a",
                   timestamp="2026-02-30T00:00:00Z").startswith("INVALID_ARG_TIMESTAMP")
    assert refused(b, rw, 400, topic=TOPIC, channel="a",
                   offset="-1").startswith("INVALID_ARG_OFFSET")
    assert refused(b, rw, 400, topic=TOPIC, channel="a",
                   offset="5").startswith("REWIND_PAST_END: the log ends at offset 0")
    assert refused(b, "/channel/create", 400, topic=TOPIC, channel="x",
                   **{"from": "latest"}).startswith("INVALID_ARG_FROM")
    # Ephemeral topics and channels keep no history.
    ok(b, "/topic/create", topic="eph#ephemeral")
    ok(b, "/channel/create", topic="eph#ephemeral", channel="a")
    assert refused(b, rw, 400, topic="eph#ephemeral", channel="a",
                   earliest="").startswith("EPHEMERAL_TOPIC")
    ok(b, "/channel/create", topic=TOPIC, channel="e#ephemeral")
    assert refused(b, rw, 400, topic=TOPIC, channel="e#ephemeral",
                   earliest="").startswith("EPHEMERAL_CHANNEL")
    # Without retention, what every channel consumed goes: a rewind before it is refused
    # with how far back the history goes.
    publish(b, 0, 500)
    rec = Receiver(b, "a")
    try:
        rec.wait(500)
        settled(b, "a", 500)
    finally:
        rec.close()
    ok(b, "/channel/delete", topic=TOPIC, channel="e#ephemeral")
    publish(b, 500, 1)

    def oldest_segment():
        names = sorted(glob.glob(os.path.join(b.data_path, TOPIC, "*.seg")))
        return int(os.path.basename(names[0]).split(".")[0]) if names else 0
    deadline = time.monotonic() + 30
    while oldest_segment() == 0:
        assert time.monotonic() < deadline, "segments never released"
        time.sleep(0.2)
    msg = refused(b, rw, 400, topic=TOPIC, channel="a", offset="0")
    assert msg.startswith("REWIND_BEFORE_HISTORY: oldest retained offset "), msg
    oldest = int(msg.split("offset ")[1].split(" ")[0])
    assert 0 < oldest <= 500
    assert msg.endswith("Z)"), msg
    assert refused(b, rw, 400, topic=TOPIC, channel="a",
                   timestamp="2000-01-01T00:00:00Z").startswith("REWIND_BEFORE_HISTORY")
    ok(b, rw, topic=TOPIC, channel="a", offset=str(oldest))
    ok(b, rw, topic=TOPIC, channel="a", earliest="")
