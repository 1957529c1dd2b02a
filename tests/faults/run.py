#!/usr/bin/env python3
"""A Jepsen-style fault run on network namespaces (issue 43): three lookups, five brokers,
publishers and consumers on real client libraries, a seeded schedule of faults, then healing,
draining and the checker (checker.py). Root only. See docs/testing/faults.md.

    tests/.venv/bin/python tests/faults/run.py --seed 7 --duration 60 --faults all

--replicas 1 runs the brokers unreplicated, as before replication (a run that wipes a broker's
data directory then reports lost > 0, as it must for unreplicated data). --replicas N above 1
runs the lookups' replication controller (Raft between the three lookups) and the brokers with
--replication-address and --replicas N; the topic is created by a publish, and before each fault
the run waits (at most --settle seconds) for the topic to be whole again: N replicas, all in
sync, a leader. A wipe of one of the topic's replicas is skipped when it is not whole by then,
so that no two holders of what was acknowledged lose their data at once (the guarantee of
replicas N with min-insync a majority); the other kinds lose no data and go ahead.

Clients run in their own namespace (`client`), so that a broker cut off is cut off from them
too, and reach every host over the bridge as any client host would:
  gnsq publisher (py-pub), Rust client publisher (rs-pub): round robin over the five brokers;
  pynsq consumer (py-con), Rust client consumer (rs-con): one channel, lookup discovery only,
  polling the three lookups every second (both clients' setting; their defaults are 60 s).
Consumers are paced below the publishers' rate while faults run, so that each broker holds a
backlog (what a wiped data directory can lose), and run unpaced once the faults end.

Exit status: 0 no violation, 1 a violation (lost or unexpected messages), 2 bad usage or a run
that could not be made (the reason is printed).
"""

import argparse
import concurrent.futures
import ctypes
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)

import checker  # noqa: E402
import hosts as hostsmod  # noqa: E402
import schedule  # noqa: E402

LOOKUPS = ["lookup-1", "lookup-2", "lookup-3"]
BROKERS = ["broker-1", "broker-2", "broker-3", "broker-4", "broker-5"]
CLIENT = "client"
TOPIC = "faults"
CHANNEL = "check"
RAFT_PORT = 4170  # the controller's Raft port on each lookup (replicas > 1)
REPLICATION_PORT = 4400  # shard i of a broker listens on this + i (replicas > 1)


def log(msg):
    print("[%s] %s" % (time.strftime("%H:%M:%S"), msg), flush=True)


def parse_args(argv):
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="--replicas N > 1 needs brokers with --replicas and lookups with --controller-id.")
    p.add_argument("--seed", type=int, default=None, help="schedule seed (default: random)")
    p.add_argument("--duration", type=float, default=60.0,
                   help="seconds of the fault phase (default 60)")
    p.add_argument("--faults", default="all",
                   help="comma-separated kinds: %s, or all" % ",".join(schedule.KINDS))
    p.add_argument("--replicas", type=int, default=1,
                   help="replicas per topic (default 1: unreplicated brokers, no controller)")
    p.add_argument("--settle", type=float, default=60.0,
                   help="replicas > 1: longest wait before a fault for the topic to be whole "
                   "again (default 60)")
    p.add_argument("--min-gap", type=float, default=3.0,
                   help="least seconds between one fault's end and the next's start")
    p.add_argument("--fault-time", default="2,6",
                   help="each fault lasts a random time in LO,HI seconds (default 2,6)")
    p.add_argument("--publish-rate", type=float, default=40.0,
                   help="attempts per second of each publisher (default 40)")
    p.add_argument("--consume-rate", type=float, default=25.0,
                   help="messages per second of each consumer while faults run (default 25)")
    p.add_argument("--quiet", type=float, default=10.0,
                   help="drained: no delivery for this many seconds (default 10)")
    p.add_argument("--drain-timeout", type=float, default=180.0,
                   help="longest drain in seconds (default 180)")
    p.add_argument("--clients", default="py,rs",
                   help="client libraries: py (gnsq publisher, pynsq consumer), rs (the Rust "
                   "client), or both (default py,rs)")
    p.add_argument("--shards", type=int, default=1, help="--shards of each broker (default 1)")
    p.add_argument("--broker-flags", default="",
                   help="extra broker flags, e.g. '--durable' or '--mem-queue-size 0'")
    p.add_argument("--workdir", default=None, help="parent of the run directory (default: TMPDIR)")
    p.add_argument("--keep", action="store_true",
                   help="keep the run directory (logs, histories; kept anyway on a violation)")
    p.add_argument("--json", default=None, help="also write the summary to this file")
    p.add_argument("--dry-run", action="store_true", help="print the schedule and exit")
    args = p.parse_args(argv)
    try:
        args.kinds = schedule.parse_kinds(args.faults)
        lo, hi = (float(x) for x in args.fault_time.split(","))
        args.fault_span = (lo, hi)
    except ValueError as e:
        p.error("--faults/--fault-time: %s" % e)
    if args.duration <= 0 or args.publish_rate <= 0 or args.consume_rate <= 0:
        p.error("--duration, --publish-rate and --consume-rate must be positive")
    args.client_kinds = [c.strip() for c in args.clients.split(",") if c.strip()]
    if not args.client_kinds or any(c not in ("py", "rs") for c in args.client_kinds):
        p.error("--clients: py, rs or py,rs")
    if args.replicas < 1 or args.replicas > len(BROKERS):
        p.error("--replicas must be 1 to %d (the brokers of the run)" % len(BROKERS))
    if args.settle < 0:
        p.error("--settle must be >= 0")
    if args.seed is None:
        args.seed = random.SystemRandom().randrange(1, 1 << 31)
    return args


def binaries():
    rel = os.path.join(REPO, "target", "release")
    return {
        "broker": os.environ.get("BROKER_BIN") or os.path.join(rel, "broker"),
        "lookup": os.environ.get("LOOKUP_BIN") or os.path.join(rel, "lookup"),
        "fault_agent": os.environ.get("FAULT_AGENT_BIN")
        or os.path.join(rel, "examples", "fault_agent"),
    }


def broker_has_flag(broker_bin, flag):
    p = subprocess.run([broker_bin, "--help"], capture_output=True, text=True, timeout=15)
    return flag in p.stdout


# ---- HTTP and TCP checks from the client host ----------------------------------------------

def _enter_netns(name):
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(os.path.join(hostsmod.NETNS_DIR, name), os.O_RDONLY)
    try:
        if libc.setns(fd, 0x40000000) != 0:  # CLONE_NEWNET
            err = ctypes.get_errno()
            raise OSError(err, "setns(%s): %s" % (name, os.strerror(err)))
    finally:
        os.close(fd)


_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _http(method, url, timeout):
    req = urllib.request.Request(url, method=method, data=b"" if method == "POST" else None)
    try:
        with _OPENER.open(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
    except OSError as e:
        return None, str(e).encode()


def _http_body(url, body, timeout):
    """POST `body` to `url`: (status or None, answer or the error's text)."""
    req = urllib.request.Request(url, method="POST", data=body)
    try:
        with _OPENER.open(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
    except OSError as e:
        return None, str(e).encode()


def _refused(error_text):
    """Whether a failed request never reached the server (nothing was sent)."""
    text = error_text.decode("utf-8", "replace").lower()
    return "refused" in text or "unreachable" in text or "no route" in text


def whole(state, replicas):
    """The topic has `replicas` replicas, every one live and in sync, and a leader."""
    return (state is not None and state["leader"] is not None
            and len(state["replicas"]) == replicas
            and sorted(state["isr"]) == sorted(state["replicas"])
            and all(r in state["live"] for r in state["replicas"]))


def describe(state):
    if state is None:
        return "no controller answer, or no such topic"
    return "replicas %s, in sync %s, eligible %s, leader %s, epoch %s" % (
        ",".join(state["replicas"]) or "-", ",".join(state["isr"]) or "-",
        ",".join(state["elr"]) or "-", state["leader"] or "none", state["epoch"])


def _accepts(ip, port):
    try:
        with socket.create_connection((ip, port), timeout=0.5):
            return True
    except OSError:
        return False


class Run:
    def __init__(self, args, bins, rundir):
        self.args = args
        self.bins = bins
        self.rundir = rundir
        self.history = os.path.join(rundir, "history")
        self.control = os.path.join(rundir, "control")
        for d in (self.history, self.control):
            os.makedirs(d, exist_ok=True)
        self.hosts = hostsmod.Hosts(LOOKUPS + BROKERS + [CLIENT], rundir)
        self.lookups = {}
        self.brokers = {}
        self.pubs = []
        self.cons = []
        self.events = []  # (t, "begin"/"end", kind, target)
        self.crashes = []  # processes that died on their own: (t, name, exit code)
        self._net = None
        self.active = None  # the fault in progress
        self.replicated = args.replicas > 1
        self.settles = []  # replicas > 1: before each fault, {"t", "waited_s", "whole"}
        self.skipped = []  # faults not begun: {"t", "kind", "target", "why"}

    # ---- network helpers

    def on_client(self, fn, *a, timeout=30):
        return self._net.submit(fn, *a).result(timeout=timeout)

    def accepts(self, role, port):
        return self.on_client(_accepts, self.hosts.ip(role), port)

    def post(self, role, path, timeout=5.0):
        url = "http://%s:4151%s" % (self.hosts.ip(role), path)
        return self.on_client(_http, "POST", url, timeout, timeout=timeout + 10)

    def wait_accepts(self, role, port, proc, timeout=20.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not proc.alive():
                raise RuntimeError("%s exited with %s at start-up (log: %s)"
                                   % (proc.name, proc.popen.returncode, proc.log_path))
            if self.accepts(role, port):
                return
            time.sleep(0.1)
        raise RuntimeError("%s does not accept on port %d within %.0fs (log: %s)"
                           % (role, port, timeout, proc.log_path))

    # ---- processes

    def data_path(self, role):
        return os.path.join(self.rundir, "data-%s" % role)

    def lookup_args(self, role):
        ip = self.hosts.ip(role)
        args = [self.bins["lookup"], "--tcp-address", "%s:4160" % ip,
                "--http-address", "%s:4161" % ip, "--broadcast-address", ip]
        if self.replicated:
            # Raft between the three lookups; a lookup killed and restarted keeps its log.
            peers = ",".join("%d=%s:%d" % (i + 1, self.hosts.ip(lk), RAFT_PORT)
                             for i, lk in enumerate(LOOKUPS))
            path = self.data_path(role)
            os.makedirs(path, exist_ok=True)
            args += ["--controller-id", str(LOOKUPS.index(role) + 1),
                     "--controller-peers", peers, "--data-path", path]
        return args

    def broker_args(self, role):
        ip = self.hosts.ip(role)
        os.makedirs(self.data_path(role), exist_ok=True)
        args = [self.bins["broker"], "--tcp-address", "%s:4150" % ip,
                "--http-address", "%s:4151" % ip, "--broadcast-address", ip,
                "--data-path", self.data_path(role), "--shards", str(self.args.shards),
                # Messages sent to a consumer that is cut off come back within seconds, so a
                # drain of --quiet seconds sees them.
                "--msg-timeout", "5s"]
        for lk in LOOKUPS:
            args += ["--lookupd-tcp-address", "%s:4160" % self.hosts.ip(lk)]
        if self.replicated:
            args += ["--replication-address", "%s:%d" % (ip, REPLICATION_PORT),
                     "--replicas", str(self.args.replicas)]
        args += self.args.broker_flags.split()
        return args

    def start_cluster(self):
        self.hosts.build()
        self._net = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, initializer=_enter_netns, initargs=(self.hosts.ns(CLIENT),))
        for role in LOOKUPS:
            self.lookups[role] = self.hosts.spawn(role, role, self.lookup_args(role))
        for role in LOOKUPS:
            self.wait_accepts(role, 4161, self.lookups[role])
        for role in BROKERS:
            self.brokers[role] = self.hosts.spawn(role, role, self.broker_args(role))
        for role in BROKERS:
            self.wait_accepts(role, 4150, self.brokers[role])
        if not self.replicated:
            for role in BROKERS:
                self.create_topic(role)
            return
        self.wait_controller()
        self.publish_topic()
        waited, state = self.settle(timeout=max(self.args.settle, 30.0))
        if not whole(state, self.args.replicas):
            raise RuntimeError("the topic %r is not whole %.0fs after its creation: %s"
                               % (TOPIC, waited, describe(state)))
        log("topic %s: %s" % (TOPIC, describe(state)))
        # The channel on every replica, so that no message waits for a channel; not on the
        # others, where it would make an unreplicated topic of the same name.
        for role in state["replicas"]:
            status, body = self.post(role, "/channel/create?topic=%s&channel=%s"
                                     % (TOPIC, CHANNEL))
            if status != 200:
                log("%s /channel/create: %s %s" % (role, status, body[:200]))

    def create_topic(self, role):
        """The topic and the channel on a broker, so that no message waits for a channel."""
        for path in ("/topic/create?topic=%s" % TOPIC,
                     "/channel/create?topic=%s&channel=%s" % (TOPIC, CHANNEL)):
            status, body = self.post(role, path)
            if status != 200:
                log("%s %s: %s %s" % (role, path, status, body[:200]))

    # ---- the replication controller (replicas > 1)

    def controller(self):
        """What the lookup leading the controller answers to GET /controller (else any lookup
        that answers, else None), as {"lookup", "role", "metadata"}."""
        fallback = None
        for role in LOOKUPS:
            url = "http://%s:4161/controller" % self.hosts.ip(role)
            status, body = self.on_client(_http, "GET", url, 2.0, timeout=10)
            if status != 200:
                continue
            try:
                doc = json.loads(body)
            except ValueError:
                continue
            if not isinstance(doc, dict) or not isinstance(doc.get("metadata"), dict):
                continue
            answer = {"lookup": role, "role": doc.get("role"), "metadata": doc["metadata"]}
            if doc.get("role") == "leader":
                return answer
            fallback = fallback or answer
        return fallback

    def topic_state(self):
        """The topic as the controller has it, broker ids named by role: {"replicas", "isr",
        "elr", "leader", "live"} (lists of roles), or None (no controller answer, no topic)."""
        c = self.controller()
        if c is None:
            return None
        md = c["metadata"]
        by_ip = {self.hosts.ip(b): b for b in BROKERS}
        retired = {str(r) for r in md.get("retired") or []}
        names, live = {}, set()
        for bid, info in (md.get("brokers") or {}).items():
            if not isinstance(info, dict):
                continue
            # A wiped broker comes back as a new id at the same address: both map to its role,
            # the old one marked retired below.
            role = next((by_ip[a.rsplit(":", 1)[0]] for a in info.get("addresses") or []
                         if a.rsplit(":", 1)[0] in by_ip), None)
            names[str(bid)] = role or "id-%s" % bid
            if not info.get("fenced", True) and str(bid) not in retired:
                live.add(names[str(bid)])
        t = (md.get("topics") or {}).get(TOPIC)
        if not isinstance(t, dict):
            return None

        def roles(ids):
            return [names.get(str(i), "id-%s" % i) + ("(retired)" if str(i) in retired else "")
                    for i in ids or []]
        leader = t.get("leader")
        return {"replicas": roles(t.get("replicas")), "isr": roles(t.get("isr")),
                "elr": roles(t.get("elr")), "leader": roles([leader])[0] if leader else None,
                "live": sorted(live), "epoch": t.get("epoch")}

    def wait_controller(self, timeout=60.0):
        """Until a lookup leads the controller and every broker is registered and live."""
        deadline = time.monotonic() + timeout
        c = None
        while time.monotonic() < deadline:
            c = self.controller()
            if c is not None and c["role"] == "leader":
                by_ip = {self.hosts.ip(b) for b in BROKERS}
                live = [i for i in (c["metadata"].get("brokers") or {}).values()
                        if isinstance(i, dict) and not i.get("fenced", True)
                        and any(a.rsplit(":", 1)[0] in by_ip for a in i.get("addresses") or [])]
                if len(live) >= len(BROKERS):
                    log("controller: %s leads, %d brokers live" % (c["lookup"], len(live)))
                    return
            time.sleep(0.5)
        raise RuntimeError("no controller leader with every broker live within %.0fs (last: %s)"
                           % (timeout, json.dumps(c)[:500] if c else "no answer"))

    def publish_topic(self, timeout=90.0):
        """Creates the topic through a publish (POST /pub, round robin over the brokers, each
        attempt with its own body, until one is acknowledged, bounded). Every attempt is
        recorded as the `setup` client's history: the acknowledged one must be received."""
        path = os.path.join(self.history, "%s.tsv" % checker.SETUP_CLIENT)
        deadline = time.monotonic() + timeout
        with open(path, "w", buffering=1) as out:
            out.write("START\t%.6f\n" % time.time())
            n = 0
            while time.monotonic() < deadline:
                role = BROKERS[n % len(BROKERS)]
                body = "%s-%d" % (checker.SETUP_CLIENT, n)
                n += 1
                url = "http://%s:4151/pub?topic=%s" % (self.hosts.ip(role), TOPIC)
                status, answer = self.on_client(_http_body, url, body.encode(), 12.0,
                                                timeout=25)
                kind = "A" if status == 200 else "F" if status is None and _refused(answer) \
                    else "U" if status is None else "E"
                out.write("%s\t%.6f\t%s:4150\t%s\t%s\n" % (
                    kind, time.time(), self.hosts.ip(role), body,
                    answer[:100].decode("utf-8", "replace").replace("\t", " ")
                    .replace("\n", " ")))
                if kind == "A":
                    out.write("END\t%.6f\tcreated by %s on %s\n" % (time.time(), body, role))
                    log("topic %s created by a publish to %s (attempt %d)" % (TOPIC, role, n))
                    return
                log("POST /pub to %s: %s %s" % (role, status, answer[:120]))
                time.sleep(0.5)
        raise RuntimeError("no publish to %r acknowledged within %.0fs" % (TOPIC, timeout))

    def settle(self, timeout):
        """Waits (at most `timeout` s) until the topic is whole; returns (waited, state)."""
        t0 = time.monotonic()
        state = None
        while True:
            state = self.topic_state()
            if whole(state, self.args.replicas) or time.monotonic() - t0 >= timeout:
                return time.monotonic() - t0, state
            self.watch(time.monotonic() + 0.25)

    def start_clients(self):
        a = self.args
        brokers = ["%s:4150" % self.hosts.ip(b) for b in BROKERS]
        lookups = ["%s:4161" % self.hosts.ip(lk) for lk in LOOKUPS]
        fast = os.path.join(self.control, "fast")
        cap = str(a.duration + a.drain_timeout + 120)  # the agents' own bound in time
        py = [sys.executable, os.path.join(HERE, "agent.py")]
        rs = [self.bins["fault_agent"]]
        cstop = os.path.join(self.control, "stop-consumers")
        pstop = os.path.join(self.control, "stop-publishers")
        consumers = {"py": ("py-con", py + ["consume"] + sum(
            [["--lookupd", "http://" + lk] for lk in lookups], [])),
            "rs": ("rs-con", rs + ["consume"] + sum([["--lookupd", lk] for lk in lookups], []))}
        for name, cmd in (consumers[c] for c in a.client_kinds):
            self.cons.append(self.hosts.spawn(CLIENT, name, cmd + [
                "--topic", TOPIC, "--channel", CHANNEL, "--rate", str(a.consume_rate),
                "--fast-file", fast, "--stop-file", cstop, "--max-seconds", cap,
                "--out", os.path.join(self.history, "%s.tsv" % name)]))
        time.sleep(2)  # consumers subscribed (the topic is registered) before the first PUB
        publishers = {"py": ("py-pub", py + ["publish"]), "rs": ("rs-pub", rs + ["publish"])}
        for name, cmd in (publishers[c] for c in a.client_kinds):
            self.pubs.append(self.hosts.spawn(CLIENT, name, cmd + sum(
                [["--broker", b] for b in brokers], []) + [
                "--topic", TOPIC, "--name", name, "--rate", str(a.publish_rate),
                "--stop-file", pstop, "--max-seconds", cap,
                "--out", os.path.join(self.history, "%s.tsv" % name)]))

    # ---- faults

    def record(self, what, f):
        t = time.time()
        self.events.append({"t": t, "event": what, "kind": f.kind, "target": f.target,
                            "duration": f.duration})
        log("%-5s %-9s %s" % (what, f.kind, f.target))

    def begin(self, f):
        self.active = f
        self.record("begin", f)
        if f.kind == "lookup":
            self.lookups[f.target].kill()
            return
        b = self.brokers[f.target]
        if f.kind == "kill":
            b.kill()
        elif f.kind == "restart":
            b.stop(timeout=30)
        elif f.kind == "pause":
            b.signal(signal.SIGSTOP)
        elif f.kind == "partition":
            self.hosts.cut(f.target)
        elif f.kind == "wipe":
            b.kill()
            shutil.rmtree(self.data_path(f.target), ignore_errors=True)

    def end(self, f):
        if f.kind == "lookup":
            self.lookups[f.target].start()
        elif f.kind in ("kill", "restart", "wipe"):
            self.brokers[f.target].popen = None
            self.brokers[f.target].args = self.broker_args(f.target)
            self.brokers[f.target].start()
        elif f.kind == "pause":
            self.brokers[f.target].signal(signal.SIGCONT)
        elif f.kind == "partition":
            self.hosts.heal(f.target)
        self.record("end", f)
        self.active = None

    def watch(self, until):
        """Sleeps until `until` (monotonic), restarting processes that died on their own."""
        while True:
            now = time.monotonic()
            if now >= until:
                return
            for role, p in list(self.brokers.items()) + list(self.lookups.items()):
                busy = self.active is not None and self.active.target == role and \
                    self.active.kind in ("kill", "restart", "wipe", "lookup")
                if not busy and p.popen is not None and p.popen.poll() is not None:
                    self.crashes.append((time.time(), role, p.popen.returncode))
                    log("%s died on its own (exit %s): restarting" % (role, p.popen.returncode))
                    p.start()
            time.sleep(min(0.2, until - now))

    def run_faults(self, plan):
        """The plan in order, one fault at a time. With replicas > 1 each fault waits for the
        topic to be whole (see settle_before); the time waited shifts the faults after it, and
        those that would then begin after --duration are not begun."""
        t0 = time.monotonic()
        shift = 0.0
        for f in plan:
            if shift + f.at >= self.args.duration:
                self.skipped.append({"t": time.time(), "kind": f.kind, "target": f.target,
                                     "why": "after --duration once the waits are counted"})
                continue
            self.watch(t0 + shift + f.at)
            if self.replicated:
                # The wait ends with the phase: a fault never begins after --duration.
                left = self.args.duration - (time.monotonic() - t0)
                waited, go = self.settle_before(f, min(self.args.settle, max(0.0, left)))
                shift += waited
                if not go:
                    continue
                if time.monotonic() - t0 >= self.args.duration:
                    self.skipped.append({"t": time.time(), "kind": f.kind, "target": f.target,
                                         "why": "the topic was not whole before --duration"})
                    continue
            self.begin(f)
            self.watch(t0 + shift + f.at + f.duration)
            self.end(f)
        self.watch(t0 + self.args.duration)

    def settle_before(self, f, timeout):
        """Waits (at most `timeout` s) for the topic to be whole before `f`; returns (waited,
        whether to begin f). Only a wipe of one of the topic's replicas waits in vain: it is
        skipped, since the replica may then be one of the last holders of what was
        acknowledged."""
        waited, state = self.settle(timeout=timeout)
        ok = whole(state, self.args.replicas)
        self.settles.append({"t": time.time(), "before": "%s %s" % (f.kind, f.target),
                             "waited_s": round(waited, 2), "whole": ok})
        if waited >= 1.0 or not ok:
            log("waited %.1fs for the topic before %s %s: %s" % (
                waited, f.kind, f.target, describe(state)))
        holders = set()
        if state is not None:
            holders = {r.split("(")[0] for r in state["replicas"] + state["isr"] + state["elr"]}
        if not ok and f.kind == "wipe" and (state is None or f.target in holders):
            why = "the topic was not whole within --settle: %s" % describe(state)
            self.skipped.append({"t": time.time(), "kind": f.kind, "target": f.target,
                                 "why": why})
            log("skip  %-9s %s (%s)" % (f.kind, f.target, why))
            return waited, False
        return waited, True

    def heal_all(self):
        if self.active is not None:
            self.end(self.active)
        for role in list(self.hosts.cut_off):
            self.hosts.heal(role)
        for p in list(self.brokers.values()) + list(self.lookups.values()):
            if p.paused:
                p.signal(signal.SIGCONT)
            if not p.alive():
                p.start()
        for role in BROKERS:
            self.wait_accepts(role, 4150, self.brokers[role], timeout=30)
        if self.replicated:
            waited, state = self.settle(timeout=self.args.settle)
            log("after the heal, in %.1fs: the topic %s: %s" % (
                waited, "whole" if whole(state, self.args.replicas) else "NOT whole",
                describe(state)))

    # ---- drain

    def drain(self):
        """Consumers unpaced; returns once no delivery came for --quiet seconds (bounded)."""
        open(os.path.join(self.control, "fast"), "w").close()
        paths = [os.path.join(self.history, "%s.tsv" % p.name) for p in self.cons]
        t0 = time.monotonic()
        last_change, sizes = t0, None
        while time.monotonic() - t0 < self.args.drain_timeout:
            now_sizes = [os.path.getsize(p) if os.path.exists(p) else 0 for p in paths]
            if now_sizes != sizes:
                sizes, last_change = now_sizes, time.monotonic()
            elif time.monotonic() - last_change >= self.args.quiet:
                return time.monotonic() - t0, True
            time.sleep(0.5)
        return time.monotonic() - t0, False

    def stop_agents(self, procs, stopfile):
        open(os.path.join(self.control, stopfile), "w").close()
        deadline = time.monotonic() + 35
        for p in procs:
            try:
                p.popen.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log("%s did not stop within its bound: killed" % p.name)
                p.kill()

    def teardown(self):
        if self._net is not None:
            self._net.shutdown(wait=False)
        self.hosts.teardown()
        for role in BROKERS:
            shutil.rmtree(self.data_path(role), ignore_errors=True)


def main(argv):
    args = parse_args(argv)
    plan = schedule.make(args.seed, args.duration, args.kinds, BROKERS, LOOKUPS,
                         min_gap=args.min_gap, fault_time=args.fault_span)
    if args.dry_run:
        for f in plan:
            print("%8.3f  %-9s %-9s %.3fs" % f)
        return 0
    reason = hostsmod.unavailable_reason()
    if reason:
        print("run.py: network namespaces cannot be made here: %s" % reason, file=sys.stderr)
        return 2
    bins = binaries()
    for name, path in bins.items():
        if name == "fault_agent" and "rs" not in args.client_kinds:
            continue
        if not os.path.exists(path):
            print("run.py: %s not found: %s (cargo build --release --workspace --all-targets)"
                  % (name, path), file=sys.stderr)
            return 2
    if args.replicas != 1 and not broker_has_flag(bins["broker"], "--replicas"):
        print("run.py: --replicas %d: %s has no --replicas flag (replication is not in this "
              "build); only --replicas 1 runs with it" % (args.replicas, bins["broker"]),
              file=sys.stderr)
        return 2
    stale = hostsmod.clean_stale()
    if stale:
        log("removed namespaces left by earlier runs: %s" % " ".join(stale))
    rundir = tempfile.mkdtemp(prefix="nsq-faults-%d-" % args.seed, dir=args.workdir)
    log("seed %d, %d faults planned over %.0fs (%s); run directory %s"
        % (args.seed, len(plan), args.duration, ",".join(args.kinds), rundir))
    run = Run(args, bins, rundir)
    # SIGINT too: a shell starts a background job with SIGINT ignored, which Python keeps.
    previous = {s: signal.signal(s, _interrupt)
                for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    summary = None
    ok = False
    try:
        run.start_cluster()
        run.start_clients()
        phase_start = time.time()
        run.run_faults(plan)
        run.heal_all()
        log("healed; publishers go on for 3 s, then stop")
        time.sleep(3)
        run.stop_agents(run.pubs, "stop-publishers")
        drained_in, quiet = run.drain()
        log("drain: %.1fs (%s)" % (drained_in, "quiet" if quiet else
                                   "NOT quiet within --drain-timeout"))
        run.stop_agents(run.cons, "stop-consumers")
        publishes, receives, _spans = checker.load_dir(run.history)
        window = checker.publish_window(publishes)
        names = {"%s:4150" % run.hosts.ip(b): b for b in BROKERS}
        begun = [(e["t"], e["kind"], e["target"]) for e in run.events if e["event"] == "begin"]
        summary = checker.check(publishes, receives, publish_window=window, names=names,
                                faults=begun)
        kinds = {}
        for e in run.events:
            if e["event"] == "begin":
                kinds[e["kind"]] = kinds.get(e["kind"], 0) + 1
        summary.update({
            "seed": args.seed, "duration_s": args.duration, "replicas": args.replicas,
            "fault_kinds": list(args.kinds), "faults": sum(kinds.values()),
            "faults_by_kind": kinds, "drain_s": round(drained_in, 1), "drained": quiet,
            "crashes": [{"t": t, "process": n, "exit": rc} for t, n, rc in run.crashes],
            "skipped": run.skipped,
            "settle_waits": {
                "count": len(run.settles),
                "not_whole": sum(1 for x in run.settles if not x["whole"]),
                "longest_s": max((x["waited_s"] for x in run.settles), default=0.0),
                "total_s": round(sum(x["waited_s"] for x in run.settles), 1),
            },
            "broker_flags": args.broker_flags, "run_dir": rundir,
        })
        with open(os.path.join(rundir, "faults.json"), "w") as f:
            json.dump({"plan": [f._asdict() for f in plan], "events": run.events,
                       "phase_start": phase_start, "brokers": names, "skipped": run.skipped,
                       "settles": run.settles}, f, indent=1)
        with open(os.path.join(rundir, "summary.json"), "w") as f:
            json.dump(summary, f, indent=1)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(summary, f, indent=1)
        print()
        print("faults: %d %s; processes that died on their own: %d; drained: %s"
              % (summary["faults"], json.dumps(kinds), len(run.crashes), quiet))
        if run.replicated:
            w = summary["settle_waits"]
            print("waits for the topic to be whole: %d, longest %.1fs, total %.1fs, %d not "
                  "whole in time; faults skipped: %d" % (w["count"], w["longest_s"],
                                                        w["total_s"], w["not_whole"],
                                                        len(run.skipped)))
        print(checker.table(summary, t0=window[0] if window else None))
        ok = not summary["violations"]
    except KeyboardInterrupt:
        log("interrupted: tearing down")
        return 130
    except (RuntimeError, OSError, subprocess.SubprocessError) as e:
        log("the run could not be made: %s" % e)
        return 2
    finally:
        # A second ^C must not cut the teardown short.
        for s in previous:
            signal.signal(s, signal.SIG_IGN)
        run.teardown()
        for s, h in previous.items():
            signal.signal(s, h)
        if args.keep or not ok:
            log("run directory kept: %s" % rundir)
        else:
            shutil.rmtree(rundir, ignore_errors=True)
    return 0 if ok else 1


def _interrupt(signum, frame):
    raise KeyboardInterrupt("signal %d" % signum)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
