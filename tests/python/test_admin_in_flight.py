"""An admin operation answered OK takes effect, whatever a consumer's FIN, REQ or timeout
reaches the topic's owner after it (ours: such mail travels between shards and a timeout fires
later): raw sockets and the HTTP API.

- A rewind sent right after a consumer's FINs (the issue's report: 50 messages, a time mark,
  50 more; a raw consumer with RDY 100 receives and FINs all 100 and at once the channel is
  rewound to the mark) delivers the 50 after the mark again, each once. The race is repeated
  `REWIND_RACE_REPEAT` times (5 by default; the repetition run sets 200). Its cause, made
  certain: FINs or REQs that reach the owner after the rewind's replay passed their messages.
- An empty: a REQ or a timeout of a message in flight when the channel was emptied brings
  nothing back (nsqd forgets what is in flight at once); its FIN still works.
- Max attempts: a limit lowered while a message waits requeued applies to it at once; it
  goes to the dead-letter topic instead of being delivered over the limit.
"""

import datetime
import json
import os
import socket
import time
import urllib.parse

import pytest

from brokerhttp import http, keepalive_pub
from nsqwire import Conn, wait_for

RACE_REPEAT = int(os.environ.get("REWIND_RACE_REPEAT", "5"))


def post(broker, path, **args):
    return http(broker, "POST", "%s?%s" % (path, urllib.parse.urlencode(args)))


def ok(broker, path, **args):
    status, body = post(broker, path, **args)
    assert status == 200, (path, args, status, body)
    return body


def channel_stats(broker, topic, channel):
    q = "/stats?format=json&topic=%s&channel=%s&include_positions=true" % (topic, channel)
    status, body = http(broker, "GET", q)
    assert status == 200, body
    (t,) = json.loads(body)["topics"]
    (c,) = t["channels"]
    return c


def topic_messages(broker, topic):
    status, answer = http(broker, "GET", "/stats?format=json&topic=%s" % topic)
    assert status == 200, answer
    (t,) = json.loads(answer)["topics"]
    return t["message_count"]


def body(i):
    return b"m-%03d" % i


def history_with_mark(broker, topic):
    """50 messages by HTTP /pub, a time mark, 50 more (bodies m-000..m-099); returns the mark
    as RFC 3339 with microseconds. The topic's owner stamps each message with its clock when
    it stores it, which may be after the answer (an early OK from another shard): the mark
    waits until the owner holds the first 50."""
    with socket.create_connection(("127.0.0.1", broker.http_port), timeout=10) as s:
        for i in range(50):
            keepalive_pub(s, topic, body(i))
        wait_for(lambda: topic_messages(broker, topic) == 50, 10, what="the first 50 stored")
        time.sleep(0.002)
        mark = datetime.datetime.now(datetime.timezone.utc)
        time.sleep(0.002)
        for i in range(50, 100):
            keepalive_pub(s, topic, body(i))
    return mark.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def rewind_args(topic, mark):
    return dict(topic=topic, channel="c", timestamp=mark)


def redelivered_once(conn, broker, topic):
    """Reads the 50 messages after the mark, each once with attempts 1, FINs them, and checks
    the channel then owes nothing and nothing more comes."""
    again = conn.read_messages(50, timeout=10)
    assert sorted(m.body for m in again) == [body(i) for i in range(50, 100)], \
        [m.body for m in again]
    assert all(m.attempts == 1 for m in again), [m.attempts for m in again]
    conn.send(b"".join(b"FIN " + m.id + b"\n" for m in again))
    wait_for(lambda: (lambda c: (c["offset"], c["depth"], c["in_flight_count"]) == (100, 0, 0))(
        channel_stats(broker, topic, "c")), 10, what="the channel to owe nothing")
    conn.expect_nothing(0.05)


def test_a_rewind_right_after_the_consumers_fins_delivers_again(start_broker):
    b = start_broker("--retention-time=1h")
    for run in range(RACE_REPEAT):
        topic = "race%d" % run
        mark = history_with_mark(b, topic)
        with Conn(b.addr) as c:
            c.sub(topic, "c", rdy=100)
            got = c.read_messages(100)
            assert [m.body for m in got] == [body(i) for i in range(100)]
            dry = ok(b, "/channel/rewind", dry_run="true", **rewind_args(topic, mark))
            assert json.loads(dry) == {"offset": 50, "redelivered": 50}
            # A FIN per message, one write each as a client answers, then the rewind at once.
            for m in got:
                c.fin(m.id)
            assert ok(b, "/channel/rewind", **rewind_args(topic, mark)) == b""
            redelivered_once(c, b, topic)


@pytest.mark.parametrize("ending", ["fin", "req"])
def test_fins_and_reqs_that_reach_the_owner_after_a_rewind_do_not_undo_it(start_broker,
                                                                         ending):
    """The race made certain. `fin`: half the FINs are in before the rewind, so the consumer
    has room and the replay passes over the second half while it is still in flight; those
    FINs arrive after the answer. `req`: the consumer is full at the rewind; REQs of the
    second half arrive before the replay reaches them, and must not make them owed twice
    (with a memory queue of one, a message given back goes out right behind the log's next,
    so a second copy shows)."""
    small_queue = ["--mem-queue-size=1"] if ending == "req" else []
    b = start_broker("--retention-time=1h", *small_queue)
    topic = "late_" + ending
    mark = history_with_mark(b, topic)
    with Conn(b.addr) as c:
        c.sub(topic, "c", rdy=100)
        got = c.read_messages(100)
        if ending == "fin":
            c.send(b"".join(b"FIN " + m.id + b"\n" for m in got[:50]))
            wait_for(lambda: channel_stats(b, topic, "c")["in_flight_count"] == 50, 10,
                     what="the first 50 FINs")
        ok(b, "/channel/rewind", **rewind_args(topic, mark))
        if ending == "fin":
            c.send(b"".join(b"FIN " + m.id + b"\n" for m in got[50:]))
        else:
            c.send(b"".join(b"REQ " + m.id + b" 0\n" for m in got[50:])
                   + b"".join(b"FIN " + m.id + b"\n" for m in got[:50]))
        redelivered_once(c, b, topic)


def test_what_was_in_flight_at_an_empty_is_not_given_back(start_broker):
    b = start_broker("--msg-timeout=1s")
    topic = "emptied"
    with socket.create_connection(("127.0.0.1", b.http_port), timeout=10) as s:
        for i in range(3):
            keepalive_pub(s, topic, body(i))
    with Conn(b.addr) as c:
        c.sub(topic, "c", rdy=3)
        held = c.read_messages(3)
        c.cmd("RDY 0")
        ok(b, "/channel/empty", topic=topic, channel="c")
        # Answered: a TOUCH and a FIN still work, a REQ and a timeout give nothing back.
        c.touch(held[0].id)
        c.fin(held[0].id)
        c.req(held[1].id)
        c.cmd("RDY 3")
        c.expect_nothing(1.5)
        stats = channel_stats(b, topic, "c")
        assert (stats["depth"], stats["in_flight_count"], stats["timeout_count"]) == (0, 0, 1), \
            stats
        # Nothing failed on the way: a FIN of the REQed one is refused as nsqd refuses it.
        c.fin(held[1].id)
        ftype, data = c.read_frame()
        assert data.startswith(b"E_FIN_FAILED"), data


def test_a_lower_max_attempts_applies_to_what_waits_requeued(start_broker):
    b = start_broker()
    topic, dead = "limited", "limited.dead"
    with socket.create_connection(("127.0.0.1", b.http_port), timeout=10) as s:
        keepalive_pub(s, topic, b"poison")
    with Conn(b.addr) as c:
        c.sub(topic, "c", rdy=1)
        for attempt in (1, 2, 3):
            m = c.read_message()
            assert m.attempts == attempt
            if attempt == 3:
                c.cmd("RDY 0")
            c.req(m.id)
        wait_for(lambda: channel_stats(b, topic, "c")["depth"] == 1, 10, what="the REQ")
        # Requeued after its third delivery; the limit drops to 2.
        ok(b, "/channel/config", topic=topic, channel="c", max_attempts="2",
           dead_letter_topic=dead)
        c.cmd("RDY 1")
        c.expect_nothing(0.5)

    def records():
        status, answer = http(b, "GET", "/dead_letters?topic=%s" % dead)
        return json.loads(answer)["dead_letters"] if status == 200 else []

    wait_for(lambda: len(records()) == 1, 10, what="the dead letter")
    (record,) = records()
    assert (record["origin_topic"], record["attempts"]) == (topic, 3), record
