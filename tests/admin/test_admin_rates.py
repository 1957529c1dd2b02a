"""admin-ui's live rates without Graphite (its own sampler, GET /api/rates; admin-ui/UI.md's
`#rates` and rate columns) in a real headless Chromium, against the lookup + two brokers
cluster and an admin-ui started with `--sample-interval=1s`.

A publisher process (rate_load.py) sends 200 messages/s to a broker through its HTTP /pub (one
keep-alive connection, each message at its own deadline on a fixed schedule, a bounded number
of them) while a pynsq Reader in another process FINs everything on a channel. The pages then
show: the topic's messages/s in within 20% of the true rate (measured from the broker's own
counters over 2 s right after the page is read), and a sparkline with points; the channel's in
rate likewise, and its out (FIN'd) rate as one of the sampler's points, whose last five average
within 20% of the true rate; the topics list's and nodes
list's rate columns; the node's memory. With `ADMIN_UI_SCREENSHOT=<path>` the topic page under
load is saved there (admin-ui/docs/topic-page.png is made so). The lookup page lists the
lookups' topics that no producer has. `--sample-interval=0` turns the sampler off and the
pages say so.

Every wait is on a DOM condition or an HTTP answer, with a deadline; each rate compared is read
once, after the load has run for several sample intervals.
"""

import os
import re
import subprocess
import sys
import time

import pytest

from adminlib import Broker, assert_error, closed_port, crash_report, q, wait_until
from browserlib import Page

RATE = 200          # messages per second published
DURATION = 25.0     # seconds of publishing at most
TOLERANCE = 0.20



LOAD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "rate_load.py")


def true_rates(broker, topic, channel, seconds=2.0):
    """Messages/s in (the topic's `message_count`) and out (what left the channel: its
    `message_count` less its depth, in-flight and deferred), from the broker's own counters
    over `seconds`: the true rates the page's are compared with."""
    def reading():
        t = broker.topic_stats(topic)
        c = broker.channel_stats(topic, channel)
        held = c["depth"] + c["in_flight_count"] + c["deferred_count"]
        return time.monotonic(), t["message_count"], c["message_count"] - held
    a = reading()
    time.sleep(seconds)
    b = reading()
    dt = b[0] - a[0]
    return (b[1] - a[1]) / dt, (b[2] - a[2]) / dt


def shown_rate(text):
    m = re.fullmatch(r"([0-9.]+) msg/s", text)
    assert m, "not a rate: %r" % text
    return float(m.group(1))


def assert_close(shown, true, what):
    assert abs(shown - true) <= TOLERANCE * true, (
        "%s: the page shows %.1f msg/s, the true rate is %.1f msg/s (more than %d%% off)"
        % (what, shown, true, TOLERANCE * 100))


def wait_rates(page, min_points):
    """Until #rates has loaded and its in-sparkline has `min_points` points."""
    page.wait(lambda: page.all('#rates[data-loaded="true"]') and int(page.one(
        '#rates svg.sparkline[data-series="in"]').get_attribute("data-points")) >= min_points
        and page.text("#rate-in") != "—",
        "#rates with an in-sparkline of %d points" % min_points, timeout=15)


class Load:
    """The publisher and the reader processes (rate_load.py) and what they load."""

    def __init__(self, broker, topic, channel):
        self.broker, self.topic, self.channel = broker, topic, channel
        self.started = time.monotonic()
        self.procs = []

    def spawn(self, *args):
        p = subprocess.Popen([sys.executable, LOAD] + [str(a) for a in args],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.procs.append(p)
        return p

    def running_for(self, seconds, timeout=20):
        """Waits until the publisher has been running `seconds` (and is still running)."""
        wait_until(lambda: time.monotonic() - self.started >= seconds,
                   "%.0f s of publishing" % seconds, timeout=timeout)
        pub = self.procs[-1]
        assert pub.poll() is None, "the publisher stopped: %s" % (pub.communicate()[1],)

    def stop(self):
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


@pytest.fixture
def load(cluster):
    """A third broker registered with the cluster's lookup, reporting e2e latency percentiles;
    a topic with a channel on it, a FINning pynsq reader on that and the publisher running
    (each a process of its own)."""
    topic, channel = "rates_t", "rates_c"
    broker = Broker(["--lookupd-tcp-address=%s" % cluster.lookup.tcp_address,
                     "--broadcast-address=127.0.0.1",
                     "--e2e-processing-latency-percentile=0.99,0.5"]).start()
    load = Load(broker, topic, channel)
    try:
        broker.create_channel(topic, channel)
        reader = load.spawn("read", broker.tcp_port, topic, channel)
        line = reader.stdout.readline()
        assert line.strip() == "ready", "the reader did not start: %r %s" % (
            line, reader.poll() is not None and reader.communicate()[1])
        wait_until(lambda: (broker.channel_stats(topic, channel) or {}).get("client_count") == 1,
                   "the reader on the broker")
        load.started = time.monotonic()
        load.spawn("pub", broker.http_port, topic, RATE, DURATION)
        yield load
    finally:
        load.stop()
        crashed = broker.stop()
        broker.cleanup()
    assert not crashed, crash_report([broker])


def test_topic_and_channel_pages_show_the_published_rate(cluster, driver, start_admin, load):
    broker, topic, channel = load.broker, load.topic, load.channel
    admin = start_admin(lookups=[cluster.lookup.http_address], extra=["--sample-interval=1s"])
    page = Page(driver, admin)
    # Let the sampler see several intervals of steady load.
    load.running_for(6)
    page.open("/topics/" + topic, "topic")
    wait_rates(page, 5)
    shown = shown_rate(page.text("#rate-in"))
    true_rate, true_out = true_rates(broker, topic, channel)
    assert_close(shown, true_rate, "topic in")
    assert_close(true_rate, RATE, "the publisher itself")
    spark = page.one('#rates svg.sparkline[data-series="in"]')
    path = spark.find_element(page.By.CSS_SELECTOR, "path").get_attribute("d")
    assert path.count("L") >= 3, "the sparkline draws no line: %r" % path
    assert page.one('#rates svg.sparkline[data-series="depth"]')
    # The broker reports e2e percentiles: shown, each with its sparkline.
    page.wait(lambda: "p99" in page.text("#rate-e2e") and "ms" in page.text("#rate-e2e"),
              "#rate-e2e to show the p99")
    assert page.all('#rates svg.sparkline[data-series="e2e-0.99"]')
    print("\ntopic page: in %.1f msg/s; true rate %.1f msg/s" % (shown, true_rate))
    # The channel row on the topic page has its rates too.
    page.wait(lambda: page.text('#channels tr[data-channel="%s"] td.rate-in' % channel)
              .endswith("msg/s"), "the channel row's rate")
    shot = os.environ.get("ADMIN_UI_SCREENSHOT")
    if shot:
        # A longer sparkline for the picture.
        load.running_for(18)
        page.open("/topics/" + topic, "topic")
        wait_rates(page, 15)
        driver.set_window_size(1200, 900)
        page.one("body").screenshot(shot)
        driver.set_window_size(1600, 1200)
    # The channel: messages in, and out as FIN'd by the reader.
    page.open("/topics/%s/%s" % (topic, channel), "channel")
    wait_rates(page, 5)
    page.wait(lambda: page.text("#rate-out") != "—", "#rate-out to show a rate")
    shown_in, shown_out = shown_rate(page.text("#rate-in")), shown_rate(page.text("#rate-out"))
    true_rate, true_out = true_rates(broker, topic, channel)
    assert_close(shown_in, true_rate, "channel in")
    # FINs come in bursts (the reader's RDY batches, a loaded host): one 1 s point of the out
    # series can be far from a 2 s reading of the counters. So the page must show one of the
    # sampler's own points, and those points, over 5 s, must average to the true rate.
    series = admin.get("/api/rates?topic=%s&channel=%s" % (topic, channel))
    outs = [v for v in series["out"] if v is not None]
    assert any(abs(shown_out - v) <= 0.051 for v in outs[-4:]), (
        "the page shows out %.1f msg/s, none of the sampler's last points %r" % (shown_out, outs[-4:]))
    mean_out = sum(outs[-5:]) / len(outs[-5:])
    assert_close(mean_out, true_out, "channel out (FIN'd), the mean of the last 5 points")
    print("channel page: in %.1f, out %.1f msg/s (last 5 points' mean %.1f); true in %.1f, "
          "out %.1f msg/s" % (shown_in, shown_out, mean_out, true_rate, true_out))
    assert int(page.one('#rates svg.sparkline[data-series="out"]')
               .get_attribute("data-points")) >= 3


def test_lists_and_node_page_show_rates_and_memory(cluster, driver, start_admin, load):
    broker, topic, channel = load.broker, load.topic, load.channel
    admin = start_admin(lookups=[cluster.lookup.http_address], extra=["--sample-interval=1s"])
    page = Page(driver, admin)
    load.running_for(5)
    page.open("/topics", "topics")
    row = '#topics tr[data-topic="%s"]' % topic
    page.wait(lambda: page.all('#topics[data-rates-loaded="true"]')
              and page.text(row + " td.rate-in").endswith("msg/s"), "the topic row's rate")
    shown = shown_rate(page.text(row + " td.rate-in"))
    assert_close(shown, true_rates(broker, topic, channel)[0], "topics list")
    assert int(page.one(row + " svg.sparkline").get_attribute("data-points")) >= 3
    page.open("/nodes", "nodes")
    node_row = '#nodes tr[data-node="%s"]' % broker.node
    page.wait(lambda: page.text(node_row + " td.rate-in").endswith("msg/s"), "the node's rate")
    page.open("/nodes/" + q(broker.node), "node")
    assert re.search(r"Memory \(heap in use\)\s*[0-9.]+ (B|KiB|MiB|GiB)", page.text("#node-info")), (
        page.text("#node-info"))
    wait_rates(page, 3)
    assert re.fullmatch(r"[0-9.]+ (B|KiB|MiB|GiB)", page.text("#rate-memory")), (
        page.text("#rate-memory"))
    assert int(page.one('#rates svg.sparkline[data-series="memory"]')
               .get_attribute("data-points")) >= 3
    assert page.all('#node-clients tr[data-topic="%s"][data-channel="%s"]' % (topic, channel))


def test_lookup_page_lists_inactive_topics(cluster, page):
    cluster.admin.act("POST", "/api/topics", {"topic": "rates_idle", "channel": "ic"})
    page.open("/lookup", "lookup")
    page.wait(lambda: page.all('#inactive[data-loaded="true"]'), "the inactive topics")
    row = page.one('#inactive-topics tr[data-topic="rates_idle"]')
    assert "ic" in row.text, row.text
    # As nsqadmin's lookup page: each inactive topic and channel has its delete action. The
    # channel goes first, then the topic, at the lookup.
    page.answer_confirm(True)
    row.find_element(page.By.CSS_SELECTOR, 'li[data-channel="ic"] button[data-action="delete-channel"]').click()
    wait_until(lambda: cluster.lookup.channels("rates_idle") == [], "ic gone from the lookup")
    page.wait(lambda: page.all('#inactive[data-loaded="true"]')
              and page.all('#inactive-topics tr[data-topic="rates_idle"]')
              and not page.all('#inactive-topics li[data-channel="ic"]'), "the row without ic")
    page.one('#inactive-topics tr[data-topic="rates_idle"] button[data-action="delete-topic"]').click()
    wait_until(lambda: "rates_idle" not in cluster.lookup.topics(), "rates_idle gone from the lookup")
    page.wait(lambda: page.all('#inactive[data-loaded="true"]')
              and not page.all('#inactive-topics tr[data-topic="rates_idle"]'), "the row gone")
    assert any("rates_idle" in c for c in page.confirms()), page.confirms()


def test_sampler_off(cluster, driver, start_admin):
    cluster.b1.publish("rates_off", 1)
    admin = start_admin(lookups=[cluster.lookup.http_address], extra=["--sample-interval=0"])
    assert admin.get("/api/rates")["enabled"] is False
    page = Page(driver, admin)
    wait_until(lambda: "rates_off" in admin.get("/api/topics")["topics"], "rates_off listed")
    page.open("/topics/rates_off", "topic")
    page.wait(lambda: page.all('#rates[data-loaded="true"]'), "#rates")
    assert "sampler is off" in page.text("#rates")


def test_rates_api_through_a_broker_restart(start_admin):
    """A broker restarted behind the same address (its counters start again from 0, its
    start_time changes) never gives a negative or huge rate: the sample across the restart is
    null, the next ones count again. And /api/rates' arguments are checked."""
    port = closed_port()
    topic = "rates_restart"
    brokers = [Broker(["--http-address=127.0.0.1:%d" % port]).start()]
    try:
        admin = start_admin(nsqds=["127.0.0.1:%d" % port], extra=["--sample-interval=1s"])
        path = "/api/rates?topic=" + topic

        def series_with(check, what):
            return wait_until(lambda: check(admin.get(path)), what, timeout=15)

        def positive_since(since):
            return lambda s: any(v for t, v in zip(s["t"], s["in"]) if t > since) and s

        brokers[0].publish(topic, 1)
        series_with(lambda s: s["t"] and s, "a first sample of the topic")
        brokers[0].post("/mpub?topic=" + topic, "\n".join(["m"] * 5000))
        before = series_with(positive_since(0), "a rate before the restart")
        assert all(0 <= v <= 5000 * 2 for v in before["in"] if v is not None), before["in"]
        assert not brokers[0].stop(), crash_report([brokers[0]])
        brokers.append(Broker(["--http-address=127.0.0.1:%d" % port]).start())
        brokers[1].publish(topic, 1)
        restarted_at = int(time.time() * 1000)
        series_with(lambda s: any(t > restarted_at for t in s["t"]) and s,
                    "a sample after the restart")
        brokers[1].publish(topic, 10)
        after = series_with(positive_since(restarted_at), "a rate after the restart")
        rates_after = [v for t, v in zip(after["t"], after["in"]) if t > restarted_at]
        # 11 messages in all since the restart: no rate across it is negative or huge.
        assert all(v is None or 0 <= v <= 11 for v in rates_after), rates_after
        assert after["latest"]["depth"] == 11
        print("\nin before the restart %r; after %r" % (before["in"], rates_after))
        for bad, message in (("?channel=c", "INVALID_ARGS"), ("?topic=bad!", "INVALID_TOPIC"),
                             ("?topic=t&channel=bad!", "INVALID_CHANNEL"),
                             ("?topic=t&node=n", "INVALID_ARGS")):
            assert_error(admin.call("GET", "/api/rates" + bad), 400, message, bad)
        summary = admin.get("/api/rates")
        assert summary["enabled"] is True and summary["interval"] == 1.0
        assert summary["window"] == 1800 and summary["refused_series"] == 0
        assert topic in summary["topics"] and "127.0.0.1:%d" % port in summary["nodes"]
    finally:
        crashed = [b for b in brokers if b.stop()]
        for b in brokers:
            b.cleanup()
    assert not crashed, crash_report(crashed)
