"""TLS, snappy and deflate on TCP connections: pynsq and gnsq negotiate each (and TLS with each
compression), publish and consume 1,000 messages, and /stats shows what they negotiated;
client certificates (`require-verify`), `--tls-required`, and bad input (a garbage handshake,
a client stopping mid-handshake, corrupt snappy and deflate streams, a decompression bomb),
each of which closes that connection while the broker serves others.

Certificates are made once per session (`certs`, conftest.py; tlscerts.py): a CA, a server
certificate for 127.0.0.1 signed by it, a client certificate signed by it, and a self-signed
client certificate the broker must not take.
"""

import asyncio
import json
import os
import shutil
import signal
import socket
import ssl
import struct
import subprocess
import tempfile
import time
import zlib

import gevent
import gnsq
import nsq
import pytest
import snappy

from aio import run, until
from brokerhttp import http
from nsqwire import Conn, FRAME_ERROR, FRAME_RESPONSE, cmd_bytes, wait_for
from procstat import rss_kib
from tlscerts import client_context, identify_tls, tls_flags

MESSAGES = 1000


# ---- raw connections ------------------------------------------------------------------------

def serves_plain_client(broker, topic="still_serving"):
    with Conn(broker.addr) as c:
        c.identify()
        c.pub(topic, b"alive")
    return True


def client_stats(broker, topic=None):
    """Every client in /stats: producers (of `topic`) and consumers (of its channels)."""
    status, body = http(broker, "GET", "/stats?format=json")
    assert status == 200
    doc = json.loads(body)
    clients = [p for p in doc.get("producers") or []
               if topic is None or any(c["topic"] == topic for c in p.get("pub_counts", []))]
    for t in doc["topics"] or []:
        if topic is not None and t["topic_name"] != topic:
            continue
        for ch in t["channels"]:
            clients.extend(ch["clients"] or [])
    return clients


# ---- pynsq and gnsq with every mode -----------------------------------------------------------

MODES = {
    "tls": dict(tls_v1=True),
    "snappy": dict(snappy=True),
    "deflate": dict(deflate=True, deflate_level=5),
    "tls_snappy": dict(tls_v1=True, snappy=True),
    "tls_deflate": dict(tls_v1=True, deflate=True, deflate_level=5),
}


def expected_flags(mode):
    return {"tls": "tls" in mode, "snappy": "snappy" in mode, "deflate": "deflate" in mode}


def check_stats(broker, topic, mode, user_agent_part, roles):
    """Every client of ours in /stats shows the negotiated flags (a producer and a consumer)."""
    want = expected_flags(mode)
    ours = [c for c in client_stats(broker, topic) if user_agent_part in c["user_agent"]]
    assert len(ours) >= roles, ours
    for c in ours:
        got = {k: c[k] for k in want}
        assert got == want, (mode, c)
        if want["tls"]:
            assert c["tls_version"] in ("TLS1.2", "TLS1.3"), c
            assert c["tls_cipher_suite"], c
            assert c["tls_negotiated_protocol"] == "", c
            assert c["tls_negotiated_protocol_is_mutual"] is True, c
        else:
            assert c["tls_version"] == "" and c["tls_cipher_suite"] == "", c


@pytest.fixture(scope="module")
def tls_broker(module_brokers, certs):
    return module_brokers.start(*tls_flags(certs))


@pytest.mark.parametrize("mode", sorted(MODES))
def test_pynsq_publishes_and_consumes_in_each_mode(tls_broker, certs, mode):
    broker = tls_broker
    topic = "pynsq_" + mode
    opts = dict(MODES[mode])
    if opts.get("tls_v1"):
        opts["tls_options"] = {"ca_certs": certs.ca}
    got = []

    def handler(msg):
        got.append(msg.body)
        return True

    async def scenario():
        w = nsq.Writer([broker.tcp_address], reconnect_interval=60.0, **opts)
        await until(lambda: any(c.connected() for c in w.conns.values()), 10, "Writer")
        answers = []
        for i in range(MESSAGES):
            w.pub(topic, b"m%d" % i, callback=lambda conn, data: answers.append(data))
            if i % 100 == 99:
                await until(lambda: len(answers) == i + 1, 20, "publish answers")
        assert all(a == b"OK" for a in answers), [a for a in answers if a != b"OK"][:3]
        r = nsq.Reader(topic=topic, channel="c", message_handler=handler,
                       nsqd_tcp_addresses=[broker.tcp_address], lookupd_poll_interval=60,
                       max_in_flight=100, **opts)
        await until(lambda: len(got) >= MESSAGES, 30, "%d messages" % MESSAGES)
        check_stats(broker, topic, mode, "pynsq", 2)
        for c in list(w.conns.values()):
            c.close()
        r.close()

    run(scenario)
    assert sorted(got) == sorted(b"m%d" % i for i in range(MESSAGES))


def gwait(pred, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        gevent.sleep(0.02)
    raise AssertionError("timed out after %.1fs waiting for %s" % (timeout, what))


@pytest.mark.parametrize("mode", sorted(MODES))
def test_gnsq_publishes_and_consumes_in_each_mode(tls_broker, certs, mode):
    """gnsq's Consumer, and its NsqdTCPClient to publish: gnsq 1.0.2's Producer cannot take an
    upgrade (the OK after TLS or a compression reaches its response handler while it is still
    identifying, a KeyError; nsqd sends the same OK)."""
    broker = tls_broker
    topic = "gnsq_" + mode
    opts = dict(MODES[mode])
    if opts.get("tls_v1"):
        opts["tls_options"] = {"ca_certs": certs.ca, "cert_reqs": ssl.CERT_REQUIRED}
    got = []

    def handler(consumer, message):
        got.append(message.body)

    p = gnsq.NsqdTCPClient(broker.host, broker.port, **opts)
    c = gnsq.Consumer(topic, "c", nsqd_tcp_addresses=[broker.tcp_address], max_in_flight=100,
                      message_handler=handler, **opts)
    try:
        p.connect()
        p.identify()
        for start in range(0, MESSAGES, 100):
            p.multipublish(topic, [b"m%d" % i for i in range(start, start + 100)])
            p.check_ok()
        c.start(block=False)
        gwait(lambda: len(got) >= MESSAGES, 30, "%d messages" % MESSAGES)
        check_stats(broker, topic, mode, "gnsq", 2)
    finally:
        c.close()
        p.close_stream()
        gevent.sleep(0.1)
    assert sorted(got) == sorted(b"m%d" % i for i in range(MESSAGES))


# ---- client certificates and --tls-required ---------------------------------------------------

def refused(fn):
    """True when the TLS connection fails in the handshake or at its first read."""
    try:
        c = fn()
    except (ssl.SSLError, ConnectionError, OSError):
        return True
    try:
        c.pub("never", b"x")
    except (ssl.SSLError, ConnectionError, OSError, AssertionError):
        return True
    finally:
        c.close()
    return False


def test_require_verify_takes_only_a_certificate_from_the_ca(start_broker, certs):
    broker = start_broker(*tls_flags(certs, "--tls-client-auth-policy=require-verify",
                                     "--tls-root-ca-file=" + certs.ca))
    assert refused(lambda: identify_tls(broker, client_context(certs)))
    assert refused(lambda: identify_tls(broker, client_context(certs, "rogue")))
    with identify_tls(broker, client_context(certs, "valid")) as c:
        c.pub("verified", b"hello")
    # Without TLS at all: the policy implies --tls-required.
    with Conn(broker.addr) as c:
        c.identify()
        c.cmd("PUB verified", b"x")
        assert c.read_frame() == (FRAME_ERROR, b"E_INVALID cannot PUB in current state (TLS required)")
        assert c.wait_closed()


def test_require_takes_any_certificate(start_broker, certs):
    broker = start_broker(*tls_flags(certs, "--tls-client-auth-policy=require"))
    assert refused(lambda: identify_tls(broker, client_context(certs)))
    with identify_tls(broker, client_context(certs, "rogue")) as c:
        c.pub("any_cert", b"hello")


def test_tls_required_refuses_plaintext_commands_with_nsqds_error(start_broker, certs):
    broker = start_broker(*tls_flags(certs, "--tls-required"))
    for line, body in [("PUB t", b"x"), ("SUB t c", None), ("NOP", None), ("BOGUS x", None)]:
        with Conn(broker.addr) as c:
            c.cmd(line, body)
            name = line.split(" ")[0]
            assert c.read_frame() == (
                FRAME_ERROR, ("E_INVALID cannot %s in current state (TLS required)" % name).encode())
            assert c.wait_closed()
    # Refused on its line alone: a PUB whose body never comes is answered all the same.
    with Conn(broker.addr) as c:
        c.send(b"PUB t\n")
        assert c.read_frame()[0] == FRAME_ERROR
    # IDENTIFY is allowed, and TLS then opens everything.
    with identify_tls(broker, client_context(certs)) as c:
        c.pub("tls_required", b"hello")
        c.sub("tls_required", "c", rdy=1)
        assert c.read_message().body == b"hello"


def test_tls_not_offered_without_a_certificate(broker):
    with Conn(broker.addr) as c:
        resp = json.loads(c.identify(feature_negotiation=True, tls_v1=True, snappy=True))
        assert resp["tls_v1"] is False and resp["snappy"] is True


def test_both_compressions_at_once_is_refused(tls_broker):
    with Conn(tls_broker.addr) as c:
        c.cmd("IDENTIFY", json.dumps(dict(feature_negotiation=True, snappy=True,
                                          deflate=True)).encode())
        assert c.read_frame() == (
            FRAME_ERROR, b"E_IDENTIFY_FAILED cannot enable both deflate and snappy compression")
        assert c.wait_closed()


def test_tls_min_version_13_refuses_a_tls12_client(start_broker, certs):
    broker = start_broker(*tls_flags(certs, "--tls-min-version=tls1.3"))
    ctx = client_context(certs)
    ctx.maximum_version = ssl.TLSVersion.TLSv1_2
    assert refused(lambda: identify_tls(broker, ctx))
    with identify_tls(broker, client_context(certs)) as c:
        c.pub("tls13", b"x")
        (ours,) = [s for s in client_stats(broker, "tls13") if s["tls"]]
        assert ours["tls_version"] == "TLS1.3"
        # nsqd names only a few TLS 1.2 suites; TLS 1.3's are "Unknown <number>" there too.
        assert ours["tls_cipher_suite"].startswith("Unknown "), ours


def start_fails(*flags):
    """Runs the broker with `flags`, which must refuse to start: (exit status, stderr)."""
    from conftest import broker_bin
    d = tempfile.mkdtemp(prefix="broker-tls-start-")
    try:
        p = subprocess.run([broker_bin(), "--tcp-address=127.0.0.1:0", "--http-address=127.0.0.1:0",
                            "--data-path=" + d] + list(flags),
                           stdin=subprocess.DEVNULL, capture_output=True, timeout=20)
    finally:
        shutil.rmtree(d, ignore_errors=True)
    return p.returncode, p.stderr.decode("utf-8", "replace")


def test_unusable_certificate_is_a_start_up_error(certs):
    code, err = start_fails("--tls-cert=/nonexistent/cert.pem", "--tls-key=" + certs.server_key)
    assert code == 1 and "--tls-cert" in err and "/nonexistent/cert.pem" in err, err
    code, err = start_fails("--tls-cert=" + certs.server, "--tls-key=" + certs.ca)
    assert code == 1 and "--tls-key" in err, err
    code, err = start_fails(*tls_flags(certs, "--tls-client-auth-policy=require-verify"))
    assert code == 1 and "--tls-root-ca-file" in err, err
    code, err = start_fails("--tls-required")
    assert code == 2 and "without TLS key and cert" in err, err


def test_sighup_reloads_the_certificate_for_new_connections(start_broker, certs):
    """Beyond nsqd: SIGHUP reads the certificate and key again; new connections get the new
    one, connections already up keep working, and files that do not load change nothing."""
    d = tempfile.mkdtemp(prefix="broker-tls-reload-")
    cert, key = os.path.join(d, "cert.pem"), os.path.join(d, "key.pem")
    shutil.copy(certs.server, cert)
    shutil.copy(certs.server_key, key)
    broker = start_broker("--tls-cert=" + cert, "--tls-key=" + key, "--https-address=127.0.0.1:0")

    def served():
        with identify_tls(broker, client_context(certs)) as c:
            return c.sock.getpeercert(binary_form=True)

    def der(path):
        with open(path) as f:
            return ssl.PEM_cert_to_DER_cert(f.read())

    try:
        assert served() == der(certs.server)
        with identify_tls(broker, client_context(certs)) as old:
            with open(cert, "w") as f:
                f.write("not a certificate")
            broker.proc.send_signal(signal.SIGHUP)
            wait_for(lambda: "certificate not reloaded" in broker.stderr(), 10,
                     what="the failed reload in the log")
            assert served() == der(certs.server)
            shutil.copy(certs.server2, cert)
            shutil.copy(certs.server2_key, key)
            broker.proc.send_signal(signal.SIGHUP)
            wait_for(lambda: served() == der(certs.server2), 10, what="the new certificate")
            old.pub("reloaded", b"the old connection still works")
        assert broker.alive()
    finally:
        shutil.rmtree(d, ignore_errors=True)


# ---- bad input ---------------------------------------------------------------------------------

def identify_plain(broker, **fields):
    """IDENTIFY on a raw socket; returns (conn, json answer)."""
    c = Conn(broker.addr)
    resp = json.loads(c.identify(feature_negotiation=True, **fields))
    return c, resp


def test_garbage_handshake_closes_that_connection(tls_broker):
    c, resp = identify_plain(tls_broker, tls_v1=True)
    with c:
        assert resp["tls_v1"]
        c.send(os.urandom(4096))
        assert c.wait_closed(10)
    assert serves_plain_client(tls_broker)


def test_client_stopping_mid_handshake_is_closed(tls_broker, certs):
    c, resp = identify_plain(tls_broker, tls_v1=True)
    with c:
        incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        tls = client_context(certs).wrap_bio(incoming, outgoing, server_hostname="127.0.0.1")
        with pytest.raises(ssl.SSLWantReadError):
            tls.do_handshake()
        hello = outgoing.read()
        c.send(hello[: len(hello) // 2])
        # Others are served meanwhile; this one is closed by the handshake deadline.
        assert serves_plain_client(tls_broker)
        assert c.wait_closed(20)
    assert serves_plain_client(tls_broker)


def test_corrupt_snappy_stream_closes_that_connection(tls_broker):
    c, resp = identify_plain(tls_broker, snappy=True)
    with c:
        assert resp["snappy"]
        good = snappy.StreamCompressor().compress(cmd_bytes("PUB snappy_bad", b"x"))
        bad = bytearray(good)
        bad[-1] ^= 0xFF  # the chunk's data no longer matches its checksum
        c.send(bytes(bad))
        assert c.wait_closed(10)
    c, resp = identify_plain(tls_broker, snappy=True)
    with c:
        c.send(b"\x05\x01\x00\x00X")  # a reserved unskippable chunk type
        assert c.wait_closed(10)
    assert serves_plain_client(tls_broker)


def test_corrupt_deflate_stream_closes_that_connection(tls_broker):
    c, resp = identify_plain(tls_broker, deflate=True)
    with c:
        assert resp["deflate"]
        c.send(b"\xff" * 64)
        assert c.wait_closed(10)
    assert serves_plain_client(tls_broker)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["zeros", "huge_body"])
def test_deflate_bomb_is_cut_off_and_closes_that_connection(tls_broker, kind):
    """1 GiB of plaintext in about a megabyte: the broker decodes only what the command limits
    allow, then closes; its memory does not grow by anything like the bomb."""
    comp = zlib.compressobj(9, zlib.DEFLATED, -15)
    if kind == "zeros":
        head = b""
    else:
        # A valid PUB line, then a body size past --max-msg-size, then zeros.
        head = b"PUB bomb\n" + struct.pack(">I", 1 << 30)
    parts = [comp.compress(head)]
    chunk = bytes(64 << 20)
    for _ in range(16):
        parts.append(comp.compress(chunk))
    parts.append(comp.flush(zlib.Z_SYNC_FLUSH))
    bomb = b"".join(parts)
    assert len(bomb) < 4 << 20
    before = rss_kib(tls_broker.proc.pid)
    c, resp = identify_plain(tls_broker, deflate=True)
    with c:
        try:
            c.send(bomb)
        except (BrokenPipeError, ConnectionResetError):
            pass
        assert c.wait_closed(20)
    after = rss_kib(tls_broker.proc.pid)
    assert after - before < 64 * 1024, "RSS grew from %d to %d KiB" % (before, after)
    assert serves_plain_client(tls_broker)


def test_snappy_stream_with_an_identifier_before_every_write(tls_broker):
    """pynsq starts every write with snappy's stream identifier: taken as the format allows."""
    c, resp = identify_plain(tls_broker, snappy=True)
    with c:
        for i in range(3):
            c.send(snappy.StreamCompressor().compress(cmd_bytes("PUB snappy_ids", b"%d" % i)))
        # The answers come back snappy-framed: the OK of the upgrade, then one per PUB.
        dec = snappy.StreamDecompressor()
        plain = b""
        deadline = time.monotonic() + 10
        want = 4 * (8 + 2)
        while len(plain) < want and time.monotonic() < deadline:
            c.sock.settimeout(max(0.01, deadline - time.monotonic()))
            data = bytes(c.buf) + c.sock.recv(65536)
            c.buf.clear()
            plain += dec.decompress(data)
        frames = []
        while plain:
            size, ftype = struct.unpack(">II", plain[:8])
            frames.append((ftype, plain[8:4 + size]))
            plain = plain[4 + size:]
        assert frames == [(FRAME_RESPONSE, b"OK")] * 4, frames
