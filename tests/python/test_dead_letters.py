"""Max attempts and dead-letter topics through the wire (`--max-attempts`, and a channel's own
through `POST /channel/config`): a message whose next delivery would exceed the limit (after a
REQ or an in-flight timeout) is published to the channel's dead-letter topic, its origin is
readable at `GET /dead_letters`, `POST /topic/redrive` publishes it back; without a dead-letter
topic it is dropped and counted; the settings, the dead letters and their origins survive a
restart; with none of the settings nothing changes.

The dead-letter topic is picked on another shard than its origin whenever the broker has more
than one (`owner_of`), so the dead letter takes the cross-shard publish path."""

import json
import os
import shutil
import socket
import tempfile
import urllib.parse

import gnsq
import gevent
import pytest

from brokerhttp import http, metrics_text, owner_of
from conftest import Broker
from nsqwire import Conn, Message, FRAME_MESSAGE, wait_for


def names(prefix, shards):
    """An origin topic and a dead-letter topic owned by different shards (when there are)."""
    origin = prefix
    for i in range(1000):
        dead = "%s.dead%d" % (prefix, i)
        if shards == 1 or owner_of(dead, shards) != owner_of(origin, shards):
            return origin, dead
    raise AssertionError("no dead-letter topic name on another shard")


def post(broker, path, **args):
    return http(broker, "POST", "%s?%s" % (path, urllib.parse.urlencode(args)))


def configure(broker, topic, channel, **args):
    status, body = post(broker, "/channel/config", topic=topic, channel=channel, **args)
    assert status == 200, (args, status, body)


def dead_letters(broker, topic, **args):
    """The topic's origin records; [] while the dead-letter topic does not exist yet."""
    status, body = http(broker, "GET", "/dead_letters?%s" % urllib.parse.urlencode(
        dict(topic=topic, **args)))
    if status == 404 and b"TOPIC_NOT_FOUND" in body:
        return []
    assert status == 200, body
    doc = json.loads(body)
    assert doc["topic"] == topic
    return doc["dead_letters"]


def channel_stats(broker, topic, channel):
    status, body = http(broker, "GET", "/stats?format=json&topic=%s" % topic)
    assert status == 200, body
    (t,) = [t for t in json.loads(body)["topics"] if t["topic_name"] == topic]
    (c,) = [c for c in t["channels"] if c["channel_name"] == channel]
    return c


def deliveries_until_quiet(conn, respond, quiet=1.5):
    """Reads messages, answering each with `respond(conn, msg)`, until none comes for `quiet`
    seconds; the messages seen."""
    seen = []
    while True:
        try:
            ftype, data = conn.read_frame(timeout=quiet)
        except OSError:
            return seen
        if ftype != FRAME_MESSAGE:
            continue
        m = Message.parse(data)
        seen.append(m)
        respond(conn, m)


def consume_one(broker, topic, channel="inspect"):
    with Conn(broker.addr) as c:
        c.identify()
        c.sub(topic, channel, rdy=1)
        m = c.read_message(timeout=10)
        c.fin(m.id)
        return m


@pytest.fixture
def workdir():
    d = tempfile.mkdtemp(prefix="broker-dead-")
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def restartable(workdir, shards):
    """Starts brokers on one data directory (one at a time); stops them at the end."""
    made = []

    def start(*flags, n=None):
        b = Broker(shards if n is None else n, flags, workdir)
        made.append(b)
        return b.start()

    yield start
    for b in made:
        b.stop()


def test_req_consumer_gets_max_attempts_then_the_message_is_a_dead_letter(start_broker, shards):
    b = start_broker()
    topic, dead = names("orders", shards)
    with Conn(b.addr) as c:
        c.identify()
        c.sub(topic, "work", rdy=1)
        configure(b, topic, "work", max_attempts=3, dead_letter_topic=dead)
        with Conn(b.addr) as p:
            p.pub(topic, b"poison body")
        seen = deliveries_until_quiet(c, lambda conn, m: conn.req(m.id))
    assert [m.attempts for m in seen] == [1, 2, 3]
    assert {m.body for m in seen} == {b"poison body"}
    origin_id = seen[0].id

    wait_for(lambda: dead_letters(b, dead), 10, what="the dead letter's origin record")
    (rec,) = dead_letters(b, dead)
    assert rec["origin_topic"] == topic
    assert rec["origin_channel"] == "work"
    assert rec["origin_id"] == origin_id.decode()
    assert rec["attempts"] == 3
    assert rec["body_size"] == len(b"poison body")
    assert rec["preview"] == "poison body"
    assert rec["timestamp"] == seen[0].timestamp

    got = consume_one(b, dead)
    assert got.body == b"poison body"
    assert got.id.decode() == rec["id"]
    assert got.attempts == 1
    assert dead_letters(b, dead, id=rec["id"]) == [rec]
    assert dead_letters(b, dead, id="0000000000000000") == []

    s = channel_stats(b, topic, "work")
    assert s["dead_lettered_count"] == 1
    assert s["max_attempts"] == 3
    assert s["dead_letter_topic"] == dead
    assert s["requeue_count"] == 3
    assert s["depth"] == 0 and s["in_flight_count"] == 0
    text = metrics_text(b)
    assert 'nsq_channel_dead_lettered_total{topic="%s",channel="work"} 1' % topic in text


def test_timed_out_message_is_dead_lettered_after_max_attempts(start_broker, shards):
    b = start_broker("--msg-timeout=300ms", "--max-attempts=3")
    topic, dead = names("timeouts", shards)
    with Conn(b.addr) as c:
        c.identify()
        c.sub(topic, "slow", rdy=1)
        configure(b, topic, "slow", dead_letter_topic=dead)
        with Conn(b.addr) as p:
            p.pub(topic, b"never finished")
        seen = deliveries_until_quiet(c, lambda conn, m: None)
    assert [m.attempts for m in seen] == [1, 2, 3]
    wait_for(lambda: dead_letters(b, dead), 10, what="the dead letter")
    (rec,) = dead_letters(b, dead)
    assert (rec["origin_topic"], rec["origin_channel"], rec["attempts"]) == (topic, "slow", 3)
    assert consume_one(b, dead).body == b"never finished"
    s = channel_stats(b, topic, "slow")
    assert s["timeout_count"] == 3
    assert (s["dead_lettered_count"], s["max_attempts"]) == (1, 3)


def test_gnsq_consumer_that_always_requeues(start_broker, shards):
    """A real client library's consumer whose handler always fails (gnsq requeues it)."""
    b = start_broker()
    topic, dead = names("gnsq", shards)
    with Conn(b.addr) as c:
        c.identify()
        c.sub(topic, "fails")
    configure(b, topic, "fails", max_attempts=3, dead_letter_topic=dead)
    attempts = []

    def handler(consumer, message):
        attempts.append(message.attempts)
        message.requeue(backoff=False)

    consumer = gnsq.Consumer(topic, "fails", nsqd_tcp_addresses=[b.tcp_address],
                             message_handler=handler, max_tries=0, max_in_flight=1)
    consumer.start(block=False)
    try:
        producer = gnsq.Producer(nsqd_tcp_addresses=[b.tcp_address])
        producer.start()
        producer.publish(topic, b"gnsq poison")
        producer.close()
        deadline = 200
        while not dead_letters(b, dead) and deadline:
            gevent.sleep(0.05)
            deadline -= 1
        gevent.sleep(0.5)
    finally:
        consumer.close()
        consumer.join(timeout=2)
    assert attempts == [1, 2, 3]
    (rec,) = dead_letters(b, dead)
    assert (rec["origin_channel"], rec["attempts"]) == ("fails", 3)


def test_a_consumer_that_dies_holding_it_counts_as_a_timeout(start_broker, shards):
    """A poison message that crashes its consumer: each disconnect gives it back (nsqd would
    let it time out), and the limit applies."""
    b = start_broker("--max-attempts=2")
    topic, dead = names("crashes", shards)
    with Conn(b.addr) as c:
        c.identify()
        c.sub(topic, "c")
    configure(b, topic, "c", dead_letter_topic=dead)
    with Conn(b.addr) as p:
        p.pub(topic, b"kills consumers")
    attempts = []
    for _ in range(2):
        with Conn(b.addr) as c:
            c.identify()
            c.sub(topic, "c", rdy=1)
            attempts.append(c.read_message(timeout=10).attempts)
    assert attempts == [1, 2]
    wait_for(lambda: dead_letters(b, dead), 10, what="the dead letter")
    with Conn(b.addr) as c:
        c.identify()
        c.sub(topic, "c", rdy=1)
        c.expect_nothing(1.0)
    (rec,) = dead_letters(b, dead)
    assert rec["attempts"] == 2
    assert channel_stats(b, topic, "c")["dead_lettered_count"] == 1


def test_statsd_counts_dead_letters(start_broker, shards):
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.settimeout(10)
    try:
        b = start_broker("--statsd-address=127.0.0.1:%d" % sock.getsockname()[1],
                         "--statsd-interval=1s", "--statsd-prefix=", "--max-attempts=1")
        with Conn(b.addr) as c:
            c.identify()
            c.sub("counted", "c", rdy=1)
            with Conn(b.addr) as p:
                p.pub("counted", b"x")
            c.req(c.read_message(timeout=10).id)
        wait_for(lambda: channel_stats(b, "counted", "c")["dead_lettered_count"] == 1, 10,
                 what="the count")
        lines = []
        want = "topic.counted.channel.c.dead_lettered_count:1|c"
        while want not in lines:
            data, _ = sock.recvfrom(65536)
            lines += data.decode().splitlines()
    finally:
        sock.close()
    # Channels without a limit send no such line.
    assert not any("dead_lettered" in l and ".channel.c." not in l for l in lines)


def test_without_a_dead_letter_topic_the_message_is_dropped_and_counted(start_broker):
    b = start_broker()
    with Conn(b.addr) as c:
        c.identify()
        c.sub("drops", "c", rdy=1)
        configure(b, "drops", "c", max_attempts=2)
        with Conn(b.addr) as p:
            p.pub("drops", b"x")
            p.pub("drops", b"y")
        seen = deliveries_until_quiet(c, lambda conn, m: conn.req(m.id))
    assert sorted((m.body, m.attempts) for m in seen) == [
        (b"x", 1), (b"x", 2), (b"y", 1), (b"y", 2)]
    s = channel_stats(b, "drops", "c")
    assert (s["dead_lettered_count"], s["max_attempts"], s["dead_letter_topic"]) == (2, 2, "")
    assert s["depth"] == 0 and s["in_flight_count"] == 0


def meta_json(broker, topic):
    try:
        with open(os.path.join(broker.data_path, topic, "meta.json")) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def test_dead_letters_survive_a_crash_a_restart_and_redrive_sends_them_back(restartable,
                                                                            shards):
    b = restartable()
    topic, dead = names("restart", shards)
    with Conn(b.addr) as c:
        c.identify()
        c.sub(topic, "w", rdy=2)
        configure(b, topic, "w", max_attempts=1, dead_letter_topic=dead)
        with Conn(b.addr) as p:
            p.mpub(topic, [b"first", b"second"])
        seen = deliveries_until_quiet(c, lambda conn, m: conn.req(m.id))
    assert sorted(m.body for m in seen) == [b"first", b"second"]
    wait_for(lambda: len(dead_letters(b, dead)) == 2, 10, what="two dead letters")
    before = dead_letters(b, dead)
    # The records are checkpointed with the dead-letter topic's metadata, without a stop.
    wait_for(lambda: len(meta_json(b, dead).get("dead_letters", [])) == 2, 20,
             what="the origin records in meta.json")
    # So is the origin channel, which owes them no more.
    wait_for(lambda: meta_json(b, topic)["channels"][0]["cursor"] == 2, 20,
             what="the origin channel's checkpoint")
    (cm,) = meta_json(b, topic)["channels"]
    assert (cm["max_attempts"], cm["dead_letter_topic"]) == (1, dead)

    # A crash (SIGKILL), then a start with another shard count.
    b.proc.kill()
    b.proc.wait(timeout=10)
    b.stop()
    b = restartable(n=4 if shards == 2 else None)
    assert dead_letters(b, dead) == before
    s = channel_stats(b, topic, "w")
    assert (s["max_attempts"], s["dead_letter_topic"]) == (1, dead)
    assert b.stop() == 0

    # A clean stop and start.
    b = restartable()
    assert dead_letters(b, dead) == before

    # Redrive one by ID, then the rest; each goes back to its origin topic.
    with Conn(b.addr) as c:
        c.identify()
        c.sub(topic, "w", rdy=5)
        first = [r for r in before if r["preview"] == "first"][0]
        status, body = post(b, "/topic/redrive", topic=dead, id=first["id"])
        assert status == 200, body
        assert json.loads(body) == {"redriven": 1, "missing": 0}
        m = c.read_message(timeout=10)
        assert (m.body, m.attempts) == (b"first", 1)
        c.fin(m.id)
        assert [r["preview"] for r in dead_letters(b, dead)] == ["second"]
        status, body = post(b, "/topic/redrive", topic=dead)
        assert status == 200, body
        assert json.loads(body) == {"redriven": 1, "missing": 0}
        m = c.read_message(timeout=10)
        assert m.body == b"second"
        c.fin(m.id)
    assert dead_letters(b, dead) == []
    status, body = post(b, "/topic/redrive", topic=dead)
    assert json.loads(body) == {"redriven": 0, "missing": 0}
    # The dead letters stay in the dead-letter topic's log (a consumer there still gets them).
    assert consume_one(b, dead).body in (b"first", b"second")


def test_redrive_of_many_from_disk_in_batches(start_broker, shards):
    """More dead letters than one redrive batch (256), most of them read back from the
    segment files (a small memory queue), all back on their origin topic, in order."""
    b = start_broker("--mem-queue-size=10", "--max-attempts=1")
    topic, dead = names("many", shards)
    n = 300
    sent = [b"m-%03d" % i for i in range(n)]
    with Conn(b.addr) as c:
        c.identify()
        c.sub(topic, "c", rdy=50)
        configure(b, topic, "c", dead_letter_topic=dead)
        with Conn(b.addr) as p:
            p.mpub(topic, sent)
        seen = deliveries_until_quiet(c, lambda conn, m: conn.req(m.id))
    assert sorted(m.body for m in seen) == sent
    wait_for(lambda: len(dead_letters(b, dead)) == n, 20, what="all dead letters")
    with Conn(b.addr) as c:
        c.identify()
        c.sub(topic, "c", rdy=n)
        status, body = post(b, "/topic/redrive", topic=dead)
        assert status == 200, body
        assert json.loads(body) == {"redriven": n, "missing": 0}
        msgs = c.read_messages(n, timeout=20)
        for m in msgs:
            c.fin(m.id)
        got = [m.body for m in msgs]
        # (Unfinished, they would come back at the disconnect, over the limit again.)
        wait_for(lambda: channel_stats(b, topic, "c")["in_flight_count"] == 0, 10,
                 what="the FINs")
    assert sorted(got) == sent
    assert dead_letters(b, dead) == []


def test_default_resets_to_the_flag(start_broker):
    b = start_broker("--max-attempts=5")
    with Conn(b.addr) as c:
        c.identify()
        c.sub("reset", "c")
    assert channel_stats(b, "reset", "c")["max_attempts"] == 5
    configure(b, "reset", "c", max_attempts=0)
    s = channel_stats(b, "reset", "c")
    assert "dead_lettered_count" not in s
    configure(b, "reset", "c", max_attempts=2, dead_letter_topic="reset.dead")
    assert channel_stats(b, "reset", "c")["dead_letter_topic"] == "reset.dead"
    configure(b, "reset", "c", max_attempts="default", dead_letter_topic="default")
    s = channel_stats(b, "reset", "c")
    assert (s["max_attempts"], s["dead_letter_topic"]) == (5, "")
    status, body = http(b, "GET", "/config/max_attempts")
    assert (status, json.loads(body)) == (200, 5)


def test_max_attempts_from_the_config_file(start_broker, tmp_path):
    cfg = tmp_path / "nsqd.cfg"
    cfg.write_text("max_attempts = 4\n")
    b = start_broker("--config=%s" % cfg)
    status, body = http(b, "GET", "/config/max_attempts")
    assert (status, json.loads(body)) == (200, 4)
    with Conn(b.addr) as c:
        c.identify()
        c.sub("fromfile", "c")
    s = channel_stats(b, "fromfile", "c")
    assert (s["dead_lettered_count"], s["max_attempts"], s["dead_letter_topic"]) == (0, 4, "")


def test_bad_values_and_unknown_names_are_refused(start_broker):
    b = start_broker()
    with Conn(b.addr) as c:
        c.identify()
        c.sub("bad", "c")
    cases = [
        (dict(topic="bad", channel="c", max_attempts="-1"), 400, b"INVALID_MAX_ATTEMPTS"),
        (dict(topic="bad", channel="c", max_attempts="70000"), 400, b"INVALID_MAX_ATTEMPTS"),
        (dict(topic="bad", channel="c", max_attempts="x"), 400, b"INVALID_MAX_ATTEMPTS"),
        (dict(topic="bad", channel="c", dead_letter_topic="a b"), 400,
         b"INVALID_DEAD_LETTER_TOPIC"),
        (dict(topic="bad", channel="c", dead_letter_topic="bad"), 400,
         b"INVALID_DEAD_LETTER_TOPIC"),
        (dict(topic="bad", channel="c", dead_letter_topic="d#ephemeral"), 400,
         b"INVALID_DEAD_LETTER_TOPIC"),
        (dict(topic="bad", channel="c"), 400, b"MISSING_ARG_MAX_ATTEMPTS"),
        (dict(channel="c", max_attempts=1), 400, b"MISSING_ARG_TOPIC"),
        (dict(topic="bad", max_attempts=1), 400, b"MISSING_ARG_CHANNEL"),
        (dict(topic="nope", channel="c", max_attempts=1), 404, b"TOPIC_NOT_FOUND"),
        (dict(topic="bad", channel="nope", max_attempts=1), 404, b"CHANNEL_NOT_FOUND"),
    ]
    for args, want_status, want in cases:
        status, body = post(b, "/channel/config", **args)
        assert (status, want in body) == (want_status, True), (args, status, body)
    status, body = http(b, "GET", "/dead_letters?topic=nope")
    assert (status, b"TOPIC_NOT_FOUND" in body) == (404, True)
    status, body = post(b, "/topic/redrive", topic="nope")
    assert (status, b"TOPIC_NOT_FOUND" in body) == (404, True)
    status, body = http(b, "GET", "/dead_letters")
    assert (status, b"MISSING_ARG_TOPIC" in body) == (400, True)


def test_without_the_new_settings_nothing_changes(start_broker, shards):
    b = start_broker()
    with Conn(b.addr) as c:
        c.identify()
        c.sub("plain", "c", rdy=1)
        with Conn(b.addr) as p:
            p.pub("plain", b"again and again")
        seen = []
        for _ in range(6):
            m = c.read_message(timeout=10)
            seen.append(m.attempts)
            c.req(m.id)
        m = c.read_message(timeout=10)
        c.fin(m.id)
    assert seen == [1, 2, 3, 4, 5, 6]
    s = channel_stats(b, "plain", "c")
    for key in ("dead_lettered_count", "max_attempts", "dead_letter_topic"):
        assert key not in s
    assert "nsq_channel_dead_lettered_total{" not in metrics_text(b)
