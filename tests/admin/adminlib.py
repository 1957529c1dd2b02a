"""Helpers for the admin-ui tests: starting lookups, brokers and admin-ui processes, plain HTTP
with urllib, a tiny raw NSQ consumer, and bounded polling.

Binaries (overridable by environment): target/release/lookup ($LOOKUP_BIN),
target/release/broker ($BROKER_BIN), target/release/admin-ui ($ADMIN_UI_BIN). Every process
listens on 127.0.0.1 with port 0 and its real ports are read from its stderr log; every process
gets its own temporary directory (the broker's --data-path is inside it) and is stopped with
SIGTERM, then SIGKILL after a few seconds. Nothing here waits without a deadline.
"""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))

# The wire tests' raw protocol client.
sys.path.insert(0, os.path.join(REPO, "tests", "python"))
from nsqwire import FRAME_MESSAGE, Conn, WireError  # noqa: E402

START_TIMEOUT = 10.0
STOP_GRACE = 4.0
# How long the lookup / brokers' stats get to catch up with something just done.
CATCH_UP = 10.0
BROKER_SHARDS = 2

_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))

# Every process started and not yet stopped: the failure report prints their stderr.
ACTIVE = []


def binary(env, name):
    return os.environ.get(env) or os.path.join(REPO, "target", "release", name)


def lookup_bin():
    return binary("LOOKUP_BIN", "lookup")


def broker_bin():
    return binary("BROKER_BIN", "broker")


def admin_bin():
    return binary("ADMIN_UI_BIN", "admin-ui")


def closed_port():
    """A port nothing listens on (bound then released: nothing else here binds fixed ports)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
    finally:
        s.close()


def port_accepts(port, host="127.0.0.1"):
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


# ---- processes ------------------------------------------------------------------------------

class Proc:
    """One child process whose listening ports are read from its stderr.

    `patterns` maps a port name to a regex with one group (the port)."""

    kind = "process"

    def __init__(self, bin_path, args, patterns, build_hint):
        self.bin_path = bin_path
        self.workdir = tempfile.mkdtemp(prefix="admin-test-%s-" % self.kind)
        self.args = [bin_path] + list(args)
        self.patterns = patterns
        self.build_hint = build_hint
        self.ports = {}
        self.stderr_path = os.path.join(self.workdir, "stderr")
        self.proc = None
        self._err = None
        self.stopped = False

    def __repr__(self):
        return "%s(%s)" % (self.kind, self.ports)

    def start(self):
        if not os.path.exists(self.bin_path):
            raise RuntimeError("%s binary not found: %s (%s)"
                               % (self.kind, self.bin_path, self.build_hint))
        self._err = open(self.stderr_path, "wb")
        env = dict(os.environ)
        env.setdefault("RUST_BACKTRACE", "1")
        self.proc = subprocess.Popen(self.args, stdout=subprocess.DEVNULL, stderr=self._err,
                                     stdin=subprocess.DEVNULL, cwd=self.workdir, env=env)
        ACTIVE.append(self)
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                code = self.proc.returncode
                self.stop()
                raise RuntimeError("%s exited with %s at start-up\nargs: %s\nstderr:\n%s"
                                   % (self.kind, code, " ".join(self.args), self.stderr()))
            if len(self.ports) < len(self.patterns):
                text = self.stderr()
                for name, pattern in self.patterns.items():
                    m = re.search(pattern, text)
                    if m:
                        self.ports[name] = int(m.group(1))
            if len(self.ports) == len(self.patterns) and all(
                    port_accepts(p) for p in self.ports.values()):
                return self
            time.sleep(0.03)
        self.stop()
        raise RuntimeError("%s did not log/listen on its ports %s within %.0fs\nargs: %s\n"
                           "stderr:\n%s" % (self.kind, list(self.patterns), START_TIMEOUT,
                                            " ".join(self.args), self.stderr()))

    def stderr(self, limit=6000):
        try:
            with open(self.stderr_path, "rb") as f:
                text = f.read().decode("utf-8", "replace")
        except OSError:
            return "<no stderr>"
        if len(text) > limit:
            text = "...(%d chars cut)...\n" % (len(text) - limit) + text[-limit:]
        return text

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self):
        """SIGTERM, then SIGKILL after STOP_GRACE. Returns True when the process had exited by
        itself before (a crash), False otherwise."""
        if self.stopped or self.proc is None:
            return False
        crashed = self.proc.poll() is not None
        if not crashed:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=STOP_GRACE)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=STOP_GRACE)
        if self._err is not None:
            self._err.close()
        self.stopped = True
        if self in ACTIVE:
            ACTIVE.remove(self)
        return crashed

    def cleanup(self):
        shutil.rmtree(self.workdir, ignore_errors=True)


class Lookup(Proc):
    kind = "lookup"

    def __init__(self):
        super().__init__(lookup_bin(),
                         ["--tcp-address=127.0.0.1:0", "--http-address=127.0.0.1:0",
                          "--broadcast-address=127.0.0.1"],
                         {"tcp": r"TCP: listening on [0-9.]+:(\d+)",
                          "http": r"HTTP: listening on [0-9.]+:(\d+)"},
                         "build with `cargo build --release -p lookup` or set LOOKUP_BIN")

    @property
    def tcp_address(self):
        return "127.0.0.1:%d" % self.ports["tcp"]

    @property
    def http_address(self):
        return "127.0.0.1:%d" % self.ports["http"]

    def get_json(self, path):
        r = request("GET", "http://%s%s" % (self.http_address, path))
        assert r.status == 200, "lookup GET %s answered %d %r" % (path, r.status, r.body)
        return r.json()

    def topics(self):
        return self.get_json("/topics")["topics"]

    def channels(self, topic):
        return self.get_json("/channels?topic=" + urllib.parse.quote(topic, safe=""))["channels"]

    def producer_tcp_ports(self, topic):
        """tcp_ports that /lookup lists for the topic (empty set for an unknown topic)."""
        r = request("GET", "http://%s/lookup?topic=%s"
                    % (self.http_address, urllib.parse.quote(topic, safe="")))
        if r.status == 404:
            return set()
        assert r.status == 200, "lookup /lookup answered %d %r" % (r.status, r.body)
        return {p["tcp_port"] for p in r.json()["producers"]}

    def nodes(self):
        return self.get_json("/nodes")["producers"]


class Broker(Proc):
    kind = "broker"

    def __init__(self, extra=(), shards=BROKER_SHARDS):
        self.shards = shards
        # The flags are added below, once the workdir (holding --data-path) exists.
        super().__init__(broker_bin(), [],
                         {"tcp": r"TCP: listening tcp=[^ ]*:(\d+)",
                          "http": r"HTTP: listening http=[^ ]*:(\d+)"},
                         "build with `cargo build --release -p broker` or set BROKER_BIN")
        data = os.path.join(self.workdir, "data")
        os.makedirs(data)
        self.args += ["--tcp-address=127.0.0.1:0", "--http-address=127.0.0.1:0",
                      "--data-path=%s" % data, "--shards=%d" % shards] + list(extra)

    def start(self):
        super().start()
        if self.shards > 1:
            # Each shard binds its own SO_REUSEPORT listener: give the others a moment.
            time.sleep(0.2)
        return self

    @property
    def tcp_port(self):
        return self.ports["tcp"]

    @property
    def http_port(self):
        return self.ports["http"]

    @property
    def node(self):
        """The admin-ui's name of this broker (broadcast address 127.0.0.1, http port)."""
        return "127.0.0.1:%d" % self.http_port

    def url(self, path):
        return "http://127.0.0.1:%d%s" % (self.http_port, path)

    def post(self, path, body=b""):
        r = request("POST", self.url(path), body)
        assert r.status == 200, "broker POST %s answered %d %r" % (path, r.status, r.body)
        return r

    def publish(self, topic, count=1, body="msg"):
        for i in range(count):
            self.post("/pub?topic=%s" % urllib.parse.quote(topic, safe=""),
                      ("%s-%d" % (body, i)).encode())

    def create_topic(self, topic):
        self.post("/topic/create?topic=%s" % urllib.parse.quote(topic, safe=""))

    def create_channel(self, topic, channel):
        """Creates the topic too (this broker's /channel/create wants an existing topic)."""
        self.create_topic(topic)
        self.post("/channel/create?topic=%s&channel=%s"
                  % (urllib.parse.quote(topic, safe=""), urllib.parse.quote(channel, safe="")))

    def stats(self):
        r = request("GET", self.url("/stats?format=json"))
        assert r.status == 200, "broker /stats answered %d %r" % (r.status, r.body)
        return r.json()

    def topic_stats(self, topic):
        for t in self.stats()["topics"]:
            if t["topic_name"] == topic:
                return t
        return None

    def channel_stats(self, topic, channel):
        t = self.topic_stats(topic)
        if t is None:
            return None
        for c in t["channels"]:
            if c["channel_name"] == channel:
                return c
        return None


class AdminUI(Proc):
    kind = "admin-ui"

    def __init__(self, lookups=(), nsqds=(), extra=()):
        args = ["--http-address=127.0.0.1:0"]
        args += ["--lookupd-http-address=%s" % a for a in lookups]
        args += ["--nsqd-http-address=%s" % a for a in nsqds]
        super().__init__(admin_bin(), args + list(extra),
                         {"http": r"HTTP: listening on [0-9.]+:(\d+)"},
                         "build with `cargo build --release -p admin-ui` or set ADMIN_UI_BIN")

    @property
    def base(self):
        return "http://127.0.0.1:%d" % self.ports["http"]

    def call(self, method, path, body=None, headers=None):
        return request(method, self.base + path, body, headers=headers)

    def get(self, path):
        """GET an /api path, asserting 200 and a JSON answer; returns the decoded JSON."""
        r = self.call("GET", path)
        assert r.status == 200, "admin-ui GET %s answered %d %r" % (path, r.status, r.body)
        assert_json_type(r, "GET " + path)
        return r.json()

    def act(self, method, path, body=None):
        """An action that must answer as nsqadmin does when it is done everywhere:
        200 {"message": ""}."""
        r = self.call(method, path, body)
        assert r.status == 200 and r.body == b'{"message":""}', (
            "admin-ui %s %s %r answered %d %r" % (method, path, body, r.status, r.body))
        assert_json_type(r, "%s %s" % (method, path))
        return r


# ---- HTTP -----------------------------------------------------------------------------------

class Resp:
    def __init__(self, status, headers, body):
        self.status = status
        self.headers = headers
        self.body = body

    def json(self):
        try:
            return json.loads(self.body)
        except ValueError:
            raise AssertionError("answer is not JSON (status %d): %r" % (self.status, self.body))

    def __repr__(self):
        return "Resp(%d, %r)" % (self.status, self.body[:300])


def request(method, url, body=None, timeout=10, headers=None):
    """One HTTP request. `body` may be bytes, str, or anything JSON-encodable (then sent as
    application/json); `headers` are added. Never raises for an HTTP error status."""
    headers = dict(headers or {})
    if body is not None and not isinstance(body, (bytes, str)):
        body = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    elif isinstance(body, str):
        body = body.encode()
    req = urllib.request.Request(url, data=body, method=method, headers=headers)
    try:
        with _OPENER.open(req, timeout=timeout) as r:
            return Resp(r.status, r.headers, r.read())
    except urllib.error.HTTPError as e:
        return Resp(e.code, e.headers, e.read())


def assert_json_type(resp, what):
    ctype = resp.headers.get("Content-Type", "")
    assert ctype.replace(" ", "").lower() == "application/json;charset=utf-8", (
        "%s: Content-Type is %r, API.md says application/json; charset=utf-8" % (what, ctype))


def assert_error(resp, status, message, what):
    assert resp.status == status, "%s: expected %d %s, got %d %r" % (
        what, status, message, resp.status, resp.body)
    assert resp.json().get("message") == message, "%s: expected message %s, got %r" % (
        what, message, resp.body)
    assert_json_type(resp, what)


def q(name):
    """Percent-encode a name for a path segment (as encodeURIComponent does)."""
    return urllib.parse.quote(name, safe="")


# ---- waiting --------------------------------------------------------------------------------

def wait_until(pred, what, timeout=CATCH_UP, interval=0.05):
    """Poll `pred` until it returns something truthy; fails with `what` after `timeout`."""
    deadline = time.monotonic() + timeout
    last = None
    while True:
        last = pred()
        if last:
            return last
        if time.monotonic() >= deadline:
            raise AssertionError("timed out after %.1fs waiting for %s (last: %r)"
                                 % (timeout, what, last))
        time.sleep(interval)


def eventually(check, timeout=CATCH_UP, interval=0.05):
    """Run `check` (which asserts) until it passes; re-raise its last failure after
    `timeout`. Returns what `check` returns."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return check()
        except AssertionError:
            if time.monotonic() >= deadline:
                raise
        time.sleep(interval)


def wait_registered(lookup, brokers, topic, channel=None):
    """Until the lookup's /lookup lists every broker for the topic (and the channel)."""
    want = {b.tcp_port for b in brokers}

    def check():
        if not want <= lookup.producer_tcp_ports(topic):
            return False
        return channel is None or channel in lookup.channels(topic)
    wait_until(check, "lookup %s to list %s for %s/%s"
               % (lookup.http_address, [b.node for b in brokers], topic, channel))


# ---- a raw NSQ consumer -----------------------------------------------------------------------

class Consumer:
    """A raw protocol-V2 consumer (tests/python/nsqwire.py): IDENTIFY, SUB, RDY; a thread
    answers heartbeats with NOP and keeps (without finishing) the messages it gets."""

    def __init__(self, broker, topic, channel, client_id="admin-test-consumer",
                 hostname="admin-test-host", user_agent="admin-tests/1.0", rdy=0):
        self.client_id = client_id
        self.hostname = hostname
        self.user_agent = user_agent
        self.messages = []
        self._stop = False
        self.conn = Conn(("127.0.0.1", broker.tcp_port))
        self.local_address = "%s:%d" % self.conn.sock.getsockname()[:2]
        answer = self.conn.identify(client_id=client_id, hostname=hostname,
                                    user_agent=user_agent, feature_negotiation=False)
        if answer != b"OK":
            raise AssertionError("IDENTIFY answered %r" % answer)
        self.conn.sub(topic, channel, rdy=rdy or None)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop:
            try:
                ftype, data = self.conn.read_frame(timeout=0.2)
            except socket.timeout:
                continue
            except (OSError, WireError):
                return
            if ftype == FRAME_MESSAGE:
                self.messages.append(data)

    def close(self):
        self._stop = True
        try:
            self.conn.cmd("CLS")
        except OSError:
            pass
        self._thread.join(timeout=2)
        self.conn.close()


# ---- a cluster ------------------------------------------------------------------------------

class Cluster:
    """One lookup, two brokers (--shards 2) registered with it, an admin-ui reading the lookup
    (`admin`) and, when asked, one reading only the brokers (`admin_nsqd`)."""

    def __init__(self, nsqd_admin=True):
        self.procs = []
        self.consumers = []
        try:
            self.lookup = self._start(Lookup())
            reg = ["--lookupd-tcp-address=%s" % self.lookup.tcp_address,
                   "--broadcast-address=127.0.0.1"]
            self.b1 = self._start(Broker(reg))
            self.b2 = self._start(Broker(reg))
            self.brokers = [self.b1, self.b2]
            self.admin = self._start(AdminUI(lookups=[self.lookup.http_address]))
            self.admin_nsqd = None
            if nsqd_admin:
                self.admin_nsqd = self._start(AdminUI(nsqds=[b.node for b in self.brokers]))
            # Both brokers identified at the lookup before anything is asked of it.
            wait_until(lambda: {b.tcp_port for b in self.brokers}
                       <= {p["tcp_port"] for p in self.lookup.nodes()},
                       "both brokers in the lookup's /nodes")
        except BaseException:
            self.stop()
            raise

    def on_both(self, topic, channels=(), count=(1, 1)):
        """Creates `channels` of `topic` on both brokers, publishes count[i] messages on broker
        i, and waits until the lookup lists both brokers (and the channels) for the topic."""
        for b, n in zip(self.brokers, count):
            b.create_topic(topic)
            for c in channels:
                b.create_channel(topic, c)
            b.publish(topic, n)
        wait_registered(self.lookup, self.brokers, topic)
        for c in channels:
            wait_registered(self.lookup, self.brokers, topic, c)

    def _start(self, proc):
        self.procs.append(proc)
        return proc.start()

    def start_admin(self, lookups=(), nsqds=()):
        return self._start(AdminUI(lookups=lookups, nsqds=nsqds))

    def consumer(self, broker, topic, channel, **kw):
        c = Consumer(broker, topic, channel, **kw)
        self.consumers.append(c)
        return c

    def stop(self):
        """Stops everything and removes the temporary directories; returns a report of the
        processes that had died on their own ("" when none)."""
        for c in self.consumers:
            c.close()
        crashed = [p for p in reversed(self.procs) if p.stop()]
        report = crash_report(crashed)
        for p in self.procs:
            p.cleanup()
        return report


def crash_report(crashed):
    return "\n".join("%s died during the test (exit %s)\nargs: %s\nstderr:\n%s"
                     % (p.kind, p.proc.returncode, " ".join(p.args), p.stderr())
                     for p in crashed)


# ---- dead letters (the broker's, beyond nsqd) ---------------------------------------------------

def make_dead_letters(broker, topic, channel, dead_letter_topic, count, body="poison"):
    """Gives `count` messages of `topic` up on `broker`: channel `channel` gets max_attempts 1
    and `dead_letter_topic`, a raw consumer takes the messages and disconnects holding them,
    so each one's next delivery would exceed the limit. Returns the broker's origin records of
    `dead_letter_topic` once all `count` are there."""
    broker.create_channel(topic, channel)
    broker.post("/channel/config?topic=%s&channel=%s&max_attempts=1&dead_letter_topic=%s"
                % (q(topic), q(channel), q(dead_letter_topic)))
    broker.publish(topic, count, body)
    c = Consumer(broker, topic, channel, rdy=count)
    try:
        wait_until(lambda: len(c.messages) >= count, "%d messages delivered" % count)
    finally:
        c.close()

    def records():
        r = request("GET", broker.url("/dead_letters?topic=%s" % q(dead_letter_topic)))
        return r.json()["dead_letters"] if r.status == 200 else []
    wait_until(lambda: len(records()) >= count, "%d dead letters recorded" % count)
    return records()


# ---- replay (the broker's, beyond nsqd) --------------------------------------------------------

def consume_and_finish(broker, topic, channel, count):
    """Takes `count` messages of `channel` on `broker` and FINishes each (its offset moves on
    by `count`); waits until the channel owes nothing. Returns the bodies, in order."""
    conn = Conn(("127.0.0.1", broker.tcp_port))
    try:
        conn.identify(client_id="admin-test-finisher", feature_negotiation=False)
        conn.sub(topic, channel, rdy=count)
        got = conn.read_messages(count)
        for m in got:
            conn.fin(m.id)
        wait_until(lambda: broker.channel_stats(topic, channel)["in_flight_count"] == 0
                   and broker.channel_stats(topic, channel)["depth"] == 0,
                   "%s/%s to owe nothing" % (topic, channel))
        conn.cmd("CLS")
    finally:
        conn.close()
    return [m.body.decode() for m in got]


def history_on_both(cluster, topic, channel, before, after, whole_second=False):
    """On both brokers: `topic` keeping 1h of history, `before[i]` messages, a time, then
    `after[i]` messages, all consumed and FINished on `channel`. Returns the time (unix ns;
    with `whole_second`, a whole second, as a datetime-local input gives it)."""
    for b in cluster.brokers:
        b.create_channel(topic, channel)
        b.post("/topic/config?topic=%s&retention_time=1h" % q(topic))
    for b, n in zip(cluster.brokers, before):
        b.publish(topic, n, "early")
    time.sleep(0.05)
    middle = time.time_ns()
    if whole_second:
        middle = (middle // 10**9 + 1) * 10**9
        time.sleep(max(0.0, (middle - time.time_ns()) / 1e9))
    time.sleep(0.05)
    for b, n in zip(cluster.brokers, after):
        b.publish(topic, n, "late")
    for b, n, m in zip(cluster.brokers, before, after):
        consume_and_finish(b, topic, channel, n + m)
    return middle
