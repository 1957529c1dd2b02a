"""A broker that serves its HTTP API over HTTPS only, for admin-ui's TLS tests, and the
certificates it needs.

- `make_certs(dir)`: with the `openssl` CLI, a test CA, a server certificate it signs for
  127.0.0.1 / localhost, a client certificate it signs (CN admin-ui-client), and a second,
  untrusted CA with a server certificate of its own.
- `FakeTlsBroker`: nsqd with --tls-required as admin-ui sees it: a plain HTTP listener that
  answers every request `403 {"message": "TLS_REQUIRED", "https_port": N}` (nsqd's words), and
  an HTTPS listener (Python's http.server wrapped in `ssl`) serving /ping, /info and
  /stats?format=json from a fixture whose clients carry nsqd's TLS, compression and auth
  fields, and recording every request (method, path, the client certificate's CN).
  `require_client_cert=True` makes the HTTPS side demand a certificate signed by the test CA.
- `StalledTlsBroker`: the same 403, pointing at a port that accepts connections and never says
  a word (a handshake that does not finish).
- `FakeLookup`: a plain-HTTP lookup whose /nodes lists given producers.
- `TlsHook`: an HTTPS notification endpoint that keeps the JSON bodies POSTed to it.

Everything listens on 127.0.0.1 with ephemeral ports; `close()` stops it.
"""

import json
import os
import socket
import ssl
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TOPIC = "tls_t"
CHANNEL = "tls_c"
VERSION = "1.3.0"

# The clients of TOPIC/CHANNEL, as nsqd's /stats reports them.
CLIENTS = [
    {"client_id": "tls-deflate-authed", "hostname": "secure-host", "version": "V2",
     "remote_address": "10.0.0.1:40001", "state": 3, "ready_count": 5, "in_flight_count": 1,
     "message_count": 7, "finish_count": 6, "requeue_count": 0, "connect_ts": 1795000000,
     "sample_rate": 0, "deflate": True, "snappy": False, "user_agent": "pynsq/0.9.1",
     "authed": True, "auth_identity": "alice",
     "auth_identity_url": "https://auth.example/users/alice",
     "tls": True, "tls_cipher_suite": "TLS_AES_128_GCM_SHA256", "tls_version": "TLS1.3",
     "tls_negotiated_protocol": "", "tls_negotiated_protocol_is_mutual": False,
     "topology_zone": "", "topology_region": ""},
    {"client_id": "snappy-plain", "hostname": "plain-host", "version": "V2",
     "remote_address": "10.0.0.2:40002", "state": 3, "ready_count": 1, "in_flight_count": 0,
     "message_count": 2, "finish_count": 2, "requeue_count": 0, "connect_ts": 1795000001,
     "sample_rate": 0, "deflate": False, "snappy": True, "user_agent": "go-nsq/1.1.0",
     "tls": False, "tls_cipher_suite": "", "tls_version": "", "tls_negotiated_protocol": "",
     "tls_negotiated_protocol_is_mutual": False, "topology_zone": "", "topology_region": ""},
    {"client_id": "authed-bad-url", "hostname": "odd-host", "version": "V2",
     "remote_address": "10.0.0.3:40003", "state": 3, "ready_count": 0, "in_flight_count": 0,
     "message_count": 0, "finish_count": 0, "requeue_count": 0, "connect_ts": 1795000002,
     "sample_rate": 0, "deflate": False, "snappy": False, "user_agent": "nsqjs/0.13.0",
     "authed": True, "auth_identity": "mallory", "auth_identity_url": "javascript:alert(1)",
     "tls": True, "tls_cipher_suite": "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
     "tls_version": "TLS1.2", "tls_negotiated_protocol": "",
     "tls_negotiated_protocol_is_mutual": False, "topology_zone": "", "topology_region": ""},
]


def stats_fixture(start_time):
    channel = {"channel_name": CHANNEL, "depth": 2, "backend_depth": 0, "in_flight_count": 1,
               "deferred_count": 0, "message_count": 9, "requeue_count": 0,
               "timeout_count": 0, "client_count": len(CLIENTS), "clients": CLIENTS,
               "paused": False, "e2e_processing_latency": None}
    topic = {"topic_name": TOPIC, "channels": [channel], "depth": 2, "backend_depth": 0,
             "message_count": 9, "message_bytes": 90, "paused": False,
             "e2e_processing_latency": None}
    return {"version": VERSION, "health": "OK", "start_time": start_time, "topics": [topic],
            "memory": {}, "producers": []}


# ---- certificates ---------------------------------------------------------------------------

def _openssl(args, cwd):
    try:
        r = subprocess.run(["openssl"] + args, cwd=cwd, capture_output=True, timeout=30)
    except FileNotFoundError:
        raise RuntimeError("the admin-ui TLS tests need the openssl command (Debian package "
                           "openssl; tests/run.sh installs it)")
    if r.returncode != 0:
        raise RuntimeError("openssl %s failed: %s" % (" ".join(args),
                                                      r.stderr.decode(errors="replace")))


def _ca(cwd, name):
    _openssl(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
              "-keyout", name + ".key", "-out", name + ".pem", "-days", "2",
              "-subj", "/CN=" + name, "-addext", "basicConstraints=critical,CA:TRUE",
              "-addext", "keyUsage=critical,keyCertSign,cRLSign"], cwd)


def _leaf(cwd, ca, name, cn, ext):
    with open(os.path.join(cwd, name + ".ext"), "w") as f:
        f.write(ext)
    _openssl(["req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
              "-keyout", name + ".key", "-out", name + ".csr", "-subj", "/CN=" + cn], cwd)
    _openssl(["x509", "-req", "-in", name + ".csr", "-CA", ca + ".pem", "-CAkey", ca + ".key",
              "-CAcreateserial", "-out", name + ".pem", "-days", "2",
              "-extfile", name + ".ext"], cwd)


SERVER_EXT = ("subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n"
              "keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n")
CLIENT_EXT = ("basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n"
              "extendedKeyUsage=clientAuth\n")


class Certs:
    """Paths of the PEM files made in `dir`."""

    def __init__(self, dir):
        self.dir = dir
        _ca(dir, "ca")
        _leaf(dir, "ca", "server", "127.0.0.1", SERVER_EXT)
        _leaf(dir, "ca", "client", "admin-ui-client", CLIENT_EXT)
        _ca(dir, "other-ca")
        _leaf(dir, "other-ca", "untrusted", "127.0.0.1", SERVER_EXT)

    def path(self, name):
        return os.path.join(self.dir, name)

    @property
    def ca(self):
        return self.path("ca.pem")


# ---- servers --------------------------------------------------------------------------------

class _Quiet(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        # A refused handshake (admin-ui without the client certificate, say) is expected.
        self.owner.errors.append(repr(sys.exc_info()[1]))


def _serve(server):
    t = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                         daemon=True)
    t.start()
    return t


class _TlsRequiredHandler(BaseHTTPRequestHandler):
    """nsqd's plain HTTP listener with --tls-required: 403 and the HTTPS port, for anything."""
    protocol_version = "HTTP/1.1"

    def _answer(self):
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        self.server.owner.plain_requests.append((self.command, self.path))
        body = json.dumps({"message": "TLS_REQUIRED",
                           "https_port": self.server.owner.https_port}).encode()
        self.send_response(403)
        self.send_header("X-NSQ-Content-Type", "nsq; version=1.0")
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer

    def log_message(self, *args):
        pass


class _ApiHandler(BaseHTTPRequestHandler):
    """The HTTPS side: the broker's API from the fixture."""
    protocol_version = "HTTP/1.1"

    def _json(self, status, value):
        body = json.dumps(value).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _record(self):
        peer = self.connection.getpeercert() if hasattr(self.connection, "getpeercert") else None
        cn = None
        for rdn in (peer or {}).get("subject", ()):
            for key, value in rdn:
                if key == "commonName":
                    cn = value
        self.server.owner.requests.append((self.command, self.path, cn))

    def do_GET(self):
        self._record()
        owner = self.server.owner
        path = self.path.split("?", 1)[0]
        if path == "/ping":
            body = b"OK"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        elif path == "/info":
            self._json(200, {"version": VERSION, "broadcast_address": "127.0.0.1",
                             "hostname": "fake-tls-broker", "http_port": owner.plain_port,
                             "tcp_port": 4150, "start_time": owner.start_time})
        elif path == "/stats":
            self._json(200, stats_fixture(owner.start_time))
        else:
            self._json(404, {"message": "NOT_FOUND"})

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        self._record()
        self._json(200, {})

    def log_message(self, *args):
        pass


class FakeTlsBroker:
    def __init__(self, certs, cert="server", require_client_cert=False):
        self.requests = []        # (method, path, client certificate CN) over HTTPS
        self.plain_requests = []  # (method, path) refused in the clear
        self.errors = []          # failed HTTPS connections (handshakes refused)
        self.start_time = 1795000000
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(certs.path(cert + ".pem"), certs.path(cert + ".key"))
        if require_client_cert:
            ctx.verify_mode = ssl.CERT_REQUIRED
            ctx.load_verify_locations(certs.ca)
        self.https = _Quiet(("127.0.0.1", 0), _ApiHandler)
        self.https.owner = self
        # The handshake happens in each connection's thread, on its first read, so that a
        # client stuck in it never holds up the accept loop.
        self.https.socket = ctx.wrap_socket(self.https.socket, server_side=True,
                                            do_handshake_on_connect=False)
        self.https_port = self.https.server_address[1]
        self.plain = _Quiet(("127.0.0.1", 0), _TlsRequiredHandler)
        self.plain.owner = self
        self.plain_port = self.plain.server_address[1]
        self._threads = [_serve(self.https), _serve(self.plain)]

    @property
    def node(self):
        """admin-ui's name of it: the plain HTTP address (what lookups report)."""
        return "127.0.0.1:%d" % self.plain_port

    def close(self):
        for s in (self.https, self.plain):
            s.shutdown()
            s.server_close()


class StalledTlsBroker:
    """The plain side says TLS is required; the HTTPS port accepts and never answers."""

    def __init__(self):
        self.plain_requests = []
        self.errors = []
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.https_port = self.listener.getsockname()[1]
        self.held = []
        self._stop = False
        threading.Thread(target=self._accept, daemon=True).start()
        self.plain = _Quiet(("127.0.0.1", 0), _TlsRequiredHandler)
        self.plain.owner = self
        self.plain_port = self.plain.server_address[1]
        _serve(self.plain)

    def _accept(self):
        while not self._stop:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.held.append(conn)

    @property
    def node(self):
        return "127.0.0.1:%d" % self.plain_port

    def close(self):
        self._stop = True
        self.plain.shutdown()
        self.plain.server_close()
        self.listener.close()
        for c in self.held:
            c.close()


class _LookupHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        owner = self.server.owner
        path = self.path.split("?", 1)[0]
        if path == "/nodes":
            value = {"producers": owner.producers}
        elif path == "/topics":
            value = {"topics": sorted({t for p in owner.producers for t in p["topics"]})}
        elif path == "/channels":
            value = {"channels": [CHANNEL]}
        else:
            value = {"message": "NOT_FOUND"}
        body = json.dumps(value).encode()
        self.send_response(200 if "message" not in value else 404)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


class FakeLookup:
    """A lookup whose /nodes lists `brokers` (FakeTlsBroker) as producers of TOPIC, by their
    plain HTTP port, as nsqlookupd lists an nsqd that requires TLS."""

    def __init__(self, brokers):
        self.errors = []
        self.producers = [
            {"remote_address": "127.0.0.1:1", "hostname": "fake-tls-broker",
             "broadcast_address": "127.0.0.1", "tcp_port": 4150, "http_port": b.plain_port,
             "version": VERSION, "tombstones": [False], "topics": [TOPIC]} for b in brokers]
        self.server = _Quiet(("127.0.0.1", 0), _LookupHandler)
        self.server.owner = self
        self.http_address = "127.0.0.1:%d" % self.server.server_address[1]
        _serve(self.server)

    def close(self):
        self.server.shutdown()
        self.server.server_close()


class _HookHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        self.server.owner.received.append((self.path, json.loads(self.rfile.read(n))))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


class TlsHook:
    """`--notification-http-endpoint=https://...`: the server certificate from the test CA."""

    def __init__(self, certs):
        self.received = []
        self.errors = []
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(certs.path("server.pem"), certs.path("server.key"))
        self.server = _Quiet(("127.0.0.1", 0), _HookHandler)
        self.server.owner = self
        self.server.socket = ctx.wrap_socket(self.server.socket, server_side=True,
                                             do_handshake_on_connect=False)
        self.url = "https://127.0.0.1:%d/hook?from=admin" % self.server.server_address[1]
        _serve(self.server)

    def close(self):
        self.server.shutdown()
        self.server.server_close()
