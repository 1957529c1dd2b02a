"""Topic retention through the wire (`--retention-time`, `--retention-bytes`, and a topic's own
through `POST /topic/config`): segments every channel has consumed are kept as the retention
says and deleted once past it, never while a channel still needs them; the per-topic setting
survives a restart; bad values are refused with a 400 that says what is wrong."""

import glob
import json
import os
import time
import urllib.parse

import pytest

from brokerhttp import http
from nsqwire import Conn, FRAME_MESSAGE, Message

SEG = "--max-bytes-per-file=4096"
N = 100


def bodies(prefix):
    return ["%s-%03d-%s" % (prefix, i, "x" * 200) for i in range(N)]


def post(broker, path, **args):
    return http(broker, "POST", "%s?%s" % (path, urllib.parse.urlencode(args)))


def configure(broker, topic, **args):
    status, body = post(broker, "/topic/config", topic=topic, **args)
    assert status == 200, (args, status, body)


def publish_and_consume(addr, topic, channel="c"):
    """Publishes N bodies of ~200 bytes (several 4 KiB segments), then consumes and FINs them
    all on `channel`."""
    sent = bodies(topic)
    with Conn(addr) as c:
        c.sub(topic, channel, rdy=N)
        with Conn(addr) as p:
            p.mpub(topic, sent)
        seen = set()
        deadline = time.monotonic() + 30
        while len(seen) < N:
            assert time.monotonic() < deadline, "consumed %d of %d" % (len(seen), N)
            ftype, data = c.read_frame(timeout=10)
            if ftype != FRAME_MESSAGE:
                continue
            m = Message.parse(data)
            seen.add(m.body.decode())
            c.fin(m.id)
    assert seen == set(sent)


def segments(broker, topic):
    return sorted(glob.glob(os.path.join(broker.data_path, topic, "*.seg")))


def retention(broker, topic):
    """The topic's retention block in /stats (None when no limit is in force for it)."""
    status, body = http(broker, "GET", "/stats?format=json&topic=%s" % topic)
    assert status == 200, body
    (t,) = [t for t in json.loads(body)["topics"] if t["topic_name"] == topic]
    return t.get("retention")


def written(broker, topic, more_than=4):
    """Waits for the flusher to write the topic's segments; their count."""
    wait_for("segments written", lambda: len(segments(broker, topic)) > more_than)
    return len(segments(broker, topic))


def wait_for(what, check, timeout=40):
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "still not: " + what
        time.sleep(0.2)


def test_bytes_keep_consumed_segments_and_a_time_then_deletes_them(restartable):
    r = restartable(SEG)
    r.start()
    b = r.broker
    topic = "kept"
    assert post(b, "/topic/create", topic=topic)[0] == 200
    configure(b, topic, retention_bytes="8KiB")
    publish_and_consume(r.addr, topic)
    written(b, topic, more_than=1)
    # The checkpoint releases what every channel passed, down to what the size keeps: the
    # oldest segment goes once the newer ones hold 8 KiB.
    wait_for("retained bytes down to about 8 KiB",
             lambda: retention(b, topic)["retained_bytes"] < 8192 + 4096 + 512)
    kept = retention(b, topic)
    assert kept["retained_bytes"] >= 8192, kept
    assert kept["bytes"] == 8192 and kept["bytes_is_topics"], kept
    assert kept["time_ns"] == 0 and not kept["time_is_topics"], kept
    assert kept["oldest_offset"] > 0, kept
    assert kept["oldest_timestamp"] > 0, kept
    files = segments(b, topic)
    assert 2 <= len(files) <= 4, files
    assert os.path.basename(files[0]) == "%020d.seg" % kept["oldest_offset"]
    # A time as well: either limit lets a segment go, so past 2 s only the newest is left.
    configure(b, topic, retention_time="2s")
    wait_for("one segment left", lambda: len(segments(b, topic)) == 1)
    after = retention(b, topic)
    assert after["time_ns"] == 2_000_000_000 and after["time_is_topics"], after


def test_flag_retention_time_deletes_once_past_it(restartable):
    r = restartable(SEG, "--retention-time=2s")
    r.start()
    b = r.broker
    topic = "timed"
    publish_and_consume(r.addr, topic)
    assert retention(b, topic)["time_ns"] == 2_000_000_000
    assert not retention(b, topic)["time_is_topics"]
    # /config/:opt reports the flags as nsqd reports its own (durations in nanoseconds).
    for opt, value in [("retention_time", 2_000_000_000), ("retention_bytes", 0)]:
        status, body = http(b, "GET", "/config/" + opt)
        assert (status, json.loads(body)) == (200, value), (opt, body)
    # Every channel finished everything, yet the records are written and kept for a while
    # (without retention they would not even be written), then go.
    most = [0]

    def one_left():
        n = len(segments(b, topic))
        most[0] = max(most[0], n)
        return n == 1 and most[0] > 1

    wait_for("segments written, then one left", one_left)
    assert most[0] > 4, most


def test_retention_never_deletes_what_a_channel_still_needs(restartable):
    r = restartable(SEG, "--retention-time=1ms", "--retention-bytes=1")
    r.start()
    b = r.broker
    topic = "owed"
    # Channel "slow" exists but reads nothing: every message is still owed to it.
    with Conn(r.addr) as s:
        s.sub(topic, "slow", rdy=0)
        publish_and_consume(r.addr, topic, channel="fast")
        count = written(b, topic)
        time.sleep(6)  # past a checkpoint (every 5 s): nothing may go
        assert len(segments(b, topic)) == count
        assert retention(b, topic)["oldest_offset"] == 0


def test_topic_setting_survives_a_restart(restartable):
    r = restartable(SEG)
    r.start()
    topic = "durable"
    assert post(r.broker, "/topic/create", topic=topic)[0] == 200
    configure(r.broker, topic, retention_time="1h", retention_bytes="1MiB")
    publish_and_consume(r.addr, topic)
    count = written(r.broker, topic)
    r.stop()
    meta = json.load(open(os.path.join(r.data_path, topic, "meta.json")))
    assert meta["retention_time_ns"] == 3600 * 10**9 and meta["retention_bytes"] == 1 << 20
    r.start()
    kept = retention(r.broker, topic)
    assert kept["time_ns"] == 3600 * 10**9 and kept["time_is_topics"], kept
    assert kept["bytes"] == 1 << 20 and kept["bytes_is_topics"], kept
    assert kept["oldest_offset"] == 0 and kept["oldest_timestamp"] > 0, kept
    assert len(segments(r.broker, topic)) == count
    # Back to the flags' (none): what every channel passed goes.
    configure(r.broker, topic, retention_time="default", retention_bytes="default")
    wait_for("one segment left", lambda: len(segments(r.broker, topic)) == 1)
    # No limit in force: the topic's object has nsqd's keys only.
    assert retention(r.broker, topic) is None


@pytest.mark.parametrize("args,status,message", [
    ({"retention_time": "abc"}, 400, "INVALID_RETENTION_TIME"),
    ({"retention_time": "10"}, 400, "INVALID_RETENTION_TIME"),
    ({"retention_time": "-1s"}, 400, "INVALID_RETENTION_TIME"),
    ({"retention_bytes": "10XB"}, 400, "INVALID_RETENTION_BYTES"),
    ({"retention_bytes": "1.5GiB"}, 400, "INVALID_RETENTION_BYTES"),
    ({"retention_bytes": "-1"}, 400, "INVALID_RETENTION_BYTES"),
    ({}, 400, "MISSING_ARG_RETENTION"),
    ({"replicas": "0"}, 400, "INVALID_REPLICAS"),
    ({"replicas": "three"}, 400, "INVALID_REPLICAS"),
    # Without --replication-address only 1 replica is possible.
    ({"replicas": "2"}, 400, "INVALID_REPLICAS"),
])
def test_bad_values_are_refused(restartable, args, status, message):
    r = restartable()
    r.start()
    assert post(r.broker, "/topic/create", topic="t")[0] == 200
    got, body = post(r.broker, "/topic/config", topic="t", **args)
    assert got == status, (args, got, body)
    assert json.loads(body)["message"].startswith(message), body
    assert retention(r.broker, "t") is None  # nothing was set


def test_one_replica_is_what_an_unreplicated_broker_has(restartable):
    r = restartable()
    r.start()
    assert post(r.broker, "/topic/create", topic="t")[0] == 200
    assert post(r.broker, "/topic/config", topic="t", replicas="1")[0] == 200
    status, body = post(r.broker, "/topic/config", topic="t", replicas="2")
    assert status == 400 and "--replication-address" in json.loads(body)["message"], body


def test_topic_config_errors(restartable):
    r = restartable()
    r.start()
    b = r.broker
    status, body = post(b, "/topic/config", retention_time="1h")
    assert (status, json.loads(body)["message"]) == (400, "MISSING_ARG_TOPIC")
    status, body = post(b, "/topic/config", topic="nope", retention_time="1h")
    assert (status, json.loads(body)["message"]) == (404, "TOPIC_NOT_FOUND")
    assert post(b, "/topic/create", topic="e#ephemeral")[0] == 200
    status, body = post(b, "/topic/config", topic="e#ephemeral", retention_time="1h")
    assert status == 400 and json.loads(body)["message"].startswith("EPHEMERAL_TOPIC"), body
