"""Hosts made of network namespaces on one bridge, and the processes started on them.

This module owns every namespace and process of a fault run, and guarantees that both are gone
when `Hosts.teardown()` returns (run.py calls it on any exit: normal end, exception, Ctrl-C,
SIGTERM), and that namespaces left by an earlier run that died are removed by `clean_stale()`.

Names: every namespace is `fi-<pid>-<role>` (pid: the harness process), so runs side by side
never collide, and one whose pid is no longer a live Python process is stale.

Layout: the namespace `fi-<pid>-sw` holds the bridge `br0` (the switch); every host namespace
has loopback up and one veth `eth0` with 10.78.0.<n>/24 whose peer `v-<role>` is a port of the
bridge. Both ends are made inside their namespaces, so nothing appears in the root namespace.
Cutting a host off sets its switch port down: packets are dropped silently both ways, as with a
pulled cable, and the host's own sockets see no error (the `partition` fault).

Processes run under `ip netns exec` (which execs the command: the pid is the process's own),
with PR_SET_PDEATHSIG so that they die with the harness even if it is SIGKILLed.
"""

import os
import re
import signal
import sys
import subprocess
import time

# The namespace primitives (running `ip`, probing, listing, removing a namespace with its
# processes, dying with the harness) are the cluster suite's; only the names differ.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "cluster"))
from netcluster import (  # noqa: E402
    _die_with_parent,
    _pid_is_a_live_run,
    _remove_ns,
    list_netns,
    run,
    unavailable_reason,
)

PREFIX = "fi-"
SUBNET = "10.78.0"
NETNS_DIR = "/var/run/netns"


def clean_stale():
    """Removes `fi-` namespaces (and their processes) of runs that are gone; returns them."""
    removed = []
    for name in sorted(list_netns()):
        m = re.match(re.escape(PREFIX) + r"(?:probe-)?(\d+)-", name)
        if not m or _pid_is_a_live_run(int(m.group(1))):
            continue
        _remove_ns(name)
        removed.append(name)
    return removed


class Proc:
    """One process on a host, restartable; its output appended to one log file."""

    def __init__(self, hosts, host, name, args, log_dir):
        self.hosts = hosts
        self.host = host
        self.name = name
        self.args = list(args)
        self.log_path = os.path.join(log_dir, "%s.log" % name)
        self.popen = None
        self.paused = False
        self.starts = 0

    def start(self):
        with open(self.log_path, "ab") as log:
            log.write(b"==== start %d at %.3f\n" % (self.starts + 1, time.time()))
            log.flush()
            self.popen = subprocess.Popen(
                ["ip", "netns", "exec", self.hosts.ns(self.host)] + self.args,
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                preexec_fn=_die_with_parent, env=dict(os.environ, RUST_BACKTRACE="1"))
        self.starts += 1
        self.paused = False
        return self

    def alive(self):
        return self.popen is not None and self.popen.poll() is None

    def signal(self, sig):
        if self.alive():
            self.popen.send_signal(sig)
            if sig == signal.SIGSTOP:
                self.paused = True
            elif sig == signal.SIGCONT:
                self.paused = False

    def kill(self):
        """SIGKILL (after SIGCONT, so a paused process dies at once) and reap."""
        if self.popen is None:
            return None
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGCONT)
            self.popen.kill()
            try:
                self.popen.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        self.paused = False
        return self.popen.returncode

    def stop(self, timeout=20.0):
        """SIGTERM (a clean stop), then SIGKILL after timeout. Returns the exit code."""
        if self.popen is None:
            return None
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGCONT)
            self.popen.terminate()
            try:
                self.popen.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                return self.kill()
        self.paused = False
        return self.popen.returncode


class Hosts:
    """The namespaces, the switch and the processes of one run."""

    def __init__(self, roles, log_dir):
        self.roles = list(roles)  # host names, e.g. lookup-1, broker-3, client
        self.log_dir = log_dir
        self.run_id = "%s%d" % (PREFIX, os.getpid())
        self.made = []
        self.procs = []
        self.cut_off = set()

    def ns(self, role):
        return "%s-%s" % (self.run_id, role)

    def ip(self, role):
        return "%s.%d" % (SUBNET, 10 + self.roles.index(role))

    def build(self):
        try:
            sw = self.ns("sw")
            run("ip", "netns", "add", sw)
            self.made.append(sw)
            run("ip", "-n", sw, "link", "add", "br0", "type", "bridge")
            run("ip", "-n", sw, "link", "set", "br0", "up")
            for role in self.roles:
                name = self.ns(role)
                run("ip", "netns", "add", name)
                self.made.append(name)
                port = "v-%s" % role
                run("ip", "link", "add", "name", "eth0", "netns", name, "type", "veth",
                    "peer", "name", port, "netns", sw)
                run("ip", "-n", sw, "link", "set", port, "master", "br0")
                run("ip", "-n", sw, "link", "set", port, "up")
                run("ip", "-n", name, "addr", "add", "%s/24" % self.ip(role), "dev", "eth0")
                run("ip", "-n", name, "link", "set", "eth0", "up")
                run("ip", "-n", name, "link", "set", "lo", "up")
        except BaseException:
            self.teardown()
            raise

    def cut(self, role):
        run("ip", "-n", self.ns("sw"), "link", "set", "v-%s" % role, "down")
        self.cut_off.add(role)

    def heal(self, role):
        run("ip", "-n", self.ns("sw"), "link", "set", "v-%s" % role, "up")
        self.cut_off.discard(role)

    def spawn(self, host, name, args):
        p = Proc(self, host, name, args, self.log_dir)
        self.procs.append(p)
        return p.start()

    def teardown(self):
        """Kills every process and deletes every namespace of the run (idempotent)."""
        for p in self.procs:
            try:
                p.kill()
            except OSError:
                pass
        for name in reversed(self.made):
            _remove_ns(name)
        self.made = []
