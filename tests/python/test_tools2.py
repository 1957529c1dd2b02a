"""The NSQ utilities of the tools/ crate, second part (target/release/nsq_stat, nsq_to_nsq,
nsq_to_http) against brokers (and a lookup) the tests start: by their output, by what arrives.

- nsq_stat: NSQ's columns and header cadence, the channel's numbers summed over brokers given
  directly or found through a lookup; NSQ's errors.
- Every flag of NSQ 1.3's counterpart is accepted, in Go's `-flag=value` and in `--flag value`.
"""

import subprocess

import pytest

from test_lookup import registered_broker, start_lookup, wait_registered  # noqa: F401
from test_tools import create_channel, go_form, gnu_form, mpub, tool


def http_addr(broker):
    return "127.0.0.1:%d" % broker.http_port


def stat(*args, timeout=60):
    return subprocess.run([tool("nsq_stat")] + list(args), capture_output=True, timeout=timeout)


def rows(out):
    """The report lines of nsq_stat's stdout, split into their 11 numbers."""
    lines = out.decode().splitlines()
    return [[int(x) for x in l.replace("|", " ").split()] for l in lines
            if not l.startswith("---") and "ingress" not in l]


def test_nsq_stat_columns_and_counts(broker):
    create_channel(broker, "st", "c")
    mpub(broker, "st", [b"m%d" % i for i in range(50)])
    r = stat("--topic", "st", "--channel", "c", "--nsqd-http-address", http_addr(broker),
             "--interval", "100ms", "--count", "2")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.decode().splitlines()
    assert lines[0] == ("------rate------+----------------depth----------------+"
                        "--------------metadata---------------")
    assert lines[1] == ("ingress  egress |   total     mem    disk inflt   def |     req     t-o"
                        "         msgs clients")
    assert len(lines) == 4, lines
    # ingress egress | total mem disk inflt def | req t-o msgs clients
    assert rows(r.stdout) == [[0, 0, 50, 50, 0, 0, 0, 0, 0, 50, 0]] * 2


def test_nsq_stat_header_every_25_polls(broker):
    create_channel(broker, "st25", "c")
    r = stat("-topic=st25", "-channel=c", "-nsqd-http-address=%s" % http_addr(broker),
             "-interval=10ms", "-count=26")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.decode().splitlines()
    headers = [i for i, l in enumerate(lines) if l.startswith("------rate")]
    # poll 0: header only; polls 1-24: rows; poll 25: header and row; poll 26: row
    assert headers == [0, 2 + 24], lines
    assert len(rows(r.stdout)) == 26


def test_nsq_stat_sums_the_brokers_a_lookup_knows(start_broker, start_lookup):  # noqa: F811
    lookup = start_lookup()
    a = registered_broker(start_broker, lookup)
    b = registered_broker(start_broker, lookup)
    for br, n in [(a, 30), (b, 20)]:
        create_channel(br, "sl", "c")
        mpub(br, "sl", [b"x"] * n)
        wait_registered(lookup, br, "sl")
    r = stat("--topic=sl", "--channel=c", "--lookupd-http-address=127.0.0.1:%d" % lookup.http_port,
             "--interval=50ms", "--count=1")
    assert r.returncode == 0, r.stderr
    assert rows(r.stdout) == [[0, 0, 50, 50, 0, 0, 0, 0, 0, 50, 0]]


@pytest.mark.parametrize("args,text", [
    (["--topic=t"], "--topic and --channel are required"),
    (["--topic=t", "--channel=c"], "--nsqd-http-address or --lookupd-http-address required"),
    (["--topic=t", "--channel=c", "--nsqd-http-address=http://x:1"],
     "--nsqd-http-address error - address should not contain scheme"),
    (["--topic=t", "--channel=c", "--nsqd-http-address=x:1", "--count=0"],
     "--count should be positive"),
    (["--topic=t", "--channel=c", "--nsqd-http-address=127.0.0.1:1"],
     "failed to get nsqd stats"),
])
def test_nsq_stat_errors_in_nsqs_words(args, text):
    r = stat(*args)
    assert r.returncode == 1 and text in r.stderr.decode(), r


def test_nsq_stat_unknown_channel(broker):
    create_channel(broker, "stu", "c")
    r = stat("--topic=stu", "--channel=nope", "--nsqd-http-address=%s" % http_addr(broker))
    assert r.returncode == 1, r
    assert "failed to find channel(nope) in stats metadata for topic(stu)" in r.stderr.decode()


@pytest.mark.parametrize("form", [go_form, gnu_form], ids=["go", "gnu"])
def test_nsq_stat_every_flag(broker, form):
    create_channel(broker, "stf", "c")
    flags = [("version", None)]
    r = stat(*form(flags))
    assert r.returncode == 0 and r.stdout.startswith(b"nsq_stat v1.3"), r
    flags = [("topic", "stf"), ("channel", "c"), ("interval", "20ms"),
             ("http-client-connect-timeout", "1s"), ("http-client-request-timeout", "2s"),
             ("count", "1"), ("nsqd-http-address", http_addr(broker))]
    r = stat(*form(flags))
    assert r.returncode == 0, r.stderr
    assert rows(r.stdout) == [[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]]
