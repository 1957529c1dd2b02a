"""The NSQ utilities of the tools/ crate, second part (target/release/nsq_stat, nsq_to_nsq,
nsq_to_http) against brokers (and a lookup) the tests start: by their output, by what arrives.

- nsq_stat: NSQ's columns and header cadence, the channel's numbers summed over brokers given
  directly or found through a lookup; NSQ's errors.
- nsq_to_nsq: 10,000 messages between two brokers all arrive (read back with nsq_tail);
  round-robin over two destinations; the JSON filters; a destination that is down when the
  tool starts, then up: the messages are requeued meanwhile and all arrive once it is up.
- Every flag of NSQ 1.3's counterpart is accepted, in Go's `-flag=value` and in `--flag value`.
"""

import json
import subprocess

import pytest

from conftest import free_port

from test_lookup import registered_broker, start_lookup, wait_registered  # noqa: F401
from test_tools import (Proc, channel_stats, create_channel, drained, go_form, gnu_form, mpub,
                        tail, tool, wait_until)


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


def relay(workdir, src, dests, topic, *extra):
    args = [tool("nsq_to_nsq"), "--nsqd-tcp-address", src.tcp_address, "--topic", topic]
    for d in dests:
        args += ["--destination-nsqd-tcp-address", d]
    return Proc(args + list(extra), str(workdir), "to_nsq_relay")


def read_all(workdir, broker, topic, n):
    """The n bodies of topic on broker, read with nsq_tail -n."""
    t = tail([broker.tcp_address], [topic], "-n", str(n), "--channel", "check",
             workdir=str(workdir))
    out, _ = t.proc.communicate(timeout=120)
    assert t.proc.returncode == 0, t.stderr()
    return out.split(b"\n")[:-1]


@pytest.mark.timeout(180)
def test_nsq_to_nsq_10000_messages_between_two_brokers(start_broker, tmp_path):
    a, b = start_broker(), start_broker()
    bodies = [b"relay-%05d" % i for i in range(10_000)]
    create_channel(a, "relay", "nsq_to_nsq")
    create_channel(b, "relayed", "check")
    mpub(a, "relay", bodies)
    p = relay(tmp_path, a, [b.tcp_address], "relay", "--destination-topic", "relayed",
              "--status-every", "2500")
    wait_until(lambda: drained(a, "relay", "nsq_to_nsq"), 120, "source drained")
    assert channel_stats(b, "relayed", "check")["depth"] == 10_000
    assert p.stop() == 0, p.stderr()
    assert sorted(read_all(tmp_path, b, "relayed", 10_000)) == bodies
    assert p.stderr().count("[aggregate]: finished 2500 requests") == 4, p.stderr()


def test_nsq_to_nsq_round_robin_over_two_destinations(start_broker, tmp_path):
    a, b, c = start_broker(), start_broker(), start_broker()
    create_channel(a, "rr", "nsq_to_nsq")
    for d in (b, c):
        create_channel(d, "rr", "check")
    mpub(a, "rr", [b"m%d" % i for i in range(100)])
    p = relay(tmp_path, a, [b.tcp_address, c.tcp_address], "rr", "--mode=round-robin",
              "--status-every=50")
    wait_until(lambda: drained(a, "rr", "nsq_to_nsq"), 60, "source drained")
    assert p.stop() == 0, p.stderr()
    assert [channel_stats(d, "rr", "check")["depth"] for d in (b, c)] == [50, 50]
    err = p.stderr()
    assert "[%s]: finished 50 requests" % b.tcp_address in err, err
    assert "[aggregate]: finished 50 requests" in err, err


def test_nsq_to_nsq_json_filters(start_broker, tmp_path):
    a, b = start_broker(), start_broker()
    create_channel(a, "js", "nsq_to_nsq")
    create_channel(b, "js", "check")
    msgs = [{"k": "v", "x": 1.0, "y": 2}, {"k": "w", "x": 3}, {"k": 7, "x": 4}, {"x": 5}]
    mpub(a, "js", [json.dumps(m).encode() for m in msgs] + [b"not json"])
    p = relay(tmp_path, a, [b.tcp_address], "js", "--require-json-field=k",
              "--require-json-value=v", "--whitelist-json-field=x",
              "--whitelist-json-field=k", "--consumer-opt=max_attempts,2",
              "--consumer-opt=default_requeue_delay,50ms",
              "--consumer-opt=max_backoff_duration,200ms")
    # {"x": 5} lacks the field whose value is required: requeued (with backoff) until given up
    wait_until(lambda: drained(a, "js", "nsq_to_nsq"), 60, "source drained")
    assert channel_stats(a, "js", "nsq_to_nsq")["requeue_count"] >= 1
    assert p.stop() == 0, p.stderr()
    assert read_all(tmp_path, b, "js", 1) == [b'{"k":"v","x":1}']
    assert channel_stats(b, "js", "check")["depth"] == 0

    # a number value matches a number field; no value: the field's presence is enough
    create_channel(a, "js2", "nsq_to_nsq")
    create_channel(b, "js2", "check")
    mpub(a, "js2", [json.dumps(m).encode() for m in msgs])
    p = relay(tmp_path, a, [b.tcp_address], "js2", "--require-json-field=x",
              "--require-json-value=3")
    wait_until(lambda: drained(a, "js2", "nsq_to_nsq"), 60, "source drained")
    assert p.stop() == 0, p.stderr()
    assert read_all(tmp_path, b, "js2", 1) == [json.dumps(msgs[1]).encode()]
    create_channel(a, "js3", "nsq_to_nsq")
    create_channel(b, "js3", "check")
    mpub(a, "js3", [json.dumps(m).encode() for m in msgs])
    p = relay(tmp_path, a, [b.tcp_address], "js3", "--require-json-field=k")
    wait_until(lambda: drained(a, "js3", "nsq_to_nsq"), 60, "source drained")
    assert p.stop() == 0, p.stderr()
    assert channel_stats(b, "js3", "check")["depth"] == 3


@pytest.mark.timeout(180)
def test_nsq_to_nsq_destination_down_then_up(start_broker, tmp_path):
    a = start_broker()
    create_channel(a, "du", "nsq_to_nsq")
    port = free_port()
    p = relay(tmp_path, a, ["127.0.0.1:%d" % port], "du",
              "--consumer-opt=default_requeue_delay,100ms",
              "--consumer-opt=max_backoff_duration,500ms")
    bodies = [b"du-%03d" % i for i in range(200)]
    mpub(a, "du", bodies)
    wait_until(lambda: channel_stats(a, "du", "nsq_to_nsq")["requeue_count"] >= 3, 60,
               "publishes to the down destination requeued")
    assert channel_stats(a, "du", "nsq_to_nsq")["message_count"] == 200
    b = start_broker("--tcp-address=127.0.0.1:%d" % port)
    create_channel(b, "du", "check")
    wait_until(lambda: drained(a, "du", "nsq_to_nsq"), 120, "source drained once it is up")
    assert p.stop() == 0, p.stderr()
    got = read_all(tmp_path, b, "du", channel_stats(b, "du", "check")["depth"])
    assert sorted(set(got)) == bodies, "every message arrived (at least once)"


@pytest.mark.parametrize("form", [go_form, gnu_form], ids=["go", "gnu"])
def test_nsq_to_nsq_every_flag(start_broker, tmp_path, form):
    """Every flag NSQ 1.3's nsq_to_nsq lists in -help, given at once."""
    a, b = start_broker(), start_broker()
    r = subprocess.run([tool("nsq_to_nsq")] + form([("version", None)]), capture_output=True,
                       timeout=30)
    assert r.returncode == 0 and r.stdout.startswith(b"nsq_to_nsq v1.3"), r
    create_channel(a, "ef", "relaych")
    create_channel(b, "ef_out", "check")
    mpub(a, "ef", [b'{"a":"1","b":2}', b'{"a":"2"}'])
    flags = [("channel", "relaych"), ("destination-topic", "ef_out"), ("max-in-flight", "10"),
             ("status-every", "1"), ("mode", "epsilon-greedy"),
             ("nsqd-tcp-address", a.tcp_address), ("destination-nsqd-tcp-address", b.tcp_address),
             ("topic", "ef"), ("whitelist-json-field", "b"), ("require-json-field", "a"),
             ("require-json-value", "1"), ("consumer-opt", "max_attempts,5"),
             ("producer-opt", "client_id,relay"), ("producer-opt", "snappy,true")]
    p = Proc([tool("nsq_to_nsq")] + form(flags), str(tmp_path), "relay_every")
    wait_until(lambda: drained(a, "ef", "relaych"), 60, "source drained")
    assert p.stop() == 0, p.stderr()
    assert channel_stats(b, "ef_out", "check")["depth"] == 1
    assert "[aggregate]: finished 1 requests" in p.stderr()


@pytest.mark.parametrize("args,code,text", [
    (["--nsqd-tcp-address=x:1", "--destination-nsqd-tcp-address=x:2"], 1,
     "--topic and --channel are required"),
    (["--topic=a b", "--nsqd-tcp-address=x:1"], 1, "--topic is invalid"),
    (["--topic=t", "--channel=a b", "--nsqd-tcp-address=x:1"], 1, "--channel is invalid"),
    (["--topic=t", "--destination-topic=a b", "--nsqd-tcp-address=x:1"], 1,
     "--destination-topic is invalid"),
    (["--topic=t"], 1, "--nsqd-tcp-address or --lookupd-http-address required"),
    (["--topic=t", "--nsqd-tcp-address=x:1"], 1, "--destination-nsqd-tcp-address required"),
    (["--topic=t", "--nsqd-tcp-address=x:1", "--destination-nsqd-tcp-address=x:2",
      "--producer-opt=nope,1"], 2, "--producer-opt"),
    (["--topic=t", "--status-every=x"], 2, "--status-every"),
    (["-bogus"], 2, "-bogus"),
])
def test_nsq_to_nsq_bad_flags(args, code, text):
    r = subprocess.run([tool("nsq_to_nsq")] + args, capture_output=True, timeout=30)
    assert r.returncode == code and text in r.stderr.decode(), r
