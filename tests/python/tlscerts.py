"""TLS helpers the tests share: certificates made with the openssl command (a CA, two server
certificates for 127.0.0.1 signed by it, a client certificate signed by it with CN
`test-client`, and a self-signed client certificate `rogue` the broker must not take), the
broker's --tls-* flags for them, client contexts, and a raw connection upgraded to TLS.

The session fixture `certs` (conftest.py) makes them once per test session.
"""

import json
import os
import ssl
import subprocess

from nsqwire import Conn

CLIENT_CN = "test-client"
ROGUE_CN = "rogue"


def _openssl(*args, cwd):
    subprocess.run(["openssl"] + list(args), cwd=cwd, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


class Certs:
    def __init__(self, d):
        self.dir = d
        p = lambda name: os.path.join(d, name)  # noqa: E731
        self.ca, self.ca_key = p("ca.pem"), p("ca.key")
        self.server, self.server_key = p("server.pem"), p("server.key")
        self.server2, self.server2_key = p("server2.pem"), p("server2.key")
        self.client, self.client_key = p("client.pem"), p("client.key")
        self.rogue, self.rogue_key = p("rogue.pem"), p("rogue.key")


def make_certs(d):
    """Makes the certificates in directory `d` and returns their paths."""
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    _openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
             "-subj", "/CN=broker test CA", "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=d)
    for name, cn, ext in [
        ("server", "127.0.0.1", "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
                                "extendedKeyUsage=serverAuth\n"),
        ("server2", "127.0.0.1", "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
                                 "extendedKeyUsage=serverAuth\n"),
        ("client", CLIENT_CN, "extendedKeyUsage=clientAuth\n"),
    ]:
        _openssl("req", *ec, "-keyout", name + ".key", "-out", name + ".csr",
                 "-subj", "/CN=" + cn, cwd=d)
        with open(os.path.join(d, name + ".ext"), "w") as f:
            f.write("basicConstraints=CA:FALSE\n" + ext)
        _openssl("x509", "-req", "-in", name + ".csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                 "-CAcreateserial", "-out", name + ".pem", "-days", "2",
                 "-extfile", name + ".ext", cwd=d)
    _openssl("req", "-x509", *ec, "-keyout", "rogue.key", "-out", "rogue.pem", "-days", "2",
             "-subj", "/CN=" + ROGUE_CN, "-addext", "extendedKeyUsage=clientAuth", cwd=d)
    return Certs(d)


def tls_flags(certs, *extra):
    """A certificate and key; with them the broker also serves HTTPS (nsqd's default
    0.0.0.0:4152), here on a port of its own."""
    return ("--tls-cert=" + certs.server, "--tls-key=" + certs.server_key,
            "--https-address=127.0.0.1:0") + extra


def client_context(certs, with_cert=None):
    ctx = ssl.create_default_context(cafile=certs.ca)
    if with_cert == "valid":
        ctx.load_cert_chain(certs.client, certs.client_key)
    elif with_cert == "rogue":
        ctx.load_cert_chain(certs.rogue, certs.rogue_key)
    return ctx


def identify_tls(broker, ctx, **fields):
    """A raw connection that negotiated TLS: IDENTIFY, the handshake, then the OK through TLS."""
    c = Conn(broker.addr)
    resp = json.loads(c.identify(feature_negotiation=True, tls_v1=True, **fields))
    assert resp["tls_v1"] is True, resp
    assert not c.buf, "bytes after the IDENTIFY answer before the handshake: %r" % c.buf
    c.sock = ctx.wrap_socket(c.sock, server_hostname="127.0.0.1")
    c.expect_ok("OK after the TLS upgrade")
    return c
