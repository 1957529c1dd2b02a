"""A full disk: the broker's data path is a small tmpfs that a filler file fills up.

While segment writes fail (ENOSPC) the broker reports it on /ping (`500 NOK - <reason>`),
refuses publishes (TCP: the fatal E_PUB_FAILED / E_MPUB_FAILED, then closes the connection, as
nsqd does; HTTP /pub: an error status) and keeps what it already acknowledged in memory. Once the
filler is removed the next successful write clears the state: /ping answers OK and publishes
succeed again. Every message that was answered OK, before, during or after the failure, reaches
a consumer, and again after a clean restart (SIGTERM, then a new broker on the same data path).

A publish on a connection whose shard does not own the topic may be answered OK before the
owner has stored it (the owner keeps such a message in memory even while its disk fails), so the
first publish after the disk filled up may well be OK: what is asserted is that every OK'd
message is delivered, and that publishes are refused once the broker has seen the failure.

Needs a tmpfs mount (root, or CAP_SYS_ADMIN); skipped when mounting is not permitted.
"""

import contextlib
import errno
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

import pytest

from conftest import Broker, _broker_sets
from nsqwire import FRAME_ERROR, FRAME_MESSAGE, FRAME_RESPONSE, Conn, Message, mpub_bytes

TOPIC = "diskfull"
LIVE, LATER = "live", "later"     # LIVE is drained before the restart, LATER only after it
TMPFS_SIZE = "4m"
LEAVE_FREE = 16 * 1024           # room left beside the filler: a few records, then ENOSPC
BODY_SIZE = 1000
WAIT = 10.0                      # bound of every polling loop
FLAGS = ("--mem-queue-size=10", "--max-bytes-per-file=65536", "--sync-every=1",
         "--sync-timeout=100ms")


def body(tag, i):
    return ("%s-%d|" % (tag, i)).encode().ljust(BODY_SIZE, b".")


def key(data):
    return data.split(b"|", 1)[0].decode()


# -- environment -----------------------------------------------------------------------------


def _mount_tmpfs(path):
    """Mounts a TMPFS_SIZE tmpfs on `path`; skips the test when that is not permitted."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root (euid is %s)" % getattr(os, "geteuid",
                                                                            lambda: "?")())
    if shutil.which("mount") is None or shutil.which("umount") is None:
        pytest.skip("no mount/umount command to make a small tmpfs")
    try:
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%s" % TMPFS_SIZE, "tmpfs", path],
                           capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError) as e:
        pytest.skip("cannot mount a tmpfs: %s" % e)
    if r.returncode != 0:
        pytest.skip("cannot mount a tmpfs here (mount exited %d: %s)"
                    % (r.returncode, " ".join((r.stderr or r.stdout).split())))


def _umount(path):
    for args in (["umount", path], ["umount", "-l", path]):
        try:
            if subprocess.run(args, capture_output=True, timeout=10).returncode == 0:
                return
        except (OSError, subprocess.SubprocessError):
            pass


class DiskFullBrokers:
    """Brokers on one tmpfs data path; their stderr shows in the report of a failed test."""

    def __init__(self, workdir, shards):
        self.workdir, self.shards = workdir, shards
        self.brokers = []   # read by conftest's report hook
        self.broker = None
        self.flags = FLAGS

    def start(self):
        self.broker = Broker(self.shards, self.flags, self.workdir)
        self.brokers.append(self.broker)
        return self.broker.start()

    def stop(self):
        b, self.broker = self.broker, None
        code = b.stop()
        assert code == 0, "clean stop must exit 0, got %s\n%s" % (code, b.stderr())


@pytest.fixture
def tmpfs_brokers(request, shards):
    workdir = tempfile.mkdtemp(prefix="broker-diskfull-")
    data = os.path.join(workdir, "data")   # Broker's --data-path under workdir
    os.makedirs(data)
    mounted = False
    try:
        _mount_tmpfs(data)
        mounted = True
        bs = DiskFullBrokers(workdir, shards)
        _broker_sets(request.node).append(bs)
        yield bs
        last = bs.broker
        died = last is not None and last.proc is not None and last.proc.poll() is not None
        for b in bs.brokers:
            b.stop()
        if died:
            pytest.fail("broker died during the test with exit code %s\nstderr:\n%s"
                        % (last.proc.returncode, last.stderr()))
    finally:
        if mounted:
            _umount(data)
        shutil.rmtree(workdir, ignore_errors=True)


def fill(path, leave):
    """Writes `path` until the filesystem is full, then gives back `leave` bytes."""
    chunk = b"\xa5" * 65536
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        while True:
            try:
                if os.write(fd, chunk) == 0:
                    break
            except OSError as e:
                if e.errno == errno.ENOSPC:
                    break
                raise
        size = os.fstat(fd).st_size
        os.ftruncate(fd, max(0, size - leave))
    finally:
        os.close(fd)


# -- wire helpers -----------------------------------------------------------------------------


def http(broker, method, target, data=None):
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (broker.http_port, target),
                                 data=data, method=method)
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def ping(broker):
    return http(broker, "GET", "/ping")


def wait_ping(broker, healthy, timeout=WAIT):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = ping(broker)
        if (last[0] == 200) == healthy:
            return last
        time.sleep(0.05)
    raise AssertionError("/ping did not turn %s within %.0fs: last answer %r\nstderr:\n%s"
                         % ("healthy" if healthy else "unhealthy", timeout, last,
                            broker.stderr()))


def assert_nok(answer):
    status, text = answer
    assert status == 500, "/ping while the disk is full: %r" % (answer,)
    assert text.startswith(b"NOK - ") and len(text) > len(b"NOK - "), \
        "/ping body must be 'NOK - <reason>': %r" % (text,)


def read_answer(c):
    """(frame type, data) of the answer to a publish; (None, reason) if the socket closed."""
    try:
        return c.read_frame(timeout=5)
    except (ConnectionError, OSError) as e:
        return None, str(e).encode()


def usable_cpus():
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return [None]


@contextlib.contextmanager
def on_cpu(cpu):
    """Runs the block pinned to `cpu` (None: unpinned). With connection steering by CPU (the
    broker's default) a loopback connection lands on the shard of the CPU it was opened from,
    so connections opened from every CPU reach the topic's owner and the other shards."""
    if cpu is None:
        yield
        return
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {cpu})
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


class Publisher:
    """Publishes over one connection per CPU, opened again after a fatal error; records what
    was answered OK and what was refused."""

    def __init__(self, broker):
        self.broker = broker
        self.cpus = usable_cpus()
        self.conns = {}
        self.acked = set()
        self.refused = []   # (key, error text)
        self.n = 0

    def close(self):
        for c in self.conns.values():
            c.close()
        self.conns.clear()

    def conn(self, cpu):
        if cpu not in self.conns:
            with on_cpu(cpu):
                self.conns[cpu] = Conn(self.broker.addr, timeout=5)
        return self.conns[cpu]

    def publish(self, tag, count=1, cpu=None):
        """One PUB (count 1) or MPUB from `cpu`'s connection (default: the next CPU in turn);
        True if OK, False if refused (with a fatal E_PUB_FAILED / E_MPUB_FAILED and a close)."""
        if cpu is None:
            cpu = self.cpus[self.n % len(self.cpus)]
        c = self.conn(cpu)
        bodies = [body(tag, self.n + i) for i in range(count)]
        self.n += count
        if count == 1:
            c.cmd("PUB %s" % TOPIC, bodies[0])
            code = b"E_PUB_FAILED"
        else:
            c.send(mpub_bytes(TOPIC, bodies))
            code = b"E_MPUB_FAILED"
        ftype, data = read_answer(c)
        if (ftype, data) == (FRAME_RESPONSE, b"OK"):
            self.acked.update(key(b) for b in bodies)
            return True
        assert ftype == FRAME_ERROR, "%s answered %r %r" % (code[2:6].decode(), ftype, data)
        assert data.startswith(code + b" "), "expected %s, got %r" % (code.decode(), data)
        # A fatal error: the broker closes the connection, as nsqd does.
        assert c.wait_closed(5), "connection left open after %r" % (data,)
        c.close()
        del self.conns[cpu]
        self.refused.extend((key(b), data) for b in bodies)
        return False

    def until_refused(self, tag, count=1, tries=50):
        """From every CPU: publishes until one is refused (the first may be OK'd early when
        its connection's shard does not own the topic and has not yet heard of the failure)."""
        for cpu in self.cpus:
            for _ in range(tries):
                if not self.publish(tag, count, cpu=cpu):
                    break
            else:
                raise AssertionError("%d publishes (%s) in a row from CPU %s answered OK while "
                                     "/ping says %r" % (tries, tag, cpu, ping(self.broker)))


def http_pub(broker, tag, i, cpu=None):
    data = body(tag, i)
    with on_cpu(cpu):
        status, text = http(broker, "POST", "/pub?topic=%s" % TOPIC, data)
    return key(data), status, text


def drain(broker, channel, expect, timeout=WAIT):
    """Consumes (FIN each) until every key in `expect` arrived; returns the list of keys seen."""
    seen = []
    deadline = time.monotonic() + timeout
    with Conn(broker.addr, timeout=5) as c:
        c.sub(TOPIC, channel, rdy=200)
        while not expect <= set(seen):
            left = deadline - time.monotonic()
            if left <= 0:
                missing = sorted(expect - set(seen))
                raise AssertionError(
                    "channel %s: %d acknowledged messages never delivered after %.0fs "
                    "(first: %s); %d delivered\nstderr:\n%s"
                    % (channel, len(missing), timeout, missing[:10], len(seen), broker.stderr()))
            try:
                ftype, data = c.read_frame(timeout=min(left, 1.0))
            except socket.timeout:
                continue
            if ftype != FRAME_MESSAGE:
                continue
            m = Message.parse(data)
            seen.append(key(m.body))
            c.fin(m.id)
        # Whatever else is queued (refused messages the owner kept anyway, if any).
        try:
            while True:
                ftype, data = c.read_frame(timeout=0.3)
                if ftype == FRAME_MESSAGE:
                    m = Message.parse(data)
                    seen.append(key(m.body))
                    c.fin(m.id)
        except socket.timeout:
            pass
        c.cmd("NOP")
    return seen


# -- the test ---------------------------------------------------------------------------------


def test_disk_full_refuses_then_recovers_and_loses_no_acknowledged_message(tmpfs_brokers, shards):
    bs = tmpfs_brokers
    b = bs.start()
    for ch in (LIVE, LATER):
        with Conn(b.addr) as c:
            c.sub(TOPIC, ch)
    assert ping(b) == (200, b"OK")

    pub = Publisher(b)
    # Before: the disk has room.
    for _ in range(10):
        assert pub.publish("pre", 10), "MPUB before the disk filled up"
    for _ in range(20):
        assert pub.publish("pre"), "PUB before the disk filled up"

    # Fill the tmpfs, leaving room for a few records only.
    filler = os.path.join(b.data_path, "filler")
    fill(filler, LEAVE_FREE)

    # Publish (from every CPU in turn) until /ping has reported the failure and a publish
    # sent after that was refused. Everything OK'd meanwhile must be delivered later.
    nok = None
    ok_after_nok = 0
    deadline = time.monotonic() + WAIT
    while True:
        assert time.monotonic() < deadline, (
            "within %.0fs of filling the disk: /ping %r, %d acknowledged, %d refused\n%s"
            % (WAIT, ping(b), len(pub.acked), len(pub.refused), b.stderr()))
        answer = ping(b)
        if answer[0] != 200:
            assert_nok(answer)
            nok = nok or answer
        if pub.publish("fill"):
            ok_after_nok += nok is not None
        elif nok is not None:
            break
        if nok is None:
            time.sleep(0.01)
    reason = nok[1]
    assert b"No space left on device" in reason or b"os error 28" in reason, (
        "the reason should say the disk is full: %r" % (reason,))
    if shards == 1:
        # The only shard owns the topic: nothing is acknowledged once it knows.
        assert ok_after_nok == 0, "%d publishes OK'd after /ping said %r" % (ok_after_nok, nok)
    assert "storage failing" in b.stderr()

    # Still full: PUB and MPUB from every CPU, and HTTP /pub, are refused; /ping stays NOK.
    pub.until_refused("tcp-pub")
    pub.until_refused("tcp-mpub", count=5)
    http_errors = []
    for cpu in pub.cpus:
        for i in range(50):
            k, status, text = http_pub(b, "http-%s" % cpu, i, cpu)
            if status == 200:
                pub.acked.add(k)
            else:
                http_errors.append((status, text))
                break
        else:
            raise AssertionError("50 HTTP /pub from CPU %s answered 200 while the disk is full"
                                 % cpu)
    assert all(status >= 500 for status, _ in http_errors), http_errors
    assert_nok(ping(b))
    assert b.alive()

    # Space returns: the next successful write clears the state.
    os.remove(filler)
    wait_ping(b, healthy=True)
    assert ping(b) == (200, b"OK")
    for cpu in pub.cpus:
        for _ in range(3):
            assert pub.publish("after", 10, cpu=cpu), "MPUB after the disk recovered"
            assert pub.publish("after", cpu=cpu), "PUB after the disk recovered"
        for i in range(3):
            k, status, text = http_pub(b, "http-after-%s" % cpu, i, cpu)
            assert (status, text) == (200, b"OK"), "HTTP /pub after the disk recovered"
            pub.acked.add(k)
    pub.close()

    acked = set(pub.acked)
    refused = {k for k, _ in pub.refused}
    seen = drain(b, LIVE, acked)
    extra = set(seen) - acked
    assert extra <= refused, "delivered bodies never published: %s" % sorted(extra - refused)[:10]
    print("acknowledged %d (%d of them after /ping said NOK), refused %d (%d delivered anyway), "
          "deliveries %d" % (len(acked), ok_after_nok, len(refused), len(extra), len(seen)))

    # A clean restart on the same data path: the untouched channel still gets everything.
    print("log of the broker before the restart:\n" + b.stderr())
    bs.stop()
    b = bs.start()
    assert ping(b) == (200, b"OK")
    log = b.stderr()
    assert "torn tail cut" not in log and "corrupt data skipped" not in log, (
        "segments written across the failure must be whole after a clean stop:\n" + log)
    seen = drain(b, LATER, acked)
    assert set(seen) - acked <= refused
    # LIVE was drained and FIN'd before the stop: none of that comes back.
    again = drain(b, LIVE, set(), timeout=1.0)
    assert not (set(again) & acked), "FIN'd messages delivered again: %s" % sorted(again)[:10]


@pytest.mark.parametrize("flags", [("--durable",), ("--mem-queue-size=0",)],
                         ids=["durable", "mem-queue-size-0"])
def test_a_publish_refused_for_a_full_disk_is_never_stored(tmpfs_brokers, shards, flags):
    """When publishes are answered only once on disk (--durable: after the fsync; --mem-queue-size
    0: after the write), a publish whose records the log took is never answered with an error
    while its write fails: it waits for the disk and is answered OK once the write succeeds. An
    error (E_PUB_FAILED / E_MPUB_FAILED) therefore means "not stored": no refused message is ever
    delivered, so a client's retry makes no duplicate."""
    bs = tmpfs_brokers
    bs.flags = flags + ("--max-bytes-per-file=65536",)
    b = bs.start()
    for ch in (LIVE, LATER):
        with Conn(b.addr) as c:
            c.sub(TOPIC, ch)
    fill(os.path.join(b.data_path, "filler"), LEAVE_FREE)

    acked, refused = set(), set()
    waiting = []   # (connection, bodies) whose answer had not come when the disk was freed
    n = 0
    cpus = usable_cpus()
    deadline = time.monotonic() + WAIT
    # From every CPU in turn, MPUBs of 5 on fresh connections, until publishes are refused.
    while len(refused) < 20:
        assert time.monotonic() < deadline, (
            "no refusal within %.0fs of filling the disk: /ping %r, %d acknowledged, %d waiting"
            "\n%s" % (WAIT, ping(b), len(acked), len(waiting), b.stderr()))
        cpu = cpus[n % len(cpus)]
        bodies = [body("d", n + i) for i in range(5)]
        n += 5
        with on_cpu(cpu):
            c = Conn(b.addr, timeout=5)
        c.send(mpub_bytes(TOPIC, bodies))
        try:
            ftype, data = c.read_frame(timeout=0.5)
        except socket.timeout:
            waiting.append((c, bodies))   # stored, waiting for the disk
            continue
        if (ftype, data) == (FRAME_RESPONSE, b"OK"):
            acked.update(key(x) for x in bodies)
        else:
            assert ftype == FRAME_ERROR and data.startswith(b"E_MPUB_FAILED "), (ftype, data)
            refused.update(key(x) for x in bodies)
        c.close()
    assert_nok(ping(b))

    # Space returns: every publish that was waiting is answered OK.
    os.remove(os.path.join(b.data_path, "filler"))
    wait_ping(b, healthy=True)
    for c, bodies in waiting:
        ftype, data = c.read_frame(timeout=WAIT)
        assert (ftype, data) == (FRAME_RESPONSE, b"OK"), (
            "a publish stored before the failure must be answered OK once written: %r %r"
            % (ftype, data))
        acked.update(key(x) for x in bodies)
        c.close()

    seen = drain(b, LIVE, acked)
    delivered_refused = set(seen) & refused
    print("%s: acknowledged %d (%d after waiting for the disk), refused %d"
          % (flags[0], len(acked), 5 * len(waiting), len(refused)))
    assert not delivered_refused, (
        "%d messages answered E_MPUB_FAILED were stored and delivered, e.g. %s"
        % (len(delivered_refused), sorted(delivered_refused)[:5]))
    assert set(seen) <= acked
    bs.stop()
    b = bs.start()
    later = drain(b, LATER, acked)
    assert not (set(later) & refused), "refused messages were delivered after a restart"
