"""Hosts made of network namespaces, and the cluster's processes started on them from deploy/.

Every namespace of a run is named `nsqcl-<pid>-<role>` (pid: the test process), so runs side by
side never collide, and a run that was killed leaves names whose pid is gone: `clean_stale()`
removes those (their processes, namespaces and /etc/netns/ files) before a run starts.

Layout: one namespace `...-sw` holds the bridge `br0` (the switch); every host namespace has one
veth `eth0` (10.77.0.x/24) whose peer `v-<role>` is a port of the bridge. Both ends are created
directly inside their namespaces, so nothing ever appears in the root namespace. Cutting a host
off sets its bridge port down (`ip -n ...-sw link set v-<role> down`): the cable pulled at the
switch, packets dropped silently both ways. Names (`broker-1.internal`, ...) resolve through
`/etc/netns/<ns>/hosts`, which `ip netns exec` mounts over /etc/hosts for the processes it runs.
"""

import concurrent.futures
import ctypes
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request

PREFIX = "nsqcl-"
SUBNET = "10.77.0"
DOMAIN = "internal"
# role -> last octet of its address
HOSTS = {
    "lookup-1": 11,
    "lookup-2": 12,
    "broker-1": 21,
    "broker-2": 22,
    "broker-3": 23,
    "admin": 31,
    "client": 41,
}
BROKERS = ["broker-1", "broker-2", "broker-3"]
LOOKUPS = ["lookup-1", "lookup-2"]
NETNS_DIR = "/var/run/netns"
CLONE_NEWNET = 0x40000000


def run(*args, check=True, timeout=15):
    p = subprocess.run(list(args), capture_output=True, text=True, timeout=timeout)
    if check and p.returncode != 0:
        raise RuntimeError("%s: exit %d: %s" % (" ".join(args), p.returncode,
                                                (p.stderr or p.stdout).strip()))
    return p


def unavailable_reason():
    """Why network namespaces cannot be made here, or None."""
    if os.geteuid() != 0:
        return "not root (ip netns needs CAP_SYS_ADMIN)"
    if shutil.which("ip") is None:
        return "no `ip` command (iproute2)"
    probe = "%sprobe-%d" % (PREFIX, os.getpid())
    try:
        p = run("ip", "netns", "add", probe, check=False)
        if p.returncode != 0:
            return "`ip netns add` failed: %s" % p.stderr.strip()
        p = run("ip", "-n", probe, "link", "add", "br0", "type", "bridge", check=False)
        if p.returncode != 0:
            return "cannot make a bridge in a namespace: %s" % p.stderr.strip()
    finally:
        run("ip", "netns", "del", probe, check=False)
    return None


def list_netns():
    out = run("ip", "netns", "list").stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def _pid_is_a_live_run(pid):
    if pid == os.getpid():
        return False  # ours, before we made anything: a leftover of an earlier run
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            return b"python" in f.read()
    except OSError:
        return False


def _remove_ns(name):
    p = run("ip", "netns", "pids", name, check=False)
    for pid in p.stdout.split():
        try:
            os.kill(int(pid), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            pass
    run("ip", "netns", "del", name, check=False)
    shutil.rmtree(os.path.join("/etc/netns", name), ignore_errors=True)


def clean_stale():
    """Removes namespaces (and their processes, /etc/netns files) left by runs that are gone."""
    removed = []
    names = set(list_netns())
    try:
        names |= {n for n in os.listdir("/etc/netns") if n.startswith(PREFIX)}
    except FileNotFoundError:
        pass
    for name in sorted(names):
        m = re.match(re.escape(PREFIX) + r"(?:probe-)?(\d+)-?", name)
        if not m or _pid_is_a_live_run(int(m.group(1))):
            continue
        _remove_ns(name)
        removed.append(name)
    return removed


def fqdn(role):
    return "%s.%s" % (role, DOMAIN)


def ip_of(role):
    return "%s.%d" % (SUBNET, HOSTS[role])


# ---- deploy/ units and settings files -------------------------------------------------------

def parse_env(path):
    """An EnvironmentFile: KEY=VALUE lines, # comments (values here are unquoted)."""
    env = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            key, _, value = line.partition("=")
            env[key.strip()] = value.strip()
    return env


def exec_start(unit_path):
    """The ExecStart= line of a unit, continuation lines joined."""
    text = open(unit_path).read().replace("\\\n", " ")
    for line in text.splitlines():
        if line.startswith("ExecStart="):
            return line[len("ExecStart="):]
    raise ValueError("%s has no ExecStart=" % unit_path)


def unit_command(unit_path, env):
    """ExecStart expanded as systemd does: `${VAR}` inside a word is replaced as is, a word that
    is exactly `$VAR` becomes the value split at whitespace (nothing when empty)."""
    words = []
    for word in shlex.split(exec_start(unit_path)):
        m = re.fullmatch(r"\$(\w+)", word)
        if m:
            words.extend(env.get(m.group(1), "").split())
        else:
            words.append(re.sub(r"\$\{(\w+)\}", lambda m: env.get(m.group(1), ""), word))
    return words


# ---- processes on hosts -----------------------------------------------------------------------

def _die_with_parent():
    # The processes die with the test process (PR_SET_PDEATHSIG, kept across exec).
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGKILL)


class Proc:
    def __init__(self, cluster, host, name, args):
        self.cluster = cluster
        self.host = host
        self.name = name
        self.args = list(args)
        self.log_path = os.path.join(cluster.workdir, "%s.log" % name)
        self.popen = None
        self.stopped_by_us = False
        self.exits = []  # return codes of earlier runs (restarts)

    def start(self):
        self.stopped_by_us = False
        log = open(self.log_path, "ab")
        try:
            # `ip netns exec` execs the command itself: the pid is the process's own.
            self.popen = subprocess.Popen(
                ["ip", "netns", "exec", self.cluster.ns(self.host)] + self.args,
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                preexec_fn=_die_with_parent, env=dict(os.environ, RUST_BACKTRACE="1"))
        finally:
            log.close()
        return self

    def alive(self):
        return self.popen is not None and self.popen.poll() is None

    def stop(self, timeout=20.0, sig=signal.SIGTERM):
        """Signal, wait up to timeout, then SIGKILL. Returns (exit code, seconds to exit)."""
        if self.popen is None:
            return None, 0.0
        t0 = time.monotonic()
        if self.popen.poll() is None:
            self.stopped_by_us = True
            self.popen.send_signal(sig)
            try:
                self.popen.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(timeout=10)
        rc = self.popen.returncode
        self.exits.append(rc)
        return rc, time.monotonic() - t0

    def wait(self, timeout):
        """Waits for a process that ends by itself (not counted as died)."""
        self.stopped_by_us = True
        return self.popen.wait(timeout=timeout)

    def log(self, limit=12000):
        try:
            with open(self.log_path, "rb") as f:
                text = f.read().decode("utf-8", "replace")
        except OSError:
            return "<no log>"
        if len(text) > limit:
            text = "...(%d chars cut)...\n%s" % (len(text) - limit, text[-limit:])
        return text


class Cluster:
    """The namespaces, the switch and the processes of one run."""

    def __init__(self, workdir, bins, deploy_dir, python):
        self.workdir = workdir
        self.bins = bins  # name -> path: broker, lookup, admin-ui
        self.deploy_dir = deploy_dir
        self.python = python
        self.run_id = "%s%d" % (PREFIX, os.getpid())
        self.made = []  # namespaces made, to delete
        self.procs = []
        self._net = None

    def ns(self, role):
        return "%s-%s" % (self.run_id, role)

    # ---- network

    def build(self):
        try:
            self._build()
        except BaseException:
            self.teardown()
            raise

    def _build(self):
        sw = self.ns("sw")
        run("ip", "netns", "add", sw)
        self.made.append(sw)
        run("ip", "-n", sw, "link", "add", "br0", "type", "bridge")
        run("ip", "-n", sw, "link", "set", "br0", "up")
        hosts = "127.0.0.1 localhost\n" + "".join(
            "%s %s %s\n" % (ip_of(r), fqdn(r), r) for r in HOSTS)
        for role in HOSTS:
            name = self.ns(role)
            etc = os.path.join("/etc/netns", name)
            os.makedirs(etc, exist_ok=True)
            with open(os.path.join(etc, "hosts"), "w") as f:
                f.write(hosts)
            run("ip", "netns", "add", name)
            self.made.append(name)
            port = "v-%s" % role
            run("ip", "link", "add", "name", "eth0", "netns", name, "type", "veth",
                "peer", "name", port, "netns", sw)
            run("ip", "-n", sw, "link", "set", port, "master", "br0")
            run("ip", "-n", sw, "link", "set", port, "up")
            run("ip", "-n", name, "addr", "add", "%s/24" % ip_of(role), "dev", "eth0")
            run("ip", "-n", name, "link", "set", "eth0", "up")
            run("ip", "-n", name, "link", "set", "lo", "up")
        # One thread of the test process joins the client host, for its HTTP checks.
        self._net = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, initializer=_enter_netns, initargs=(self.ns("client"),))

    def cut(self, role):
        run("ip", "-n", self.ns("sw"), "link", "set", "v-%s" % role, "down")

    def reconnect(self, role):
        run("ip", "-n", self.ns("sw"), "link", "set", "v-%s" % role, "up")

    def teardown(self):
        """Stops every process (SIGTERM, then SIGKILL), deletes the namespaces and files."""
        for p in self.procs:
            if p.alive():
                p.stop(timeout=10)
        if self._net is not None:
            self._net.shutdown(wait=False)
            self._net = None
        for name in reversed(self.made):
            _remove_ns(name)
        for role in HOSTS:
            shutil.rmtree(os.path.join("/etc/netns", self.ns(role)), ignore_errors=True)
        self.made = []

    def died(self):
        """Processes that exited on their own."""
        return [p for p in self.procs
                if p.popen is not None and p.popen.poll() is not None and not p.stopped_by_us]

    # ---- from the client host

    def on_client(self, fn, *args, timeout=30):
        return self._net.submit(fn, *args).result(timeout=timeout)

    def http(self, role, port, path, timeout=5.0):
        """GET http://<role>:<port><path> from the client host: (status, parsed JSON or text)."""
        return self.on_client(_http_get, "http://%s:%d%s" % (ip_of(role), port, path), timeout,
                              timeout=timeout + 5)

    def accepts(self, role, port):
        return self.on_client(_accepts, ip_of(role), port)

    # ---- processes

    def spawn(self, host, name, args):
        p = Proc(self, host, name, args)
        self.procs.append(p)
        return p.start()

    def _service(self, unit, binary, env, data_path=None):
        args = unit_command(os.path.join(self.deploy_dir, unit), env)
        assert args[0] == "/usr/local/bin/%s" % binary, args
        args[0] = self.bins[binary]
        if data_path is not None:
            args = [a.replace("/var/lib/broker", data_path) for a in args]
        assert not any("/var/lib" in a or "/usr/local" in a for a in args), args
        return args

    def lookup_args(self, role):
        env = parse_env(os.path.join(self.deploy_dir, "lookup.env"))
        env["LOOKUP_BROADCAST_ADDRESS"] = fqdn(role)
        return self._service("lookup.service", "lookup", env)

    def broker_args(self, role):
        env = parse_env(os.path.join(self.deploy_dir, "broker.env"))
        env["BROKER_BROADCAST_ADDRESS"] = fqdn(role)
        data = os.path.join(self.workdir, "data-%s" % role)
        os.makedirs(data, exist_ok=True)
        return self._service("broker.service", "broker", env, data_path=data)

    def admin_args(self):
        env = parse_env(os.path.join(self.deploy_dir, "admin-ui.env"))
        return self._service("admin-ui.service", "admin-ui", env)

    def agent(self, name, *args):
        here = os.path.dirname(os.path.abspath(__file__))
        return self.spawn("client", name, [self.python, os.path.join(here, "agent.py")]
                          + list(args))

    def wait_accepts(self, role, ports, timeout=15.0, proc=None):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc is not None and not proc.alive():
                raise RuntimeError("%s exited with %s at start-up:\n%s"
                                   % (proc.name, proc.popen.returncode, proc.log()))
            if all(self.accepts(role, port) for port in ports):
                return
            time.sleep(0.1)
        raise RuntimeError("%s does not accept on %s within %.0fs%s" % (
            role, ports, timeout, "" if proc is None else ":\n" + proc.log()))


def _enter_netns(name):
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(os.path.join(NETNS_DIR, name), os.O_RDONLY)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, "setns(%s): %s" % (name, os.strerror(err)))
    finally:
        os.close(fd)


_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # no proxy from the env


def _http_get(url, timeout):
    try:
        with _OPENER.open(url, timeout=timeout) as r:
            status, body = r.status, r.read()
    except urllib.error.HTTPError as e:
        status, body = e.code, e.read()
    try:
        return status, json.loads(body)
    except ValueError:
        return status, body.decode("utf-8", "replace")


def _accepts(ip, port):
    try:
        with socket.create_connection((ip, port), timeout=0.5):
            return True
    except OSError:
        return False
