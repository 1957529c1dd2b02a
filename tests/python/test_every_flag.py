"""Every flag of nsqd 1.3 and nsqlookupd 1.3, given at once, in Go's `-flag=value` form and in
the `--flag value` form, plus a config file whose keys the flags override: the binaries start,
and each option reads back as given through `GET /config/:opt` (nsqd's names and types:
durations in nanoseconds, `tls_required` and `tls_min_version` as nsqd's numbers), or, for
nsqlookupd, through what its IDENTIFY answer and listeners show.

nsqd's flag list is apps/nsqd/options.go of v1.3.0; `--version` and `--config` alone are tested
in test_config_file.py, the unix-socket forms of the two addresses in their own tests.
"""

import json
import os
import socket
import struct
import subprocess
import time

import pytest

from brokerhttp import config_value, http
from conftest import REPO, free_port, port_accepts

SEC = 10**9
MS = 10**6


def nsqd_flags(certs, statsd_port):
    """(flag, value, config key, expected /config value); value None: a bare boolean flag."""
    return [
        ("log-level", "debug", "log_level", 1),
        ("log-prefix", "[b] ", "log_prefix", "[b] "),
        ("verbose", None, None, None),
        ("node-id", "42", "id", 42),
        ("worker-id", None, None, None),
        ("tcp-address", "127.0.0.1:0", None, None),
        ("http-address", "127.0.0.1:0", None, None),
        ("auth-http-address", "127.0.0.1:1", "auth_http_addresses", ["127.0.0.1:1"]),
        ("auth-http-request-method", "post", "auth_http_request_method", "post"),
        ("broadcast-address", "b.example", "broadcast_address", "b.example"),
        ("broadcast-tcp-port", "1234", "broadcast_tcp_port", 1234),
        ("broadcast-http-port", "1235", "broadcast_http_port", 1235),
        ("lookupd-tcp-address", "127.0.0.1:1", "nsqlookupd_tcp_addresses", ["127.0.0.1:1"]),
        ("http-client-connect-timeout", "3s", "http_client_connect_timeout", 3 * SEC),
        ("http-client-request-timeout", "7s", "http_client_request_timeout", 7 * SEC),
        ("topology-region", "r1", "topology_region", "r1"),
        ("topology-zone", "z1", "topology_zone", "z1"),
        ("mem-queue-size", "77", "mem_queue_size", 77),
        ("max-bytes-per-file", "1048576", "max_bytes_per_file", 1048576),
        ("sync-every", "11", "sync_every", 11),
        ("sync-timeout", "3s", "sync_timeout", 3 * SEC),
        ("queue-scan-worker-pool-max", "5", "queue_scan_worker_pool_max", 5),
        ("queue-scan-selection-count", "6", "queue_scan_selection_count", 6),
        ("msg-timeout", "61s", "msg_timeout", 61 * SEC),
        ("max-msg-timeout", "16m", "max_msg_timeout", 16 * 60 * SEC),
        ("max-msg-size", "2048", "max_msg_size", 2048),
        ("max-req-timeout", "2h", "max_req_timeout", 7200 * SEC),
        ("max-body-size", "8192", "max_body_size", 8192),
        ("max-heartbeat-interval", "61s", "max_heartbeat_interval", 61 * SEC),
        ("max-rdy-count", "300", "max_rdy_count", 300),
        ("max-output-buffer-size", "70000", "max_output_buffer_size", 70000),
        ("max-output-buffer-timeout", "31s", "max_output_buffer_timeout", 31 * SEC),
        ("min-output-buffer-timeout", "26ms", "min_output_buffer_timeout", 26 * MS),
        ("output-buffer-timeout", "251ms", "output_buffer_timeout", 251 * MS),
        ("max-channel-consumers", "9", "max_channel_consumers", 9),
        ("statsd-address", "127.0.0.1:%d" % statsd_port, "statsd_address",
         "127.0.0.1:%d" % statsd_port),
        ("statsd-interval", "5s", "statsd_interval", 5 * SEC),
        ("statsd-mem-stats", "false", "statsd_mem_stats", False),
        ("statsd-prefix", "p.%s", "statsd_prefix", "p.%s"),
        ("statsd-udp-packet-size", "600", "statsd_udp_packet_size", 600),
        ("statsd-exclude-ephemeral", None, "statsd_exclude_ephemeral", True),
        # Repeatable and comma separated, as nsqd.
        ("e2e-processing-latency-percentile", "0.99,0.5", None, None),
        ("e2e-processing-latency-percentile", "1.0", "e2e_processing_latency_percentiles",
         [0.99, 0.5, 1.0]),
        ("e2e-processing-latency-window-time", "5m", "e2e_processing_latency_window_time",
         300 * SEC),
        ("https-address", "127.0.0.1:0", None, None),
        ("tls-cert", certs.server, "tls_cert", certs.server),
        ("tls-key", certs.server_key, "tls_key", certs.server_key),
        ("tls-client-auth-policy", "require-verify", "tls_client_auth_policy", "require-verify"),
        ("tls-root-ca-file", certs.ca, "tls_root_ca_file", certs.ca),
        # tcp-https, so that /config stays readable over plain HTTP (a client auth policy
        # implies `true` only when --tls-required is not given, as in nsqd).
        ("tls-required", "tcp-https", "tls_required", 1),
        ("tls-min-version", "tls1.3", "tls_min_version", 0x0304),
        ("deflate", "false", "deflate", False),
        ("max-deflate-level", "4", "max_deflate_level", 4),
        ("snappy", None, "snappy", True),
        ("enable-experiment", "topology-aware-consumption", "enable_experiment",
         ["topology-aware-consumption"]),
    ]


# Bool flags take `=value` only, in both forms (Go's flag package reads `-flag false` as the
# flag alone followed by an argument); so does --tls-required, a bool-like flag in nsqd.
EQUALS_ONLY = {"verbose", "worker-id", "statsd-mem-stats", "statsd-exclude-ephemeral",
               "tls-required", "deflate", "snappy"}


def command_line(flags, form):
    args = []
    for name, value, _, _ in flags:
        if value is None:
            args.append(("-%s" if form == "go" else "--%s") % name)
        elif form == "go":
            args.append("-%s=%s" % (name, value))
        elif name in EQUALS_ONLY:
            args.append("--%s=%s" % (name, value))
        else:
            args += ["--%s" % name, value]
    return args




@pytest.mark.parametrize("form", ["go", "gnu"])
def test_broker_takes_every_nsqd_flag(start_broker, certs, tmp_path, form):
    statsd = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    statsd.bind(("127.0.0.1", 0))
    try:
        flags = nsqd_flags(certs, statsd.getsockname()[1])
        # A config file under the flags: its keys are read, the flags win where both are given.
        cfg = tmp_path / "nsqd.cfg"
        cfg.write_text('max_rdy_count = 5\nmax_msg_size = 1000\n')
        config_flag = ["-config=%s" % cfg] if form == "go" else ["--config", str(cfg)]
        broker = start_broker(*(config_flag + command_line(flags, form)))
        for _, _, key, expected in flags:
            if key is not None:
                assert config_value(broker, key) == expected, key
        # Real ports were bound (0 given) and the broker takes a publish.
        status, body = http(broker, "POST", "/pub?topic=every_flag", b"x")
        assert (status, body) == (200, b"OK")
        log = broker.stderr()
        for flag in ("--log-prefix", "--verbose", "--worker-id", "--queue-scan-*",
                     "--topology-region/--topology-zone", "--enable-experiment"):
            assert "flag accepted without effect: %s" % flag in log, (flag, log)
    finally:
        statsd.close()


@pytest.mark.parametrize("form", ["go", "gnu"])
def test_broker_config_file_alone_gives_nsqd_defaults_elsewhere(start_broker, tmp_path, form):
    cfg = tmp_path / "nsqd.cfg"
    cfg.write_text('mem_queue_size = 3\nstatsd_prefix = "x.%s"\n')
    flag = ["-config=%s" % cfg] if form == "go" else ["--config", str(cfg)]
    broker = start_broker(*flag)
    assert config_value(broker, "mem_queue_size") == 3
    assert config_value(broker, "statsd_prefix") == "x.%s"
    # nsqd's defaults for what neither gives.
    assert config_value(broker, "log_prefix") == "[nsqd] "
    assert config_value(broker, "statsd_interval") == 60 * SEC
    assert config_value(broker, "statsd_udp_packet_size") == 508
    assert config_value(broker, "auth_http_request_method") == "get"
    assert config_value(broker, "tls_required") == 0
    assert config_value(broker, "snappy") is True
    assert config_value(broker, "deflate") is True
    assert config_value(broker, "max_deflate_level") == 6
    status, body = http(broker, "GET", "/config/no_such_option")
    assert status == 400 and json.loads(body) == {"message": "INVALID_OPTION"}


# ---- nsqlookupd -------------------------------------------------------------------------------

def lookup_bin():
    return os.environ.get("LOOKUP_BIN") or os.path.join(REPO, "target", "release", "lookup")


def lookup_identify(port):
    """nsqlookupd's IDENTIFY answer to a broker-like peer, as JSON."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        body = json.dumps({"broadcast_address": "127.0.0.1", "tcp_port": 1, "http_port": 2,
                           "version": "1.3.0"}).encode()
        s.sendall(b"  V1IDENTIFY\n" + struct.pack(">I", len(body)) + body)
        head = b""
        while len(head) < 4:
            chunk = s.recv(4 - len(head))
            assert chunk, "lookup closed the connection"
            head += chunk
        (size,) = struct.unpack(">I", head)
        data = b""
        while len(data) < size:
            chunk = s.recv(size - len(data))
            assert chunk, "lookup closed the connection"
            data += chunk
        return json.loads(data)


@pytest.mark.parametrize("form", ["go", "gnu"])
def test_lookup_takes_every_nsqlookupd_flag(tmp_path, form):
    tcp, http_port = free_port(), free_port()
    while http_port == tcp:
        http_port = free_port()
    cfg = tmp_path / "nsqlookupd.cfg"
    cfg.write_text('broadcast_address = "from.file"\ntombstone_lifetime = "10s"\n')
    flags = [
        ("config", str(cfg)),
        ("log-level", "debug"),
        ("log-prefix", "[l] "),
        ("verbose", None),
        ("tcp-address", "127.0.0.1:%d" % tcp),
        ("http-address", "127.0.0.1:%d" % http_port),
        ("broadcast-address", "l.example"),
        ("inactive-producer-timeout", "30s"),
        ("tombstone-lifetime", "20s"),
    ]
    args = []
    for name, value in flags:
        if value is None:
            args.append(("-%s" if form == "go" else "--%s") % name)
        elif form == "go":
            args.append("-%s=%s" % (name, value))
        else:
            args += ["--%s" % name, value]
    err = open(tmp_path / "lookup.stderr", "wb")
    proc = subprocess.Popen([lookup_bin()] + args, stdout=subprocess.DEVNULL, stderr=err,
                            stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while not (port_accepts("127.0.0.1", tcp) and port_accepts("127.0.0.1", http_port)):
            assert proc.poll() is None, (tmp_path / "lookup.stderr").read_text()
            assert time.monotonic() < deadline, "lookup did not listen"
            time.sleep(0.05)
        answer = lookup_identify(tcp)
        assert answer["broadcast_address"] == "l.example", answer
        assert (answer["tcp_port"], answer["http_port"]) == (tcp, http_port), answer
        log = (tmp_path / "lookup.stderr").read_text()
        assert "DEBUG" in log, "--log-level debug"
        for flag in ("--log-prefix", "--verbose"):
            assert "flag accepted without effect: %s" % flag in log, (flag, log)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        err.close()


def toml_value(v):
    return json.dumps(v) if not isinstance(v, bool) else ("true" if v else "false")


def test_broker_reads_a_config_file_with_every_nsqd_key(start_broker, certs, tmp_path):
    """Every key of nsqd's Options in one file (nsqd's cfg names, its TOML types: booleans for
    `tls_required`, an empty `tls_min_version`, integer milliseconds for durations), no flags
    besides the test's addresses and data path."""
    keys = {
        "log_level": "debug", "log_prefix": "[n] ", "id": 5,
        "broadcast_address": "c.example", "broadcast_tcp_port": 4000,
        "broadcast_http_port": 4001, "nsqlookupd_tcp_addresses": ["127.0.0.1:1"],
        "auth_http_addresses": ["127.0.0.1:2"], "auth_http_request_method": "get",
        "http_client_connect_timeout": "2s", "http_client_request_timeout": 5000,
        "topology_region": "", "topology_zone": "",
        "mem_queue_size": 12, "max_bytes_per_file": 104857600, "sync_every": 2500,
        "sync_timeout": "2s", "queue_scan_selection_count": 20, "queue_scan_worker_pool_max": 4,
        "msg_timeout": "60s", "max_msg_timeout": "15m", "max_msg_size": 1024768,
        "max_body_size": 5123840, "max_req_timeout": "1h", "max_heartbeat_interval": "60s",
        "max_rdy_count": 2500, "max_output_buffer_size": 65536,
        "max_output_buffer_timeout": "1s", "min_output_buffer_timeout": "25ms",
        "output_buffer_timeout": "250ms", "max_channel_consumers": 0,
        "statsd_address": "", "statsd_prefix": "nsq.%s", "statsd_interval": "60s",
        "statsd_mem_stats": True, "statsd_udp_packet_size": 508,
        "statsd_exclude_ephemeral": False,
        "e2e_processing_latency_percentiles": [1.0, 0.99, 0.95],
        "e2e_processing_latency_window_time": "10m",
        "https_address": "127.0.0.1:0", "tls_cert": certs.server,
        "tls_key": certs.server_key, "tls_client_auth_policy": "",
        "tls_root_ca_file": "", "tls_required": False, "tls_min_version": "",
        "deflate": True, "max_deflate_level": 6, "snappy": True, "enable_experiment": [],
        # nsqd's options without a flag (it reads them from no file either) and its flags
        # without an option: accepted, without effect (and, as nsqd, not in /config).
        "queue_scan_interval": "100ms", "queue_scan_refresh_interval": "5s",
        "queue_scan_dirty_percent": 0.25, "client_timeout": "60s", "verbose": False,
        "worker_id": False, "version": False, "config": "/etc/nsqd.cfg",
    }
    cfg = tmp_path / "nsqd.cfg"
    cfg.write_text("".join("%s = %s\n" % (k, toml_value(v)) for k, v in keys.items()))
    broker = start_broker("--config=%s" % cfg)
    expected = dict(keys, log_level=1, http_client_connect_timeout=2 * SEC,
                    http_client_request_timeout=5 * SEC, sync_timeout=2 * SEC,
                    msg_timeout=60 * SEC, max_msg_timeout=900 * SEC, max_req_timeout=3600 * SEC,
                    max_heartbeat_interval=60 * SEC, max_output_buffer_timeout=SEC,
                    min_output_buffer_timeout=25 * MS, output_buffer_timeout=250 * MS,
                    statsd_interval=60 * SEC, e2e_processing_latency_window_time=600 * SEC,
                    tls_required=0, tls_min_version=0x0303)
    # nsqd reports the address HTTPS is bound to: the real port for 0.
    del expected["https_address"]
    for key in ("queue_scan_interval", "queue_scan_refresh_interval", "queue_scan_dirty_percent",
                "client_timeout", "verbose", "worker_id", "version", "config"):
        del expected[key]
    assert config_value(broker, "https_address").startswith("127.0.0.1:")
    assert config_value(broker, "https_address") != "127.0.0.1:0"
    for key, value in expected.items():
        assert config_value(broker, key) == value, key
