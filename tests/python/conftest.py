"""Fixtures for the broker's wire-level tests.

The broker binary is target/release/broker (BROKER_BIN overrides). Each broker under test runs on
127.0.0.1 with ephemeral ports, a fresh temporary --data-path and --shards N, where N comes from
`--shards` on the pytest command line or the BROKER_SHARDS environment variable (default 1).
"""

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)

# Real nsqd/nsqlookupd responses: a copy of ../shared/fixtures kept in the repository, so a
# clone anywhere can run the tests.
FIXTURES = os.environ.get("NSQ_FIXTURES", os.path.join(REPO, "tests", "fixtures", "nsq"))
# A bound for a broker that does not start, not a speed check: a restart after SIGKILL scans
# its segments, which on a host busy with other disk work can take more than 10 s.
START_TIMEOUT = 30.0
STOP_GRACE = 5.0


def pytest_addoption(parser):
    parser.addoption(
        "--shards",
        action="store",
        default=None,
        help="broker --shards value for every broker started (default: $BROKER_SHARDS or 1)",
    )


def pytest_configure(config):
    config.addinivalue_line("markers", "shards(n): only run when the shard count is n or more")
    config.addinivalue_line(
        "markers",
        "slow: among the slowest wire tests; `tests/run.sh wire` leaves them out, the full run keeps them",
    )


def pytest_report_header(config):
    return "broker: %s, shards: %d" % (broker_bin(), shard_count(config))


def shard_count(config):
    value = config.getoption("--shards") or os.environ.get("BROKER_SHARDS") or "1"
    return int(value)


def broker_bin():
    return os.environ.get("BROKER_BIN") or os.path.join(REPO, "target", "release", "broker")


_PORT_FLOOR = 10_000
_next_port = [os.getpid() * 7_919]


def _ephemeral_low():
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768


def free_port():
    """A port free on 127.0.0.1 a moment ago, for a process that is told its port.

    It comes from below the kernel's ephemeral range, in turn, so no connection made out and
    no process binding port 0 can take it before its owner binds it (as test_harness's
    free_port in Rust)."""
    span = _ephemeral_low() - _PORT_FLOOR
    for _ in range(max(span, 0)):
        port = _PORT_FLOOR + _next_port[0] % span
        _next_port[0] += 1
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            s.bind(("127.0.0.1", port))
            return port
        except OSError:
            continue
        finally:
            s.close()
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
    finally:
        s.close()


def port_accepts(host, port):
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


class Broker:
    """One running broker process."""

    def __init__(self, shards, extra_args, workdir):
        # Port 0: the broker picks free ports and keeps them reserved; we read them from its
        # log. (Picking ports here and passing them races with brokers started side by side:
        # SO_REUSEPORT would let two brokers share a port.)
        self.host = "127.0.0.1"
        self.port = None
        self.http_port = None
        self.shards = shards
        self.data_path = os.path.join(workdir, "data")
        os.makedirs(self.data_path, exist_ok=True)
        self.stderr_path = os.path.join(workdir, "broker.stderr")
        self.stdout_path = os.path.join(workdir, "broker.stdout")
        self.args = [
            broker_bin(),
            "--tcp-address=%s:0" % self.host,
            "--http-address=%s:0" % self.host,
            "--data-path=%s" % self.data_path,
            "--shards=%d" % shards,
        ] + list(extra_args)
        self.proc = None

    @property
    def addr(self):
        return (self.host, self.port)

    @property
    def tcp_address(self):
        # Before the log names the port (a broker that did not start) there is none to show.
        return "%s:%s" % (self.host, self.port if self.port is not None else "?")

    def start(self):
        if not os.path.exists(self.args[0]):
            raise RuntimeError("broker binary not found: %s (build with `cargo build --release "
                               "-p broker` or set BROKER_BIN)" % self.args[0])
        self._err = open(self.stderr_path, "wb")
        self._out = open(self.stdout_path, "wb")
        env = dict(os.environ)
        env.setdefault("RUST_BACKTRACE", "1")
        self.proc = subprocess.Popen(self.args, stdout=self._out, stderr=self._err,
                                     stdin=subprocess.DEVNULL, env=env)
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("broker exited with %s at start-up\nargs: %s\nstderr:\n%s"
                                   % (self.proc.returncode, " ".join(self.args), self.stderr()))
            if self.port is None:
                self._read_ports()
            if self.port is not None and port_accepts(self.host, self.port):
                # With several shards each binds its own SO_REUSEPORT listener: give the others
                # a moment after the first one answers.
                if self.shards > 1:
                    time.sleep(0.2)
                return self
            time.sleep(0.05)
        self.stop()
        raise RuntimeError("broker did not accept on %s within %.0fs\nargs: %s\nstderr:\n%s"
                           % (self.tcp_address, START_TIMEOUT, " ".join(self.args), self.stderr()))

    def _read_ports(self):
        text = self.stderr()
        tcp = re.search(r"TCP: listening tcp=[^ ]*:(\d+)", text)
        http = re.search(r"HTTP: listening http=[^ ]*:(\d+)", text)
        if tcp and http:
            self.port, self.http_port = int(tcp.group(1)), int(http.group(1))

    @property
    def https_port(self):
        """The port the broker serves HTTPS on (its log's `HTTPS: listening`, written just after
        the TCP and HTTP lines)."""
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            m = re.search(r"HTTPS: listening https=[^ ]*:(\d+)", self.stderr())
            if m:
                return int(m.group(1))
            if time.monotonic() > deadline:
                raise AssertionError("no `HTTPS: listening` in the broker's log:\n" + self.stderr())
            time.sleep(0.05)

    def stderr(self, limit=20000):
        try:
            with open(self.stderr_path, "rb") as f:
                data = f.read()
        except OSError:
            return "<no stderr>"
        text = data.decode("utf-8", "replace")
        if len(text) > limit:
            text = "...(%d chars cut)...\n" % (len(text) - limit) + text[-limit:]
        return text

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self):
        """SIGTERM, then SIGKILL after STOP_GRACE seconds. Returns the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=STOP_GRACE)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=STOP_GRACE)
        for f in (self._err, self._out):
            try:
                f.close()
            except Exception:
                pass
        return self.proc.returncode


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.failed:
        seen = []
        for bs in getattr(item, "_broker_sets", []):
            seen.extend(b for b in bs.brokers if b not in seen)
        for b in seen:
            rep.sections.append((
                "broker stderr (%s, --shards %d, alive=%s)" % (b.tcp_address, b.shards, b.alive()),
                "args: %s\n%s" % (" ".join(b.args), b.stderr()),
            ))


@pytest.fixture(scope="session")
def shards(pytestconfig):
    return shard_count(pytestconfig)


class BrokerSet:
    """Brokers started by one fixture; stops them all and reports any that died on its own."""

    def __init__(self, default_shards):
        self.default_shards = default_shards
        self.brokers = []
        self.dirs = []

    def start(self, *extra, shards=None):
        workdir = tempfile.mkdtemp(prefix="broker-test-")
        self.dirs.append(workdir)
        b = Broker(self.default_shards if shards is None else shards, extra, workdir)
        self.brokers.append(b)
        return b.start()

    def stop_all(self):
        crashed = []
        for b in self.brokers:
            if b.proc is not None and b.proc.poll() is not None:
                crashed.append(b)
            b.stop()
        for d in self.dirs:
            shutil.rmtree(d, ignore_errors=True)
        return crashed


def _crash_report(crashed):
    return "\n".join(
        "broker %s (--shards %d) died during the test with exit code %s\nstderr:\n%s"
        % (b.tcp_address, b.shards, b.proc.returncode, b.stderr()) for b in crashed)


@pytest.fixture
def start_broker(request, shards):
    """Factory: start_broker(*extra_flags, shards=None) -> Broker, stopped at teardown.

    A broker that exits by itself during the test makes the test error at teardown."""
    bs = BrokerSet(shards)
    _broker_sets(request.node).append(bs)
    yield bs.start
    crashed = bs.stop_all()
    if crashed:
        pytest.fail(_crash_report(crashed))


@pytest.fixture(scope="module")
def module_brokers(request, shards):
    """Module-wide factory, for a broker shared by the tests of one file."""
    bs = BrokerSet(shards)
    yield bs
    crashed = bs.stop_all()
    if crashed:
        pytest.fail(_crash_report(crashed))


@pytest.fixture(autouse=True)
def _attach_module_brokers(request):
    # Lets the failure report show the stderr of module-scoped brokers too.
    if "module_brokers" in request.fixturenames:
        _broker_sets(request.node).append(request.getfixturevalue("module_brokers"))
    yield


def _broker_sets(node):
    if not hasattr(node, "_broker_sets"):
        node._broker_sets = []
    return node._broker_sets


@pytest.fixture
def broker(start_broker):
    """A broker with default flags."""
    return start_broker()


@pytest.fixture(scope="session")
def transcripts():
    import json
    path = os.path.join(FIXTURES, "nsqd_tcp_transcripts.json")
    with open(path) as f:
        data = json.load(f)
    return {c["case"]: c for c in data["cases"]}, data


@pytest.fixture(scope="session")
def certs():
    """TLS certificates for the session (tlscerts.py): a CA, servers, a client, a rogue."""
    from tlscerts import make_certs
    d = tempfile.mkdtemp(prefix="broker-tls-")
    yield make_certs(d)
    shutil.rmtree(d, ignore_errors=True)


# Restart tests (test_storage, test_retention, test_replay, ...): a broker whose data directory
# survives stops and restarts.

@pytest.fixture
def workdir():
    d = tempfile.mkdtemp(prefix="broker-storage-")
    yield d
    shutil.rmtree(d, ignore_errors=True)


class Restartable:
    """A broker whose data directory survives stops and restarts."""

    def __init__(self, workdir, shards, *flags):
        self.workdir, self.shards, self.flags = workdir, shards, flags
        self.broker = None

    def start(self, shards=None):
        self.broker = Broker(self.shards if shards is None else shards, self.flags, self.workdir)
        return self.broker.start()

    def stop(self):
        code = self.broker.stop()
        assert code == 0, "clean stop must exit 0, got %s\n%s" % (code, self.broker.stderr())

    def kill(self):
        self.broker.proc.send_signal(signal.SIGKILL)
        self.broker.proc.wait(timeout=10)
        self.broker.stop()

    @property
    def addr(self):
        return self.broker.addr

    @property
    def data_path(self):
        return self.broker.data_path


@pytest.fixture
def restartable(workdir, shards):
    made = []

    def make(*flags, shards_override=None):
        r = Restartable(workdir, shards_override or shards, *flags)
        made.append(r)
        return r

    yield make
    for r in made:
        if r.broker is not None and r.broker.alive():
            r.broker.stop()
