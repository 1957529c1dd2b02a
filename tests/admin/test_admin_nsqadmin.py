"""admin-ui as a drop-in nsqadmin 1.3: its flags, its config file, its routes and its answers.

Checked: every nsqadmin flag (apps/nsqadmin/main.go lists 26) accepted in Go's `-flag=value`
and the `--flag value` forms, each option read back through nsqadmin's `GET /config/:opt`;
nsqadmin's example config file with every key set, and flags overriding it; `--base-path`
(page, static files, API and actions under the prefix, 404 outside it); `/config` from an
allowed and a refused CIDR (a second loopback source address), `PUT /config` of the lookups
(then read from) and the log level; Graphite: the `/render` proxy and `/api/graphite` against a
fake Graphite the test runs, with `--statsd-interval`; `--dev-static-dir`; the JSON shapes of
nsqadmin's `clusterinfo` types and `RespondV1`'s answers (no recorded nsqadmin answers exist in
/work/shared/fixtures, so the shapes are nsqadmin 1.3's source: http.go, clusterinfo/types.go,
http_api/api_response.go).
"""

import http.client
import json
import subprocess
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from adminlib import (admin_bin, assert_error, assert_json_type, closed_port, eventually, q,
                      request, wait_registered)

FULL_EXAMPLE = """
log_level = "info"
log_prefix = ""
acl_http_header = ""
admin_users = [
    "admin"
]
allow_config_from_cidr = ""
base_path = ""
http_client_connect_timeout = "2s"
http_client_request_timeout = "5s"
http_client_tls_cert = ""
http_client_tls_insecure_skip_verify = false
http_client_tls_key = ""
http_client_tls_root_ca_file = ""
http_address = "0.0.0.0:4171"
graphite_url = ""
proxy_graphite = false
statsd_prefix = "nsq.%s"
statsd_counter_format = "stats.counters.%s.count"
statsd_gauge_format = "stats.gauges.%s"
statsd_interval = "60s"
notification_http_endpoint = ""
nsqlookupd_http_addresses = [
    "127.0.0.1:4161"
]
nsqd_http_addresses = [
    "127.0.0.1:4151"
]
dev_static_dir = ""
verbose = false
"""


class FakeGraphite:
    """A Graphite `/render`: JSON (one series whose first point is `rate`) for format=json,
    else a fake PNG; every request's path and query kept."""

    def __init__(self, rate=120.0):
        self.requests = []
        self.rate = rate
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self):
                u = urllib.parse.urlsplit(self.path)
                query = urllib.parse.parse_qs(u.query)
                owner.requests.append((u.path, query))
                if query.get("format") == ["json"]:
                    body = json.dumps([{"target": query.get("target", [""])[0],
                                        "datapoints": [[owner.rate, 1795365993]]}]).encode()
                    ctype = "application/json"
                else:
                    body, ctype = b"\x89PNG fake chart", "image/png"
                self.send_response(200)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def graphite():
    g = FakeGraphite()
    yield g
    g.close()


def config_value(admin, opt, base=""):
    r = admin.call("GET", base + "/config/" + opt)
    assert r.status == 200, (opt, r)
    assert r.headers.get("X-NSQ-Content-Type") == "nsq; version=1.0", r.headers
    ctype = r.headers.get("Content-Type", "")
    # nsqadmin writes a string as it is, anything else as JSON
    return r.body.decode() if ctype.startswith("text/plain") else json.loads(r.body)


# ---- flags ----------------------------------------------------------------------------------

def all_flags(certs, tmp_path, graphite):
    """(flag, value) for every nsqadmin flag taking a value, and the boolean ones."""
    static = tmp_path / "static"
    static.mkdir(exist_ok=True)
    valued = [
        ("log-level", "debug"), ("log-prefix", "[admin] "), ("http-address", "127.0.0.1:0"),
        ("base-path", "/nsq"), ("dev-static-dir", str(static)), ("graphite-url", graphite.url),
        ("statsd-counter-format", "c.%s.n"), ("statsd-gauge-format", "g.%s"),
        ("statsd-prefix", "p.%s"), ("statsd-interval", "30s"),
        ("notification-http-endpoint", "https://127.0.0.1:1/hook"),
        ("http-client-connect-timeout", "3s"), ("http-client-request-timeout", "7s"),
        ("http-client-tls-root-ca-file", certs.ca),
        ("http-client-tls-cert", certs.path("client.pem")),
        ("http-client-tls-key", certs.path("client.key")),
        ("allow-config-from-cidr", "127.0.0.0/8"), ("acl-http-header", "X-User"),
        ("lookupd-http-address", "127.0.0.1:%d" % closed_port()),
        ("nsqd-http-address", "127.0.0.1:%d" % closed_port()),
        ("admin-user", "ops"),
    ]
    switches = ["verbose", "proxy-graphite", "http-client-tls-insecure-skip-verify"]
    return valued, switches


@pytest.mark.parametrize("form", ["go", "gnu"])
def test_every_nsqadmin_flag_in_both_forms(form, certs, tmp_path, graphite, start_admin):
    valued, switches = all_flags(certs, tmp_path, graphite)
    if form == "go":
        args = ["-%s=%s" % (f, v) for f, v in valued] + ["-" + s for s in switches]
    else:
        args = [w for f, v in valued for w in ("--" + f, v)] + ["--" + s for s in switches]
    admin = start_admin(raw=args)
    assert admin.call("GET", "/nsq/ping").body == b"OK"
    assert admin.call("GET", "/ping").status == 404, "outside --base-path"
    want = {
        "log_level": 1, "log_prefix": "[admin] ", "base_path": "/nsq",
        "dev_static_dir": str(tmp_path / "static"), "graphite_url": graphite.url,
        "proxy_graphite": True, "statsd_counter_format": "c.%s.n", "statsd_gauge_format": "g.%s",
        "statsd_prefix": "p.%s", "statsd_interval": 30 * 10**9,
        "notification_http_endpoint": "https://127.0.0.1:1/hook",
        "http_client_connect_timeout": 3 * 10**9, "http_client_request_timeout": 7 * 10**9,
        "http_client_tls_root_ca_file": certs.ca,
        "http_client_tls_cert": certs.path("client.pem"),
        "http_client_tls_key": certs.path("client.key"),
        "http_client_tls_insecure_skip_verify": True,
        "allow_config_from_cidr": "127.0.0.0/8", "acl_http_header": "X-User",
        "nsqlookupd_http_addresses": [dict(valued)["lookupd-http-address"]],
        "nsqd_http_addresses": [dict(valued)["nsqd-http-address"]],
        "admin_users": ["ops"],
    }
    for opt, value in want.items():
        assert config_value(admin, opt, "/nsq") == value, opt
    assert config_value(admin, "http_address", "/nsq").startswith("127.0.0.1:")
    # the two that have no effect say so once at start-up, as the broker does
    text = admin.stderr()
    for flag in ("--verbose", "--log-prefix"):
        assert text.count("flag accepted without effect: %s" % flag) == 1, text
    # the Graphite proxy is on: <base>/render reaches it
    r = admin.call("GET", "/nsq/render?target=x")
    assert r.status == 200 and r.body == b"\x89PNG fake chart", r


def test_version_in_nsqadmins_words():
    for flag in ("--version", "-version"):
        out = subprocess.run([admin_bin(), flag], capture_output=True, timeout=10)
        assert out.returncode == 0, out
        assert b"nsqadmin v1.3.0-compatible" in out.stdout, out.stdout


def test_nsqadmins_example_config_with_every_key_and_overriding_flags(cluster, tmp_path,
                                                                      start_admin):
    cfg = tmp_path / "nsqadmin.cfg"
    cfg.write_text(FULL_EXAMPLE.replace('"127.0.0.1:4161"', '"%s"' % cluster.lookup.http_address))
    admin = start_admin(raw=["-config=" + str(cfg), "--http-address=127.0.0.1:0",
                             "-base-path=/ops", "--statsd-interval", "15s",
                             "--nsqd-http-address", cluster.b1.node])
    # from the file
    assert config_value(admin, "nsqlookupd_http_addresses", "/ops") == [
        cluster.lookup.http_address]
    assert config_value(admin, "admin_users", "/ops") == ["admin"]
    assert config_value(admin, "statsd_prefix", "/ops") == "nsq.%s"
    assert config_value(admin, "http_client_request_timeout", "/ops") == 5 * 10**9
    # the flags win over the file
    assert config_value(admin, "base_path", "/ops") == "/ops"
    assert config_value(admin, "statsd_interval", "/ops") == 15 * 10**9
    assert config_value(admin, "nsqd_http_addresses", "/ops") == [cluster.b1.node]
    # allow_config_from_cidr = "" in the file: /config from anywhere (it answered above)
    assert config_value(admin, "allow_config_from_cidr", "/ops") == ""
    r = admin.call("GET", "/ops/api/nodes")
    assert r.status == 200 and r.json()["message"] == "", r


def test_bad_config_key_names_the_line(tmp_path):
    cfg = tmp_path / "bad.cfg"
    cfg.write_text('nsqd_http_addresses = ["h:1"]\ngraphite_url = "g:80"\n')
    out = subprocess.run([admin_bin(), "--config", str(cfg)], capture_output=True, timeout=10)
    text = out.stderr.decode()
    assert out.returncode != 0 and "line 2" in text and "graphite_url" in text, text


# ---- base path ------------------------------------------------------------------------------

def test_base_path_serves_page_static_api_and_actions_under_it(cluster, start_admin):
    cluster.b1.publish("bp_t", 1)
    wait_registered(cluster.lookup, [cluster.b1], "bp_t")
    admin = start_admin(lookups=[cluster.lookup.http_address], extra=["--base-path=nsq/"])
    page = admin.call("GET", "/nsq")
    assert page.status == 200 and b'src="/nsq/static/app.js"' in page.body, page
    assert b'data-base-path="/nsq"' in page.body and b'href="/nsq/topics"' in page.body
    for path in ("/nsq/", "/nsq/topics", "/nsq/topics/bp_t", "/nsq/topics/bp_t/c", "/nsq/nodes",
                 "/nsq/nodes/" + q(cluster.b1.node), "/nsq/counter", "/nsq/lookup"):
        r = admin.call("GET", path)
        assert r.status == 200 and r.body == page.body, (path, r.status)
    r = admin.call("GET", "/nsq/static/app.js")
    assert r.status == 200 and r.headers["Content-Type"].startswith("text/javascript"), r
    assert admin.call("GET", "/nsq/static/style.css").status == 200
    assert "bp_t" in admin.get("/nsq/api/topics")["topics"]
    admin.act("POST", "/nsq/api/topics/bp_t", {"action": "pause"})
    assert cluster.b1.topic_stats("bp_t")["paused"] is True
    admin.act("POST", "/nsq/api/topics/bp_t", {"action": "unpause"})
    # outside the base path: nothing, as nsqadmin's router
    for path in ("/", "/ping", "/topics", "/static/app.js", "/api/topics", "/nsqx/topics",
                 "/nsq/elsewhere", "/nsq/topics/a/b/c"):
        assert_error(admin.call("GET", path), 404, "NOT_FOUND", path)


def test_dev_static_dir_serves_files_from_it(tmp_path, start_admin):
    static = tmp_path / "static"
    static.mkdir()
    (static / "app.js").write_text("/* from the dev dir */\n")
    (static / "extra.css").write_text("body {}\n")
    admin = start_admin(nsqds=["127.0.0.1:1"], extra=["--dev-static-dir=" + str(static)])
    r = admin.call("GET", "/static/app.js")
    assert r.status == 200 and r.body == b"/* from the dev dir */\n", r
    r = admin.call("GET", "/static/extra.css")
    assert r.status == 200 and r.headers["Content-Type"].startswith("text/css"), r
    for path in ("/static/missing.js", "/static/..", "/static/%2e%2e", "/fonts/x.woff"):
        r = admin.call("GET", path)
        assert r.status == 404 and r.body == b"NOT_FOUND", (path, r)


# ---- /config --------------------------------------------------------------------------------

def call_from(source_ip, admin, method, path, body=None):
    """One request from the loopback address `source_ip` (127.0.0.0/8 is all loopback)."""
    c = http.client.HTTPConnection("127.0.0.1", admin.ports["http"], timeout=10,
                                   source_address=(source_ip, 0))
    try:
        c.request(method, path, body=body)
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


def test_config_endpoint_reads_and_changes_options(cluster, start_admin):
    cluster.b2.publish("cf_t", 1)
    wait_registered(cluster.lookup, [cluster.b2], "cf_t")
    down = "127.0.0.1:%d" % closed_port()
    admin = start_admin(lookups=[down])
    assert config_value(admin, "nsqlookupd_http_addresses") == [down]
    assert config_value(admin, "allow_config_from_cidr") == "127.0.0.1/8", "nsqadmin's default"
    # no lookup answers: nsqadmin's 502
    r = admin.call("GET", "/api/topics")
    assert r.status == 502 and r.json()["message"].startswith(
        "UPSTREAM_ERROR: failed to query any nsqlookupd: "), r
    new = json.dumps([cluster.lookup.http_address])
    r = admin.call("PUT", "/config/nsqlookupd_http_addresses", new)
    assert r.status == 200 and json.loads(r.body) == [cluster.lookup.http_address], r
    assert "cf_t" in admin.get("/api/topics")["topics"], "read from the new lookup"
    r = admin.call("PUT", "/config/log_level", "debug")
    assert r.status == 200 and r.body == b"1", r
    assert config_value(admin, "log_level") == 1
    admin.get("/api/nodes")
    eventually(lambda: "DEBUG" in admin.stderr())
    for opt, body, status, message in (
            ("log_level", "loud", 400, "INVALID_VALUE"),
            ("nsqlookupd_http_addresses", "not json", 400, "INVALID_VALUE"),
            ("nsqlookupd_http_addresses", '["nohost"]', 400, "INVALID_VALUE"),
            ("http_address", '"0.0.0.0:1"', 400, "INVALID_OPTION"),
            ("log_level", "", 413, "INVALID_VALUE")):
        assert_error(admin.call("PUT", "/config/" + opt, body), status, message, (opt, body))
    assert_error(admin.call("GET", "/config/no_such_option"), 400, "INVALID_OPTION", "GET")
    assert config_value(admin, "nsqlookupd_http_addresses") == [cluster.lookup.http_address]


def test_config_endpoint_only_from_the_allowed_cidr(start_admin):
    admin = start_admin(nsqds=["127.0.0.1:1"], extra=["--allow-config-from-cidr=127.0.0.2/32"])
    status, body = call_from("127.0.0.2", admin, "GET", "/config/nsqd_http_addresses")
    assert (status, json.loads(body)) == (200, ["127.0.0.1:1"]), body
    status, body = call_from("127.0.0.1", admin, "GET", "/config/nsqd_http_addresses")
    assert (status, json.loads(body)) == (403, {"message": "FORBIDDEN"}), body
    status, body = call_from("127.0.0.1", admin, "PUT", "/config/log_level", "debug")
    assert status == 403, body
    assert call_from("127.0.0.2", admin, "GET", "/config/log_level") == (200, b"2"), "unchanged"
    # the rest of admin-ui is open to both
    assert call_from("127.0.0.1", admin, "GET", "/ping") == (200, b"OK")


# ---- Graphite -------------------------------------------------------------------------------

def test_graphite_proxy_and_rate(graphite, start_admin):
    admin = start_admin(nsqds=["127.0.0.1:1"], extra=[
        "--graphite-url=%s/graphite" % graphite.url, "--proxy-graphite",
        "--statsd-interval=10s"])
    r = admin.call("GET", "/render?target=sumSeries(a.b)&from=-1h")
    assert r.status == 200 and r.body == b"\x89PNG fake chart", r
    assert r.headers["Content-Type"] == "image/png", r.headers
    assert graphite.requests[-1] == ("/graphite/render", {"target": ["sumSeries(a.b)"],
                                                          "from": ["-1h"]})
    r = admin.call("GET", "/api/graphite?metric=rate&target=" + q("sumSeries(a.b)"))
    assert r.status == 200 and r.json() == {"rate": "12.00"}, r  # 120 per 10 s interval
    assert_json_type(r, "/api/graphite")
    assert graphite.requests[-1] == ("/graphite/render", {
        "format": ["json"], "from": ["-20sec"], "until": ["-10sec"],
        "target": ["sumSeries(a.b)"]})
    graphite.rate = -1.0
    assert admin.get("/api/graphite?metric=rate&target=x") == {"rate": "N/A"}
    assert_error(admin.call("GET", "/api/graphite?target=x"), 400, "INVALID_ARG_METRIC", "")
    assert_error(admin.call("GET", "/api/graphite?metric=rate"), 400, "INVALID_ARG_TARGET", "")


def test_without_graphite_nothing_is_asked(start_admin):
    admin = start_admin(nsqds=["127.0.0.1:1"])
    assert_error(admin.call("GET", "/render?target=x"), 404, "NOT_FOUND", "no --proxy-graphite")
    assert_error(admin.call("GET", "/api/graphite?metric=rate&target=x"), 500, "INTERNAL_ERROR",
                 "no --graphite-url")


# ---- nsqadmin's JSON shapes -----------------------------------------------------------------

TOPIC_STATS = {"node", "hostname", "topic_name", "depth", "memory_depth", "backend_depth",
               "message_count", "delivery_msg_count", "nodes", "channels", "paused",
               "e2e_processing_latency"}
CHANNEL_STATS = {"node", "hostname", "topic_name", "channel_name", "depth", "memory_depth",
                 "backend_depth", "in_flight_count", "deferred_count", "requeue_count",
                 "timeout_count", "message_count", "client_count", "nodes", "clients", "paused",
                 "e2e_processing_latency"}
CLIENT_STATS = {"node", "remote_address", "version", "client_id", "hostname", "user_agent",
                "connect_ts", "connected", "in_flight_count", "ready_count", "finish_count",
                "requeue_count", "message_count", "sample_rate", "deflate", "snappy", "authed",
                "auth_identity", "auth_identity_url", "tls", "tls_cipher_suite", "tls_version",
                "tls_negotiated_protocol", "tls_negotiated_protocol_is_mutual"}
PRODUCER = {"remote_addresses", "remote_address", "hostname", "broadcast_address", "tcp_port",
            "http_port", "version", "topics", "out_of_date"}
E2E = {"count", "percentiles", "topic", "channel", "host"}


def missing(want, got):
    return sorted(want - set(got))


def test_api_shapes_are_nsqadmins(cluster):
    a = cluster.admin
    cluster.on_both("sh_t", channels=["c"])
    cluster.b1.publish("sh_t", 3)
    consumer = cluster.consumer(cluster.b1, "sh_t", "c", client_id="shape-client", rdy=1)
    try:
        t = a.get("/api/topics")
        assert t["message"] == "" and "sh_t" in t["topics"], t
        topic = a.get("/api/topics/sh_t")
        assert missing(TOPIC_STATS | {"message"}, topic) == [], topic.keys()
        assert topic["node"] == "*" and topic["message"] == ""
        assert missing(E2E, topic["e2e_processing_latency"]) == []
        for row in topic["nodes"]:
            assert missing(TOPIC_STATS, row) == [] and row["node"] != "*", row
        [ch] = topic["channels"]
        assert missing(CHANNEL_STATS, ch) == [] and ch["node"] == "*", ch
        channel = eventually(lambda: _with_client(a, "/api/topics/sh_t/c"))
        assert missing(CHANNEL_STATS | {"message"}, channel) == [], channel.keys()
        [client] = channel["clients"]
        assert missing(CLIENT_STATS, client) == [], client.keys()
        assert client["node"] == cluster.b1.node and client["client_id"] == "shape-client"
        assert isinstance(client["connected"], int)
        nodes = a.get("/api/nodes")
        assert nodes["message"] == ""
        for n in nodes["nodes"]:
            assert missing(PRODUCER, n) == [], n
            assert all(set(t) == {"topic", "tombstoned"} for t in n["topics"]), n
        node = a.get("/api/nodes/" + q(cluster.b1.node))
        assert missing({"node", "topics", "total_messages", "total_clients", "message"},
                       node) == [], node.keys()
        [nt] = [x for x in node["topics"] if x["topic_name"] == "sh_t"]
        assert missing(TOPIC_STATS, nt) == [] and nt["node"] == cluster.b1.node
        assert node["total_clients"] >= 1
        counter = a.get("/api/counter")
        key = "sh_t:c:%s" % cluster.b1.node
        assert counter["message"] == "" and key in counter["stats"], counter
        assert counter["stats"][key] == {"node": cluster.b1.node, "topic_name": "sh_t",
                                         "channel_name": "c",
                                         "message_count": cluster.b1.channel_stats(
                                             "sh_t", "c")["message_count"]}
    finally:
        consumer.close()
    # answers as nsqadmin's RespondV1 writes them
    r = a.call("POST", "/api/topics/sh_t/c", {"action": "pause"})
    assert (r.status, r.body) == (200, b'{"message":""}'), r
    assert r.headers.get("X-NSQ-Content-Type") == "nsq; version=1.0", r.headers
    assert_json_type(r, "an action")
    a.act("POST", "/api/topics/sh_t/c", {"action": "unpause"})
    r = a.call("GET", "/api/topics/sh_never")
    assert r.json() == {"message": "TOPIC_NOT_FOUND"} and r.status == 404, r
    assert r.headers.get("X-NSQ-Content-Type") == "nsq; version=1.0", r.headers


def _with_client(admin, path):
    data = admin.get(path)
    assert data["clients"], data
    return data


def test_inactive_topics_as_nsqadmin(cluster):
    """`?inactive=true`: the lookups' topics no producer has, with their channels."""
    r = request("POST", "http://%s/channel/create?topic=in_t&channel=ic"
                % cluster.lookup.http_address)
    assert r.status == 200, r
    data = cluster.admin.get("/api/topics?inactive=true")
    assert data["topics"].get("in_t") == ["ic"], data
    assert data["message"] == ""
    assert all(t["topic_name"] not in data["topics"] for t in cluster.b1.stats()["topics"]), data


def test_actions_and_upstream_calls_are_logged(cluster, start_admin):
    """As nsqadmin logs every upstream call (clusterinfo's `CI: querying ...`), admin-ui logs
    each request it sends at info, and each action it takes with who asked."""
    admin = start_admin(lookups=[cluster.lookup.http_address])
    r = admin.act("POST", "/api/topics", {"topic": "logged_t", "channel": "logged_c"})
    assert r.status == 200, r
    admin.get("/api/nodes")
    want = [
        "action done",
        "action=create_channel",
        "topic=\"logged_t\"",
        "querying POST http://%s/topic/create?topic=logged_t" % cluster.lookup.http_address,
        "querying GET http://%s/nodes" % cluster.lookup.http_address,
    ]
    text = ""
    for _ in range(50):
        text = admin.stderr(limit=200000)
        if all(w in text for w in want):
            break
        time.sleep(0.1)
    missing = [w for w in want if w not in text]
    assert not missing, (missing, text[-3000:])
