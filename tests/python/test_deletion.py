"""Deleting a topic or a channel through the HTTP API is final: once /topic/delete or
/channel/delete has answered 200, no restart brings the topic or channel back, whether the
broker stops cleanly or is killed right after the answer, after a checkpoint has passed, or
while a publisher keeps publishing to the topic at full speed. A topic that a publish made
again after the delete holds only what was published after the delete; a deleted channel's
cursor holds no segment back."""

import glob
import json
import os
import threading
import time

import pytest

from brokerhttp import http
from nsqwire import Conn, FRAME_MESSAGE, Message

TOPIC = "doomed"




def delete(broker, what, query):
    status, body = http(broker, "POST", "/%s/delete?%s" % (what, query))
    assert status == 200, (what, query, status, body)


def topics(broker):
    """{topic: [channel names]} from /stats."""
    status, body = http(broker, "GET", "/stats?format=json")
    assert status == 200, body
    return {t["topic_name"]: sorted(c["channel_name"] for c in t["channels"])
            for t in json.loads(body)["topics"] or []}


def restored(r):
    """Restarts; returns {topic: [channels]}. /stats asks every shard, and a shard answers
    only once it has loaded its topics."""
    r.start()
    return topics(r.broker)


def stop(r, how):
    if how == "sigkill":
        r.kill()
    else:
        r.stop()


def subscribe(addr, channels):
    for ch in channels:
        with Conn(addr) as c:
            c.sub(TOPIC, ch)


def publish(addr, n, prefix):
    with Conn(addr) as p:
        for i in range(0, n, 500):
            p.mpub(TOPIC, ["%s-%d" % (prefix, j) for j in range(i, min(n, i + 500))])


def drain_all(addr, channel, quiet=1.0, timeout=60.0):
    """Every body the channel delivers until it has been quiet for `quiet` seconds."""
    seen = []
    deadline = time.monotonic() + timeout
    with Conn(addr) as c:
        c.sub(TOPIC, channel, rdy=2500)
        while True:
            left = deadline - time.monotonic()
            assert left > 0, "still delivering after %.0f s (%d so far)" % (timeout, len(seen))
            try:
                ftype, data = c.read_frame(timeout=min(quiet, left))
            except OSError:
                return seen
            if ftype != FRAME_MESSAGE:
                continue
            m = Message.parse(data)
            seen.append(m.body.decode())
            c.fin(m.id)


@pytest.mark.parametrize("how", ["clean stop", "sigkill"])
def test_a_deleted_topic_does_not_come_back_after_a_checkpoint_and_a_restart(restartable, how):
    """The flusher's checkpoint, which persists topics published to in the last seconds, must
    not write the metadata of a topic deleted meanwhile (it made the directory again, with a
    meta.json, and the next start listed the topic)."""
    r = restartable()
    r.start()
    subscribe(r.addr, ["c"])
    publish(r.addr, 100, "old")
    delete(r.broker, "topic", "topic=" + TOPIC)
    assert TOPIC not in topics(r.broker)
    topic_dir = os.path.join(r.data_path, TOPIC)
    # A checkpoint comes at most 5 s after the last one.
    deadline = time.monotonic() + 6
    while time.monotonic() < deadline:
        assert not os.path.exists(topic_dir), \
            "the deleted topic's directory came back: %s" % os.listdir(topic_dir)
        time.sleep(0.1)
    stop(r, how)
    assert TOPIC not in restored(r)


@pytest.mark.parametrize("how", ["clean stop", "sigkill"])
def test_a_deleted_topic_does_not_come_back_after_a_stop_right_after_the_delete(restartable,
                                                                                   how):
    r = restartable()
    r.start()
    subscribe(r.addr, ["c"])
    publish(r.addr, 100, "old")
    delete(r.broker, "topic", "topic=" + TOPIC)
    stop(r, how)
    assert TOPIC not in restored(r)
    assert not glob.glob(os.path.join(r.data_path, TOPIC + "*")), os.listdir(r.data_path)


@pytest.mark.parametrize("how", ["clean stop", "sigkill"])
def test_a_deleted_channel_does_not_come_back_after_a_stop_right_after_the_delete(restartable,
                                                                                     how):
    """The answer to /channel/delete waits until meta.json no longer lists the channel."""
    r = restartable()
    r.start()
    subscribe(r.addr, ["kept", "gone"])
    publish(r.addr, 100, "m")
    delete(r.broker, "channel", "topic=%s&channel=gone" % TOPIC)
    stop(r, how)
    assert restored(r).get(TOPIC) == ["kept"]
    seen = drain_all(r.addr, "kept")
    assert sorted(seen) == sorted("m-%d" % i for i in range(100))


def test_a_deleted_channel_holds_no_segment_back(restartable):
    """Segments only the deleted channel still needed go once it is deleted (the checkpoint
    its delete waits for frees them)."""
    r = restartable("--mem-queue-size=100", "--max-bytes-per-file=1048576")
    r.start()
    subscribe(r.addr, ["reader", "idle"])
    publish(r.addr, 30000, "p" * 150)
    seen = drain_all(r.addr, "reader")
    assert len(seen) == 30000
    topic_dir = os.path.join(r.data_path, TOPIC)
    segments = glob.glob(os.path.join(topic_dir, "*.seg"))
    assert len(segments) > 3, "the idle channel holds every segment: %s" % segments
    delete(r.broker, "channel", "topic=%s&channel=idle" % TOPIC)
    deadline = time.monotonic() + 15
    while len(glob.glob(os.path.join(topic_dir, "*.seg"))) > 1:
        assert time.monotonic() < deadline, sorted(os.listdir(topic_dir))
        time.sleep(0.1)


class Publisher(threading.Thread):
    """PUBs numbered bodies one after another on one connection, as fast as the answers come,
    until stopped. `sent` counts the PUBs written to the socket, `acked` their OKs."""

    def __init__(self, addr):
        super().__init__(daemon=True)
        self.addr, self.sent, self.acked = addr, 0, 0
        self.halt = threading.Event()
        self.error = None

    def run(self):
        try:
            with Conn(self.addr) as p:
                while not self.halt.is_set():
                    self.sent += 1
                    p.pub(TOPIC, "n-%d" % (self.sent - 1))
                    self.acked += 1
        except Exception as e:  # reported by the test
            self.error = e


def number(body):
    return int(body.split("-")[1])


@pytest.mark.parametrize("how", ["clean stop", "sigkill"])
def test_a_topic_deleted_under_full_speed_publishing_keeps_only_what_came_after(restartable,
                                                                                 how):
    """After the restart the topic holds no message acknowledged before the delete was asked
    for, every message sent after its answer, and no channel (none was made after it).

    With --mem-queue-size 0 an OK means the owner stored the message, so "acknowledged before
    the delete" is exact. (With early OKs, a PUB answered by a shard that does not own the
    topic can still be on its way to the owner when a delete from another shard gets there
    first, and it then re-creates the topic: a known ordering gap, not covered here.)"""
    r = restartable("--mem-queue-size=0")
    r.start()
    subscribe(r.addr, ["c"])
    p = Publisher(r.addr)
    p.start()
    time.sleep(0.5)
    acked_before = p.acked
    delete(r.broker, "topic", "topic=" + TOPIC)
    sent_after = p.sent
    time.sleep(0.5)
    p.halt.set()
    p.join(10)
    assert p.error is None, p.error
    acked = p.acked
    assert acked > sent_after, "the publisher went on after the delete"
    time.sleep(0.3)  # past the flusher's coalescing: a kill loses nothing acknowledged
    stop(r, how)
    assert restored(r).get(TOPIC) == [], "the old channel came back"
    numbers = sorted(number(b) for b in drain_all(r.addr, "after"))
    old = [n for n in numbers if n < acked_before]
    assert not old, "%d messages from before the delete came back: %s" % (len(old), old[:10])
    missing = sorted(set(range(sent_after, acked)) - set(numbers))
    assert not missing, "%d messages from after the delete lost: %s" % (len(missing), missing[:10])


@pytest.mark.parametrize("how", ["clean stop", "sigkill"])
def test_a_channel_deleted_under_full_speed_publishing_stays_deleted(restartable, how):
    r = restartable()
    r.start()
    subscribe(r.addr, ["kept", "gone"])
    p = Publisher(r.addr)
    p.start()
    time.sleep(0.5)
    delete(r.broker, "channel", "topic=%s&channel=gone" % TOPIC)
    stop(r, how)
    p.halt.set()
    p.join(10)
    assert restored(r).get(TOPIC) == ["kept"]
