"""The NSQ utilities of the tools/ crate (target/release/nsq_to_file, nsq_tail, to_nsq) against
brokers (and a lookup) the tests start: by their files and their output.

- nsq_to_file archives 100,000 messages across rotations (size and interval), plain, gzip and
  zstd (--compress zstd), each message exactly once; SIGKILLed mid-way and restarted (gzip and
  zstd): every message at least once, and the output dir never holds a partial gzip or zstd file; --topic-pattern finds topics through a
  lookup; every flag of NSQ 1.3's nsq_to_file is accepted in both forms.
- to_nsq -> broker -> nsq_tail round trips (several destinations, --delimiter, --rate,
  --print-topic, several topics, -n exits); nsq_tail -n on a named channel leaves the rest
  in the channel, each message's attempts unspent; to_nsq fails with a message naming what
  failed.
- TLS with a client certificate, snappy, deflate and AUTH through --consumer-opt /
  --producer-opt.
- Bad flags end each tool with status 1 or 2 and a message naming the flag.
"""

import glob
import gzip
import json
import os
import signal
import subprocess
import time
import zlib

import pytest
import zstandard

from brokerhttp import http
from conftest import REPO
from test_auth import AuthServer, grant
from test_lookup import registered_broker, start_lookup, wait_registered  # noqa: F401

N = 100_000
WAIT = 120


def tool(name):
    path = os.path.join(REPO, "target", "release", name)
    if not os.path.exists(path):
        pytest.fail("%s not found (build with `cargo build --release -p tools`)" % path)
    return path


def wait_until(pred, timeout, what):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = pred()
        if last:
            return last
        time.sleep(0.1)
    raise AssertionError("timed out after %ss waiting for %s (last: %r)" % (timeout, what, last))


def body(i):
    return b"msg-%06d" % i


def mpub(broker, topic, bodies):
    for start in range(0, len(bodies), 5000):
        status, answer = http(broker, "POST", "/mpub?topic=%s" % topic,
                              b"\n".join(bodies[start:start + 5000]))
        assert status == 200, answer


def create_channel(broker, topic, channel):
    status, answer = http(broker, "POST", "/topic/create?topic=%s" % topic)
    assert status == 200, answer
    status, answer = http(broker, "POST", "/channel/create?topic=%s&channel=%s" % (topic, channel))
    assert status == 200, answer


def channel_stats(broker, topic, channel):
    status, answer = http(broker, "GET", "/stats?format=json&topic=%s" % topic)
    assert status == 200, answer
    stats = json.loads(answer)
    stats = stats.get("data", stats)
    for t in stats["topics"] or []:
        if t["topic_name"] == topic:
            for c in t["channels"] or []:
                if c["channel_name"] == channel:
                    return c
    return None


def drained(broker, topic, channel):
    c = channel_stats(broker, topic, channel)
    return c is not None and c["depth"] == 0 and c["in_flight_count"] == 0 and \
        c["deferred_count"] == 0


STARTED = []


@pytest.fixture(autouse=True)
def _kill_leftover_tools():
    """A test that fails half-way leaves no tool process running."""
    yield
    while STARTED:
        p = STARTED.pop()
        if p.poll() is None:
            p.kill()
            p.wait()


class Proc:
    """A tool process with its stderr in a file (killed at the end of the test if still up)."""

    def __init__(self, args, workdir, name, **kw):
        self.err_path = os.path.join(workdir, "%s.%d.stderr" % (name, time.monotonic_ns()))
        self._err = open(self.err_path, "wb")
        self.proc = subprocess.Popen(args, stderr=self._err, **kw)
        STARTED.append(self.proc)

    def stderr(self):
        with open(self.err_path, "rb") as f:
            return f.read().decode(errors="replace")[-5000:]

    def stop(self, sig=signal.SIGTERM, timeout=60):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError("did not stop within %ss:\n%s" % (timeout, self.stderr()))


def read_archive(path):
    """The records of one output file; a gzip or zstd file must be whole (every member or frame
    complete)."""
    with open(path, "rb") as f:
        data = f.read()
    if path.endswith(".gz"):
        out = b""
        while data:
            d = zlib.decompressobj(16 + zlib.MAX_WBITS)
            out += d.decompress(data)
            assert d.eof, "%s ends inside a gzip member" % path
            data = d.unused_data
        data = out
    elif path.endswith(".zst"):
        out = b""
        while data:
            d = zstandard.ZstdDecompressor().decompressobj()
            out += d.decompress(data)
            assert d.eof, "%s ends inside a zstd frame" % path
            data = d.unused_data
        data = out
    assert data == b"" or data.endswith(b"\n"), "%s ends inside a record" % path
    return data.split(b"\n")[:-1] if data else []


def archived(out_dir):
    records = []
    files = sorted(glob.glob(os.path.join(out_dir, "**", "*"), recursive=True))
    files = [f for f in files if os.path.isfile(f)]
    for f in files:
        records.extend(read_archive(f))
    return files, records


def to_file_args(broker, out_dir, work_dir, topic, *extra):
    return [tool("nsq_to_file"), "--nsqd-tcp-address", broker.tcp_address, "--topic", topic,
            "--output-dir", out_dir, "--work-dir", work_dir, "--sync-interval", "1s"] + list(extra)


COMPRESS = {"plain": ([], ""), "gzip": (["--gzip", "--gzip-level", "1"], ".gz"),
            "zstd": (["--compress", "zstd", "--zstd-level", "1"], ".zst")}


@pytest.mark.timeout(600)
@pytest.mark.parametrize("compress", ["plain", "gzip", "zstd"])
def test_nsq_to_file_archives_every_message_once_across_rotations(broker, tmp_path, compress):
    topic = "archive_" + compress
    flags, ext = COMPRESS[compress]
    out_dir, work_dir = str(tmp_path / "out"), str(tmp_path / "work")
    create_channel(broker, topic, "nsq_to_file")
    bodies = [body(i) for i in range(N)]
    mpub(broker, topic, bodies[: N // 2])
    # Rotation by size (~100 KB of records) and by interval (1s) together.
    extra = ["--rotate-size", "100000", "--rotate-interval", "1s"] + flags
    p = Proc(to_file_args(broker, out_dir, work_dir, topic, *extra), str(tmp_path), "to_file")
    mpub(broker, topic, bodies[N // 2:])
    wait_until(lambda: drained(broker, topic, "nsq_to_file"), WAIT, "the channel drained")
    assert p.stop() == 0, p.stderr()
    files, records = archived(out_dir)
    assert len(files) > 2, "rotations happened: %s" % files
    assert all(f.endswith(ext) if ext else not f.endswith((".gz", ".zst")) for f in files), files
    assert len(records) == N, "each message exactly once (%d records)" % len(records)
    assert sorted(records) == bodies
    assert os.listdir(work_dir) == [], "the work dir is left empty by a clean stop"
    # rotation by size: no file much over the limit (a file rotates after the record that
    # crossed it)
    if not ext:
        assert max(os.path.getsize(f) for f in files) <= 100000 + 20


@pytest.mark.timeout(600)
@pytest.mark.parametrize("compress", ["gzip", "zstd"])
def test_nsq_to_file_sigkill_and_restart_loses_nothing_and_leaves_no_partial_file(broker,
                                                                                    tmp_path,
                                                                                    compress):
    topic = "archive_kill_" + compress
    flags, ext = COMPRESS[compress]
    out_dir, work_dir = str(tmp_path / "out"), str(tmp_path / "work")
    create_channel(broker, topic, "nsq_to_file")
    bodies = [body(i) for i in range(N)]
    mpub(broker, topic, bodies[: N // 2])
    args = to_file_args(broker, out_dir, work_dir, topic, *flags, "--rotate-size", "200000",
                        "--max-in-flight", "500")
    p = Proc(args, str(tmp_path), "to_file")

    def a_quarter_taken():
        c = channel_stats(broker, topic, "nsq_to_file")
        return c is not None and c["depth"] < N // 4
    wait_until(a_quarter_taken, WAIT, "a quarter of the messages taken")
    p.stop(signal.SIGKILL)
    files, first = archived(out_dir)  # every file in the output dir is whole gzip / zstd
    assert all(f.endswith(ext) for f in files), files
    leftovers = os.listdir(work_dir)
    assert leftovers, "a killed run leaves its open file in the work dir"
    mpub(broker, topic, bodies[N // 2:])

    p = Proc(args, str(tmp_path), "to_file")
    wait_until(lambda: not set(leftovers) & set(os.listdir(work_dir)), WAIT,
               "the leftover finished and moved by the next run")
    wait_until(lambda: drained(broker, topic, "nsq_to_file"), WAIT, "the channel drained")
    assert p.stop() == 0, p.stderr()
    files, records = archived(out_dir)
    assert all(f.endswith(ext) for f in files), files
    assert set(records) == set(bodies), "every message at least once"
    assert len(records) >= N
    assert len(first) <= len(records)
    assert os.listdir(work_dir) == [], "the leftover was finished and moved"


@pytest.mark.timeout(120)
def test_nsq_to_file_topic_pattern_through_a_lookup(start_broker, start_lookup, tmp_path):  # noqa: F811
    lookup = start_lookup()
    broker = registered_broker(start_broker, lookup)
    for t in ["arch_a", "arch_b", "other"]:
        create_channel(broker, t, "nsq_to_file")
        mpub(broker, t, [b"%s-%d" % (t.encode(), i) for i in range(10)])
        wait_registered(lookup, broker, t)
    out_dir = str(tmp_path / "out")
    p = Proc([tool("nsq_to_file"), "-lookupd-http-address=%s" % lookup.http_address,
              "-topic-pattern=^arch_", "-topic-refresh=1s", "-output-dir=%s" % out_dir,
              "-sync-interval=1s", "-consumer-opt=lookupd_poll_interval,200ms"],
             str(tmp_path), "to_file")
    wait_until(lambda: drained(broker, "arch_a", "nsq_to_file")
               and drained(broker, "arch_b", "nsq_to_file"), 60, "both arch_ topics drained")
    assert p.stop() == 0, p.stderr()
    files, records = archived(out_dir)
    names = sorted(os.path.basename(f).split(".")[0] for f in files)
    assert names == ["arch_a", "arch_b"], files
    assert sorted(records) == sorted(b"arch_%s-%d" % (x, i) for x in [b"a", b"b"] for i in range(10))
    assert channel_stats(broker, "other", "nsq_to_file")["depth"] == 10


def tail(broker_addrs, topics, *extra, workdir):
    args = [tool("nsq_tail")]
    for a in broker_addrs:
        args += ["--nsqd-tcp-address", a]
    for t in topics:
        args += ["--topic", t]
    return Proc(args + list(extra), workdir, "tail", stdout=subprocess.PIPE)


def tail_channel(broker, topic):
    status, answer = http(broker, "GET", "/stats?format=json&topic=%s" % topic)
    stats = json.loads(answer)
    stats = stats.get("data", stats)
    for t in stats["topics"] or []:
        for c in t["channels"] or []:
            if c["channel_name"].startswith("tail") and c["client_count"] > 0:
                return c["channel_name"]
    return None


def to_nsq(broker_addrs, topic, data, *extra):
    args = [tool("to_nsq"), "--topic", topic] + list(extra)
    for a in broker_addrs:
        args += ["--nsqd-tcp-address", a]
    return subprocess.run(args, input=data, capture_output=True, timeout=60)


@pytest.mark.timeout(120)
def test_to_nsq_to_nsq_tail_round_trip_with_two_destinations(start_broker, tmp_path):
    a, b = start_broker(), start_broker()
    t = tail([a.tcp_address, b.tcp_address], ["rt"], "-n", "200", workdir=str(tmp_path))
    wait_until(lambda: tail_channel(a, "rt") and tail_channel(b, "rt"), 30, "tail subscribed")
    assert tail_channel(a, "rt").endswith("#ephemeral")
    lines = [b"line %d" % i for i in range(100)]
    r = to_nsq([a.tcp_address, b.tcp_address], "rt", b"\n".join(lines) + b"\n")
    assert r.returncode == 0, r.stderr
    out, _ = t.proc.communicate(timeout=60)
    assert t.proc.returncode == 0, t.stderr()
    got = out.split(b"\n")
    assert got[-1] == b""
    assert sorted(got[:-1]) == sorted(lines * 2), "each line from each destination"


@pytest.mark.timeout(120)
def test_nsq_tail_print_topic_several_topics_and_to_nsq_delimiter_and_rate(broker, tmp_path):
    t = tail([broker.tcp_address], ["ta", "tb"], "--print-topic", "-n=3", workdir=str(tmp_path))
    wait_until(lambda: tail_channel(broker, "ta") and tail_channel(broker, "tb"), 30, "subscribed")
    r = to_nsq([broker.tcp_address], "ta", b"x,y,,z", "-delimiter=,", "-rate=50")
    assert r.returncode == 0, r.stderr
    out, _ = t.proc.communicate(timeout=60)
    assert t.proc.returncode == 0, t.stderr()
    assert out == b"ta | x\nta | y\nta | z\n", "-n counts per topic; empty records skipped"


@pytest.mark.timeout(120)
def test_nsq_tail_n_on_a_named_channel_takes_no_more_and_loses_nothing(broker, tmp_path):
    """Issue 40 item 3: after -n the tool takes no more (RDY 0) and closes, so what it held goes
    back to the channel: no REQ loop spending the messages' attempts, nothing given up (FINed)
    unprinted. Published one PUB at a time while it runs, as the report did."""
    t = tail([broker.tcp_address], ["keep_t"], "--channel=keep", "-n", "5", workdir=str(tmp_path))
    wait_until(lambda: (channel_stats(broker, "keep_t", "keep") or {}).get("client_count"), 30,
               "tail subscribed")
    bodies = [body(i) for i in range(1000)]
    r = to_nsq([broker.tcp_address], "keep_t", b"\n".join(bodies) + b"\n")
    assert r.returncode == 0, r.stderr
    out, _ = t.proc.communicate(timeout=60)
    assert t.proc.returncode == 0, t.stderr()
    shown = out.split(b"\n")[:-1]
    assert len(shown) == 5 and set(shown) <= set(bodies), out
    assert "giving up" not in t.stderr(), t.stderr()

    def settled():
        c = channel_stats(broker, "keep_t", "keep")
        return c if c["in_flight_count"] == 0 and c["deferred_count"] == 0 else None
    c = wait_until(settled, 30, "the tail's messages back in the channel")
    assert c["depth"] == 995, c
    # What was in flight at RDY 0 (at most -n) went back on close; no REQ loop.
    assert c["requeue_count"] <= 5, c
    rest = tail([broker.tcp_address], ["keep_t"], "--channel=keep", "-n", "995",
                workdir=str(tmp_path))
    out, _ = rest.proc.communicate(timeout=60)
    assert rest.proc.returncode == 0, rest.stderr()
    assert sorted(shown + out.split(b"\n")[:-1]) == bodies, "every message printed exactly once"


@pytest.mark.timeout(60)
def test_a_repeated_flag_takes_its_last_value_list_flags_add_up(broker, tmp_path):
    """Issue 40 item 10, for the tools: Go's flag package takes a repeated flag's last value
    (`$DEFAULTS $EXTRA` wrapper scripts); NSQ's list flags (--topic) still add up."""
    create_channel(broker, "rep_a", "c")
    create_channel(broker, "rep_b", "c")
    mpub(broker, "rep_a", [b"a1", b"a2"])
    mpub(broker, "rep_b", [b"b1", b"b2"])
    r = subprocess.run([tool("nsq_tail"), "--nsqd-tcp-address", broker.tcp_address,
                        "--topic=rep_a", "--topic=rep_b", "--channel=x", "--channel=c",
                        "-n", "5", "-n=1", "--print-topic=false", "--print-topic"],
                       capture_output=True, timeout=30)
    assert r.returncode == 0, r
    assert r.stdout in (b"rep_a | a1\n", b"rep_b | b1\n"), r.stdout


def test_to_nsq_fails_with_a_message(broker, tmp_path):
    r = to_nsq([broker.tcp_address], "bad topic!", b"a\n")
    assert r.returncode == 1 and b"publishing to %s" % broker.tcp_address.encode() in r.stderr, r
    r = to_nsq(["127.0.0.1:1"], "t", b"a\n")
    assert r.returncode == 1 and b"127.0.0.1:1" in r.stderr, r
    r = to_nsq([broker.tcp_address], "t", b"a\n", "--delimiter", "ab")
    assert r.returncode == 1 and b"--delimiter must be a single byte" in r.stderr, r


@pytest.mark.parametrize("name,args,code,text", [
    ("nsq_to_file", ["--topic", "t"], 1, "--nsqd-tcp-address or --lookupd-http-address required"),
    ("nsq_to_file", ["--topic=t", "--nsqd-tcp-address=x:1", "--gzip-level=10"], 1, "--gzip-level"),
    ("nsq_to_file", ["--topic=t", "--nsqd-tcp-address=x:1", "--rotate-size=x"], 2, "--rotate-size"),
    ("nsq_to_file", ["--topic=t", "--nsqd-tcp-address=x:1", "--gzip", "--filename-format=a"], 1,
     "missing <REV>"),
    ("nsq_to_file", ["--topic=t", "--nsqd-tcp-address=x:1", "--consumer-opt=nope,1"], 2,
     "--consumer-opt"),
    ("nsq_to_file", ["--topic=t", "--nsqd-tcp-address=x:1", "--compress=lz4"], 1, "--compress"),
    ("nsq_to_file", ["--topic=t", "--nsqd-tcp-address=x:1", "--compress=zstd", "--zstd-level=0"],
     1, "--zstd-level"),
    ("nsq_to_file", ["-bogus"], 2, "-bogus"),
    ("nsq_tail", ["--nsqd-tcp-address=x:1"], 1, "--topic required"),
    ("nsq_tail", ["--topic=t", "--nsqd-tcp-address=x:1", "-n=x"], 2, "--n"),
    ("to_nsq", ["--nsqd-tcp-address=x:1"], 1, "--topic required"),
    ("to_nsq", ["--topic=t", "--rate", "fast"], 2, "--rate"),
    ("to_nsq", ["--topic=t", "--nsqd-tcp-address=x:1", "--producer-opt=snappy,maybe"], 2,
     "snappy"),
])
def test_bad_flags_name_the_flag(name, args, code, text):
    r = subprocess.run([tool(name)] + args, capture_output=True, timeout=30, stdin=subprocess.DEVNULL)
    assert r.returncode == code, r
    assert text in r.stderr.decode(), r.stderr


def test_version_in_nsqs_words():
    for name in ["nsq_to_file", "nsq_tail", "to_nsq"]:
        r = subprocess.run([tool(name), "-version"], capture_output=True, timeout=30)
        assert r.returncode == 0 and r.stdout.startswith(b"%s v1.3" % name.encode()), r


def go_form(flags):
    """[(flag, value)] as Go's `-flag=value` (a bare boolean as `-flag`)."""
    return ["-%s" % f if v is None else "-%s=%s" % (f, v) for f, v in flags]


def gnu_form(flags):
    out = []
    for f, v in flags:
        out += ["--%s" % f] if v is None else ["--%s" % f, v]
    return out


@pytest.mark.timeout(180)
@pytest.mark.parametrize("form", [go_form, gnu_form], ids=["go", "gnu"])
def test_every_flag_of_each_tool(broker, tmp_path, form):
    """Every flag NSQ 1.3's nsq_to_file, nsq_tail and to_nsq list in -help, given at once."""
    topic = "every_%s" % form.__name__
    out_dir, work_dir = str(tmp_path / "out"), str(tmp_path / "work")
    create_channel(broker, topic, "ch")
    to_file_flags = [
        ("log-level", "debug"), ("log-prefix", "[x] "), ("channel", "ch"),
        ("max-in-flight", "10"), ("output-dir", out_dir), ("work-dir", work_dir),
        ("datetime-format", "%Y%m%d"), ("filename-format", "<TOPIC>.<HOST>.<PID><REV>.<DATETIME>.log"),
        ("host-identifier", "box-<SHORT_HOST>"), ("gzip-level", "3"), ("gzip", None),
        ("skip-empty-files", None), ("topic-refresh", "30s"), ("topic-pattern", "^every_"),
        ("rotate-size", "1000000"), ("rotate-interval", "1h"), ("sync-interval", "1s"),
        ("http-client-connect-timeout", "1s"), ("http-client-request-timeout", "2s"),
        ("nsqd-tcp-address", broker.tcp_address), ("topic", topic),
        ("consumer-opt", "max_attempts,9"), ("consumer-opt", "heartbeat_interval,5s"),
    ]
    p = Proc([tool("nsq_to_file")] + form(to_file_flags), str(tmp_path), "to_file")
    # to_nsq's every flag (its one destination given twice is two destinations)
    to_nsq_flags = [("topic", topic), ("delimiter", ";"), ("rate", "1000"),
                    ("nsqd-tcp-address", broker.tcp_address),
                    ("producer-opt", "client_id,me"), ("producer-opt", "snappy,false")]
    r = subprocess.run([tool("to_nsq")] + form(to_nsq_flags), input=b"a;b;c", capture_output=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    wait_until(lambda: drained(broker, topic, "ch") and channel_stats(broker, topic, "ch")
               ["message_count"] >= 3, 60, "archived")
    assert p.stop() == 0, p.stderr()
    files, records = archived(out_dir)
    assert sorted(records) == [b"a", b"b", b"c"]
    assert len(files) == 1 and os.path.basename(files[0]).startswith(
        "%s.box-" % topic) and files[0].endswith(".log.gz"), files

    tail_flags = [("channel", "tailch"), ("max-in-flight", "5"), ("n", "2"), ("print-topic", None),
                  ("nsqd-tcp-address", broker.tcp_address), ("topic", topic),
                  ("consumer-opt", "max_attempts,3")]
    t = Proc([tool("nsq_tail")] + form(tail_flags), str(tmp_path), "tail", stdout=subprocess.PIPE)
    wait_until(lambda: channel_stats(broker, topic, "tailch"), 30, "tail subscribed")
    mpub(broker, topic, [b"p", b"q"])
    out, _ = t.proc.communicate(timeout=60)
    assert t.proc.returncode == 0, t.stderr()
    assert sorted(out.split(b"\n")[:-1]) == [b"%s | p" % topic.encode(), b"%s | q" % topic.encode()]


@pytest.mark.timeout(120)
def test_tls_client_certificate_compression_and_auth_through_the_opts(start_broker, certs,
                                                                      tmp_path):
    """--consumer-opt / --producer-opt with go-nsq's keys: TLS with a client certificate (the
    broker requires and verifies one), snappy and deflate, AUTH against an auth server."""
    server = AuthServer()
    server.answers["s3"] = grant({"topic": "^sec$", "channels": [".*"],
                                  "permissions": ["subscribe", "publish"]})
    try:
        b = start_broker("--tls-cert=" + certs.server, "--tls-key=" + certs.server_key,
                         "--https-address=127.0.0.1:0", "--tls-required=tcp-https",
                         "--tls-client-auth-policy=require-verify",
                         "--tls-root-ca-file=" + certs.ca,
                         "--auth-http-address=%s" % server.address)
        sec = ["tls_v1", "tls_root_ca_file,%s" % certs.ca, "tls_cert,%s" % certs.client,
               "tls_key,%s" % certs.client_key, "auth_secret,s3"]
        create_channel(b, "sec", "nsq_to_file")
        out_dir = str(tmp_path / "out")
        p = Proc([tool("nsq_to_file"), "--nsqd-tcp-address", b.tcp_address, "--topic", "sec",
                  "--output-dir", out_dir, "--sync-interval", "1s"]
                 + ["--consumer-opt=%s" % o for o in sec + ["snappy"]], str(tmp_path), "to_file")
        t = tail([b.tcp_address], ["sec"], "-n", "3",
                 *["-consumer-opt=%s" % o for o in sec + ["deflate", "deflate_level,3"]],
                 workdir=str(tmp_path))
        wait_until(lambda: tail_channel(b, "sec"), 30, "tail subscribed")
        r = to_nsq([b.tcp_address], "sec", b"a\nb\nc\n",
                   *["--producer-opt=%s" % o for o in sec + ["snappy"]])
        assert r.returncode == 0, r.stderr
        out, _ = t.proc.communicate(timeout=60)
        assert t.proc.returncode == 0, t.stderr()
        assert sorted(out.split(b"\n")[:-1]) == [b"a", b"b", b"c"]
        wait_until(lambda: drained(b, "sec", "nsq_to_file")
                   and channel_stats(b, "sec", "nsq_to_file")["message_count"] == 3, 60,
                   "archived")
        assert p.stop() == 0, p.stderr()
        assert sorted(archived(out_dir)[1]) == [b"a", b"b", b"c"]
        # Without the TLS options the broker refuses the connection: a message and status 1.
        r = to_nsq([b.tcp_address], "sec", b"x\n")
        assert r.returncode == 1 and b.tcp_address.encode() in r.stderr, r
        assert any("secret=s3" in q or "s3" in q for q in map(str, server.requests))
    finally:
        server.close()


@pytest.mark.timeout(120)
def test_nsq_to_file_rotates_on_a_new_datetime_and_closes_on_sighup(broker, tmp_path):
    """<DATETIME> to the second: a new name each second is a rotation (each file named by the
    second it was opened in); SIGHUP closes the open file, which moves to the output dir at
    once, and the next message opens a new one."""
    topic = "by_second"
    out_dir, work_dir = str(tmp_path / "out"), str(tmp_path / "work")
    create_channel(broker, topic, "nsq_to_file")
    p = Proc(to_file_args(broker, out_dir, work_dir, topic, "--datetime-format=%Y%m%d%H%M%S",
                          "--max-in-flight=1"), str(tmp_path), "to_file")
    lines = [b"s%03d" % i for i in range(25)]
    r = to_nsq([broker.tcp_address], topic, b"\n".join(lines) + b"\n", "--rate", "10")
    assert r.returncode == 0, r.stderr
    wait_until(lambda: drained(broker, topic, "nsq_to_file"), 60, "drained")
    files_before = archived(out_dir)[0]
    assert len(files_before) >= 2, "a new second, a new file: %s" % files_before
    p.proc.send_signal(signal.SIGHUP)
    wait_until(lambda: os.listdir(work_dir) == [], 30, "the open file closed and moved")
    mpub(broker, topic, [b"after-hup"])
    wait_until(lambda: os.listdir(work_dir) != [], 30, "a new file opened")
    assert p.stop() == 0, p.stderr()
    files, records = archived(out_dir)
    assert sorted(records) == sorted(lines + [b"after-hup"])
    assert len(files) == len(set(files)) >= len(files_before) + 1
