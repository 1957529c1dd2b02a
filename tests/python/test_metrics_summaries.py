"""/metrics' end-to-end latency summaries carry `_sum` (seconds) beside `_count`, both counters
since the channel was made (since start for a topic), so a dashboard's average,
rate(_sum) / rate(_count), is the mean time from publish to FIN. The quantiles stay over
--e2e-processing-latency-window-time."""

import re
import time

from brokerhttp import http, metrics_text
from nsqwire import Conn, wait_for

TOPIC = "e2e_sums"
SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$')
HOLD = 0.3  # seconds channel "slow" holds its messages after "quick" finished its copies


def parse(text):
    """{family: kind} and [(name, labels without quantile, quantile, value)] of an exposition,
    checking each line's shape."""
    kinds, samples = {}, []
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            kinds[name] = kind
            continue
        if line.startswith("#") or not line:
            continue
        m = SAMPLE.match(line)
        assert m, "not a sample line: %r" % line
        labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2) or ""))
        quantile = labels.pop("quantile", None)
        samples.append((m.group(1), tuple(sorted(labels.items())), quantile, float(m.group(3))))
    return kinds, samples


def summaries(text):
    """{(family, labels): {"sum": s, "count": c, "quantiles": {q: v}}} of every summary family,
    checking that each series has exactly one _sum and one _count."""
    kinds, samples = parse(text)
    out = {}
    for family in (f for f, k in kinds.items() if k == "summary"):
        for name, labels, quantile, value in samples:
            part = {family: "quantile", family + "_sum": "sum",
                    family + "_count": "count"}.get(name)
            if part is None:
                continue
            series = out.setdefault((family, labels), {"quantiles": {}})
            if part == "quantile":
                series["quantiles"][quantile] = value
            else:
                assert part not in series, "two %s samples for %s%s" % (part, family, labels)
                series[part] = value
    for key, series in out.items():
        assert "sum" in series and "count" in series, "%s%s: %s" % (key[0], key[1], series)
        assert series["sum"] >= 0 and series["count"] >= 0, (key, series)
    return out


def test_e2e_summaries_have_sum_and_count_that_only_grow(start_broker):
    b = start_broker("--e2e-processing-latency-percentile=0.5",
                     "--e2e-processing-latency-percentile=0.99")
    assert http(b, "POST", "/topic/create?topic=%s" % TOPIC)[0] == 200
    for channel in ("slow", "quick"):
        assert http(b, "POST", "/channel/create?topic=%s&channel=%s" % (TOPIC, channel))[0] == 200
    n = 10
    with Conn(b.addr) as p:
        for i in range(n):
            p.pub(TOPIC, b"m%d" % i)
    slow_c, quick_c = Conn(b.addr), Conn(b.addr)
    try:
        slow_c.sub(TOPIC, "slow", rdy=n)
        quick_c.sub(TOPIC, "quick", rdy=n)
        slow_msgs, quick_msgs = slow_c.read_messages(n), quick_c.read_messages(n)
        for m in quick_msgs:
            quick_c.fin(m.id)
        quick_c.expect_nothing(0.02)
        time.sleep(HOLD)
        for m in slow_msgs:
            slow_c.fin(m.id)
        slow_c.expect_nothing(0.02)
    finally:
        slow_c.close()
        quick_c.close()

    topic_key = ("nsq_topic_e2e_processing_latency_seconds", (("topic", TOPIC),))

    def channel_key(channel):
        return ("nsq_channel_e2e_processing_latency_seconds",
                (("channel", channel), ("topic", TOPIC)))

    wait_for(lambda: summaries(metrics_text(b)).get(topic_key, {}).get("count") == 2 * n, 10,
             what="every FIN counted in /metrics")
    s = summaries(metrics_text(b))
    slow, quick, topic = s[channel_key("slow")], s[channel_key("quick")], s[topic_key]
    assert (slow["count"], quick["count"]) == (n, n), (slow, quick)
    # Seconds: each of slow's messages was finished HOLD after quick's copy.
    assert slow["sum"] - quick["sum"] >= 0.8 * n * HOLD, (slow, quick)
    assert 0 < quick["sum"] and slow["sum"] < n * (HOLD + 10), (slow, quick)
    assert abs(topic["sum"] - (slow["sum"] + quick["sum"])) < 1e-6, (topic, slow, quick)
    assert set(slow["quantiles"]) == {"0.5", "0.99"}, slow

    # A deleted channel's series ends, and the topic's counters keep what it counted.
    assert http(b, "POST", "/channel/delete?topic=%s&channel=slow" % TOPIC)[0] == 200
    after = summaries(metrics_text(b))
    assert channel_key("slow") not in after, after
    assert after[topic_key]["count"] == 2 * n, after[topic_key]
    assert abs(after[topic_key]["sum"] - topic["sum"]) < 1e-6, (after[topic_key], topic)
