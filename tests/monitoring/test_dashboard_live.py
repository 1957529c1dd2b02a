"""The Grafana dashboard and the alert rules against a real broker scraped by a real Prometheus.

A broker (127.0.0.1, ephemeral ports, a temporary data path, end-to-end percentiles on) gets
traffic: a topic `orders` with channels `billing` (max attempts 2, dead-letter topic
`orders.dead`) and `idle`; messages published, FINished and REQueued until some are dead
letters. /usr/bin/prometheus then scrapes it every second with alerts.yml loaded, and:

- every target expression of every panel of grafana-dashboard.json, its template variables
  substituted, has a non-empty result from /api/v1/query. The substitutions: `$instance` is
  the broker's scrape target (`127.0.0.1:<http port>`), `$topic` is `orders`, `$channel` is
  `billing`, and `$__rate_interval` is `10s` (ten scrapes, so rate() and increase() have
  samples); `${datasource}` appears only in the panels' datasource fields;
- each query variable's `label_values(<selector>, <label>)` lists those values;
- every metric name the expressions use is one the broker's /metrics shows;
- every rule of alerts.yml is loaded and evaluates without error (an empty result is fine),
  and its expression is accepted by /api/v1/query.

It also lints the broker's /metrics page with `promtool check metrics`. Every wait is bounded;
the broker and Prometheus are stopped at the end."""

import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest

from monpaths import ALERTS, DASHBOARD, PROMETHEUS, PROMTOOL, REPO, need

WIRE = os.path.join(REPO, "tests", "python")
# The wire tests' Broker (tests/python/conftest.py) under another module name, so it does not
# stand in for a conftest of this directory; it puts tests/python on sys.path (nsqwire).
_spec = importlib.util.spec_from_file_location("wire_conftest", os.path.join(WIRE, "conftest.py"))
wire = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(wire)
from nsqwire import Conn  # noqa: E402 (on sys.path once wire_conftest is loaded)

TOPIC, CHANNEL, IDLE, DEAD = "orders", "billing", "idle", "orders.dead"
RATE_INTERVAL = "10s"
SCRAPES = 4  # samples of every series before the queries
WAIT = 30.0  # bound of each wait


def load_dashboard():
    with open(DASHBOARD) as f:
        return json.load(f)


def panel_targets(dashboard):
    """[(panel title, refId, expr)] of every panel, rows' nested panels included."""
    out = []
    for p in dashboard["panels"]:
        for q in [p] + p.get("panels", []):
            for t in q.get("targets", []):
                out.append((q["title"], t["refId"], t["expr"]))
    return out


def substitute(expr, values):
    """`$name` and `${name}` replaced by values[name]; an unknown variable is an error."""
    def one(m):
        name = m.group(1) or m.group(2)
        assert name in values, "unknown variable $%s in %r" % (name, expr)
        return values[name]
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", one, expr)


# ---- the dashboard's shape (no process) ----------------------------------------------------

def test_dashboard_shape():
    d = load_dashboard()
    variables = {v["name"]: v for v in d["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for name in ("instance", "topic", "channel"):
        v = variables[name]
        assert v["type"] == "query", v
        assert v["definition"].startswith("label_values("), v
        assert v["definition"].endswith(", %s)" % name), v
        assert v["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, v
    ids = [p["id"] for p in d["panels"]]
    assert len(ids) == len(set(ids)), ids
    for p in d["panels"]:
        if p["type"] == "row":
            continue
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
        assert p["targets"], p["title"]
    exprs = " ".join(e for _, _, e in panel_targets(d))
    # What the issue asks each topic, channel and broker to show.
    for metric in ("nsq_topic_messages_total", "nsq_channel_messages_total",
                   "nsq_channel_e2e_processing_latency_seconds_count", "nsq_channel_depth",
                   "nsq_channel_in_flight", "nsq_channel_requeued_total",
                   "nsq_channel_timed_out_total", "nsq_channel_e2e_processing_latency_seconds",
                   "nsq_channel_e2e_processing_latency_seconds_sum",
                   "nsq_channel_dead_lettered_total", "nsq_topic_retained_bytes",
                   "nsq_shard_tcp_connections", "process_resident_memory_bytes",
                   "nsq_data_path_available_bytes", "nsq_shard_topics", "nsq_healthy"):
        assert re.search(r"\b%s\b" % metric, exprs), metric


# ---- live: a broker and Prometheus -------------------------------------------------------

def http(port, method, target, timeout=10):
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, target), method=method,
                                 data=b"" if method == "POST" else None)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
    except OSError as e:
        return None, str(e).encode()


def post_ok(broker, target):
    status, body = http(broker.http_port, "POST", target)
    assert status == 200, (target, status, body)


def traffic(broker):
    """Publishes 20 messages; `billing`'s consumer FINs 15 and REQs 5 twice, so with max
    attempts 2 they go to `orders.dead`. Returns the consumer, still subscribed."""
    post_ok(broker, "/topic/create?topic=%s" % TOPIC)
    for channel in (CHANNEL, IDLE):
        post_ok(broker, "/channel/create?topic=%s&channel=%s" % (TOPIC, channel))
    post_ok(broker, "/channel/config?topic=%s&channel=%s&max_attempts=2&dead_letter_topic=%s"
            % (TOPIC, CHANNEL, DEAD))
    with Conn(broker.addr) as p:
        for i in range(10):
            p.pub(TOPIC, b"m%d" % i)
        p.mpub(TOPIC, [b"b%d" % i for i in range(10)])
    c = Conn(broker.addr)
    c.sub(TOPIC, CHANNEL, rdy=20)
    msgs = c.read_messages(20)
    for m in msgs[:15]:
        c.fin(m.id)
    for m in msgs[15:]:
        c.req(m.id)
    for m in c.read_messages(5):
        assert m.attempts == 2, m
        c.req(m.id)
    c.expect_nothing(0.3)
    return c


class Prometheus:
    """/usr/bin/prometheus on 127.0.0.1, scraping one broker every second with alerts.yml."""

    def __init__(self, workdir, broker_target):
        self.port = wire.free_port()
        self.log_path = os.path.join(workdir, "prometheus.log")
        config = os.path.join(workdir, "prometheus.yml")
        with open(config, "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
                    "  evaluation_interval: 1s\n"
                    "rule_files:\n  - %s\n"
                    "scrape_configs:\n  - job_name: nsq-broker\n"
                    "    static_configs:\n      - targets: ['%s']\n"
                    % (json.dumps(ALERTS), broker_target))
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [need(PROMETHEUS), "--config.file=" + config,
             "--storage.tsdb.path=" + os.path.join(workdir, "tsdb"),
             "--web.listen-address=127.0.0.1:%d" % self.port],
            stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def log(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode("utf-8", "replace")[-5000:]

    def api(self, path, **params):
        status, body = http(self.port, "GET", "/api/v1/%s?%s"
                            % (path, urllib.parse.urlencode(params, doseq=True)))
        assert status is not None, "Prometheus unreachable: %s\n%s" % (body, self.log())
        doc = json.loads(body)
        assert status == 200 and doc["status"] == "success", (path, params, status, doc)
        return doc["data"]

    def query(self, expr):
        return self.api("query", query=expr)

    def wait(self, what, pred):
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, "Prometheus exited:\n" + self.log()
            if pred():
                return
            time.sleep(0.2)
        raise AssertionError("timed out after %.0fs waiting for %s\n%s"
                             % (WAIT, what, self.log()))

    def ready(self):
        return http(self.port, "GET", "/-/ready", timeout=2)[0] == 200

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self._log.close()


@pytest.fixture
def live():
    """(broker, prometheus, consumer) with the traffic done and SCRAPES scrapes taken."""
    workdir = tempfile.mkdtemp(prefix="monitoring-test-")
    broker = wire.Broker(int(os.environ.get("BROKER_SHARDS", "2")),
                         ["--e2e-processing-latency-percentile=0.5",
                          "--e2e-processing-latency-percentile=0.99"],
                         os.path.join(workdir, "broker"))
    prom, consumer = None, None
    try:
        broker.start()
        prom = Prometheus(workdir, "127.0.0.1:%d" % broker.http_port)
        consumer = traffic(broker)
        prom.wait("Prometheus ready", prom.ready)
        selector = 'nsq_channel_dead_lettered_total{topic="%s",channel="%s"}' % (TOPIC, CHANNEL)
        prom.wait("%d scrapes with the dead letters" % SCRAPES, lambda: prom.query(
            "count_over_time(%s[1m]) >= %d and %s == 5" % (selector, SCRAPES, selector))["result"])
        yield broker, prom, consumer
    finally:
        if consumer is not None:
            consumer.close()
        if prom is not None:
            prom.stop()
        broker.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def metrics_text(broker):
    status, body = http(broker.http_port, "GET", "/metrics")
    assert status == 200, (status, body)
    return body.decode()


def test_dashboard_and_alerts_on_a_live_broker(live):
    broker, prom, _ = live
    instance = "127.0.0.1:%d" % broker.http_port
    values = {"instance": instance, "topic": TOPIC, "channel": CHANNEL,
              "__rate_interval": RATE_INTERVAL}
    d = load_dashboard()

    # The broker's page is valid exposition, and the dashboard names only what it shows.
    text = metrics_text(broker)
    lint = subprocess.run([need(PROMTOOL), "check", "metrics"], input=text, text=True,
                          capture_output=True, timeout=30)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    exposed = set(re.findall(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)[{ ]", text, re.M))
    targets = panel_targets(d)
    used = set()
    for _, _, expr in targets:
        used.update(re.findall(r"\b((?:nsq|process)_[a-zA-Z0-9_]+)", expr))
    assert used <= exposed, "not in /metrics: %s" % sorted(used - exposed)

    # Template variables list the real values.
    for v in d["templating"]["list"]:
        if v["type"] != "query":
            continue
        m = re.fullmatch(r"label_values\((.+), (\w+)\)", v["definition"])
        assert m, v["definition"]
        selector, label = substitute(m.group(1), values), m.group(2)
        listed = prom.api("label/%s/values" % label, **{"match[]": selector})
        assert values[v["name"]] in listed, (v["name"], selector, listed)

    # Every panel target has data.
    empty = []
    for title, ref, expr in targets:
        q = substitute(expr, values)
        if not prom.query(q)["result"]:
            empty.append("%s [%s]: %s" % (title, ref, q))
    assert not empty, "panel targets without data:\n" + "\n".join(empty)
    assert len(targets) >= 30, len(targets)

    # Every alert rule is loaded, evaluated without error, and its expression parses.
    with open(ALERTS) as f:
        names = set(re.findall(r"^\s*- alert: (\w+)\s*$", f.read(), re.M))

    def rules():
        return [r for g in prom.api("rules")["groups"] for r in g["rules"]]
    prom.wait("every rule evaluated", lambda: all(
        r.get("lastEvaluation", "").startswith("2") and r["health"] != "unknown"
        for r in rules()) and rules())
    loaded = rules()
    assert {r["name"] for r in loaded} == names, loaded
    for r in loaded:
        assert r["health"] == "ok", r
        prom.query(r["query"])  # status success: it parses and evaluates
