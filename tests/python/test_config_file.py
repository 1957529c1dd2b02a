"""`--config FILE`: nsqd's and nsqlookupd's TOML config files, read unchanged; flags given on
the command line win over the file; an unknown key or a wrong value stops start-up with the
file, the line and the key named.
"""

import json
import os
import subprocess
import urllib.request

import pytest

from brokerhttp import config_value, http
from conftest import broker_bin

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

# The keys of nsqd's contrib/nsqd.cfg.example the broker has, in that file's forms (durations
# as strings and as integer milliseconds, lists for repeatable flags, nsqd's renamed keys).
NSQD_CFG = """
## log verbosity level: debug, info, warn, error, or fatal
log_level = "debug"
id = 7
nsqlookupd_tcp_addresses = [
    "127.0.0.1:1",
    "127.0.0.1:2"
]
mem_queue_size = 5
max_bytes_per_file = 104857600
sync_every = 2500
sync_timeout = "2s"
msg_timeout = 30000
max_msg_timeout = "15m"
max_msg_size = 1000
max_req_timeout = "1h"
max_body_size = 5123840
max_heartbeat_interval = "60s"
max_rdy_count = 2500
max_output_buffer_size = 65536
max_output_buffer_timeout = "1s"
statsd_prefix = "nsq.%s"
statsd_interval = "60s"
statsd_mem_stats = true
e2e_processing_latency_percentiles = [
    1.0,
    0.99,
    0.95
]
e2e_processing_latency_window_time = "10m"
deflate = true
max_deflate_level = 6
snappy = true
log_prefix = "[nsqd] "
"""




def test_nsqd_config_file_with_overriding_flags(start_broker, tmp_path):
    cfg = tmp_path / "nsqd.cfg"
    cfg.write_text(NSQD_CFG)
    broker = start_broker("--config=%s" % cfg, "-max-msg-size=2000", "--mem-queue-size", "9")
    assert config_value(broker, "id") == 7
    assert config_value(broker, "nsqlookupd_tcp_addresses") == ["127.0.0.1:1", "127.0.0.1:2"]
    assert config_value(broker, "msg_timeout") == 30 * 10**9, "an integer duration is ms"
    assert config_value(broker, "e2e_processing_latency_percentiles") == [1.0, 0.99, 0.95]
    assert config_value(broker, "log_level") == 1, "debug"
    # The command line wins, in Go's -flag=value form and in --flag value form.
    assert config_value(broker, "max_msg_size") == 2000
    assert config_value(broker, "mem_queue_size") == 9


# nsqd 1.3's keys that stand for no broker flag: its options without a flag, its flags
# without an option (nsqd reads none of them from the file).
KEYS_WITHOUT_A_FLAG = """
mem_queue_size = 5
queue_scan_interval = "100ms"
queue_scan_refresh_interval = "5s"
queue_scan_dirty_percent = 0.25
client_timeout = 60000
version = false
config = "/etc/nsqd.cfg"
"""


def test_nsqd_keys_without_a_flag_are_accepted_and_logged(start_broker, tmp_path):
    cfg = tmp_path / "nsqd.cfg"
    cfg.write_text(KEYS_WITHOUT_A_FLAG)
    broker = start_broker("--config=%s" % cfg)
    assert config_value(broker, "mem_queue_size") == 5, "the file's other keys are read"
    log = broker.stderr()
    for key in ("queue_scan_interval", "queue_scan_refresh_interval", "queue_scan_dirty_percent",
                "client_timeout", "version", "config"):
        assert log.count("config file key accepted without effect: %s " % key) == 1, (key, log)
        # As nsqd: only options with a flag are readable.
        status, body = http(broker, "GET", "/config/%s" % key)
        assert (status, json.loads(body)) == (400, {"message": "INVALID_OPTION"}), key
    # A key nsqd does not know either is still refused, named with its file and line.
    cfg.write_text(KEYS_WITHOUT_A_FLAG + "queue_scan_intervall = \"1s\"\n")
    out = run_broker("--config=%s" % cfg, "--data-path=%s" % tmp_path)
    assert out.returncode == 2, (out.returncode, out.stderr)
    assert "config file %s line 9: unknown key `queue_scan_intervall`" % cfg in out.stderr, \
        out.stderr


def run_broker(*args, timeout=10):
    return subprocess.run([broker_bin(), *args], capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


@pytest.mark.parametrize("text,expected", [
    ('mem_queue_size = 5\n\nno_such_option = "x"\n', "line 3: unknown key `no_such_option`"),
    ('msg_timeout = "soon"\n', "line 1: `msg_timeout`:"),
    ('max_msg_size = [1, 2]\nmem_queue_size = 5\n', "`max_msg_size`"),
    ('[section]\nkey = 1\n', "unknown key `section`"),
    ('mem_queue_size = \n', "not valid TOML"),
])
def test_bad_config_files_are_refused_with_file_line_and_key(tmp_path, text, expected):
    cfg = tmp_path / "bad.cfg"
    cfg.write_text(text)
    out = run_broker("--config=%s" % cfg, "--data-path=%s" % tmp_path)
    assert out.returncode == 2, (out.returncode, out.stderr)
    assert expected in out.stderr, out.stderr
    assert str(cfg) in out.stderr, out.stderr


def test_missing_config_file_is_a_clear_error(tmp_path):
    out = run_broker("--config=%s" % (tmp_path / "nope.cfg"), "--data-path=%s" % tmp_path)
    assert out.returncode == 2
    assert "cannot read config file" in out.stderr, out.stderr


def test_version_has_nsqds_form():
    out = run_broker("--version")
    assert out.returncode == 0
    assert "nsqd v1.3.0" in out.stdout, out.stdout


def test_deprecated_and_scan_flags_accepted_and_logged(start_broker):
    broker = start_broker("--verbose", "-worker-id", "--log-prefix=[x] ",
                          "--queue-scan-selection-count=5", "--enable-experiment",
                          "topology-aware-consumption")
    log = broker.stderr()
    for flag in ("--log-prefix", "--verbose", "--worker-id", "--queue-scan-*",
                 "--enable-experiment"):
        assert "flag accepted without effect: %s" % flag in log, (flag, log)


# Every key of nsqlookupd's Options.
LOOKUP_CFG = """
log_level = "info"
log_prefix = "[nsqlookupd] "
tcp_address = "127.0.0.1:0"
http_address = "127.0.0.1:0"
broadcast_address = "lookup.example"
inactive_producer_timeout = "300s"
tombstone_lifetime = "45s"
"""


def lookup_bin():
    return os.environ.get("LOOKUP_BIN") or os.path.join(REPO, "target", "release", "lookup")


def test_nsqlookupd_config_file(tmp_path):
    cfg = tmp_path / "nsqlookupd.cfg"
    cfg.write_text(LOOKUP_CFG)
    proc = subprocess.Popen([lookup_bin(), "--config=%s" % cfg, "--tombstone-lifetime=10s"],
                            stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    try:
        port = None
        for _ in range(200):
            line = proc.stderr.readline()
            if "HTTP" in line and "listening" in line:
                port = int(line.rsplit(":", 1)[1].split()[0].strip().strip('"'))
                break
        assert port, "the lookup did not say where it listens"
        with urllib.request.urlopen("http://127.0.0.1:%d/info" % port, timeout=5) as r:
            info = json.loads(r.read())
        assert info["version"], info
    finally:
        proc.kill()
        proc.wait(timeout=5)
    bad = tmp_path / "bad.cfg"
    bad.write_text("tcp_address = \"127.0.0.1:0\"\nlookupd_thing = 1\n")
    out = subprocess.run([lookup_bin(), "--config=%s" % bad], capture_output=True, text=True,
                         timeout=10)
    assert out.returncode == 2
    assert "line 2: unknown key `lookupd_thing`" in out.stderr, out.stderr
