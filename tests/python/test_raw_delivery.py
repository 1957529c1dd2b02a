"""Raw-socket tests of delivery semantics: heartbeats, timeouts, requeue, deferral, CLS,
channels that appear late, #ephemeral channels, in-flight messages of a closed connection."""

import socket
import time

from nsqwire import FRAME_RESPONSE, HEARTBEAT, Conn, wait_for


def consumer(broker, topic, channel, rdy=1, **identify):
    c = Conn(broker.addr)
    c.identify(**identify)
    c.sub(topic, channel, rdy=rdy)
    return c


def publisher(broker):
    return Conn(broker.addr)


def test_pub_sub_roundtrip_fields(broker):
    with consumer(broker, "rt", "ch") as c, publisher(broker) as p:
        before = time.time_ns()
        p.pub("rt", b"hello world")
        m = c.read_message(timeout=10)
        after = time.time_ns()
        assert m.body == b"hello world"
        assert m.attempts == 1
        assert len(m.id) == 16 and all(ch in b"0123456789abcdef" for ch in m.id), m.id
        # Timestamp is the publish time in ns (allow 5 s of clock slop either way).
        assert before - 5_000_000_000 <= m.timestamp <= after + 5_000_000_000, m.timestamp
        c.fin(m.id)
        c.expect_nothing(0.3)


def test_mpub_fanout_two_channels_each_get_every_message(broker):
    bodies = [("m%03d" % i).encode() for i in range(50)]
    with consumer(broker, "fan", "a", rdy=50) as a, consumer(broker, "fan", "b", rdy=50) as b, \
            publisher(broker) as p:
        p.mpub("fan", bodies[:25])
        for body in bodies[25:]:
            p.pub("fan", body)
        for c in (a, b):
            msgs = c.read_messages(50, timeout=15)
            assert sorted(m.body for m in msgs) == bodies
            assert all(m.attempts == 1 for m in msgs)
            assert len({m.id for m in msgs}) == 50
            for m in msgs:
                c.fin(m.id)
            c.expect_nothing(0.3)


def test_two_consumers_of_a_channel_share_messages_published_one_at_a_time(broker):
    """Ready consumers take turns even when each publish brings a single message (the turn
    used to pass on the empty look after each delivery, so one of two consumers got all 50),
    and a message one of them gives back goes to the other."""
    with consumer(broker, "turns", "ch", rdy=100) as a, \
            consumer(broker, "turns", "ch", rdy=100) as b, publisher(broker) as p:
        for i in range(50):
            p.pub("turns", b"t%02d" % i)
        got = {}
        deadline = time.monotonic() + 15
        while sum(len(v) for v in got.values()) < 50:
            assert time.monotonic() < deadline, {k: len(v) for k, v in got.items()}
            for name, c in (("a", a), ("b", b)):
                try:
                    got.setdefault(name, []).append(c.read_message(timeout=0.1))
                except socket.timeout:
                    pass
        assert sorted(m.body for ms in got.values() for m in ms) == [b"t%02d" % i for i in range(50)]
        assert len(got.get("a", [])) == 25 and len(got.get("b", [])) == 25, \
            {k: len(v) for k, v in got.items()}
        # A message given back twice goes to each consumer in turn, not twice to the same.
        back, holder, takers = got["a"][0], a, []
        for attempts in (2, 3):
            holder.req(back.id, 0)
            m, holder = _first_message((a, b))
            assert (m.body, m.attempts) == (back.body, attempts)
            back = m
            takers.append(holder)
        assert takers[0] is not takers[1]


def test_a_requeued_message_goes_to_the_tail(broker):
    """REQ puts the message behind the ones waiting, "equivalent to having just published
    it" (NSQ's protocol spec); it used to jump ahead of them."""
    with publisher(broker) as p:
        p.mpub("tail", [b"m%d" % i for i in range(5)])
    with consumer(broker, "tail", "ch", rdy=1) as c:
        order = []
        for n in range(6):
            m = c.read_message(timeout=10)
            order.append((m.body, m.attempts))
            if n == 0:
                c.req(m.id, 0)
            else:
                c.fin(m.id)
        assert order == [(b"m0", 1), (b"m1", 1), (b"m2", 1), (b"m3", 1), (b"m4", 1), (b"m0", 2)]


def _first_message(conns, timeout=10):
    """The next message any of `conns` receives, and the connection it came on."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for c in conns:
            try:
                return c.read_message(timeout=0.05), c
            except socket.timeout:
                pass
    raise AssertionError("no message within %ss" % timeout)


def test_message_ids_unique_across_channels_are_per_message(broker):
    """Both channels see the same id for the same message (a channel copy, not a new message)."""
    with consumer(broker, "ids", "a", rdy=10) as a, consumer(broker, "ids", "b", rdy=10) as b, \
            publisher(broker) as p:
        p.mpub("ids", [b"x1", b"x2", b"x3"])
        ma = {m.body: m.id for m in a.read_messages(3)}
        mb = {m.body: m.id for m in b.read_messages(3)}
        assert ma == mb
        assert len(set(ma.values())) == 3


def test_topic_without_channel_keeps_messages_for_first_channel(broker):
    with publisher(broker) as p:
        p.mpub("early", [b"e1", b"e2"])
        p.pub("early", b"e3")
    time.sleep(0.2)
    with consumer(broker, "early", "first", rdy=10) as first:
        msgs = first.read_messages(3, timeout=10)
        assert sorted(m.body for m in msgs) == [b"e1", b"e2", b"e3"]
        for m in msgs:
            first.fin(m.id)
        first.expect_nothing(0.3)
        # A channel made later sees only what is published after it exists.
        with consumer(broker, "early", "second", rdy=10) as second, publisher(broker) as p:
            p.pub("early", b"late")
            assert second.read_message(timeout=10).body == b"late"
            second.expect_nothing(0.5)
            assert first.read_message(timeout=10).body == b"late"


def test_failed_handler_requeue_redelivers_with_attempts_plus_one(broker):
    with consumer(broker, "requeue", "ch") as c, publisher(broker) as p:
        p.pub("requeue", b"again")
        m1 = c.read_message(timeout=10)
        assert m1.attempts == 1
        c.req(m1.id, 0)
        m2 = c.read_message(timeout=10)
        assert (m2.id, m2.body, m2.attempts) == (m1.id, b"again", 2)
        c.req(m2.id, 0)
        m3 = c.read_message(timeout=10)
        assert (m3.id, m3.attempts) == (m1.id, 3)
        c.fin(m3.id)
        c.expect_nothing(0.5)


def test_req_with_delay_defers_redelivery(broker):
    with consumer(broker, "reqdelay", "ch") as c, publisher(broker) as p:
        p.pub("reqdelay", b"later")
        m1 = c.read_message(timeout=10)
        t0 = time.monotonic()
        c.req(m1.id, 1500)
        c.expect_nothing(1.0)
        m2 = c.read_message(timeout=6)
        elapsed = time.monotonic() - t0
        assert (m2.id, m2.attempts) == (m1.id, 2)
        assert elapsed >= 1.4, "REQ 1500 ms came back after %.2fs" % elapsed
        c.fin(m2.id)


def test_dpub_delivered_after_delay_not_before(broker):
    with consumer(broker, "deferred", "ch", rdy=5) as c, publisher(broker) as p:
        t0 = time.monotonic()
        p.dpub("deferred", 1500, b"deferred-body")
        p.pub("deferred", b"now")
        first = c.read_message(timeout=5)
        assert first.body == b"now", "a deferred message overtook its delay"
        c.fin(first.id)
        c.expect_nothing(max(0.0, 1.0 - (time.monotonic() - t0)))
        m = c.read_message(timeout=6)
        elapsed = time.monotonic() - t0
        assert m.body == b"deferred-body" and m.attempts == 1
        assert elapsed >= 1.4, "DPUB 1500 ms delivered after %.2fs" % elapsed
        c.fin(m.id)


def test_msg_timeout_redelivers_with_attempts_2(start_broker):
    b = start_broker("--msg-timeout=2s")
    with consumer(b, "timeout", "ch") as c, publisher(b) as p:
        p.pub("timeout", b"unanswered")
        m1 = c.read_message(timeout=10)
        t0 = time.monotonic()
        c.expect_nothing(1.5)
        m2 = c.read_message(timeout=6)
        elapsed = time.monotonic() - t0
        assert (m2.id, m2.body, m2.attempts) == (m1.id, b"unanswered", 2)
        assert 1.5 <= elapsed <= 6.0, elapsed
        # FIN of the timed-out delivery's id is the live one now; it succeeds.
        c.fin(m2.id)
        c.expect_nothing(2.5)


def test_identify_msg_timeout_overrides_default(broker):
    """IDENTIFY msg_timeout=1000 makes in-flight messages of this client time out after 1 s."""
    with consumer(broker, "client_timeout", "ch", msg_timeout=1000) as c, publisher(broker) as p:
        p.pub("client_timeout", b"short")
        m1 = c.read_message(timeout=10)
        t0 = time.monotonic()
        m2 = c.read_message(timeout=5)
        elapsed = time.monotonic() - t0
        assert (m2.id, m2.attempts) == (m1.id, 2)
        assert 0.7 <= elapsed <= 4.0, elapsed
        c.fin(m2.id)


def test_touch_holds_message(start_broker):
    b = start_broker("--msg-timeout=2s")
    with consumer(b, "touch", "ch") as c, publisher(b) as p:
        p.pub("touch", b"held")
        m = c.read_message(timeout=10)
        for _ in range(5):
            c.expect_nothing(1.0)
            c.touch(m.id)
        c.fin(m.id)
        c.expect_nothing(2.5)


def test_disconnect_returns_in_flight_at_once(start_broker):
    b = start_broker("--msg-timeout=60s")
    with consumer(b, "disc", "ch") as a, consumer(b, "disc", "ch", rdy=0) as other, \
            publisher(b) as p:
        p.pub("disc", b"orphan")
        m1 = a.read_message(timeout=10)
        a.close()
        t0 = time.monotonic()
        other.cmd("RDY 1")
        m2 = other.read_message(timeout=10)
        assert (m2.id, m2.body, m2.attempts) == (m1.id, b"orphan", 2)
        assert time.monotonic() - t0 < 10
        other.fin(m2.id)


def test_fatal_error_returns_in_flight(start_broker):
    """A connection closed for a protocol error gives its in-flight messages back too."""
    b = start_broker("--msg-timeout=60s")
    with consumer(b, "fatal", "ch") as a, consumer(b, "fatal", "ch", rdy=0) as other, \
            publisher(b) as p:
        p.pub("fatal", b"x")
        m1 = a.read_message(timeout=10)
        a.send(b"BOGUS\n")
        assert a.wait_closed(5)
        other.cmd("RDY 1")
        m2 = other.read_message(timeout=10)
        assert (m2.id, m2.attempts) == (m1.id, 2)


def test_cls_returns_close_wait_and_stops_deliveries(broker):
    with consumer(broker, "cls", "ch") as c, publisher(broker) as p:
        p.pub("cls", b"one")
        m1 = c.read_message(timeout=10)
        c.cmd("CLS")
        ftype, data = c.read_frame(timeout=5)
        assert (ftype, data) == (FRAME_RESPONSE, b"CLOSE_WAIT")
        c.fin(m1.id)           # still accepted after CLS
        c.cmd("RDY 5")         # ignored after CLS
        p.pub("cls", b"two")
        c.expect_nothing(1.0)  # no error for the FIN, no delivery
        with consumer(broker, "cls", "ch") as d:
            m2 = d.read_message(timeout=10)
            assert (m2.body, m2.attempts) == (b"two", 1)
            d.fin(m2.id)


def test_ephemeral_channel_vanishes_with_last_consumer(broker):
    topic = "eph"
    with consumer(broker, topic, "durable", rdy=10) as durable, publisher(broker) as p:
        e1 = consumer(broker, topic, "live#ephemeral", rdy=10)
        p.pub(topic, b"m1")
        m = e1.read_message(timeout=10)
        assert m.body == b"m1"
        e1.fin(m.id)
        e1.close()
        time.sleep(1.0)  # the channel goes with its last consumer
        p.pub(topic, b"m2")
        # Once the durable channel has m2, the topic's owner has taken it. The publisher's OK
        # can come before that (with several shards the connection's shard answers as soon as
        # the message is on its way, as nsqd answers once it is in the topic's in-memory
        # queue), and a SUB from another shard could then reach the owner first.
        assert sorted(m.body for m in durable.read_messages(2)) == [b"m1", b"m2"]
        with consumer(broker, topic, "live#ephemeral", rdy=10) as e2:
            # m2 was published while the ephemeral channel did not exist.
            p.pub(topic, b"m3")
            got = e2.read_message(timeout=10)
            assert got.body == b"m3", "ephemeral channel kept %r after its last consumer left" \
                % got.body
            e2.expect_nothing(0.5)
        assert [m.body for m in durable.read_messages(1)] == [b"m3"]


def test_ephemeral_topic_and_channel_names_accepted(broker):
    with consumer(broker, "tmp#ephemeral", "c#ephemeral", rdy=1) as c, publisher(broker) as p:
        p.pub("tmp#ephemeral", b"e")
        m = c.read_message(timeout=10)
        assert m.body == b"e"
        c.fin(m.id)


def test_first_ephemeral_channel_gets_what_the_topic_held(broker):
    """Messages published before any channel exists go to the first channel, #ephemeral or
    not. With only an #ephemeral channel the checkpoint used to release the topic's log up to
    its head, so the messages the channel had not read yet (no RDY yet) were skipped: counted
    in the channel's message_count, never delivered. Some rounds wait before RDY so that a
    checkpoint falls between SUB and RDY; the last rounds use an #ephemeral topic too."""
    rounds = 30
    deadline = time.monotonic() + 120
    lost = []
    with publisher(broker) as p:
        for i in range(rounds):
            assert time.monotonic() < deadline, "rounds took too long: %d done" % i
            topic = "efirst%02d" % i + ("#ephemeral" if i >= rounds - 4 else "")
            p.pub(topic, b"a")
            p.pub(topic, b"b")
            with Conn(broker.addr) as c:
                c.identify()
                c.sub(topic, "c#ephemeral")
                time.sleep(0.3 if i % 2 else 0.0)
                c.cmd("RDY 10")
                got, until = [], time.monotonic() + 3
                while len(got) < 2 and time.monotonic() < until:
                    left = max(0.01, until - time.monotonic())
                    try:
                        got.append(c.read_message(timeout=left).body)
                    except socket.timeout:
                        break
                if sorted(got) != [b"a", b"b"]:
                    lost.append((topic, got))
    assert not lost, "messages published before the #ephemeral channel existed were lost " \
        "in %d of %d rounds: %r" % (len(lost), rounds, lost)


def test_rdy_limits_in_flight(broker):
    with consumer(broker, "rdy", "ch", rdy=2) as c, publisher(broker) as p:
        p.mpub("rdy", [b"1", b"2", b"3", b"4", b"5"])
        msgs = c.read_messages(2, timeout=10)
        c.expect_nothing(0.7)  # RDY 2, two in flight: nothing more
        c.fin(msgs[0].id)
        third = c.read_message(timeout=10)
        c.expect_nothing(0.5)
        c.cmd("RDY 0")
        for m in (msgs[1], third):
            c.fin(m.id)
        c.expect_nothing(0.7)  # RDY 0: nothing
        c.cmd("RDY 10")
        rest = c.read_messages(2, timeout=10)
        bodies = sorted(m.body for m in msgs + [third] + rest)
        assert bodies == [b"1", b"2", b"3", b"4", b"5"]


def test_heartbeat_frames_and_answered_client_stays(broker):
    with Conn(broker.addr) as c:
        c.identify(heartbeat_interval=1000)
        got = []
        deadline = time.monotonic() + 3.6
        while time.monotonic() < deadline:
            try:
                ftype, data = c.read_raw_frame(timeout=deadline - time.monotonic())
            except TimeoutError:
                break
            got.append((ftype, data))
            c.cmd("NOP")
        assert got and all(f == (FRAME_RESPONSE, HEARTBEAT) for f in got), got
        assert len(got) >= 2, "expected a heartbeat every second, got %d in 3.6 s" % len(got)
        assert c.is_open_after(0.1), "a client that answers heartbeats must stay connected"
        c.pub("hb", b"still here")


def test_idle_client_closed_after_two_heartbeat_intervals(broker):
    with Conn(broker.addr) as c:
        c.identify(heartbeat_interval=1000)
        t0 = time.monotonic()
        heartbeats = 0
        closed = False
        while time.monotonic() - t0 < 6:
            try:
                ftype, data = c.read_raw_frame(timeout=6 - (time.monotonic() - t0))
            except TimeoutError:
                break
            except ConnectionError:
                closed = True
                break
            assert (ftype, data) == (FRAME_RESPONSE, HEARTBEAT)
            heartbeats += 1
        elapsed = time.monotonic() - t0
        assert heartbeats >= 1, "no heartbeat before the close"
        assert closed, "a client silent for > 2 heartbeat intervals was not closed within 6 s"
        assert elapsed >= 1.5, "closed after only %.2fs" % elapsed


def _channel(broker, topic, channel):
    import json
    import urllib.request

    url = "http://127.0.0.1:%d/stats?format=json&topic=%s&channel=%s" % (
        broker.http_port, topic, channel)
    with urllib.request.urlopen(url, timeout=10) as resp:
        stats = json.loads(resp.read())
    return stats["topics"][0]["channels"][0]


def test_fins_of_one_read_are_one_batch_and_a_bad_id_among_them_fails_alone(broker):
    """FINs that arrive in one read go to the owner as one operation: the good ones finish,
    an unknown ID among them gets its own non-fatal E_FIN_FAILED, and the connection stays."""
    from nsqwire import FRAME_ERROR

    with consumer(broker, "finbatch", "ch", rdy=10) as c, publisher(broker) as p:
        p.mpub("finbatch", [b"a", b"b", b"c", b"d"])
        msgs = c.read_messages(4, timeout=10)
        bogus = b"0123456789abcdef"
        lines = [b"FIN " + msgs[0].id, b"FIN " + msgs[1].id, b"FIN " + bogus,
                 b"FIN " + msgs[2].id, b"FIN " + msgs[3].id]
        c.send(b"".join(line + b"\n" for line in lines))  # one write: one read on the broker
        ftype, data = c.read_frame(timeout=10)
        assert ftype == FRAME_ERROR, (ftype, data)
        assert data == b"E_FIN_FAILED FIN " + bogus + b" failed ID not in flight", data
        # No other error, and the connection still works.
        c.expect_nothing(0.5)
        c.cmd("NOP")
    # All four were finished: a disconnect would have put any still in flight back at once,
    # so a new consumer of the channel gets only the next message. The owner learns of the
    # close through a mailbox when the connection lived on another shard: wait until it has,
    # or "e" could go to the closed consumer and come back with attempts 2.
    wait_for(lambda: _channel(broker, "finbatch", "ch")["client_count"] == 0, 10,
             what="the closed consumer to leave the channel")
    assert _channel(broker, "finbatch", "ch")["in_flight_count"] == 0
    with consumer(broker, "finbatch", "ch", rdy=10) as c2, publisher(broker) as p:
        p.pub("finbatch", b"e")
        m = c2.read_message(timeout=10)
        assert m.body == b"e" and m.attempts == 1, m
        c2.fin(m.id)
        c2.expect_nothing(0.5)


def test_message_held_while_thousands_pass_stays_in_flight(broker):
    """One message is held (no FIN) while 5,000 later ones are delivered and finished. The
    in-flight table keeps neighbouring IDs in a window and moves a long-held one aside; the
    held message must still answer TOUCH, REQ and FIN by its ID, and nothing else is owed."""
    from nsqwire import FRAME_ERROR

    with consumer(broker, "held", "ch", rdy=100) as c, publisher(broker) as p:
        p.pub("held", b"held")
        held = c.read_message(timeout=10)
        assert held.body == b"held"
        for batch in range(10):
            p.mpub("held", [b"m%d-%d" % (batch, i) for i in range(500)])
        seen = 0
        while seen < 5000:
            msgs = c.read_messages(min(99, 5000 - seen), timeout=15)
            for m in msgs:
                assert m.body != b"held" and m.attempts == 1, m
                c.fin(m.id)
            seen += len(msgs)
        c.touch(held.id)
        c.req(held.id)
        again = c.read_message(timeout=10)
        assert (again.id, again.body, again.attempts) == (held.id, b"held", 2), again
        c.fin(again.id)
        c.fin(again.id)  # no longer in flight
        ftype, data = c.read_frame(timeout=10)
        assert ftype == FRAME_ERROR and data.startswith(b"E_FIN_FAILED"), (ftype, data)
        c.expect_nothing(0.5)
