"""--stats-address of the long-running utilities (nsq_to_file, nsq_to_nsq, nsq_to_http): GET
/metrics in Prometheus' text format, scraped during and after a run, against what the brokers
and the test HTTP servers saw: messages received, finished, requeued, in flight, errors by kind.
"""

import re
import urllib.error
import urllib.request

import pytest

from conftest import free_port
from test_tools import Proc, channel_stats, create_channel, drained, mpub, tool, wait_until
from test_tools2 import fail_some, relay, sinks, to_http  # noqa: F401

LINE = re.compile(r'^(nsq_tool_[a-z_]+)\{tool="([a-z_]+)"(?:,kind="([a-z_]+)")?\} (\d+)$')


def scrape(addr):
    """{name or (name, kind): value} of one GET /metrics; checks the format on the way."""
    with urllib.request.urlopen("http://%s/metrics" % addr, timeout=10) as r:
        assert r.status == 200
        assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith("# "):
            assert line.startswith(("# HELP nsq_tool_", "# TYPE nsq_tool_")), line
            continue
        m = LINE.match(line)
        assert m, "not a Prometheus sample line: %r" % line
        name, _tool, kind, value = m.groups()
        out[(name, kind) if kind else name] = int(value)
    return out


def consistent(m):
    """received = finished + requeued + in flight, at every scrape."""
    assert m["nsq_tool_messages_received_total"] == (
        m["nsq_tool_messages_finished_total"] + m["nsq_tool_messages_requeued_total"]
        + m["nsq_tool_messages_in_flight"]), m
    return m


def wait_serving(addr, proc):
    def up():
        assert proc.proc.poll() is None, proc.stderr()
        try:
            return scrape(addr)
        except (urllib.error.URLError, ConnectionError):
            return None
    return wait_until(up, 30, "the stats listener")


@pytest.mark.timeout(180)
def test_nsq_to_file_metrics_count_every_message(broker, tmp_path):
    topic, n = "metrics_file", 20_000
    create_channel(broker, topic, "nsq_to_file")
    addr = "127.0.0.1:%d" % free_port()
    p = Proc([tool("nsq_to_file"), "--nsqd-tcp-address", broker.tcp_address, "--topic", topic,
              "--output-dir", str(tmp_path / "out"), "--sync-interval", "200ms",
              "--stats-address", addr], str(tmp_path), "to_file")
    first = consistent(wait_serving(addr, p))
    assert first["nsq_tool_messages_finished_total"] == 0
    mpub(broker, topic, [b"m-%05d" % i for i in range(n)])
    during = consistent(scrape(addr))
    wait_until(lambda: drained(broker, topic, "nsq_to_file"), 120, "the channel drained")
    after = wait_until(lambda: (lambda m: m["nsq_tool_messages_in_flight"] == 0 and m)(
        consistent(scrape(addr))), 30, "nothing in flight")
    assert after["nsq_tool_messages_received_total"] == n, after
    assert after["nsq_tool_messages_finished_total"] == n, after
    assert after["nsq_tool_messages_requeued_total"] == 0, after
    assert during["nsq_tool_messages_finished_total"] <= n
    assert not [k for k in after if isinstance(k, tuple)], "no errors: %r" % after
    # anything but GET /metrics (and /ping)
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen("http://%s/nope" % addr, timeout=10)
    assert e.value.code == 404
    with urllib.request.urlopen("http://%s/ping" % addr, timeout=10) as r:
        assert r.read() == b"OK"
    assert p.stop() == 0, p.stderr()


@pytest.mark.timeout(180)
def test_nsq_to_nsq_metrics_count_publish_errors_then_successes(start_broker, tmp_path):
    a = start_broker()
    create_channel(a, "mdu", "nsq_to_nsq")
    port, addr = free_port(), "127.0.0.1:%d" % free_port()
    p = relay(tmp_path, a, ["127.0.0.1:%d" % port], "mdu",
              "--consumer-opt=default_requeue_delay,100ms",
              "--consumer-opt=max_backoff_duration,500ms", "--stats-address", addr)
    wait_serving(addr, p)
    bodies = [b"mdu-%03d" % i for i in range(200)]
    mpub(a, "mdu", bodies)
    down = wait_until(lambda: (lambda m: m.get(("nsq_tool_errors_total", "publish"), 0) >= 3
                               and m)(consistent(scrape(addr))), 60, "publish errors counted")
    assert down["nsq_tool_messages_finished_total"] == 0, down
    b = start_broker("--tcp-address=127.0.0.1:%d" % port)
    create_channel(b, "mdu", "check")
    wait_until(lambda: drained(a, "mdu", "nsq_to_nsq"), 120, "source drained once it is up")
    after = wait_until(lambda: (lambda m: m["nsq_tool_messages_in_flight"] == 0 and m)(
        consistent(scrape(addr))), 30, "nothing in flight")
    src = channel_stats(a, "mdu", "nsq_to_nsq")
    assert after["nsq_tool_messages_finished_total"] == 200, after
    assert after["nsq_tool_messages_requeued_total"] == src["requeue_count"], (after, src)
    assert after[("nsq_tool_errors_total", "publish")] == src["requeue_count"], (after, src)
    assert p.stop() == 0, p.stderr()


@pytest.mark.timeout(180)
def test_nsq_to_http_metrics_match_the_servers_count(broker, tmp_path, sinks):  # noqa: F811
    sink = sinks(fail_some)
    bodies = [b"msg-%04d" % i for i in range(1000)]
    create_channel(broker, "mth", "nsq_to_http")
    addr = "127.0.0.1:%d" % free_port()
    p = to_http(tmp_path, broker, "mth", "--post", sink.url("/in"),
                "--http-client-request-timeout", "1s", "-n", "10", "--stats-address", addr)
    wait_serving(addr, p)
    mpub(broker, "mth", bodies)
    consistent(scrape(addr))
    wait_until(lambda: drained(broker, "mth", "nsq_to_http"), 120, "source drained")
    after = wait_until(lambda: (lambda m: m["nsq_tool_messages_in_flight"] == 0 and m)(
        consistent(scrape(addr))), 30, "nothing in flight")
    assert after["nsq_tool_messages_finished_total"] == 1000, after
    assert after["nsq_tool_messages_requeued_total"] == sink.failed == 200 + 1 + 3, after
    assert after[("nsq_tool_errors_total", "http")] == sink.failed, after
    assert p.stop() == 0, p.stderr()


def test_stats_address_in_use_is_an_error(broker, tmp_path):
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(1)
    addr = "127.0.0.1:%d" % s.getsockname()[1]
    try:
        for name, extra in [("nsq_to_file", ["--output-dir", str(tmp_path)]),
                            ("nsq_to_nsq", ["--destination-nsqd-tcp-address", "127.0.0.1:1"]),
                            ("nsq_to_http", ["--post", "http://127.0.0.1:1/"])]:
            p = Proc([tool(name), "--nsqd-tcp-address", broker.tcp_address, "--topic", "t",
                      "--stats-address", addr] + extra, str(tmp_path), name)
            assert p.proc.wait(30) == 1, p.stderr()
            assert "--stats-address %s" % addr in p.stderr(), p.stderr()
    finally:
        s.close()
