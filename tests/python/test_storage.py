"""Segment storage through the wire: clean restarts lose nothing (with messages ready, in flight,
requeued and deferred at the stop), a torn or corrupt segment never delivers a garbled body, and
SIGKILL under durable publishing loses no acknowledged message."""

import glob
import os
import random
import socket
import struct
import threading
import time

import pytest

from conftest import Broker
from nsqwire import Conn, FRAME_MESSAGE, FRAME_RESPONSE, Message, mpub_bytes

TOPIC = "stored"
CHANNELS = ("a", "b", "c")


def publish(addr, n, prefix="m", batch=500):
    bodies = ["%s-%d" % (prefix, i) for i in range(n)]
    with Conn(addr) as p:
        for i in range(0, n, batch):
            p.mpub(TOPIC, bodies[i:i + batch])
    return set(bodies)


def drain(addr, channel, expect, timeout=60.0, rdy=2500):
    """Consumes until `expect` bodies were seen (FINing each); returns (seen bodies, attempts)."""
    seen, attempts = set(), {}
    drain.deliveries = 0
    deadline = time.monotonic() + timeout
    with Conn(addr) as c:
        c.sub(TOPIC, channel, rdy=rdy)
        while not expect <= seen:
            left = deadline - time.monotonic()
            assert left > 0, "channel %s: %d of %d bodies after %.0fs" % (
                channel, len(seen & expect), len(expect), timeout)
            ftype, data = c.read_frame(timeout=left)
            if ftype != FRAME_MESSAGE:
                continue
            m = Message.parse(data)
            body = m.body.decode()
            drain.deliveries += 1
            seen.add(body)
            attempts[body] = m.attempts
            c.fin(m.id)
    return seen, attempts


def create_channels(addr):
    for ch in CHANNELS:
        with Conn(addr) as c:
            c.sub(TOPIC, ch)


@pytest.mark.slow
@pytest.mark.parametrize("mem_queue_size", [0, 100, 10000])
def test_clean_restart_keeps_every_message_for_every_channel(restartable, mem_queue_size):
    r = restartable("--mem-queue-size=%d" % mem_queue_size, "--max-bytes-per-file=1048576")
    r.start()
    create_channels(r.addr)
    expect = publish(r.addr, 100_000)
    r.stop()
    segments = glob.glob(os.path.join(r.data_path, TOPIC, "*.seg"))
    assert len(segments) > 1, "100,000 messages should span several 1 MiB segments"
    r.start()
    for ch in CHANNELS:
        seen, _ = drain(r.addr, ch, expect)
        assert seen == expect


def test_in_flight_requeued_and_deferred_survive_a_clean_stop(restartable):
    r = restartable("--mem-queue-size=100")
    r.start()
    create_channels(r.addr)
    expect = publish(r.addr, 1000)
    with Conn(r.addr) as p:
        p.dpub(TOPIC, 1500, "deferred-dpub")
    expect.add("deferred-dpub")
    held = Conn(r.addr)
    held.sub(TOPIC, "a", rdy=30)
    msgs = []
    while len(msgs) < 30:
        ftype, data = held.read_frame()
        if ftype == FRAME_MESSAGE:
            msgs.append(Message.parse(data))
    for m in msgs[:10]:
        held.req(m.id, 0)          # requeued
    for m in msgs[10:20]:
        held.req(m.id, 2000)       # deferred by REQ
    # msgs[20:30] stay in flight across the stop.
    held.cmd("NOP")
    time.sleep(0.3)
    r.stop()
    held.close()
    r.start()
    started = time.monotonic()
    for ch in CHANNELS:
        seen, attempts = drain(r.addr, ch, expect)
        assert seen == expect
        if ch == "a":
            for m in msgs:
                assert attempts[m.body.decode()] >= 2, "an owed message keeps its attempts"
    assert time.monotonic() - started >= 1.0, "deferred messages wait out their delay"


def test_restart_with_another_shard_count_keeps_everything(restartable, shards):
    r = restartable("--mem-queue-size=50")
    r.start()
    create_channels(r.addr)
    expect = publish(r.addr, 5000)
    r.stop()
    r.start(shards=4 if shards != 4 else 1)
    for ch in CHANNELS:
        seen, _ = drain(r.addr, ch, expect)
        assert seen == expect


def test_metadata_survives_restart(restartable):
    r = restartable()
    r.start()
    create_channels(r.addr)
    r.stop()
    r.start()
    # Channels exist again before any consumer: a publish reaches all three.
    expect = publish(r.addr, 10)
    for ch in CHANNELS:
        seen, _ = drain(r.addr, ch, expect, timeout=10)
        assert seen == expect


def logged(broker, text, timeout=15.0):
    """Whether `text` shows up in the broker's log within `timeout`: the ports listen (the
    main thread opens them) before the shards have recovered their topics and logged it."""
    deadline = time.monotonic() + timeout
    while text not in broker.stderr():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _segments(data_path):
    return sorted(glob.glob(os.path.join(data_path, TOPIC, "*.seg")))


# Where a record's body starts, by segment version (broker/src/storage/segment.rs).
BODY_AT = {1: 48, 2: 56}
HEADER_LEN = {1: 32, 2: 36}
FRAME_LEN = {1: 8, 2: 24}


def _segment_records(data):
    """The version of an undamaged segment's bytes and its records' (start, end, body)."""
    version = struct.unpack(">I", data[8:12])[0]
    off, records = HEADER_LEN[version], []
    len_at = 0 if version == 1 else 4
    while off + BODY_AT[version] <= len(data):
        (payload,) = struct.unpack(">I", data[off + len_at:off + len_at + 4])
        end = off + FRAME_LEN[version] + payload
        if payload == 0 or end > len(data):
            break  # the zero padding of a direct write
        records.append((off, end, bytes(data[off + BODY_AT[version]:end])))
        off = end
    return version, records


def test_torn_tail_is_cut_and_never_delivered(restartable):
    r = restartable("--mem-queue-size=0")
    r.start()
    create_channels(r.addr)
    expect = publish(r.addr, 200, prefix="torn")
    r.stop()
    seg = _segments(r.data_path)[-1]
    size = os.path.getsize(seg)
    assert size > 64, "segment %s has %d bytes: %s" % (seg, size, os.listdir(os.path.dirname(seg)))
    with open(seg, "r+b") as f:
        f.truncate(size - 7)  # cut into the last record
    r.start()
    assert logged(r.broker, "torn tail cut"), r.broker.stderr()[-2000:]
    lost = "torn-199"
    seen, _ = drain(r.addr, "a", expect - {lost})
    assert lost not in seen
    assert all(b.startswith("torn-") for b in seen)
    # The log continues cleanly after the cut.
    more = publish(r.addr, 5, prefix="after")
    seen, _ = drain(r.addr, "b", (expect - {lost}) | more)
    assert lost not in seen


def test_flipped_bytes_are_skipped_not_delivered(restartable):
    r = restartable("--mem-queue-size=0")
    r.start()
    create_channels(r.addr)
    expect = publish(r.addr, 100, prefix="flip")
    r.stop()
    seg = _segments(r.data_path)[0]
    with open(seg, "r+b") as f:
        data = bytearray(f.read())
        pos = data.find(b"flip-50")
        assert pos > 0
        data[pos + 2] ^= 0xFF
        f.seek(0)
        f.write(data)
    r.start()
    assert logged(r.broker, "corrupt data skipped"), r.broker.stderr()[-2000:]
    seen, _ = drain(r.addr, "a", expect - {"flip-50"}, timeout=20)
    assert "flip-50" not in seen
    assert all(b.startswith("flip-") and b[5:].isdigit() for b in seen), "no garbled body"


def test_damage_while_running_loses_only_the_damaged_message(restartable):
    """A record damaged on disk while the broker runs (after start-up, before any reader
    touched it) costs that message and no other, even when the next record starts in the next
    256 KiB read block: reading resynchronises on it instead of jumping to the next index
    point (up to 255 records further)."""
    r = restartable("--mem-queue-size=0")
    r.start()
    create_channels(r.addr)
    pad = "x" * 300
    bodies = ["live-%d-%s" % (i, pad) for i in range(2000)]
    with Conn(r.addr) as p:
        for i in range(0, len(bodies), 250):
            p.mpub(TOPIC, bodies[i:i + 250])
    # Publishes are answered before the flusher writes them (and creates the segment file).
    def written():
        segs = _segments(r.data_path)
        return segs and b"live-1999-" in open(segs[0], "rb").read()

    deadline = time.monotonic() + 15
    while not written():
        assert time.monotonic() < deadline, "the last record never reached the segment file"
        time.sleep(0.05)
    seg = _segments(r.data_path)[0]
    data = open(seg, "rb").read()
    starts = [data.find(b"live-%d-" % i) - BODY_AT[2] for i in range(len(bodies))]
    assert all(s > 0 for s in starts)
    block = 256 * 1024
    damaged = next(i for i in range(len(bodies) - 1) if starts[i] < block < starts[i + 1])
    assert damaged % 256 < 250, "the next index point is right after it: pick another block"
    with open(seg, "r+b") as f:
        f.seek(starts[damaged] + BODY_AT[2] + 2)
        f.write(b"?")
        f.flush()
        os.fsync(f.fileno())
    lost = bodies[damaged]
    seen, _ = drain(r.addr, "a", set(bodies) - {lost}, timeout=30)
    assert lost not in seen
    assert all(b.startswith("live-") and b.endswith(pad) for b in seen), "no garbled body"
    assert logged(r.broker, "corrupt record while reading; skipped"), r.broker.stderr()[-2000:]


class CrashPublisher(threading.Thread):
    """Publishes MPUBs of 20 as fast as the broker answers, PIPELINE deep on one connection, until
    the connection breaks (the broker was killed) or `stop` is set. A body is counted as
    acknowledged only once its OK was read."""

    PIPELINE = 8
    BATCH = 20

    def __init__(self, addr, tag, stop):
        super().__init__(daemon=True)
        self.addr, self.tag, self.stop = addr, tag, stop
        self.acked = []
        self.error = None

    def run(self):
        n = 0
        sent = []   # batches sent, oldest first, answers not read yet
        try:
            with Conn(self.addr, timeout=5) as p:
                while not self.stop.is_set():
                    while len(sent) < self.PIPELINE:
                        batch = ["%s-%d" % (self.tag, n + i) for i in range(self.BATCH)]
                        n += self.BATCH
                        p.send(mpub_bytes(TOPIC, batch))
                        sent.append(batch)
                    ftype, data = p.read_frame(timeout=5)
                    if (ftype, data) != (FRAME_RESPONSE, b"OK"):
                        self.error = "MPUB answered %r %r" % (ftype, data)
                        return
                    self.acked.extend(sent.pop(0))
        except (ConnectionError, socket.timeout, OSError):
            pass   # the broker was killed


def drain_until_quiet(addr, channel, expect, quiet=5.0, timeout=240.0):
    """Consumes (FINing each) until every body of `expect` was seen, or nothing arrived for
    `quiet` seconds; returns (bodies seen, deliveries)."""
    seen, deliveries = set(), 0
    deadline = time.monotonic() + timeout
    with Conn(addr) as c:
        c.sub(TOPIC, channel, rdy=2500)
        while not expect <= seen and time.monotonic() < deadline:
            try:
                ftype, data = c.read_frame(timeout=quiet)
            except socket.timeout:
                break
            if ftype != FRAME_MESSAGE:
                continue
            m = Message.parse(data)
            deliveries += 1
            seen.add(m.body.decode())
            c.fin(m.id)
    return seen, deliveries


def crash_under_publishing(r, rounds=20, seconds=(0.3, 0.6)):
    """`rounds` times: publishers on every CPU (so publishes reach the topic's owner from every
    shard), SIGKILL after a random moment of full-speed publishing, restart. Returns the bodies
    acknowledged."""
    import random
    rng = random.Random(1)
    cpus = sorted(os.sched_getaffinity(0))
    acked = set()
    for round_ in range(rounds):
        stop = threading.Event()
        pubs = []
        for i, cpu in enumerate(cpus * 2):
            before = os.sched_getaffinity(0)
            os.sched_setaffinity(0, {cpu})   # steers the connection to that CPU's shard
            try:
                pub = CrashPublisher(r.addr, "r%d-p%d" % (round_, i), stop)
                pub.start()
                pubs.append(pub)
            finally:
                os.sched_setaffinity(0, before)
        time.sleep(rng.uniform(*seconds))
        r.kill()
        stop.set()
        for pub in pubs:
            pub.join(10)
            assert pub.error is None, pub.error
            acked.update(pub.acked)
        r.start()
    return acked


@pytest.mark.parametrize("stop", ["clean", "sigkill"])
def test_a_smaller_max_msg_size_keeps_every_stored_message(restartable, stop):
    """Restarting with a smaller --max-msg-size destroys nothing: stored records are judged by
    the segment format, never by the current flags, so messages over the new limit (accepted
    and stored under the old one) are delivered too, after a clean stop or a SIGKILL (with
    --durable, so every acknowledged publish is on disk when the broker dies)."""
    large = restartable("--mem-queue-size=0", "--durable")
    large.start()
    create_channels(large.addr)
    sizes = [20, 900, 1001, 5000, 100_000, 900_000]
    bodies = []
    with Conn(large.addr) as p:
        for i in range(60):
            prefix = "size-%d-" % i
            bodies.append(prefix + "x" * (sizes[i % len(sizes)] - len(prefix)))
            p.pub(TOPIC, bodies[-1])
    if stop == "clean":
        large.stop()
    else:
        large.kill()
    small = restartable("--mem-queue-size=0", "--max-msg-size=1000")
    small.start()
    seen, _ = drain(small.addr, "a", set(bodies), timeout=30, rdy=5)
    assert seen == set(bodies)
    err = small.broker.stderr()
    assert "corrupt" not in err and "torn tail" not in err, err[-2000:]


def test_a_flipped_length_bit_loses_only_its_record(restartable):
    """One flipped bit in a record's length, making it point past the end of the newest
    segment, costs that record alone: the records after it are found (not cut as a torn
    tail) and delivered."""
    r = restartable("--mem-queue-size=0")
    r.start()
    create_channels(r.addr)
    expect = publish(r.addr, 300, prefix="len")
    r.stop()
    seg = _segments(r.data_path)[-1]
    data = bytearray(open(seg, "rb").read())
    version, records = _segment_records(data)
    start, end, body = next(rec for rec in records if rec[2] == b"len-100")
    len_at = start if version == 1 else start + 4
    data[len_at + 1] ^= 0x01  # 64 KiB more
    assert start + (end - start) + 65536 > len(data), "the length must point past the end"
    with open(seg, "r+b") as f:
        f.write(data)
    r.start()
    assert logged(r.broker, "corrupt data skipped"), r.broker.stderr()[-2000:]
    seen, _ = drain(r.addr, "a", expect - {"len-100"}, timeout=20)
    assert "len-100" not in seen
    assert all(b.startswith("len-") and b[4:].isdigit() for b in seen), "no garbled body"
    assert b"len-299" in open(seg, "rb").read(), "the intact tail stays on disk"


@pytest.mark.parametrize("byte", [3, 11, 20])
def test_a_damaged_segment_header_hides_none_of_its_records(restartable, byte):
    """A bad byte in a segment's header (magic, version, base seq) hides none of its records:
    the base seq is in the file name and the records carry their own. The oldest and the
    newest segment are damaged; the newest is still appended to, and a second start reads
    everything again."""
    r = restartable("--mem-queue-size=0", "--max-bytes-per-file=65536")
    r.start()
    create_channels(r.addr)
    expect = publish(r.addr, 3000, prefix="hdr")
    r.stop()
    segments = _segments(r.data_path)
    assert len(segments) >= 3
    for seg in (segments[0], segments[-1]):
        with open(seg, "r+b") as f:
            f.seek(byte)
            old = f.read(1)[0]
            f.seek(byte)
            f.write(bytes([old ^ 0x5A]))
    r.start()
    assert logged(r.broker, "damaged segment header"), r.broker.stderr()[-2000:]
    seen, _ = drain(r.addr, "a", expect, timeout=30)
    assert seen == expect
    assert not glob.glob(os.path.join(r.data_path, TOPIC, "*.corrupt"))
    more = publish(r.addr, 5, prefix="after")
    seen, _ = drain(r.addr, "b", expect | more, timeout=30)
    assert seen == expect | more
    r.stop()
    r.start()
    seen, _ = drain(r.addr, "c", expect | more, timeout=30)
    assert seen == expect | more


@pytest.mark.parametrize("seed", range(6))
def test_random_single_byte_damage_loses_at_most_the_damaged_record(restartable, seed):
    """A random byte of a random segment changed (in the header, a record's frame, or
    anywhere): at most the record it falls in is lost, and no garbled body is delivered."""
    rnd = random.Random(seed)
    r = restartable("--mem-queue-size=0", "--max-bytes-per-file=262144")
    r.start()
    create_channels(r.addr)
    bodies = ["rnd-%d-%s" % (i, "z" * rnd.randint(0, 3000)) for i in range(600)]
    with Conn(r.addr) as p:
        for i in range(0, len(bodies), 100):
            p.mpub(TOPIC, bodies[i:i + 100])
    r.stop()
    seg = rnd.choice(_segments(r.data_path))
    data = bytearray(open(seg, "rb").read())
    version, records = _segment_records(data)
    where = rnd.choice(["header", "frame", "anywhere"])
    if where == "header":
        pos = rnd.randrange(HEADER_LEN[version])
    elif where == "frame":
        pos = rnd.choice(records)[0] + rnd.randrange(FRAME_LEN[version])
    else:
        pos = rnd.randrange(len(data))
    data[pos] ^= rnd.randint(1, 255)
    with open(seg, "r+b") as f:
        f.write(data)
    damaged = {body.decode() for start, end, body in records if start <= pos < end}
    r.start()
    seen, _ = drain(r.addr, "a", set(bodies) - damaged, timeout=30)
    assert seen <= set(bodies), "no garbled body"
    assert len(set(bodies) - seen) <= len(damaged) <= 1, (where, pos)


def assert_crashes_lose_nothing(r, what):
    r.start()
    create_channels(r.addr)
    acked = crash_under_publishing(r)
    seen, deliveries = drain_until_quiet(r.addr, "a", acked)
    lost = acked - seen
    # Draining stops once every acknowledged body was seen; extra deliveries are duplicates.
    dupes = deliveries - len(seen)
    print("%s crash test: 20 SIGKILLs, acked=%d lost=%d duplicates=%d unacked-but-delivered=%d"
          % (what, len(acked), len(lost), dupes, len(seen - acked)))
    assert len(acked) > 10000, "too little load to mean anything: %d acknowledged" % len(acked)
    assert not lost, "lost %d acknowledged messages, e.g. %s" % (len(lost), sorted(lost)[:5])


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_sigkill_under_durable_publishing_loses_no_acknowledged_message(restartable):
    """20 SIGKILLs under full-speed pipelined publishing with --durable: every OK'd message
    comes back (an OK is sent after the fsync that covers it)."""
    assert_crashes_lose_nothing(restartable("--durable", "--mem-queue-size=100"), "durable")


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_sigkill_with_mem_queue_size_0_loses_no_acknowledged_message(restartable):
    """20 SIGKILLs under full-speed pipelined publishing with --mem-queue-size 0 (not durable):
    every OK'd message comes back, as with nsqd, which writes each message to its file before
    answering (an OK is sent after the write to the segment file; a process crash leaves what
    was written in the page cache or on the device)."""
    assert_crashes_lose_nothing(restartable("--mem-queue-size=0"), "mem-queue-size 0")


def test_messages_larger_than_a_read_block_come_back_from_disk(restartable):
    """--mem-queue-size 0: every body is read back from the segment through the direct-I/O
    block cache (256 KiB blocks); bodies of 300-900 KB straddle two or more blocks, and one of
    10 MB is larger than the whole cache."""
    import hashlib
    import random
    r = restartable("--mem-queue-size=0", "--max-msg-size=12000000", "--max-body-size=24000000")
    r.start()
    create_channels(r.addr)
    rnd = random.Random(7)
    bodies = [os.urandom(rnd.randint(300_000, 900_000)) for _ in range(11)]
    # One larger than the whole block cache (32 x 256 KiB): read in one fetch round.
    bodies.insert(5, os.urandom(10_000_000))
    small = [b"s-%d" % i for i in range(2000)]
    with Conn(r.addr) as p:
        for i, b in enumerate(bodies):
            p.pub(TOPIC, b)
            p.mpub(TOPIC, small[i * 100:(i + 1) * 100])
        p.mpub(TOPIC, small[1200:])
    want = {hashlib.sha256(b).hexdigest() for b in bodies} | {s.decode() for s in small}
    got = set()
    errors = []
    # Under pytest's 60 s timeout, so a stall reports what the broker holds.
    deadline = time.monotonic() + 45
    with Conn(r.addr) as c:
        c.sub(TOPIC, "a", rdy=50)
        while not want <= got:
            left = deadline - time.monotonic()
            try:
                assert left > 0, "deadline"
                ftype, data = c.read_frame(timeout=left)
            except (AssertionError, socket.timeout):
                pytest.fail("%d of %d after 45 s; errors %r; channel %s\n%s" % (
                    len(got & want), len(want), errors[:5], _channel_stats(r.broker, "a"),
                    r.broker.stderr()[-3000:]))
            if ftype != FRAME_MESSAGE:
                errors.append(data)
                continue
            m = Message.parse(data)
            got.add(m.body.decode() if m.body.startswith(b"s-") and len(m.body) < 10
                    else hashlib.sha256(m.body).hexdigest())
            c.fin(m.id)
    assert got == want, "unexpected bodies: %d" % len(got - want)
    assert _read_cache_bytes(r.broker) > 0, "the bodies came back through the block cache"


def test_crash_after_direct_writes_leaves_no_damage(restartable):
    """Segments are written with direct I/O in whole blocks, zero-padded; a SIGKILL leaves the
    padding behind. Recovery must take it for what it is: no torn tail, nothing skipped."""
    r = restartable("--durable", "--mem-queue-size=10")
    r.start()
    create_channels(r.addr)
    expect = publish(r.addr, 3001, prefix="pad", batch=250)
    seg = _segments(r.data_path)[-1]
    r.kill()
    assert os.path.getsize(seg) % 4096 == 0, "a direct write ends on a block boundary"
    r.start()
    seen, _ = drain(r.addr, "a", expect)
    assert seen == expect
    # Recovery is over (its messages were served): it must not have called the padding damage.
    err = r.broker.stderr()
    assert "torn tail" not in err and "corrupt" not in err, err[-2000:]
    # Recovery already cut the old padding; a new direct write pads the last block again, and
    # the clean stop must trim that.
    publish(r.addr, 1, prefix="after")
    seg = _segments(r.data_path)[-1]
    assert os.path.getsize(seg) % 4096 == 0, "the new write is padded to a block"
    r.stop()
    assert os.path.getsize(seg) % 4096 != 0, "a clean stop trims padding"


def _channel_stats(broker, channel):
    """The channel's counters from /stats (or why they could not be read)."""
    import json
    import urllib.request
    try:
        url = "http://127.0.0.1:%d/stats?format=json&topic=%s" % (broker.http_port, TOPIC)
        with urllib.request.urlopen(url, timeout=5) as resp:
            stats = json.loads(resp.read())
        for t in stats.get("topics", []):
            for ch in t.get("channels", []):
                if ch.get("channel_name") == channel:
                    return {k: v for k, v in ch.items() if k != "clients"}
        return "channel not in /stats"
    except Exception as e:  # a diagnostic: never hide the failure it explains
        return "unreadable /stats: %s" % e


def _read_cache_bytes(broker):
    from brokerhttp import metrics_text, per_shard
    return sum(per_shard(metrics_text(broker), "nsq_shard_read_cache_bytes").values())


@pytest.mark.slow
def test_read_cache_is_given_back_when_readers_stop(restartable):
    """A channel reading behind memory fills the topic's block cache (/metrics
    nsq_shard_read_cache_bytes); once nobody reads, the blocks are dropped within seconds."""
    r = restartable("--mem-queue-size=0")
    r.start()
    create_channels(r.addr)
    expect = publish(r.addr, 20000, prefix="cache")
    seen, _ = drain(r.addr, "a", expect)
    assert seen == expect
    assert _read_cache_bytes(r.broker) > 0, "the drain read through the block cache"
    deadline = time.monotonic() + 30
    while _read_cache_bytes(r.broker) > 0:
        assert time.monotonic() < deadline, "blocks still cached 30 s after the last read"
        time.sleep(1)


def test_deleting_topics_while_their_segments_open_keeps_the_broker_up(restartable):
    """Publish then delete at once, many times: the flusher may be opening the topic's first
    segment while its directory goes. The broker must stay up and healthy."""
    import urllib.request
    r = restartable()
    r.start()
    base = "http://127.0.0.1:%d" % r.broker.http_port
    for i in range(60):
        topic = "gone-%d" % i
        with Conn(r.addr) as p:
            p.mpub(topic, ["x-%d" % j for j in range(50)])
        req = urllib.request.Request(base + "/topic/delete?topic=" + topic, method="POST")
        with urllib.request.urlopen(req, timeout=5) as resp:
            assert resp.status == 200
    assert r.broker.alive(), r.broker.stderr()[-2000:]
    with urllib.request.urlopen(base + "/ping", timeout=5) as resp:
        assert resp.read() == b"OK"
    assert "panicked" not in r.broker.stderr()


def _wait_for(what, cond, timeout=20.0):
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "after %.0f s: %s" % (timeout, what())
        time.sleep(0.2)


def test_segments_every_channel_has_passed_are_deleted(restartable):
    """Once all channels have FINned what a segment holds, its file goes (renamed, then deleted
    off the shard's thread); only the segment being written stays, and no renamed leftovers."""
    r = restartable("--mem-queue-size=100", "--max-bytes-per-file=1048576")
    r.start()
    create_channels(r.addr)
    expect = publish(r.addr, 30000, prefix="p" * 150)
    topic_dir = os.path.join(r.data_path, TOPIC)
    _wait_for(lambda: os.listdir(topic_dir),
              lambda: len(glob.glob(os.path.join(topic_dir, "*.seg"))) > 3)
    for ch in CHANNELS:
        seen, _ = drain(r.addr, ch, expect)
        assert seen == expect
    # Every channel is past every full segment: at most the newest one remains.
    _wait_for(lambda: sorted(os.listdir(topic_dir)),
              lambda: len(glob.glob(os.path.join(topic_dir, "*.seg"))) <= 1
              and not glob.glob(os.path.join(topic_dir, "*~deleted")))
    assert r.broker.alive()


def test_deleted_topic_can_be_recreated_at_once_and_its_files_go(restartable):
    """DELETE renames the topic's directory out of the way and deletes it in the background:
    a topic of the same name made right after starts empty and works, and the old files go."""
    import urllib.request
    r = restartable("--mem-queue-size=0", "--max-bytes-per-file=1048576")
    r.start()
    create_channels(r.addr)
    publish(r.addr, 20000, prefix="old")
    base = "http://127.0.0.1:%d" % r.broker.http_port
    req = urllib.request.Request(base + "/topic/delete?topic=" + TOPIC, method="POST")
    with urllib.request.urlopen(req, timeout=5) as resp:
        assert resp.status == 200
    create_channels(r.addr)
    expect = publish(r.addr, 500, prefix="new")
    seen, _ = drain(r.addr, "a", expect)
    assert seen == expect, "the re-created topic delivers only its own messages"
    assert all(b.startswith("new-") for b in seen)
    _wait_for(lambda: os.listdir(r.data_path),
              lambda: not glob.glob(os.path.join(r.data_path, "*~deleted")))


def test_start_deletes_what_a_stop_left_in_the_trash(restartable):
    """A released segment or deleted topic directory that a stop left behind (renamed with
    `~deleted`) is removed at the next start, and the topic's real segments are untouched."""
    r = restartable("--mem-queue-size=0")
    r.start()
    create_channels(r.addr)
    expect = publish(r.addr, 2000)
    r.stop()
    topic_dir = os.path.join(r.data_path, TOPIC)
    leftover_seg = os.path.join(topic_dir, "%020d.seg~deleted" % 0)
    with open(leftover_seg, "wb") as f:
        f.write(b"x" * 4096)
    leftover_dir = os.path.join(r.data_path, "gone~deleted")
    os.makedirs(leftover_dir)
    with open(os.path.join(leftover_dir, "%020d.seg" % 0), "wb") as f:
        f.write(b"y" * 4096)
    r.start()
    # The listeners are up before the shards have loaded their topics; once the topic serves,
    # its shard has loaded it (and cleared the trash on the way).
    seen, _ = drain(r.addr, "a", expect)
    assert seen == expect
    assert not os.path.exists(leftover_seg)
    assert not os.path.exists(leftover_dir)


def test_a_shard_that_cannot_load_its_topics_stops_the_whole_broker(tmp_path):
    """A shard that fails to start (here a topic whose segment file is a directory) stops the
    broker: the other shard stops the clean way and the process exits 1. It used to leave the
    other shard serving, without the failed shard's topics, and then ignore SIGTERM while its
    shutdown waited for the failed shard."""
    import subprocess
    from conftest import broker_bin

    data = tmp_path / "data"
    (data / "bad" / ("0" * 20 + ".seg")).mkdir(parents=True)
    r = subprocess.run(
        [broker_bin(), "--shards", "2", "--tcp-address", "127.0.0.1:0",
         "--http-address", "127.0.0.1:0", "--data-path", str(data)],
        capture_output=True, timeout=60,
    )
    log = (r.stdout + r.stderr).decode(errors="replace")
    assert r.returncode == 1, log
    assert "topic bad" in log and "failed to start" in log, log
    assert "TCP: listening" not in log, log
    assert "shard quiet" in log, log


def _topic_depth(broker):
    import json
    import urllib.request

    url = "http://127.0.0.1:%d/stats?format=json&topic=%s" % (broker.http_port, TOPIC)
    with urllib.request.urlopen(url, timeout=5) as r:
        topics = json.loads(r.read())["topics"]
    return topics[0]["depth"] if topics else None


def test_an_emptied_topic_without_channels_stays_empty_after_a_restart(restartable):
    """Emptying a topic with no channel drops what it held, and a restart does not bring it
    back (the topic's start is kept in meta.json); what is published afterwards is delivered."""
    import urllib.request

    r = restartable()
    r.start()
    publish(r.addr, 300, prefix="dropped")
    assert _topic_depth(r.broker) == 300
    req = urllib.request.Request(
        "http://127.0.0.1:%d/topic/empty?topic=%s" % (r.broker.http_port, TOPIC), method="POST")
    with urllib.request.urlopen(req, timeout=5) as resp:
        assert resp.status == 200
    assert _topic_depth(r.broker) == 0
    r.stop()
    r.start()
    assert logged(r.broker, "topic restored"), r.broker.stderr()[-2000:]
    assert _topic_depth(r.broker) == 0
    expect = publish(r.addr, 5, prefix="after")
    seen, _ = drain(r.addr, "a", expect, timeout=10)
    assert seen == expect, sorted(seen - expect)[:5]


def _records(broker):
    from brokerhttp import metrics_text, per_shard
    text = metrics_text(broker)
    return (sum(per_shard(text, "nsq_shard_records_written_total").values()),
            sum(per_shard(text, "nsq_shard_records_skipped_total").values()))


def _publish_and_consume(p, c, prefix, rounds, batch=50):
    """Publishes `rounds` batches on `p`, each consumed and FINned on `c` before the next."""
    for r in range(rounds):
        bodies = ["%s-%d-%d" % (prefix, r, i) for i in range(batch)]
        p.mpub(TOPIC, bodies)
        got = c.read_messages(batch)
        assert sorted(m.body.decode() for m in got) == sorted(bodies)
        c.send(b"".join(b"FIN " + m.id + b"\n" for m in got))


def test_messages_finished_before_the_write_are_never_written(restartable):
    """A message every channel FINned before the flusher came to write it is left out of the
    segment files (/metrics nsq_shard_records_skipped_total), and that loses nothing: a channel
    without a consumer makes every message written, a clean restart delivers exactly what was
    not finished, and after a SIGKILL everything unfinished and written comes back."""
    r = restartable()
    r.start()
    with Conn(r.addr) as p, Conn(r.addr) as c:
        # Each batch must come at once (RDY 100 for 50 messages would be held for the
        # output buffer timeout, and the flusher would write them all meanwhile).
        c.identify(output_buffer_timeout=-1)
        c.sub(TOPIC, "a", rdy=100)
        _publish_and_consume(p, c, "early", 200)
        time.sleep(0.5)  # the flusher's round (10 ms) has come and gone
        written, skipped = _records(r.broker)
        assert written + skipped == 200 * 50
        assert skipped > 0, "consumed as fast as published, some writes are left out"
        # Channel b has no consumer: nothing it has not read may be left out.
        with Conn(r.addr) as b:
            b.sub(TOPIC, "b")
        _publish_and_consume(p, c, "both", 40)
        time.sleep(0.5)
        assert _records(r.broker) == (written + 40 * 50, skipped)
        # Unfinished by a, when the broker stops.
        late = set("late-%d" % i for i in range(300))
        p.mpub(TOPIC, sorted(late))
    r.stop()
    r.start()
    both = set("both-%d-%d" % (r_, i) for r_ in range(40) for i in range(50))
    seen_a, _ = drain(r.addr, "a", late)
    assert seen_a == late, "a gets exactly what it had not finished"
    seen_b, _ = drain(r.addr, "b", both | late)
    assert seen_b == both | late
    # After a SIGKILL: whatever a channel did not finish was written (within the flusher's
    # 10 ms) and comes back; what it finished may come again (at-least-once), but what was
    # left out cannot, and the channel's last checkpoint (deleting b makes one) is not older.
    import urllib.request
    req = urllib.request.Request("http://127.0.0.1:%d/channel/delete?topic=%s&channel=b"
                                 % (r.broker.http_port, TOPIC), method="POST")
    with urllib.request.urlopen(req, timeout=5) as resp:
        assert resp.status == 200
    with Conn(r.addr) as p, Conn(r.addr) as c:
        c.identify(output_buffer_timeout=-1)
        c.sub(TOPIC, "a", rdy=100)
        _publish_and_consume(p, c, "again", 100)
        crash = set("crash-%d" % i for i in range(300))
        p.mpub(TOPIC, sorted(crash))
    time.sleep(0.5)
    r.kill()
    r.start()
    seen_a, _ = drain(r.addr, "a", crash)
    assert crash <= seen_a
    assert not any(b.startswith(("early-", "both-", "late-")) for b in seen_a), \
        "messages finished before the last checkpoint never come back"
    again = sum(b.startswith("again-") for b in seen_a)
    assert again < 100 * 50, "finished messages left out of the files do not come back"


def _lingering(port):
    """Connections on local `port` the kernel still keeps after their socket closed
    (FIN_WAIT1/2, CLOSING, TIME_WAIT, LAST_ACK), from /proc/net/tcp."""
    closing_states = {"04", "05", "06", "08", "09", "0B"}
    n = 0
    with open("/proc/net/tcp") as f:
        next(f)
        for line in f:
            fields = line.split()
            local_port = int(fields[1].split(":")[1], 16)
            if local_port == port and fields[3] in closing_states:
                n += 1
    return n


def test_a_restart_on_the_same_ports_binds_over_lingering_connections(restartable):
    """A broker stopped while clients are connected leaves those connections in FIN_WAIT or
    TIME_WAIT on its ports for up to a minute; a restart on the same explicit ports (what
    `systemctl restart` does) must start at once and serve, as nsqd does (SO_REUSEADDR). It
    used to exit with "Address already in use". A second broker on a port a running one
    listens on is still refused."""
    import subprocess
    import urllib.request
    from conftest import broker_bin

    r = restartable()
    r.start()
    tcp_port, http_port = r.broker.port, r.broker.http_port
    with Conn(r.addr) as p:
        p.pub(TOPIC, b"before the restart")
    consumer = Conn(r.addr)
    consumer.sub(TOPIC, "a", rdy=0)
    keepalive = socket.create_connection(("127.0.0.1", http_port))
    keepalive.sendall(b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n")
    assert b"200" in keepalive.recv(4096)
    r.stop()
    # Sockets that io_uring requests still held (a pending read on the keep-alive connection)
    # are closed by the ring's teardown, which the kernel runs just after the process exits.
    deadline = time.monotonic() + 5
    while not (_lingering(tcp_port) >= 1 and _lingering(http_port) >= 1) \
            and time.monotonic() < deadline:
        time.sleep(0.02)
    assert _lingering(tcp_port) >= 1 and _lingering(http_port) >= 1, \
        "the stop should leave the clients' connections lingering on the broker's ports"

    again = Broker(r.shards, r.flags, r.workdir)
    again.args[1] = "--tcp-address=127.0.0.1:%d" % tcp_port
    again.args[2] = "--http-address=127.0.0.1:%d" % http_port
    r.broker = again
    again.start()
    assert (again.port, again.http_port) == (tcp_port, http_port)
    with urllib.request.urlopen("http://127.0.0.1:%d/ping" % http_port, timeout=5) as resp:
        assert resp.read() == b"OK"
    seen, _ = drain(again.addr, "a", {"before the restart"})
    assert seen == {"before the restart"}

    taken = subprocess.run(
        [broker_bin(), "--shards", "1", "--tcp-address", "127.0.0.1:%d" % tcp_port,
         "--http-address", "127.0.0.1:0", "--data-path", os.path.join(r.workdir, "other")],
        capture_output=True, timeout=60,
    )
    log = (taken.stdout + taken.stderr).decode(errors="replace")
    assert taken.returncode == 1, log
    assert "cannot listen on --tcp-address 127.0.0.1:%d" % tcp_port in log, log
    assert "Address already in use" in log, log
    consumer.close()
    keepalive.close()


@pytest.mark.slow
def test_a_clean_stop_under_publishing_loses_no_acknowledged_message(restartable):
    """SIGTERM while three producers publish one message at a time to three topics (a
    channel each, no consumer): after a restart every acknowledged message is there. The
    flusher could be in its 10 ms gathering wait, not marked busy, when the stop's
    hand-over began; its round then ran alongside the hand-over, whose padding trim cut
    that round's write, and the tail of a topic was lost (3 stops in about 30)."""
    import threading
    topics = ["stop_a", "stop_b", "stop_c"]
    r = restartable()
    acked = {t: [] for t in topics}

    def produce(topic, stop, prefix):
        try:
            with Conn(r.addr, timeout=5) as p:
                i = 0
                while not stop.is_set():
                    body = "%s-%d" % (prefix, i)
                    p.pub(topic, body.encode())
                    acked[topic].append(body)
                    i += 1
        except (ConnectionError, OSError, Exception):
            pass  # the broker stopped: what was not acknowledged does not count

    for round_ in range(8):
        r.start()
        for t in topics:
            with Conn(r.addr) as c:
                c.sub(t, "c1")
        stop = threading.Event()
        threads = [threading.Thread(target=produce, args=(t, stop, "%s-r%d" % (t, round_)))
                   for t in topics]
        for th in threads:
            th.start()
        time.sleep(0.4 + 0.1 * (round_ % 4))
        r.stop()
        stop.set()
        for th in threads:
            th.join(timeout=10)
    r.start()
    for t in topics:
        want = set(acked[t])
        assert want, "no publish was acknowledged on %s" % t
        seen = set()
        with Conn(r.addr) as c:
            c.sub(t, "c1", rdy=2500)
            deadline = time.monotonic() + 60
            while not want <= seen:
                left = deadline - time.monotonic()
                assert left > 0, "%s: %d acknowledged messages lost, e.g. %s" % (
                    t, len(want - seen), sorted(want - seen)[:5])
                ftype, data = c.read_frame(timeout=left)
                if ftype != FRAME_MESSAGE:
                    continue
                m = Message.parse(data)
                seen.add(m.body.decode())
                c.fin(m.id)


def test_a_second_broker_on_the_same_data_path_is_refused(restartable):
    """Two brokers on one --data-path each believe they own every topic there and overwrite
    each other's files (a review lost half of 100 acknowledged messages that way). As nsqd,
    the second is refused while the first runs, and starts once it stopped."""
    import subprocess
    from conftest import broker_bin

    r = restartable()
    r.start()
    args = [broker_bin(), "--shards", "1", "--tcp-address", "127.0.0.1:0",
            "--http-address", "127.0.0.1:0", "--data-path", r.data_path]
    second = subprocess.run(args, capture_output=True, timeout=60)
    log = (second.stdout + second.stderr).decode(errors="replace")
    assert second.returncode == 1, log
    assert "cannot lock --data-path" in log and "in use by another broker" in log, log
    assert "listening" not in log, log
    r.stop()
    r.start()


def test_a_topic_whose_directory_cannot_be_made_is_refused_until_it_can(restartable):
    """A durable topic lives in its directory under --data-path. When that directory cannot be
    made (here a plain file holds its name; in production permissions or inodes) the broker
    refuses what would create the topic (PUB: the fatal E_PUB_FAILED; SUB: E_SUB_FAILED;
    /topic/create: 500 INTERNAL_ERROR) rather than acknowledge messages it would keep only in
    memory and drop at the next stop. The broker stays healthy, and once the directory can be
    made the next publish creates the topic and its messages survive a restart."""
    import json
    import urllib.error
    import urllib.request

    topic = "nodir"
    r = restartable()
    r.start()
    blocker = os.path.join(r.data_path, topic)
    with open(blocker, "w") as f:
        f.write("not a directory")

    with Conn(r.addr) as p:
        p.cmd("PUB %s" % topic, b"refused")
        ftype, data = p.read_frame()
        assert ftype == 1 and data.startswith(b"E_PUB_FAILED"), (ftype, data)
        assert p.wait_closed(), "a fatal error closes the connection"
    with Conn(r.addr) as c:
        c.cmd("SUB %s ch" % topic)
        ftype, data = c.read_frame()
        assert ftype == 1 and data.startswith(b"E_SUB_FAILED"), (ftype, data)
    http = "http://127.0.0.1:%d" % r.broker.http_port
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(urllib.request.Request(
            http + "/topic/create?topic=" + topic, method="POST"), timeout=10)
    assert e.value.code == 500
    assert json.loads(e.value.read()) == {"message": "INTERNAL_ERROR"}
    with urllib.request.urlopen(http + "/ping", timeout=10) as resp:
        assert resp.read() == b"OK", "a topic the broker refused leaves it healthy"
    with urllib.request.urlopen(http + "/stats?format=json", timeout=10) as resp:
        names = [t["topic_name"] for t in json.loads(resp.read())["topics"]]
    assert topic not in names, names

    os.remove(blocker)
    with Conn(r.addr) as p:
        p.pub(topic, b"kept")
    r.stop()
    r.start()
    with Conn(r.addr) as c:
        c.sub(topic, "ch", rdy=10)
        m = c.read_message()
        assert m.body == b"kept"
        c.fin(m.id)
        c.expect_nothing(0.5)


def test_a_broker_starting_on_an_address_another_is_starting_on_is_refused(workdir):
    """Between a broker's check that its port is free and its shards' SO_REUSEPORT binds, a
    second broker started at the same moment could pass the same check and join the port
    (each answering half of the connections). A starting broker claims each explicit address
    by name (the abstract unix socket nsq-broker-listen-<addr>); here the test holds that
    claim, as a broker starting at the same moment would, and the broker is refused."""
    import subprocess
    from conftest import broker_bin, free_port

    port = free_port()
    claim = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    claim.bind("\0nsq-broker-listen-127.0.0.1:%d" % port)
    try:
        args = [broker_bin(), "--shards", "1", "--tcp-address", "127.0.0.1:%d" % port,
                "--http-address", "127.0.0.1:0", "--data-path", os.path.join(workdir, "d")]
        run = subprocess.run(args, capture_output=True, timeout=60, stdin=subprocess.DEVNULL)
        log = (run.stdout + run.stderr).decode(errors="replace")
        assert run.returncode == 1, log
        assert "another broker on this host is starting, running or stopping on it" in log, log
    finally:
        claim.close()
    # Once released, the address is the broker's.
    b = Broker(1, ("--tcp-address=127.0.0.1:%d" % port,), workdir)
    b.args = [a for a in b.args if not a.startswith("--tcp-address=127.0.0.1:0")]
    b.start()
    try:
        assert b.port == port
        with Conn(b.addr) as c:
            c.pub(TOPIC, b"x")
    finally:
        assert b.stop() == 0


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_a_start_that_stalls_is_named_by_the_watchdog_and_bounded(workdir, shards):
    """A shard that never finishes a start-up step (forced with the BROKER_TEST_STALL_START test
    hook) is named in the log, with its step, after 10 s; a step whose work does not grow with
    the data (here: probing the data path) that stays stuck past the step limit ends the process
    with status 1, so a supervisor starts it again instead of leaving a deaf broker up."""
    import subprocess
    from conftest import broker_bin
    stalled = shards - 1
    data = os.path.join(workdir, "data")
    os.makedirs(data)
    env = dict(os.environ, BROKER_TEST_STALL_START="%d:ProbingDataPath" % stalled,
               BROKER_TEST_STEP_LIMIT_SECS="15")
    err_path = os.path.join(workdir, "stderr")
    with open(err_path, "wb") as err:
        proc = subprocess.Popen([broker_bin(), "--tcp-address=127.0.0.1:0",
                                 "--http-address=127.0.0.1:0", "--data-path=%s" % data,
                                 "--shards=%d" % shards], stdout=subprocess.DEVNULL, stderr=err,
                                stdin=subprocess.DEVNULL, env=env)
        try:
            code = proc.wait(timeout=45)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    log = open(err_path, encoding="utf-8", errors="replace").read()
    assert ("start-up: shard %d has not finished probing the data path for direct I/O after 1"
            % stalled) in log, log
    assert "is stuck probing the data path" in log, log
    assert "TCP: listening" not in log, log
    assert code == 1, "exit status %s\n%s" % (code, log)
