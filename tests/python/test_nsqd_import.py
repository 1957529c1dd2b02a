"""The broker takes over an nsqd data directory (issue 42), tested on directories real nsqd wrote.

tests/fixtures/nsqd-data/v<version>/data is what nsqd 1.2.1 / 1.3.0 left at a clean stop, and
expected.json what that nsqd itself then delivered from it (see that folder's README). Started
with `--data-path` on a copy, the broker must show the same topics, channels and paused state,
deliver on each channel exactly the messages nsqd delivered there (ID, body, attempts,
timestamp; none missing, none twice), leave nsqd's files byte for byte as they were, and not
import them again at its next start; until the unpause, paused channels deliver nothing and a
paused topic's channels their own queues only. The same for the smaller scenarios (a topic
without channels, an nsqd without topics, queues over several files). Also: `broker
import-nsqd` (--dry-run: counts, nothing written; into a stopped broker's data path; staged for
a running broker's next start), damaged queue records (skipped and counted, the rest
delivered) and nsqd.dat versions it does not know (refused, the directory left as it was).

With NSQD_BIN naming an nsqd binary, the same checks also run on a directory that nsqd writes
live during the test (make_fixtures.py's scenario and ground truth):

    NSQD_BIN=/path/to/nsqd tests/.venv/bin/python -m pytest tests/python/test_nsqd_import.py -q \
        --shards 2 -k live
"""

import collections
import hashlib
import json
import os
import re
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

import pytest

from brokerhttp import http
from conftest import REPO, Broker, broker_bin
from nsqwire import Conn

FIXTURES = os.path.join(REPO, "tests", "fixtures", "nsqd-data")
sys.path.insert(0, FIXTURES)

import make_fixtures  # noqa: E402  (the live form plays the fixtures' own scenario)

VERSIONS = sorted(d[1:] for d in os.listdir(FIXTURES) if re.fullmatch(r"v\d+\.\d+\.\d+", d))
NSQD_BIN = os.environ.get("NSQD_BIN")
# A drain ends this long after the last message once the expected count has arrived.
QUIET = 1.0
DRAIN_TIMEOUT = 20.0
# A take-over is two starts and three drains of a few seconds each: room for a loaded host.
TAKE_OVER_TIMEOUT = 120
# The import's summary line; a dry run prints it without "imported" (it imports nothing).
SUMMARY = re.compile(r"imported nsqd (\S+) data from (.+?): (\d+) topics, (\d+) channels, "
                     r"(\d+) messages, (\d+) bytes, (\d+) damaged records skipped")
DRY_SUMMARY = re.compile(r"^nsqd (\S+) data from (.+?): (\d+) topics, (\d+) channels, "
                         r"(\d+) messages, (\d+) bytes, (\d+) damaged records skipped", re.M)


# -- nsqd's files, read here only to know what to expect ----------------------------------------

def queue_meta(data, queue):
    """(depth, read file, read pos, write file, write pos) of a disk queue's .meta.dat."""
    with open(os.path.join(data, "%s.diskqueue.meta.dat" % queue)) as f:
        depth, read, write = f.read().split("\n")[:3]
    rf, rp = read.split(",")
    wf, wp = write.split(",")
    return int(depth), int(rf), int(rp), int(wf), int(wp)


def queue_records(data, queue):
    """[(file, offset of the length prefix, id, body)] of the records a queue still holds, from
    the read position its .meta.dat gives."""
    _, rf, rp, wf, _ = queue_meta(data, queue)
    out = []
    for num in range(rf, wf + 1):
        path = os.path.join(data, "%s.diskqueue.%06d.dat" % (queue, num))
        if not os.path.exists(path):
            continue
        with open(path, "rb") as f:
            buf = f.read()
        pos = rp if num == rf else 0
        while pos + 4 <= len(buf):
            (size,) = struct.unpack(">I", buf[pos:pos + 4])
            if size < 26 or pos + 4 + size > len(buf):
                break  # damaged here (only the damage tests make such files)
            rec = buf[pos + 4:pos + 4 + size]
            out.append((path, pos, rec[10:26].decode(), rec[26:].decode()))
            pos += 4 + size
    return out


def nsqd_queues(data):
    """Every disk queue name in an nsqd data directory (topic and `topic:channel`)."""
    return sorted(n[:-len(".diskqueue.meta.dat")] for n in os.listdir(data)
                  if n.endswith(".diskqueue.meta.dat"))


def owed_record_count(data):
    return sum(len(queue_records(data, q)) for q in nsqd_queues(data))


def owed_body_bytes(data):
    return sum(len(r[3]) for q in nsqd_queues(data) for r in queue_records(data, q))


def tree(path):
    """{relative path: sha256 or 'dir'} of everything under path."""
    out = {}
    for root, dirs, files in os.walk(path):
        for d in dirs:
            out[os.path.relpath(os.path.join(root, d), path)] = "dir"
        for n in files:
            p = os.path.join(root, n)
            with open(p, "rb") as f:
                out[os.path.relpath(p, path)] = hashlib.sha256(f.read()).hexdigest()
    return out


def nsqd_files(data):
    """{name: sha256} of nsqd's own files in a data directory."""
    return {n: h for n, h in tree(data).items()
            if n == "nsqd.dat" or re.fullmatch(r"[^/]+\.diskqueue\.(meta|\d{6})\.dat", n)}


# -- the broker ---------------------------------------------------------------------------------

def broker_on(workdir, shards, source):
    """A broker (not started) whose --data-path is workdir/data, a copy of `source`."""
    shutil.copytree(source, os.path.join(workdir, "data"))
    return Broker(shards, [], workdir)


def stats(broker):
    status, body = http(broker, "GET", "/stats?format=json")
    assert status == 200, body
    return {t["topic_name"]: t for t in json.loads(body)["topics"]}


def layout(broker):
    """{topic: (paused, {channel: paused})} as /stats shows it."""
    return {name: (t["paused"], {c["channel_name"]: c["paused"] for c in t["channels"]})
            for name, t in stats(broker).items()}


def expected_layout(expected):
    return {name: (t["paused"], {c: ch["paused"] for c, ch in t["channels"].items()})
            for name, t in expected["topics"].items()}


def unpause_all(broker, expected):
    for topic, t in expected["topics"].items():
        if t["paused"]:
            assert http(broker, "POST", "/topic/unpause?topic=%s" % topic)[0] == 200
        for channel, c in t["channels"].items():
            if c["paused"]:
                target = "/channel/unpause?topic=%s&channel=%s" % (topic, channel)
                assert http(broker, "POST", target)[0] == 200


def drain_channel(broker, topic, channel, want, out):
    """Every message the channel delivers, each FINed, until `want` have come and QUIET seconds
    pass without another (or DRAIN_TIMEOUT): out[(topic, channel)] = [(id, body, attempts, ts)]."""
    got = out[(topic, channel)] = []
    with Conn(broker.addr) as c:
        c.sub(topic, channel, rdy=1000)
        deadline = time.monotonic() + DRAIN_TIMEOUT
        while time.monotonic() < deadline:
            wait = QUIET if len(got) >= want else deadline - time.monotonic()
            try:
                m = c.read_message(timeout=max(0.0, min(wait, deadline - time.monotonic())))
            except socket.timeout:
                if len(got) >= want:
                    break
                continue
            c.fin(m.id)
            got.append((m.id.decode(), m.body.decode(), m.attempts, m.timestamp))
        # CLOSE_WAIT answered: every FIN before it was handled (none is lost at the stop).
        make_fixtures.close_cleanly(c)


def drain_all(broker, want):
    """Drains every channel of `want` ({(topic, channel): count}) side by side."""
    out, errors = {}, {}

    def run(topic, channel, n):
        try:
            drain_channel(broker, topic, channel, n, out)
        except Exception as e:  # reported by the caller's thread
            errors[(topic, channel)] = e

    threads = [threading.Thread(target=run, args=(t, c, n), daemon=True)
               for (t, c), n in want.items()]
    for th in threads:
        th.start()
    for th in threads:
        th.join(DRAIN_TIMEOUT + 15)
    assert not errors, "drains that failed: %r" % errors
    missing = [k for k in want if k not in out]
    assert not missing, "drains that did not run: %s" % missing
    return out


def expected_messages(expected):
    """{(topic, channel): Counter of (id, body, attempts, timestamp)}; a topic without channels
    has its `first_channel`, the channel a SUB makes, which nsqd gives the topic's queue."""
    def counter(c):
        return collections.Counter(
            (m["id"], m["body"], m["attempts"], m["timestamp"]) for m in c["messages"])
    out = {}
    for topic, t in expected["topics"].items():
        for channel, c in t["channels"].items():
            out[(topic, channel)] = counter(c)
        if "first_channel" in t:
            out[(topic, t["first_channel"]["name"])] = counter(t["first_channel"])
    return out


def assert_delivered(got, want):
    for key, counter in want.items():
        have = collections.Counter(got[key])
        missing, extra = counter - have, have - counter
        assert not missing and not extra, (
            "%s/%s: %d expected, %d delivered\nmissing: %s\nextra (or twice): %s"
            % (key[0], key[1], sum(counter.values()), len(got[key]), sorted(missing),
               sorted(extra)))


def summary(broker_log, pattern=SUMMARY):
    found = pattern.findall(broker_log)
    assert len(found) == 1, "want one import summary line in the log:\n" + broker_log
    version, _, topics, channels, messages, nbytes, damaged = found[0]
    return {"version": version, "topics": int(topics), "channels": int(channels),
            "messages": int(messages), "bytes": int(nbytes), "damaged": int(damaged)}


def while_paused(broker, source, expected, drop):
    """Before any unpause, as nsqd: a paused channel delivers nothing, and a channel of a
    paused topic delivers its own queue's messages only (the topic's queue waits for the
    unpause). Returns what they delivered, {(topic, channel): [(id, body, attempts, ts)]}."""
    plan = {}
    for topic, t in expected["topics"].items():
        for channel, c in t["channels"].items():
            if c["paused"]:
                plan[(topic, channel)] = collections.Counter()
            elif t["paused"]:
                own = collections.Counter(
                    r[2:] for r in queue_records(source, "%s:%s" % (topic, channel)))
                plan[(topic, channel)] = own - collections.Counter(drop.get((topic, channel), []))
    got = drain_all(broker, {k: sum(v.values()) for k, v in plan.items()})
    for key, own in plan.items():
        have = collections.Counter(m[:2] for m in got[key])
        assert have == own, "%s/%s while paused: want %s, got %s" % (key[0], key[1],
                                                                      sorted(own), sorted(have))
    return got


def delivers_exactly(broker, source, expected, want, drop=None):
    """Paused state honoured until the unpause, then every channel delivers `want` exactly."""
    early = while_paused(broker, source, expected, drop or {})
    unpause_all(broker, expected)
    got = drain_all(broker, {k: sum(v.values()) - len(early.get(k, [])) for k, v in want.items()})
    for key, msgs in early.items():
        got[key] = msgs + got[key]
    assert_delivered(got, want)


def take_over(source, expected, shards, drop=None):
    """The broker on a copy of `source`: layout, every owed message once, nsqd's files untouched,
    no import at the next start. `drop` ({(topic, channel): [(id, body)]}) are damaged records
    the copy no longer owes; the summary must count them. Returns the first start's summary."""
    drop = drop or {}
    want = expected_messages(expected)
    for key, records in drop.items():
        for rid, body in records:
            victims = [m for m in want[key] if m[:2] == (rid, body)]
            assert len(victims) == 1, (key, rid, body)
            want[key] -= collections.Counter(victims)
    workdir = tempfile.mkdtemp(prefix="broker-nsqd-import-")
    brokers = []
    try:
        b = broker_on(workdir, shards, source)
        before = nsqd_files(b.data_path)
        assert before, "no nsqd files in %s" % source
        brokers.append(b)
        b.start()
        assert layout(b) == expected_layout(expected), b.stderr()
        s = summary(b.stderr())
        assert (s["version"], s["topics"], s["channels"]) == (
            expected["nsqd_version"], len(expected["topics"]),
            sum(len(t["channels"]) for t in expected["topics"].values())), s
        assert s["damaged"] == sum(len(v) for v in drop.values()), s
        delivers_exactly(b, source, expected, want, drop)
        assert b.stop() == 0, b.stderr()
        assert nsqd_files(b.data_path) == before, "nsqd's files changed"

        again = Broker(shards, [], workdir)
        brokers.append(again)
        again.start()
        assert not SUMMARY.search(again.stderr()), "imported twice:\n" + again.stderr()
        assert set(layout(again)) == set(expected["topics"]), again.stderr()
        for name, t in stats(again).items():
            for c in t["channels"]:
                assert (c["depth"], c["in_flight_count"], c["deferred_count"]) == (0, 0, 0), \
                    (name, c["channel_name"], c["depth"], c["in_flight_count"])
        unpause_all(again, expected)
        got = drain_all(again, {k: 0 for k in want})
        assert all(not v for v in got.values()), "delivered again after a restart: %s" % got
        assert again.stop() == 0, again.stderr()
        assert nsqd_files(again.data_path) == before, "nsqd's files changed"
        return s
    except BaseException:
        for br in brokers:
            sys.stderr.write("broker %s stderr:\n%s\n" % (br.tcp_address, br.stderr()))
        raise
    finally:
        for br in brokers:
            if br.alive():
                br.stop()
        shutil.rmtree(workdir, ignore_errors=True)


# Besides v<version>/data: v<version>/<scenario>/data (make_fixtures.SCENARIOS).
EXTRA_SCENARIOS = ["no-channels", "empty", "multi-file"]


def fixture(version, scenario=""):
    d = os.path.join(FIXTURES, "v%s" % version, scenario)
    with open(os.path.join(d, "expected.json")) as f:
        return os.path.join(d, "data"), json.load(f)


@pytest.fixture(scope="module", params=sorted(make_fixtures.SCENARIOS))
def live(request):
    """A data directory NSQD_BIN writes now with one of make_fixtures' scenarios, and its
    ground truth."""
    if not NSQD_BIN:
        pytest.skip("set NSQD_BIN to an nsqd binary for the live form")
    version = make_fixtures.nsqd_version(NSQD_BIN)
    d = tempfile.mkdtemp(prefix="nsqd-live-")
    data = os.path.join(d, "data")
    play, _ = make_fixtures.SCENARIOS[request.param]
    play(NSQD_BIN, data, log=lambda *_: None)
    expected = make_fixtures.ground_truth(NSQD_BIN, data, version)
    yield data, expected
    shutil.rmtree(d, ignore_errors=True)


# -- the tests ----------------------------------------------------------------------------------

@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.timeout(TAKE_OVER_TIMEOUT)
def test_the_broker_delivers_what_nsqd_owed_once(version, shards):
    data, expected = fixture(version)
    s = take_over(data, expected, shards)
    assert (s["messages"], s["bytes"]) == (owed_record_count(data), owed_body_bytes(data)), s


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("scenario", EXTRA_SCENARIOS)
@pytest.mark.timeout(TAKE_OVER_TIMEOUT)
def test_smaller_nsqd_scenarios_are_taken_over(scenario, version, shards):
    """no-channels: nsqd 1.3 writes `"channels": null` for a topic without channels, whose
    queue waits for the first channel made, which gets it all. empty: nsqd 1.3 writes
    `"topics": null` when it has none. multi-file: queues over several files, the first ones
    consumed and gone, read positions inside later files."""
    data, expected = fixture(version, scenario)
    s = take_over(data, expected, shards)
    assert (s["messages"], s["bytes"]) == (owed_record_count(data), owed_body_bytes(data)), s


@pytest.mark.timeout(TAKE_OVER_TIMEOUT + 60)
def test_live_nsqd_directory_is_taken_over(live, shards):
    data, expected = live
    s = take_over(data, expected, shards)
    assert (s["messages"], s["bytes"]) == (owed_record_count(data), owed_body_bytes(data)), s


@pytest.mark.parametrize("version", VERSIONS)
def test_dry_run_prints_the_counts_and_writes_nothing(version):
    data, expected = fixture(version)
    d = tempfile.mkdtemp(prefix="broker-nsqd-dry-")
    try:
        src, dest = os.path.join(d, "nsqd"), os.path.join(d, "broker")
        shutil.copytree(data, src)
        os.makedirs(dest)
        before = tree(src)
        r = subprocess.run([broker_bin(), "import-nsqd", "--dry-run", "--from", src,
                            "--data-path", dest], capture_output=True, text=True, timeout=30)
        out = r.stdout + r.stderr
        assert r.returncode == 0, out
        s = summary(out, DRY_SUMMARY)
        # Messages: the records nsqd's queues still hold (a topic queue's counted once);
        # bytes: their bodies.
        assert s == {"version": expected["nsqd_version"], "topics": 2, "channels": 4,
                     "messages": owed_record_count(data), "bytes": owed_body_bytes(data),
                     "damaged": 0}, out
        for topic, t in expected["topics"].items():
            owed = len(queue_records(data, topic))
            assert re.search(r"^topic %s\b.*: %d messages in its queue" % (topic, owed), out,
                             re.M), out
            for channel in t["channels"]:
                owed = len(queue_records(data, "%s:%s" % (topic, channel)))
                assert re.search(r"^ +channel %s\b.*: %d messages of its own" % (channel, owed),
                                 out, re.M), out
        assert not SUMMARY.search(out), "a dry run says it imported:\n" + out
        assert os.listdir(dest) == [], "a dry run wrote into --data-path: %s" % os.listdir(dest)
        assert tree(src) == before, "a dry run changed --from"
    finally:
        shutil.rmtree(d, ignore_errors=True)


def damaged_copy(version, damage):
    """A scratch copy of a fixture whose `orders:shipping` queue `damage(records)` damages,
    returning the record it spoils: (scratch dir, copy, expected, drop)."""
    data, expected = fixture(version)
    d = tempfile.mkdtemp(prefix="nsqd-damaged-")
    copy = os.path.join(d, "data")
    shutil.copytree(data, copy)
    queue = "orders:shipping"
    records = queue_records(copy, queue)
    assert len(records) > 4, records
    victim = damage(records)
    return d, copy, expected, {("orders", "shipping"): [victim[2:]]}


def take_over_damaged(version, shards, damage):
    """take_over() on a copy of the fixture damaged by damage(records), without the victim."""
    d, copy, expected, drop = damaged_copy(version, damage)
    try:
        take_over(copy, expected, shards, drop=drop)
    finally:
        shutil.rmtree(d, ignore_errors=True)


@pytest.mark.slow
@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.timeout(TAKE_OVER_TIMEOUT)
def test_a_record_with_an_impossible_length_is_skipped_the_rest_delivered(version, shards):
    def damage(records):
        path, pos, _, _ = victim = records[2]
        with open(path, "r+b") as f:
            f.seek(pos)
            f.write(b"\xff\xff\xff\xff")
        return victim

    take_over_damaged(version, shards, damage)


@pytest.mark.slow
@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.timeout(TAKE_OVER_TIMEOUT)
def test_a_queue_file_cut_inside_its_last_record_loses_only_that_record(version, shards):
    def damage(records):
        path, pos, _, _ = victim = records[-1]
        with open(path, "rb") as f:
            f.seek(pos)
            (size,) = struct.unpack(">I", f.read(4))
        os.truncate(path, pos + 4 + size // 2)
        return victim

    take_over_damaged(version, shards, damage)


@pytest.mark.parametrize("bad", ["0.3.8", "2.0.0"])
def test_an_unknown_nsqd_version_is_refused_and_nothing_written(bad, shards):
    data, _ = fixture(VERSIONS[-1])
    workdir = tempfile.mkdtemp(prefix="broker-nsqd-version-")
    b = broker_on(workdir, shards, data)
    try:
        path = os.path.join(b.data_path, "nsqd.dat")
        with open(path) as f:
            meta = json.load(f)
        meta["version"] = bad
        with open(path, "w") as f:
            json.dump(meta, f)
        before = tree(b.data_path)
        with pytest.raises(RuntimeError, match="exited with"):
            b.start()
        assert b.proc.returncode not in (0, None), b.stderr()
        assert 'nsqd version "%s"' % bad in b.stderr(), b.stderr()
        assert tree(b.data_path) == before, "the refused directory was changed"
    finally:
        b.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def test_an_nsqd_dat_that_is_not_nsqd_json_is_refused_and_nothing_written(shards):
    data, _ = fixture(VERSIONS[-1])
    workdir = tempfile.mkdtemp(prefix="broker-nsqd-notjson-")
    b = broker_on(workdir, shards, data)
    try:
        with open(os.path.join(b.data_path, "nsqd.dat"), "w") as f:
            f.write('{"topics": [')
        before = tree(b.data_path)
        with pytest.raises(RuntimeError, match="exited with"):
            b.start()
        assert b.proc.returncode not in (0, None), b.stderr()
        assert "nsqd.dat" in b.stderr(), b.stderr()
        assert tree(b.data_path) == before, "the refused directory was changed"
    finally:
        b.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def import_nsqd(src, data_path):
    r = subprocess.run([broker_bin(), "import-nsqd", "--from", src, "--data-path", data_path],
                       capture_output=True, text=True, timeout=60)
    return r.returncode, r.stdout + r.stderr


@pytest.mark.timeout(TAKE_OVER_TIMEOUT)
def test_import_nsqd_into_a_stopped_brokers_data_path(shards):
    data, expected = fixture(VERSIONS[-1])
    workdir = tempfile.mkdtemp(prefix="broker-nsqd-explicit-")
    b = Broker(shards, [], workdir)
    try:
        src = os.path.join(workdir, "nsqd")
        shutil.copytree(data, src)
        before = tree(src)
        code, out = import_nsqd(src, b.data_path)
        assert code == 0, out
        assert summary(out, DRY_SUMMARY)["messages"] == owed_record_count(data), out
        assert "imported into" in out, out
        assert tree(src) == before, "import-nsqd changed --from"
        b.start()
        assert layout(b) == expected_layout(expected), b.stderr()
        delivers_exactly(b, src, expected, expected_messages(expected))
    finally:
        b.stop()
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.mark.timeout(TAKE_OVER_TIMEOUT)
def test_import_nsqd_for_a_running_broker_is_applied_at_its_next_start(shards):
    data, expected = fixture(VERSIONS[-1], "multi-file")
    workdir = tempfile.mkdtemp(prefix="broker-nsqd-staged-")
    b = Broker(shards, [], workdir)
    again = None
    try:
        src = os.path.join(workdir, "nsqd")
        shutil.copytree(data, src)
        b.start()
        code, out = import_nsqd(src, b.data_path)
        assert code == 0, out
        assert "staged" in out and "next start" in out, out
        assert layout(b) == {}, "a staged import shows before the restart"
        assert b.stop() == 0, b.stderr()
        again = Broker(shards, [], workdir)
        again.start()
        assert layout(again) == expected_layout(expected), again.stderr()
        delivers_exactly(again, src, expected, expected_messages(expected))
    finally:
        b.stop()
        if again is not None:
            again.stop()
        shutil.rmtree(workdir, ignore_errors=True)
