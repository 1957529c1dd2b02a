"""AUTH against a real HTTP auth server started by the test (nsqd's auth protocol).

The auth server is Python's http.server in a thread, answering per secret; it records every
request it gets (method, path, query or JSON body) so the tests can count them and check what
the broker sent. The broker is started with --auth-http-address pointing at it.

What nsqd 1.3 does, and so must we: IDENTIFY says auth_required; PUB/MPUB/DPUB/SUB before AUTH
are E_AUTH_FIRST; AUTH asks the server (GET /auth?common_name=&remote_ip=&secret=&tls=, or POST
with the same values as JSON) and answers {"identity","identity_url","permission_count"};
commands outside the authorizations are E_UNAUTHORIZED; an answer is used for its ttl and asked
again when it expired; a server that is down, too slow or answers garbage gives E_AUTH_FAILED.
Over TLS, common_name is the subject common name of the client's certificate (empty without one).
"""

import asyncio
import json
import logging
import select
import socket
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import gevent
import gnsq
import nsq
import pytest

from aio import run, until
from brokerhttp import http
from conftest import Broker, free_port
from nsqwire import FRAME_ERROR, FRAME_RESPONSE, Conn, mpub_bytes, wait_for
from tlscerts import CLIENT_CN, ROGUE_CN, client_context, identify_tls, tls_flags

logging.getLogger("nsq").setLevel(logging.CRITICAL)
logging.getLogger("gnsq").setLevel(logging.CRITICAL)

ALICE_URL = "http://id.example/alice"
PUB_ORDERS = {"topic": "^orders$", "channels": [".*"], "permissions": ["publish"]}
SUB_BILLING = {"topic": "^orders$", "channels": ["^billing$"], "permissions": ["subscribe"]}


def grant(*authorizations, ttl=3600, identity="alice", identity_url=ALICE_URL):
    return {"ttl": ttl, "identity": identity, "identity_url": identity_url,
            "authorizations": list(authorizations)}


class AuthServer:
    """An auth server in a thread. `answers[secret]` is a dict (sent as JSON with 200) or a
    (status, body bytes) pair; an unknown secret gets 403. `hold(secret)` makes requests for
    that secret wait until `release(secret)` (at most 60 s)."""

    def __init__(self):
        self.answers = {}
        self.requests = []
        self.holds = {}
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                url = urllib.parse.urlsplit(self.path)
                values = urllib.parse.parse_qs(url.query, keep_blank_values=True)
                server._handle(self, "GET", url.path, values)

            def do_POST(self):
                url = urllib.parse.urlsplit(self.path)
                n = int(self.headers.get("Content-Length", "0"))
                raw = self.rfile.read(n)
                try:
                    values = json.loads(raw)
                except ValueError:
                    values = {"_raw": [raw.decode("latin-1")]}
                server._handle(self, "POST", url.path, values)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def address(self):
        return "127.0.0.1:%d" % self.httpd.server_address[1]

    def _handle(self, handler, method, path, values):
        secret = (values.get("secret") or [""])[0]
        with self.lock:
            self.requests.append({"method": method, "path": path, "values": values,
                                  "headers": dict(handler.headers), "secret": secret})
            hold = self.holds.get(secret)
        if hold is not None:
            hold.wait(60)
        with self.lock:
            answer = self.answers.get(secret, (403, b'{"message":"FORBIDDEN"}'))
        if isinstance(answer, dict):
            status, body = 200, json.dumps(answer).encode()
        else:
            status, body = answer
        try:
            handler.send_response(status)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(len(body)))
            handler.end_headers()
            handler.wfile.write(body)
        except OSError:
            pass  # the broker gave up on this request

    def count(self, secret):
        with self.lock:
            return sum(1 for r in self.requests if r["secret"] == secret)

    def hold(self, secret):
        with self.lock:
            self.holds[secret] = threading.Event()

    def release(self, secret):
        with self.lock:
            ev = self.holds.pop(secret, None)
        if ev is not None:
            ev.set()

    def close(self):
        with self.lock:
            holds = list(self.holds.values())
            self.holds.clear()
        for ev in holds:
            ev.set()
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def auth_server():
    s = AuthServer()
    s.answers["s1"] = grant(PUB_ORDERS, SUB_BILLING)
    s.answers["pub-only"] = grant(PUB_ORDERS, identity="producer", identity_url="")
    s.answers["sub-only"] = grant(SUB_BILLING, identity="consumer")
    yield s
    s.close()


def auth_broker(start_broker, server, *extra, shards=None):
    return start_broker("--auth-http-address=%s" % server.address, *extra, shards=shards)


def identify(c):
    data = c.identify(feature_negotiation=True, client_id="auth-test")
    return json.loads(data)


def auth(c, secret, timeout=None):
    """Sends AUTH and returns its (frame type, data)."""
    if isinstance(secret, str):
        secret = secret.encode()
    c.cmd("AUTH", secret)
    return c.read_frame(timeout=timeout)


def authed(broker, secret):
    c = Conn(broker.addr)
    assert identify(c)["auth_required"] is True
    ftype, data = auth(c, secret)
    assert ftype == FRAME_RESPONSE, data
    return c


def expect_fatal(c, data):
    ftype, got = c.read_frame()
    assert (ftype, got) == (FRAME_ERROR, data)
    assert c.wait_closed(), "connection left open after %r" % data


def nothing_readable(c):
    """True when no byte from the broker waits on `c` (looks, does not wait)."""
    if c.buf:
        return False
    readable, _, _ = select.select([c.sock], [], [], 0)
    return not readable


# ---- raw frames -----------------------------------------------------------------------------

def test_identify_says_auth_required_and_everything_gated_wants_auth_first(start_broker,
                                                                            auth_server):
    b = auth_broker(start_broker, auth_server)
    for line, body, verb in [
        ("PUB orders", b"x", "PUB"),
        (None, None, "MPUB"),
        ("DPUB orders 100", b"x", "DPUB"),
        ("SUB orders billing", None, "SUB"),
    ]:
        with Conn(b.addr) as c:
            assert identify(c)["auth_required"] is True
            if line is None:
                c.send(mpub_bytes("orders", [b"a", b"b"]))
            else:
                c.cmd(line, body)
            expect_fatal(c, b"E_AUTH_FIRST AUTH required before " + verb.encode())
    assert auth_server.requests == []


def test_without_auth_servers_auth_is_disabled(broker):
    with Conn(broker.addr) as c:
        assert identify(c)["auth_required"] is False
        c.cmd("AUTH", b"s1")
        expect_fatal(c, b"E_AUTH_DISABLED AUTH disabled")
    with Conn(broker.addr) as c:
        c.identify()
        c.pub("orders", b"no auth needed")


def test_auth_answers_nsqds_json_and_publish_is_allowed_per_topic(start_broker, auth_server):
    b = auth_broker(start_broker, auth_server)
    with Conn(b.addr) as c:
        identify(c)
        ftype, data = auth(c, "s1")
        assert ftype == FRAME_RESPONSE
        assert data == (b'{"identity":"alice","identity_url":"http://id.example/alice",'
                        b'"permission_count":2}')
        c.pub("orders", b"one")
        c.mpub("orders", [b"two", b"three"])
        c.dpub("orders", 10, b"four")
        c.cmd("PUB other", b"x")
        expect_fatal(c, b'E_UNAUTHORIZED AUTH failed for PUB on "other" ""')
    with authed(b, "s1") as c:
        c.send(mpub_bytes("orders2", [b"a"]))
        expect_fatal(c, b'E_UNAUTHORIZED AUTH failed for MPUB on "orders2" ""')
    with authed(b, "s1") as c:
        c.cmd("DPUB other 10", b"x")
        expect_fatal(c, b'E_UNAUTHORIZED AUTH failed for DPUB on "other" ""')
    # Subscribe permission only: publishing is refused.
    with authed(b, "sub-only") as c:
        c.cmd("PUB orders", b"x")
        expect_fatal(c, b'E_UNAUTHORIZED AUTH failed for PUB on "orders" ""')
    # One request per AUTH, with nsqd's query.
    assert auth_server.count("s1") == 3
    r = auth_server.requests[0]
    assert (r["method"], r["path"]) == ("GET", "/auth")
    assert r["values"] == {"common_name": [""], "remote_ip": ["127.0.0.1"], "secret": ["s1"],
                           "tls": ["false"]}
    assert r["headers"].get("Accept") == "application/vnd.nsq; version=1.0"


def test_subscribe_is_allowed_per_channel_regex(start_broker, auth_server):
    b = auth_broker(start_broker, auth_server)
    with authed(b, "s1") as c:
        c.cmd("SUB orders audit")
        expect_fatal(c, b'E_UNAUTHORIZED AUTH failed for SUB on "orders" "audit"')
    with authed(b, "s1") as c:
        c.cmd("SUB other billing")
        expect_fatal(c, b'E_UNAUTHORIZED AUTH failed for SUB on "other" "billing"')
    with authed(b, "pub-only") as c:
        c.cmd("SUB orders billing")
        expect_fatal(c, b'E_UNAUTHORIZED AUTH failed for SUB on "orders" "billing"')
    with authed(b, "sub-only") as consumer, authed(b, "pub-only") as producer:
        consumer.sub("orders", "billing", rdy=10)
        producer.pub("orders", b"invoice")
        m = consumer.read_message()
        assert m.body == b"invoice"
        consumer.fin(m.id)


def test_an_answer_without_authorizations_is_unauthorized(start_broker, auth_server):
    auth_server.answers["nobody"] = grant()
    auth_server.answers["null"] = {"ttl": 60, "authorizations": None}
    b = auth_broker(start_broker, auth_server)
    for secret in ("nobody", "null"):
        with Conn(b.addr) as c:
            identify(c)
            c.cmd("AUTH", secret.encode())
            expect_fatal(c, b"E_UNAUTHORIZED AUTH no authorizations found")


def test_auth_twice_is_invalid(start_broker, auth_server):
    b = auth_broker(start_broker, auth_server)
    with authed(b, "s1") as c:
        c.cmd("AUTH", b"s1")
        expect_fatal(c, b"E_INVALID AUTH already set")
    with authed(b, "s1") as c:
        c.sub("orders", "billing")
        c.cmd("AUTH", b"s1")
        expect_fatal(c, b"E_INVALID cannot AUTH in current state")


@pytest.mark.parametrize("answer", [
    (200, b"this is not json"),
    (200, b'{"ttl":60,"authorizations":[{"topic":".*"'),
    (500, b'{"ttl":60,"authorizations":[]}'),
    (403, b'{"message":"FORBIDDEN"}'),
    {"ttl": 0, "authorizations": [PUB_ORDERS]},
    {"authorizations": [PUB_ORDERS]},
    {"ttl": 60, "authorizations": [{"topic": ".*", "channels": [".*"], "permissions": ["all"]}]},
    {"ttl": 60, "authorizations": [{"topic": "(", "channels": [".*"], "permissions": ["publish"]}]},
    {"ttl": 60, "authorizations": [{"topic": ".*", "channels": ["["], "permissions": ["publish"]}]},
], ids=["not-json", "cut-json", "status-500", "status-403", "ttl-0", "no-ttl", "bad-permission",
        "bad-topic-regex", "bad-channel-regex"])
def test_a_bad_answer_fails_auth_and_the_broker_serves_on(start_broker, auth_server, answer):
    auth_server.answers["bad"] = answer
    b = auth_broker(start_broker, auth_server)
    with Conn(b.addr) as c:
        identify(c)
        c.cmd("AUTH", b"bad")
        expect_fatal(c, b"E_AUTH_FAILED AUTH failed")
    with authed(b, "s1") as c:
        c.pub("orders", b"still serving")
    assert b.alive()


def test_an_auth_server_that_is_down_fails_auth(start_broker):
    b = start_broker("--auth-http-address=127.0.0.1:%d" % free_port())
    with Conn(b.addr) as c:
        identify(c)
        c.cmd("AUTH", b"s1")
        expect_fatal(c, b"E_AUTH_FAILED AUTH failed")
    assert b.alive()


def test_servers_are_tried_in_turn_until_one_answers(start_broker, auth_server):
    down = "127.0.0.1:%d" % free_port()
    b = start_broker("--auth-http-address=%s" % down,
                     "--auth-http-address=%s" % auth_server.address)
    for _ in range(6):  # whichever server a connection starts with
        with authed(b, "s1") as c:
            c.pub("orders", b"x")
    assert auth_server.count("s1") == 6


def test_post_sends_the_values_as_json(start_broker, auth_server):
    b = auth_broker(start_broker, auth_server, "--auth-http-request-method=post")
    secret = "a b&c=d/\u00e9"
    auth_server.answers[secret] = grant(PUB_ORDERS)
    with authed(b, secret) as c:
        c.pub("orders", b"x")
    (r,) = auth_server.requests
    assert (r["method"], r["path"]) == ("POST", "/auth")
    assert r["headers"].get("Content-Type") == "application/json"
    assert r["values"] == {"common_name": [""], "remote_ip": ["127.0.0.1"], "secret": [secret],
                           "tls": ["false"]}


def test_get_escapes_the_secret(start_broker, auth_server):
    b = auth_broker(start_broker, auth_server)
    secret = "a b&c=d?e#f%20+\u00e9"
    auth_server.answers[secret] = grant(PUB_ORDERS)
    with authed(b, secret) as c:
        c.pub("orders", b"x")
    assert auth_server.requests[0]["values"]["secret"] == [secret]


def _auth_over_tls(broker, server, certs, with_cert):
    """AUTH over a TLS connection presenting `with_cert` ("valid", "rogue" or None); returns
    the values the auth server got."""
    before = len(server.requests)
    with identify_tls(broker, client_context(certs, with_cert)) as c:
        ftype, data = auth(c, "s1")
        assert ftype == FRAME_RESPONSE, data
        c.pub("orders", b"x")
    (r,) = server.requests[before:]
    return r["values"]


def test_the_client_certificates_common_name_goes_to_the_auth_server(start_broker, auth_server,
                                                                     certs):
    # nsqd sends the subject common name of the certificate the client presented, with
    # tls=true; each client here is a new connection, and each AUTH a new request.
    b = auth_broker(start_broker, auth_server,
                    *tls_flags(certs, "--tls-client-auth-policy=require-verify",
                               "--tls-root-ca-file=" + certs.ca))
    got = _auth_over_tls(b, auth_server, certs, "valid")
    assert (got["common_name"], got["tls"]) == ([CLIENT_CN], ["true"])
    # `require` takes any certificate; its common name goes along as well.
    b = auth_broker(start_broker, auth_server,
                    *tls_flags(certs, "--tls-client-auth-policy=require"))
    got = _auth_over_tls(b, auth_server, certs, "rogue")
    assert (got["common_name"], got["tls"]) == ([ROGUE_CN], ["true"])
    # POST carries it in the JSON body.
    b = auth_broker(start_broker, auth_server, "--auth-http-request-method=post",
                    *tls_flags(certs, "--tls-client-auth-policy=require"))
    got = _auth_over_tls(b, auth_server, certs, "valid")
    assert (got["common_name"], got["tls"]) == ([CLIENT_CN], ["true"])


def test_without_a_client_certificate_the_common_name_is_empty(start_broker, auth_server, certs):
    # As nsqd: TLS without a client certificate, or no TLS at all, sends common_name empty.
    b = auth_broker(start_broker, auth_server, *tls_flags(certs))
    got = _auth_over_tls(b, auth_server, certs, None)
    assert (got["common_name"], got["tls"]) == ([""], ["true"])
    before = len(auth_server.requests)
    with authed(b, "s1") as c:
        c.pub("orders", b"x")
    (r,) = auth_server.requests[before:]
    assert (r["values"]["common_name"], r["values"]["tls"]) == ([""], ["false"])


def test_a_full_url_is_used_as_given(start_broker, auth_server):
    b = start_broker("--auth-http-address=http://%s/v1/check" % auth_server.address)
    with authed(b, "s1") as c:
        c.pub("orders", b"x")
    assert auth_server.requests[0]["path"] == "/v1/check"


def test_the_answer_is_used_for_its_ttl_then_asked_again(start_broker, auth_server):
    b = auth_broker(start_broker, auth_server)
    # Within the ttl: one request, however many commands.
    with authed(b, "s1") as c:
        for i in range(20):
            c.pub("orders", b"%d" % i)
    assert auth_server.count("s1") == 1

    auth_server.answers["short"] = grant(PUB_ORDERS, ttl=1)
    with authed(b, "short") as c:
        c.pub("orders", b"first")
        n = auth_server.count("short")
        time.sleep(1.6)  # past the 1 s ttl
        c.pub("orders", b"after expiry")
        assert auth_server.count("short") == n + 1, "expired answer not asked again"
        # The server now refuses the topic: the next expiry takes the new answer.
        auth_server.answers["short"] = grant(
            {"topic": "^other$", "channels": [".*"], "permissions": ["publish"]}, ttl=1)
        time.sleep(1.6)
        c.cmd("PUB orders", b"refused now")
        expect_fatal(c, b'E_UNAUTHORIZED AUTH failed for PUB on "orders" ""')
    assert auth_server.count("short") == n + 2

    # An expired answer whose renewal fails: E_AUTH_FAILED, never access.
    auth_server.answers["flaky"] = grant(PUB_ORDERS, ttl=1)
    with authed(b, "flaky") as c:
        c.pub("orders", b"ok")
        auth_server.answers["flaky"] = (500, b"down for maintenance")
        time.sleep(1.6)
        c.cmd("PUB orders", b"x")
        expect_fatal(c, b"E_AUTH_FAILED AUTH failed")


def test_pipelined_publishes_are_answered_before_a_refusal(start_broker, auth_server):
    b = auth_broker(start_broker, auth_server)
    with authed(b, "s1") as c:
        c.send(b"".join(b"PUB orders\n" + len(b"m%d" % i).to_bytes(4, "big") + b"m%d" % i
                        for i in range(30)) + b"PUB other\n\x00\x00\x00\x01x")
        for i in range(30):
            c.expect_ok("PUB %d" % i)
        expect_fatal(c, b'E_UNAUTHORIZED AUTH failed for PUB on "other" ""')


def test_a_slow_auth_server_fails_auth_after_the_request_timeout(start_broker, auth_server):
    b = auth_broker(start_broker, auth_server, "--http-client-request-timeout=1s")
    auth_server.answers["slow"] = grant(PUB_ORDERS)
    auth_server.hold("slow")
    try:
        with Conn(b.addr) as c:
            identify(c)
            c.cmd("AUTH", b"slow")
            expect_fatal(c, b"E_AUTH_FAILED AUTH failed")
    finally:
        auth_server.release("slow")
    assert b.alive()


def test_the_shard_serves_other_clients_while_an_auth_request_waits(start_broker, auth_server):
    # One shard: the waiting AUTH and the other clients share its executor.
    b = auth_broker(start_broker, auth_server, "--http-client-request-timeout=60s", shards=1)
    auth_server.answers["slow"] = grant(PUB_ORDERS, identity="slowpoke")
    auth_server.hold("slow")
    try:
        with Conn(b.addr) as waiting:
            identify(waiting)
            waiting.cmd("AUTH", b"slow")
            wait_for(lambda: auth_server.count("slow") == 1, 10, what="the AUTH request")
            # Meanwhile: other clients authenticate, publish and consume on the same shard.
            with authed(b, "sub-only") as consumer, authed(b, "pub-only") as producer:
                consumer.sub("orders", "billing", rdy=100)
                for i in range(50):
                    producer.pub("orders", b"m%d" % i)
                got = consumer.read_messages(50)
                for m in got:
                    consumer.fin(m.id)
                assert sorted(m.body for m in got) == sorted(b"m%d" % i for i in range(50))
                status, _ = http(b, "GET", "/ping")
                assert status == 200
            # ...all while the AUTH still waits for its server.
            assert nothing_readable(waiting), "AUTH answered before its server did"
            assert auth_server.count("slow") == 1
            auth_server.release("slow")
            ftype, data = waiting.read_frame()
            assert ftype == FRAME_RESPONSE
            assert json.loads(data) == {"identity": "slowpoke", "identity_url": ALICE_URL,
                                        "permission_count": 1}
            waiting.pub("orders", b"finally")
    finally:
        auth_server.release("slow")


def test_a_clean_stop_does_not_wait_for_a_pending_auth_request(shards, tmp_path, auth_server):
    # Started here, not by start_broker (which reports a broker gone before teardown).
    b = Broker(shards, ["--auth-http-address=%s" % auth_server.address,
                        "--http-client-request-timeout=60s"], str(tmp_path)).start()
    auth_server.hold("slow")
    try:
        with Conn(b.addr) as c:
            identify(c)
            c.cmd("AUTH", b"slow")
            wait_for(lambda: auth_server.count("slow") == 1, 10, what="the AUTH request")
            # SIGTERM; Broker.stop() SIGKILLs after its grace, which would show as -9.
            assert b.stop() == 0
            ftype, data = c.read_frame()
            assert (ftype, data) == (FRAME_ERROR, b"E_AUTH_FAILED AUTH failed")
    finally:
        auth_server.release("slow")
        b.stop()


def test_stats_show_each_clients_auth_state(start_broker, auth_server):
    b = auth_broker(start_broker, auth_server)
    with authed(b, "sub-only") as consumer, authed(b, "s1") as producer:
        consumer.sub("orders", "billing")
        producer.pub("orders", b"x")
        status, body = http(b, "GET", "/stats?format=json")
        assert status == 200
        doc = json.loads(body)
    (p,) = doc["producers"]
    assert (p["authed"], p["auth_identity"], p["auth_identity_url"]) == (True, "alice", ALICE_URL)
    keys = list(p)
    assert keys.index("user_agent") < keys.index("authed") < keys.index("pub_counts")
    (topic,) = [t for t in doc["topics"] if t["topic_name"] == "orders"]
    (ch,) = topic["channels"]
    (cl,) = ch["clients"]
    assert cl["authed"] is True
    assert cl["auth_identity"] == "consumer"
    assert cl["auth_identity_url"] == ALICE_URL


def test_stats_leave_auth_keys_out_without_auth(broker):
    with Conn(broker.addr) as c:
        c.identify()
        c.pub("plain", b"x")
        status, body = http(broker, "GET", "/stats?format=json")
    (p,) = json.loads(body)["producers"]
    assert "authed" not in p and "auth_identity" not in p and "auth_identity_url" not in p


# ---- real clients ---------------------------------------------------------------------------

def test_pynsq_publishes_and_consumes_with_auth_secret(start_broker, auth_server):
    b = auth_broker(start_broker, auth_server)
    got = []
    answers = {}

    def handler(msg):
        got.append(msg.body)
        return True

    async def scenario():
        r = nsq.Reader(topic="orders", channel="billing", message_handler=handler,
                       nsqd_tcp_addresses=[b.tcp_address], lookupd_poll_interval=60,
                       max_in_flight=10, auth_secret="sub-only")
        await until(lambda: any(c.connected() for c in r.conns.values()), 10, "Reader")
        w = nsq.Writer([b.tcp_address], reconnect_interval=60.0, auth_secret="pub-only")
        await until(lambda: any(c.connected() for c in w.conns.values()), 10, "Writer")
        for i in range(20):
            fut = asyncio.get_running_loop().create_future()
            w.pub("orders", b"p%d" % i, callback=lambda conn, data, f=fut: f.done() or
                  f.set_result(data))
            answers[i] = await asyncio.wait_for(fut, 10)
        await until(lambda: len(got) >= 20, 15, "20 messages")
        # A topic outside the authorizations: the broker refuses it.
        fut = asyncio.get_running_loop().create_future()
        w.pub("other", b"x", callback=lambda conn, data: fut.done() or fut.set_result(data))
        answers["other"] = await asyncio.wait_for(fut, 10)
        r.close()
        for c in list(w.conns.values()):
            c.close()

    run(scenario)
    assert all(answers[i] == b"OK" for i in range(20)), answers
    assert sorted(got) == sorted(b"p%d" % i for i in range(20))
    assert "E_UNAUTHORIZED" in str(answers["other"]), answers["other"]
    assert auth_server.count("sub-only") >= 1 and auth_server.count("pub-only") >= 1


def gwait(pred, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        gevent.sleep(0.02)
    raise AssertionError("timed out after %.1fs waiting for %s" % (timeout, what))


def test_gnsq_publishes_and_consumes_with_auth_secret(start_broker, auth_server):
    b = auth_broker(start_broker, auth_server)
    got = []
    c = gnsq.Consumer("orders", "billing", nsqd_tcp_addresses=[b.tcp_address],
                      message_handler=lambda consumer, message: got.append(message.body),
                      max_in_flight=10, auth_secret=b"sub-only")
    p = gnsq.Producer(nsqd_tcp_addresses=[b.tcp_address], auth_secret=b"pub-only")
    try:
        c.start(block=False)
        gwait(lambda: len(c._connections) > 0, 10, "consumer connection")
        p.start()
        for i in range(20):
            p.publish("orders", b"g%d" % i)
        gwait(lambda: len(got) >= 20, 15, "20 messages")
        with pytest.raises(gnsq.errors.NSQUnauthorized):
            p.publish("other", b"x")
    finally:
        for item in (p, c):
            try:
                item.close()
                item.join(timeout=2)
            except Exception:
                pass
    assert sorted(got) == sorted(b"g%d" % i for i in range(20))


def test_gnsq_without_a_secret_gets_auth_first(start_broker, auth_server):
    b = auth_broker(start_broker, auth_server)
    p = gnsq.Producer(nsqd_tcp_addresses=[b.tcp_address])
    try:
        p.start()
        with pytest.raises(gnsq.errors.NSQErrorCode) as e:
            p.publish("orders", b"x")
        # gnsq has no class for E_AUTH_FIRST: the generic one, with nsqd's text.
        assert e.value.args == (b"AUTH required before PUB",)
    finally:
        try:
            p.close()
            p.join(timeout=2)
        except Exception:
            pass


def test_auth_with_an_unresolvable_name_fails_auth(start_broker):
    b = start_broker("--auth-http-address=no-such-host.invalid:4181")
    with Conn(b.addr) as c:
        identify(c)
        c.cmd("AUTH", b"s1")
        expect_fatal(c, b"E_AUTH_FAILED AUTH failed")


def test_an_auth_server_that_never_answers_headers_is_cut_at_the_timeout(start_broker):
    # A server that accepts and reads but never answers (not an HTTP server at all).
    lsock = socket.socket()
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(8)
    try:
        b = start_broker("--auth-http-address=127.0.0.1:%d" % lsock.getsockname()[1],
                         "--http-client-request-timeout=1s")
        with Conn(b.addr) as c:
            identify(c)
            c.cmd("AUTH", b"s1")
            expect_fatal(c, b"E_AUTH_FAILED AUTH failed")
    finally:
        lsock.close()
