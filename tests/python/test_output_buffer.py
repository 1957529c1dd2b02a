"""Output buffering of consumer connections, as nsqd does it (IDENTIFY's output_buffer_size and
output_buffer_timeout, the broker's --output-buffer-timeout): message frames may wait in the
connection's buffer up to the timeout, are written when the buffer reaches its size or when
the consumer can take no more (in flight = RDY, RDY 0), and every other frame (responses,
errors, heartbeats) is written at once, taking the held messages with it, in order.

The lower bounds below are behaviour (the broker did hold the message), not speed; the upper
bounds are generous and far below the timeouts they tell apart."""

import asyncio
import json
import logging
import time

import nsq

from aio import run, until
from nsqwire import FRAME_ERROR, FRAME_MESSAGE, FRAME_RESPONSE, HEARTBEAT, Conn

logging.getLogger("nsq").setLevel(logging.CRITICAL)

# A message held for this long is distinguishable from one written at once on any machine.
LONG_MS = 5000


def consumer(broker, topic, rdy, **identify):
    c = Conn(broker.addr)
    if identify:
        c.identify(**identify)
    c.sub(topic, "ch", rdy=rdy)
    # RDY has no answer: give it a moment to reach the channel's owner before a publish
    # (one that came first would only wait in the channel for it).
    time.sleep(0.1)
    return c


def publish_timed(broker, topic, body=b"m"):
    """Publishes one message; returns the time just before it was sent."""
    with Conn(broker.addr) as p:
        t0 = time.monotonic()
        p.pub(topic, body)
    return t0


def test_high_rdy_holds_a_lone_message_for_the_timeout(broker):
    with consumer(broker, "held", 100, output_buffer_timeout=500) as c:
        t0 = publish_timed(broker, "held")
        m = c.read_message(timeout=10)
        waited = time.monotonic() - t0
        assert m.body == b"m"
        assert waited >= 0.3, "delivered after %.3fs: not held for the 500 ms timeout" % waited
        assert waited < 5, "held %.3fs for a 500 ms timeout" % waited


def test_rdy_one_is_written_at_once(broker):
    with consumer(broker, "rdy1", 1, output_buffer_timeout=LONG_MS) as c:
        t0 = publish_timed(broker, "rdy1")
        c.read_message(timeout=10)
        waited = time.monotonic() - t0
        assert waited < 1.0, "RDY 1 (full after one message) waited %.3fs" % waited


def test_full_rdy_is_written_at_once(broker):
    """RDY 3 and three messages at once: the third fills it, all three go together."""
    with consumer(broker, "rdy3", 3, output_buffer_timeout=LONG_MS) as c, \
            Conn(broker.addr) as p:
        t0 = time.monotonic()
        p.mpub("rdy3", [b"a", b"b", b"c"])
        msgs = c.read_messages(3, timeout=10)
        waited = time.monotonic() - t0
        assert sorted(m.body for m in msgs) == [b"a", b"b", b"c"]
        assert waited < 2.5, "a full consumer waited %.3fs" % waited


def test_timeout_minus_one_writes_at_once(broker):
    with consumer(broker, "nobuf", 100, output_buffer_timeout=-1) as c:
        t0 = publish_timed(broker, "nobuf")
        c.read_message(timeout=10)
        waited = time.monotonic() - t0
        assert waited < 0.2, "output_buffer_timeout -1 waited %.3fs" % waited


def test_size_minus_one_writes_at_once(broker):
    with consumer(broker, "nosize", 100, output_buffer_size=-1) as c:
        t0 = publish_timed(broker, "nosize")
        c.read_message(timeout=10)
        waited = time.monotonic() - t0
        assert waited < 0.2, "output_buffer_size -1 waited %.3fs" % waited


def test_a_full_buffer_is_written_without_the_timeout(broker):
    """100 messages of 200 bytes at once overflow a 1024-byte buffer many times: they come
    without waiting for the 5 s timeout (at most the last buffer's worth may be held)."""
    bodies = [b"%03d" % i + b"x" * 197 for i in range(100)]
    with consumer(broker, "size", 1000, output_buffer_size=1024,
                  output_buffer_timeout=LONG_MS) as c, Conn(broker.addr) as p:
        t0 = time.monotonic()
        p.mpub("size", bodies)
        # A frame is 8 + 26 + 200 bytes: at most 4 fit in 1024 bytes and may be held.
        first = c.read_messages(96, timeout=10)
        waited = time.monotonic() - t0
        assert waited < 2.5, "a buffer past its size waited %.3fs" % waited
        rest = c.read_messages(4, timeout=10)
        assert sorted(m.body for m in first + rest) == bodies


def test_a_response_takes_the_held_messages_along(broker):
    """An error frame (FIN of an unknown ID) is written at once, after the message held
    before it."""
    with consumer(broker, "resp", 100, output_buffer_timeout=LONG_MS) as c:
        t0 = publish_timed(broker, "resp")
        time.sleep(0.2)
        c.fin(b"0123456789abcdef")
        first = c.read_frame(timeout=10)
        second = c.read_frame(timeout=10)
        waited = time.monotonic() - t0
        assert first[0] == FRAME_MESSAGE, first
        assert second[0] == FRAME_ERROR and second[1].startswith(b"E_FIN_FAILED"), second
        assert waited < 2.5, "an error frame waited %.3fs behind a held message" % waited


def test_a_heartbeat_takes_the_held_messages_along(broker):
    with consumer(broker, "hb", 100, output_buffer_timeout=LONG_MS,
                  heartbeat_interval=1000) as c:
        t0 = publish_timed(broker, "hb")
        frames = []
        while len(frames) < 2:
            frames.append(c.read_raw_frame(timeout=10))
            if frames[0] == (FRAME_RESPONSE, HEARTBEAT):
                # A heartbeat before the publish arrived: it had nothing to take along.
                frames.pop(0)
        waited = time.monotonic() - t0
        assert frames[0][0] == FRAME_MESSAGE, frames
        assert frames[1] == (FRAME_RESPONSE, HEARTBEAT), frames
        assert waited < 3.5, "held %.3fs though a heartbeat went out" % waited


def test_rdy_zero_writes_the_held_messages(broker):
    with consumer(broker, "rdy0", 100, output_buffer_timeout=LONG_MS) as c:
        t0 = publish_timed(broker, "rdy0")
        time.sleep(0.2)
        c.cmd("RDY 0")
        c.read_message(timeout=10)
        waited = time.monotonic() - t0
        assert waited < 2.5, "RDY 0 left the message held %.3fs" % waited


def test_broker_default_timeout_applies_without_identify(start_broker):
    b = start_broker("--output-buffer-timeout=1500ms")
    with consumer(b, "dflt", 100) as c:
        t0 = publish_timed(b, "dflt")
        c.read_message(timeout=10)
        waited = time.monotonic() - t0
        assert waited >= 1.0, "the broker's 1.5 s default held it only %.3fs" % waited
    # And IDENTIFY's answer reports it.
    with Conn(b.addr) as c:
        answer = json.loads(c.identify(feature_negotiation=True))
        assert answer["output_buffer_timeout"] == 1500
        assert answer["output_buffer_size"] == 16384


def identify_error(broker, **fields):
    with Conn(broker.addr) as c:
        c.cmd("IDENTIFY", json.dumps(fields).encode())
        ftype, data = c.read_frame(timeout=5)
        closed = c.wait_closed(5)
        return ftype, data, closed


def test_identify_out_of_range_gets_nsqds_errors(start_broker):
    b = start_broker("--max-output-buffer-size=65536", "--min-output-buffer-timeout=25ms",
                     "--max-output-buffer-timeout=1s")
    cases = [
        ({"output_buffer_timeout": 10}, b"E_BAD_BODY IDENTIFY output buffer timeout (10) is invalid"),
        ({"output_buffer_timeout": 1001},
         b"E_BAD_BODY IDENTIFY output buffer timeout (1001) is invalid"),
        ({"output_buffer_timeout": -2}, b"E_BAD_BODY IDENTIFY output buffer timeout (-2) is invalid"),
        ({"output_buffer_size": 63}, b"E_BAD_BODY IDENTIFY output buffer size (63) is invalid"),
        ({"output_buffer_size": 65537},
         b"E_BAD_BODY IDENTIFY output buffer size (65537) is invalid"),
    ]
    for fields, text in cases:
        ftype, data, closed = identify_error(b, **fields)
        assert (ftype, data) == (FRAME_ERROR, text), fields
        assert closed, "fatal: %r" % (fields,)
    # In range: accepted and echoed.
    with Conn(b.addr) as c:
        answer = json.loads(c.identify(feature_negotiation=True, output_buffer_size=64,
                                       output_buffer_timeout=1000))
        assert (answer["output_buffer_size"], answer["output_buffer_timeout"]) == (64, 1000)


def test_pynsq_reader_output_buffer_timeout_is_honoured(broker):
    """pynsq sends its output_buffer_timeout in IDENTIFY (250 ms by default): a reader with
    max_in_flight 100 and 600 ms gets a lone message after about that, not at once. (pynsq
    starts a connection at RDY 1, which holds nothing, and goes to full RDY after the first
    message.)"""
    topic = "pynsq_outbuf"
    with Conn(broker.addr) as c:
        c.identify()
        c.sub(topic, "ch")
    got = []

    def handler(msg):
        got.append((time.monotonic(), msg.body))
        return True

    async def scenario():
        r = nsq.Reader(topic=topic, channel="ch", message_handler=handler,
                       nsqd_tcp_addresses=[broker.tcp_address], lookupd_poll_interval=60,
                       max_in_flight=100, output_buffer_timeout=600)
        await until(lambda: any(c.connected() for c in r.conns.values()), 10, "Reader")
        publish_timed(broker, topic, b"first")
        await until(lambda: got, 10, "the first message")
        await asyncio.sleep(0.5)
        t0 = publish_timed(broker, topic, b"lone")
        await until(lambda: len(got) == 2, 10, "the second message")
        r.close()
        return t0

    t0 = run(scenario)
    waited = got[1][0] - t0
    assert [body for _, body in got] == [b"first", b"lone"]
    assert waited >= 0.35, "pynsq's 600 ms output_buffer_timeout held it only %.3fs" % waited
