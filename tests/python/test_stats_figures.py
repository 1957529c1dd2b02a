"""/stats figures mean what nsqd 1.3's mean (nsqd/stats.go, channel.go, topic.go), at every
--mem-queue-size, and /stats text and /metrics say the same as /stats JSON.

- A channel's `depth` is what waits for delivery (nsqd: its memory queue plus its backend):
  never its in-flight messages (`in_flight_count`) nor its deferred ones (`deferred_count`:
  DPUB from publication on, REQ with a delay) until their time comes.
- `backend_depth` is the part of `depth` beyond the --mem-queue-size messages held in memory
  (nsqd's disk queue): with --mem-queue-size 0 nsqd has no memory queue for channels and every
  message goes to the backend; with 10, the first 10 fill the memory queue and the rest go
  to disk. Without a consumer that is exact in nsqd; while one reads, nsqd's split depends on
  which queue its select took from, and ours stays depth minus --mem-queue-size.
- A topic's `depth` is what it holds that no channel has been given (nsqd: published and not
  yet pumped to channels): everything, deferred messages included, while it has no channel;
  0 once channels take them.

Several topics are used per broker, so with --shards 2 and more some are owned by another
shard than the one the test's connections land on.
"""

import json
import re
import time

import pytest

from brokerhttp import http, metrics_text
from nsqwire import Conn

TOPICS = ["figures-%d" % i for i in range(4)]
LONG = 60_000  # ms: a deferral that does not come due during the test




def post_ok(broker, target):
    status, body = http(broker, "POST", target)
    assert status == 200, (target, status, body)


def stats(broker):
    status, body = http(broker, "GET", "/stats?format=json")
    assert status == 200, body
    return {t["topic_name"]: t for t in json.loads(body)["topics"] or []}


def figures(broker, topic, channel=None):
    t = stats(broker).get(topic)
    if t is None:
        return None
    if channel is None:
        return {k: t[k] for k in ("depth", "backend_depth")}
    for c in t["channels"]:
        if c["channel_name"] == channel:
            return {k: c[k] for k in ("depth", "backend_depth", "in_flight_count",
                                      "deferred_count")}
    return None


def expect_figures(broker, topic, channel, want, timeout=5.0):
    """Waits until the figures are `want` (an early-answered publish from another shard may
    reach its owner a moment after its OK)."""
    deadline = time.monotonic() + timeout
    while True:
        got = figures(broker, topic, channel)
        if got == want:
            return
        assert time.monotonic() < deadline, "%s/%s: %s, want %s" % (topic, channel, got, want)
        time.sleep(0.05)


def channel_figures(depth, mem, in_flight=0, deferred=0):
    return {"depth": depth, "backend_depth": max(0, depth - mem),
            "in_flight_count": in_flight, "deferred_count": deferred}


def topic_figures(depth, mem):
    return {"depth": depth, "backend_depth": max(0, depth - mem)}


@pytest.mark.parametrize("mem", [0, 10, 10000])
def test_deferred_messages_are_deferred_not_depth(start_broker, mem):
    """nsqd: three DPUBs to a topic with a channel give the channel deferred_count 3, depth 0."""
    b = start_broker("--mem-queue-size=%d" % mem)
    for topic in TOPICS:
        post_ok(b, "/topic/create?topic=" + topic)
        post_ok(b, "/channel/create?topic=%s&channel=c" % topic)
        with Conn(b.addr) as p:
            for i in range(3):
                p.dpub(topic, LONG, "later-%d" % i)
        expect_figures(b, topic, "c", channel_figures(0, mem, deferred=3))
        expect_figures(b, topic, None, topic_figures(0, mem))


def test_a_deferral_that_came_due_counts_as_depth(start_broker):
    b = start_broker()
    for topic in TOPICS:
        post_ok(b, "/topic/create?topic=" + topic)
        post_ok(b, "/channel/create?topic=%s&channel=c" % topic)
        with Conn(b.addr) as p:
            p.dpub(topic, 1500, "soon")
            p.dpub(topic, LONG, "later")
        expect_figures(b, topic, "c", channel_figures(0, 10000, deferred=2), timeout=0.5)
    for topic in TOPICS:
        expect_figures(b, topic, "c", channel_figures(1, 10000, deferred=1))


@pytest.mark.parametrize("mem", [0, 10, 10000])
def test_a_topic_without_channels_holds_everything_as_its_depth(start_broker, mem):
    """nsqd's topic keeps what is published while it has no channel, deferred messages
    included, --mem-queue-size of it in memory and the rest in its backend."""
    b = start_broker("--mem-queue-size=%d" % mem)
    for topic in TOPICS:
        with Conn(b.addr) as p:
            p.mpub(topic, ["m-%d" % i for i in range(100)])
            for i in range(3):
                p.dpub(topic, LONG, "later-%d" % i)
        expect_figures(b, topic, None, topic_figures(103, mem))
        # The first channel takes it all over: the deferred ones as deferred.
        post_ok(b, "/channel/create?topic=%s&channel=c" % topic)
        expect_figures(b, topic, None, topic_figures(0, mem))
        expect_figures(b, topic, "c", channel_figures(100, mem, deferred=3))


@pytest.mark.parametrize("mem", [0, 10, 10000])
def test_backend_depth_is_the_backlog_beyond_the_memory_queue(start_broker, mem):
    """--mem-queue-size 0: every message is in the backend (depth N, backend_depth N);
    --mem-queue-size 10 with 100 messages: depth 100, backend_depth 90."""
    b = start_broker("--mem-queue-size=%d" % mem)
    for topic in TOPICS:
        post_ok(b, "/topic/create?topic=" + topic)
        post_ok(b, "/channel/create?topic=%s&channel=c" % topic)
        with Conn(b.addr) as p:
            p.mpub(topic, ["m-%d" % i for i in range(100)])
        # At once: the split does not wait for the flusher to write the messages (the first
        # publish to a topic from a shard is answered by its owner, after it stored them).
        expect_figures(b, topic, "c", channel_figures(100, mem), timeout=0)
        expect_figures(b, topic, None, topic_figures(0, mem), timeout=0)
        time.sleep(0.1)  # written: the figures stay
        expect_figures(b, topic, "c", channel_figures(100, mem), timeout=0)
    assert figures(b, TOPICS[0], "c")["backend_depth"] == {0: 100, 10: 90, 10000: 0}[mem]


@pytest.mark.parametrize("mem", [0, 10, 10000])
def test_in_flight_and_requeued_with_a_delay_are_not_depth(start_broker, mem):
    b = start_broker("--mem-queue-size=%d" % mem)
    consumers = []
    for topic in TOPICS:
        post_ok(b, "/topic/create?topic=" + topic)
        post_ok(b, "/channel/create?topic=%s&channel=c" % topic)
        with Conn(b.addr) as p:
            p.mpub(topic, ["m-%d" % i for i in range(100)])
        c = Conn(b.addr)
        consumers.append(c)
        c.sub(topic, "c", rdy=5)
        msgs = c.read_messages(5)
        expect_figures(b, topic, "c", channel_figures(95, mem, in_flight=5))
        c.cmd("RDY 0")
        for m in msgs[:2]:
            c.req(m.id, LONG)        # deferred by REQ
        c.req(msgs[2].id, 0)         # back to the queue at once
        c.fin(msgs[3].id)
        expect_figures(b, topic, "c", channel_figures(96, mem, in_flight=1, deferred=2))
    check_text_and_metrics_agree(b)
    for c in consumers:
        c.close()


def check_text_and_metrics_agree(b):
    """/stats text and /metrics show each topic's and channel's figures as /stats JSON does."""
    doc = stats(b)
    status, text = http(b, "GET", "/stats")
    assert status == 200
    text = text.decode()
    metrics = metrics_text(b)

    def metric(name, labels):
        pattern = r'^%s\{%s\} (\d+)$' % (name, ",".join('%s="%s"' % kv for kv in labels))
        found = re.search(pattern, metrics, re.M)
        assert found, "%s%s not in /metrics" % (name, labels)
        return int(found.group(1))

    for name, t in doc.items():
        line = re.search(r"\[%s\s*\] depth: (\d+)\s+be-depth: (\d+)" % re.escape(name), text)
        assert line, "topic %s not in /stats text" % name
        assert (int(line.group(1)), int(line.group(2))) == (t["depth"], t["backend_depth"])
        assert metric("nsq_topic_depth", [("topic", name)]) == t["depth"]
        assert metric("nsq_topic_backend_depth", [("topic", name)]) == t["backend_depth"]
        for c in t["channels"]:
            labels = [("topic", name), ("channel", c["channel_name"])]
            assert metric("nsq_channel_depth", labels) == c["depth"]
            assert metric("nsq_channel_backend_depth", labels) == c["backend_depth"]
            assert metric("nsq_channel_in_flight", labels) == c["in_flight_count"]
            assert metric("nsq_channel_deferred", labels) == c["deferred_count"]
        # Text: one channel line per channel, in JSON's order, with the same figures.
        lines = re.findall(r"\[(\S+)\s*\] depth: (\d+)\s+be-depth: (\d+)\s+inflt: (\d+)\s+"
                           r"def: (\d+)", text)
        for c in t["channels"]:
            want = (c["channel_name"], str(c["depth"]), str(c["backend_depth"]),
                    str(c["in_flight_count"]), str(c["deferred_count"]))
            assert want in lines, (want, lines)


def test_deferred_figures_survive_a_restart(restartable):
    """After a stop that was not clean, the deferred records a channel has not taken are found
    again in the segments and still count as deferred."""
    r = restartable("--mem-queue-size=10")
    r.start()
    topic = "stored"
    post_ok(r.broker, "/topic/create?topic=" + topic)
    post_ok(r.broker, "/channel/create?topic=%s&channel=c" % topic)
    with Conn(r.addr) as p:
        p.mpub(topic, ["m-%d" % i for i in range(20)])
        for i in range(3):
            p.dpub(topic, LONG, "later-%d" % i)
    expect_figures(r.broker, topic, "c", channel_figures(20, 10, deferred=3))
    time.sleep(0.5)  # written and checkpointed (a channel made: a structural change)
    r.kill()
    r.start()
    expect_figures(r.broker, topic, "c", channel_figures(20, 10, deferred=3))

