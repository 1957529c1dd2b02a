"""admin-ui and brokers that serve their HTTP API over HTTPS only (nsqd's --tls-required), through
admin-ui's JSON API, with nsqadmin's --http-client-tls-* flags.

The broker is `fakebroker.FakeTlsBroker`: its plain port answers nsqd's `403 TLS_REQUIRED` with
the HTTPS port, its HTTPS port (Python's http.server in `ssl`, certificates made with the
openssl CLI) serves a /stats whose clients carry nsqd's TLS, compression and auth fields.
Checked: admin-ui follows the 403 to HTTPS (for reads, through a lookup too, and for
actions) and shows each client's tls / tls_version / tls_cipher_suite / snappy / deflate /
authed / auth_identity / auth_identity_url; a certificate it does not trust, a client
certificate it lacks, a handshake that never ends are each a warning saying why, answered
without hanging; --http-client-tls-insecure-skip-verify and --http-client-tls-cert/-key do what
nsqadmin's do; bad flags stop admin-ui at start-up with nsqadmin's words. One test runs the
real broker with --tls-required and a TLS consumer (skipped, saying why, while the broker does
not take --tls-required / --https-address).
"""

import json
import ssl
import subprocess

import adminlib
from adminlib import Broker, eventually, q
from nsqwire import Conn
from fakebroker import (CHANNEL, CLIENTS, TOPIC, FakeLookup, FakeTlsBroker, StalledTlsBroker,
                        TlsHook)


def by_id(clients):
    return {c["client_id"]: c for c in clients}


def assert_client_fields(clients, node):
    got = by_id(clients)
    assert set(got) == {c["client_id"] for c in CLIENTS}, clients
    for want in CLIENTS:
        c = got[want["client_id"]]
        assert c["node"] == node, c
        for key in ("tls", "tls_version", "tls_cipher_suite", "tls_negotiated_protocol",
                    "tls_negotiated_protocol_is_mutual", "snappy", "deflate", "hostname",
                    "remote_address", "user_agent", "ready_count", "connect_ts"):
            assert c[key] == want[key], (want["client_id"], key, c)
        for key, empty in (("authed", False), ("auth_identity", ""), ("auth_identity_url", "")):
            assert c[key] == want.get(key, empty), (want["client_id"], key, c)


def test_https_only_broker_is_read_over_tls(certs, fakes, start_admin):
    b = fakes(FakeTlsBroker, certs)
    admin = start_admin(nsqds=[b.node], extra=["--http-client-tls-root-ca-file=" + certs.ca])
    topics = admin.get("/api/topics")
    assert topics == {"topics": [TOPIC], "message": "", "warnings": []}, topics
    ch = admin.get("/api/topics/%s/%s" % (TOPIC, CHANNEL))
    assert ch["warnings"] == [], ch["warnings"]
    assert ch["client_count"] == len(CLIENTS) and ch["message_count"] == 9, ch
    assert_client_fields(ch["clients"], b.node)
    node = admin.get("/api/nodes/" + q(b.node))
    assert node["warnings"] == [] and node["version"] == "1.3.0", node
    [topic] = node["topics"]
    [channel] = topic["channels"]
    assert_client_fields(channel["clients"], b.node)
    nodes = admin.get("/api/nodes")
    assert [n["node"] for n in nodes["nodes"]] == [b.node] and nodes["warnings"] == [], nodes
    assert nodes["nodes"][0]["hostname"] == "fake-tls-broker"
    # every read went to the plain port first (refused), then over TLS
    paths = [p.split("?")[0] for _, p, _ in b.requests]
    assert "/stats" in paths and "/info" in paths, b.requests
    assert len(b.plain_requests) == len(b.requests), (b.plain_requests, b.requests)


def test_lookup_producer_that_requires_tls_is_read_over_tls(certs, fakes, start_admin):
    b = fakes(FakeTlsBroker, certs)
    lookup = fakes(FakeLookup, [b])
    admin = start_admin(lookups=[lookup.http_address],
                        extra=["--http-client-tls-root-ca-file=" + certs.ca])
    ch = admin.get("/api/topics/%s/%s" % (TOPIC, CHANNEL))
    assert ch["warnings"] == [], ch["warnings"]
    assert [n["node"] for n in ch["nodes"]] == [b.node], ch["nodes"]
    assert_client_fields(ch["clients"], b.node)


def test_actions_reach_an_https_only_broker(certs, fakes, start_admin):
    b = fakes(FakeTlsBroker, certs)
    admin = start_admin(nsqds=[b.node], extra=["--http-client-tls-root-ca-file=" + certs.ca])
    admin.act("POST", "/api/topics/" + TOPIC, {"action": "pause"})
    admin.act("POST", "/api/topics/%s/%s" % (TOPIC, CHANNEL), {"action": "empty"})
    posts = [p for m, p, _ in b.requests if m == "POST"]
    assert posts == ["/topic/pause?topic=%s" % TOPIC,
                     "/channel/empty?topic=%s&channel=%s" % (TOPIC, CHANNEL)], b.requests


def test_https_notification_endpoint(certs, fakes, start_admin):
    """An https:// --notification-http-endpoint is sent over TLS with the same settings; the
    notification's url says https when a proxy in front says so in X-Scheme (as nsqadmin)."""
    b = fakes(FakeTlsBroker, certs)
    hook = fakes(TlsHook, certs)
    admin = start_admin(nsqds=[b.node], extra=["--http-client-tls-root-ca-file=" + certs.ca,
                                               "--notification-http-endpoint=" + hook.url])
    r = admin.call("POST", "/api/topics/" + TOPIC, {"action": "pause"},
                   headers={"X-Scheme": "https", "Host": "admin.example:443"})
    assert r.status == 200, r
    adminlib.wait_until(lambda: hook.received, "the notification at the https endpoint")
    [(path, body)] = hook.received
    assert path == "/hook?from=admin", path
    assert (body["action"], body["topic"]) == ("pause_topic", TOPIC), body
    assert body["url"] == "https://admin.example:443/api/topics/" + TOPIC, body


def test_untrusted_certificate_is_a_clear_warning(certs, fakes, start_admin):
    b = fakes(FakeTlsBroker, certs, cert="untrusted")
    # trusting only the test CA: the broker's certificate comes from another one
    admin = start_admin(nsqds=[b.node], extra=["--http-client-tls-root-ca-file=" + certs.ca])
    topics = admin.get("/api/topics")
    assert topics["topics"] == [], topics
    [warning] = topics["warnings"]
    assert warning.startswith("GET https://127.0.0.1:%d/info: TLS handshake failed: "
                              % b.https_port), warning
    assert "invalid peer certificate" in warning, warning
    assert "--http-client-tls-root-ca-file" in warning, warning
    # a node that cannot be read: nsqadmin's 502 UPSTREAM_ERROR, saying why
    r = admin.call("GET", "/api/nodes/" + q(b.node))
    assert r.status == 502, r
    assert r.json()["message"].startswith("UPSTREAM_ERROR: "), r.body
    assert "invalid peer certificate" in r.json()["message"], r.body
    # nothing was asked over the connection that failed
    assert b.requests == [], b.requests
    # the system's roots do not know the test CA either
    admin2 = start_admin(nsqds=[b.node])
    assert "invalid peer certificate" in admin2.get("/api/topics")["warnings"][0]
    # an action when no broker can be asked: 502 UPSTREAM_ERROR at once
    r = admin.call("POST", "/api/topics/" + TOPIC, {"action": "pause"})
    assert r.status == 502 and "invalid peer certificate" in r.json()["message"], r


def test_insecure_skip_verify_accepts_any_certificate(certs, fakes, start_admin):
    b = fakes(FakeTlsBroker, certs, cert="untrusted")
    for flag in ("--http-client-tls-insecure-skip-verify",
                 "--http-client-tls-insecure-skip-verify=true"):
        admin = start_admin(nsqds=[b.node], extra=[flag])
        ch = admin.get("/api/topics/%s/%s" % (TOPIC, CHANNEL))
        assert ch["warnings"] == [], (flag, ch["warnings"])
        assert_client_fields(ch["clients"], b.node)
    off = start_admin(nsqds=[b.node], extra=["--http-client-tls-insecure-skip-verify=false",
                                             "--http-client-tls-root-ca-file=" + certs.ca])
    assert "invalid peer certificate" in off.get("/api/topics")["warnings"][0]


def test_client_certificate_for_a_broker_that_requires_one(certs, fakes, start_admin):
    b = fakes(FakeTlsBroker, certs, require_client_cert=True)
    # The rates sampler is off: its rounds would add requests while the second admin-ui is
    # checked below.
    admin = start_admin(nsqds=[b.node], extra=[
        "--sample-interval=0",
        "--http-client-tls-root-ca-file=" + certs.ca,
        "--http-client-tls-cert=" + certs.path("client.pem"),
        "--http-client-tls-key=" + certs.path("client.key")])
    ch = admin.get("/api/topics/%s/%s" % (TOPIC, CHANNEL))
    assert ch["warnings"] == [], ch["warnings"]
    assert b.requests and all(cn == "admin-ui-client" for _, _, cn in b.requests), b.requests
    # without a client certificate the broker refuses the session, and the warning says so
    seen = len(b.requests)
    without = start_admin(nsqds=[b.node], extra=["--sample-interval=0",
                                                 "--http-client-tls-root-ca-file=" + certs.ca])
    topics = without.get("/api/topics")
    assert topics["topics"] == [], topics
    [warning] = topics["warnings"]
    assert warning.startswith("GET https://127.0.0.1:%d/info: " % b.https_port), warning
    assert "--http-client-tls-cert" in warning, warning
    assert len(b.requests) == seen, b.requests[seen:]


def test_stalled_handshake_is_a_warning_not_a_hang(fakes, start_admin):
    b = fakes(StalledTlsBroker)
    admin = start_admin(nsqds=[b.node], extra=["--http-client-request-timeout=500ms"])
    r = admin.call("GET", "/api/topics")
    assert r.status == 200, r
    [warning] = r.json()["warnings"]
    assert warning == ("GET https://127.0.0.1:%d/info: TLS handshake failed: timed out: "
                       "nothing for 500ms" % b.https_port), warning
    # nsqadmin's default, 5s, when not given
    admin = start_admin(nsqds=[b.node])
    [warning] = admin.get("/api/topics")["warnings"]
    assert warning.endswith("TLS handshake failed: timed out: nothing for 5s"), warning


def _start_fails(args):
    r = subprocess.run([adminlib.admin_bin(), "--http-address=127.0.0.1:0",
                        "--nsqd-http-address=127.0.0.1:1"] + args,
                       capture_output=True, timeout=20)
    assert r.returncode != 0, (args, r)
    return r.stderr.decode(errors="replace")


def test_bad_tls_flags_stop_admin_ui_at_start_up(certs, tmp_path):
    err = _start_fails(["--http-client-tls-root-ca-file=/nonexistent/ca.pem"])
    assert "failed to read TLS root CA file /nonexistent/ca.pem" in err, err
    junk = tmp_path / "junk.pem"
    junk.write_text("no certificate here\n")
    err = _start_fails(["--http-client-tls-root-ca-file=%s" % junk])
    assert "failed to AppendCertsFromPEM" in err, err
    err = _start_fails(["--http-client-tls-cert=" + certs.path("client.pem")])
    assert "--http-client-tls-key must be specified with --http-client-tls-cert" in err, err
    err = _start_fails(["--http-client-tls-key=" + certs.path("client.key")])
    assert "--http-client-tls-cert must be specified with --http-client-tls-key" in err, err
    err = _start_fails(["--http-client-tls-cert=" + certs.path("client.pem"),
                        "--http-client-tls-key=" + certs.path("server.key")])
    assert "failed to LoadX509KeyPair" in err, err


def test_real_broker_requiring_tls(certs, start_admin):
    """The broker itself with --tls-required: admin-ui reads it over HTTPS and shows a TLS
    consumer's state from its /stats."""
    b = Broker(["--tls-cert=" + certs.path("server.pem"), "--tls-key=" + certs.path("server.key"),
                "--https-address=127.0.0.1:0", "--tls-required=true"])
    try:
        b.start()
    except Exception:
        b.cleanup()
        raise
    conn = None
    try:
        r = adminlib.request("GET", b.url("/stats?format=json"))
        assert r.status == 403 and r.json()["message"] == "TLS_REQUIRED", r
        assert r.json()["https_port"] > 0, r
        conn = Conn(("127.0.0.1", b.tcp_port))
        answer = json.loads(conn.identify(feature_negotiation=True, tls_v1=True,
                                          client_id="real-tls-consumer", hostname="tls-host",
                                          user_agent="admin-tests/1.0"))
        assert answer["tls_v1"] is True, answer
        conn.sock = ssl.create_default_context(cafile=certs.ca).wrap_socket(
            conn.sock, server_hostname="127.0.0.1")
        conn.expect_ok("OK after the TLS upgrade")
        conn.sub("real_tls", "c")
        admin = start_admin(nsqds=[b.node], extra=["--http-client-tls-root-ca-file=" + certs.ca])

        def check():
            ch = admin.get("/api/topics/real_tls/c")
            assert ch["warnings"] == [], ch["warnings"]
            [client] = ch["clients"]
            assert client["client_id"] == "real-tls-consumer" and client["tls"] is True, client
            assert client["tls_version"] in ("TLS1.2", "TLS1.3"), client
            assert client["tls_cipher_suite"], client
            assert client["snappy"] is False and client["deflate"] is False, client
        eventually(check)
    finally:
        if conn is not None:
            conn.close()
        crashed = b.stop()
        b.cleanup()
        assert not crashed, "the broker died during the test"
