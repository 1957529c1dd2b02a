"""A running NSQ cluster moved from nsqd to the broker, node by node, under load (issue 42).

Run by hand as root, outside CI (CI has no nsqd), with nsqd and nsqlookupd built from NSQ's
source (see README.md here):

    tests/.venv/bin/python tests/migration/replace_nsqd.py \\
        --nsqd /path/to/nsqd-1.3.0 --nsqlookupd /path/to/nsqlookupd-1.3.0 --duration 120

Hosts are network namespaces (tests/cluster/netcluster.py): lookup-1 and lookup-2 run nsqlookupd,
broker-1..3 run nsqd, each with its own data path, a config file in nsqd's TOML format and a
small --mem-queue-size so that backlog goes to disk; the client host runs the publishers
(publisher.py: gnsq, round robin over the three hosts, a failed PUB sent again on the next) and
the consumers (tests/cluster/agent.py: pynsq Readers given only the two lookups), one per channel
of two topics, one channel consumed slowly so that every nsqd holds a disk backlog when it stops.

At duration/4, 2/4 and 3/4 one host after the other is switched: nsqd gets SIGTERM and exits,
then --broker (target/release/broker) starts on the same host with the same command line (same
config file, flags, data path, ports), imports nsqd's data, and the run waits until both lookups
list it again. After the last switch the load goes on to --duration, the publishers stop, the
consumers drain (bounded by --drain-timeout), and everything stops. No client is restarted.

The checker reads the clients' logs: per channel, the acknowledged messages never delivered
(lost: must be 0), duplicates, the longest pause each consumer saw, and the messages published
and delivered per phase; with the nsqd backlog at each switch and the broker's import summary.
It prints a JSON summary and exits 1 if an acknowledged message was lost, a client died, a
switch failed or the broker changed nsqd's files (2: the run could not be set up). Every wait
is bounded; on any exit (an error, ^C, SIGTERM) the processes and namespaces are removed. The
logs and data paths are kept in the work directory when the run fails or with --keep.
"""

import argparse
import collections
import hashlib
import json
import os
import re
import shutil
import signal
import sys
import tempfile
import time
import traceback
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(REPO, "tests", "cluster"))

import netcluster  # noqa: E402
from netcluster import BROKERS, LOOKUPS, fqdn  # noqa: E402

TCP, HTTP = 4150, 4151
LOOKUP_TCP, LOOKUP_HTTP = 4160, 4161
TOPICS = ["orders", "events"]
CHANNELS = ["live", "batch"]
SLOW = ("orders", "batch")  # consumed slowly: a backlog builds on every host, mostly on disk
AGENT = os.path.join(REPO, "tests", "cluster", "agent.py")
PUBLISHER = os.path.join(HERE, "publisher.py")
IMPORT_SUMMARY = re.compile(
    r"imported nsqd (\S+) data from (.+?): (\d+) topics, (\d+) channels, (\d+) messages, "
    r"(\d+) bytes, (\d+) damaged records skipped")
ANSI = re.compile(r"\x1b\[[0-9;]*m")


class RunFailed(Exception):
    """A step of the run did not happen as it must (a switch, a client): the run fails."""


def log(msg):
    print("[%7.1f] %s" % (time.monotonic() - T0, msg), file=sys.stderr, flush=True)


T0 = time.monotonic()
# How late the harness's own sleeps ended: a machine that stalls every process (memory or I/O
# pressure from other work) shows here, and tells a slow drain from a broker that holds back.
LATE = {"longest s": 0.0, "total s": 0.0}


def nap(seconds):
    t = time.monotonic()
    time.sleep(seconds)
    late = time.monotonic() - t - seconds
    if late > 0.5:
        LATE["longest s"] = max(LATE["longest s"], round(late, 1))
        LATE["total s"] = round(LATE["total s"] + late, 1)


# ---- client logs --------------------------------------------------------------------------------

class PubLog:
    """A publisher's lines (publisher.py): acknowledged and failed PUBs."""

    def __init__(self, path):
        self.path = path
        self.acked = {}  # body -> (t, host, topic)
        self.failed = []  # (t, host, topic, error)
        self.ended = False

    def read(self):
        self.acked.clear()
        self.failed.clear()
        for parts in _lines(self.path):
            if parts[0] == "A":
                self.acked[parts[4]] = (float(parts[1]), _host(parts[2]), parts[3])
            elif parts[0] == "F":
                self.failed.append((float(parts[1]), _host(parts[2]), parts[3], parts[4]))
            elif parts[0] == "END":
                self.ended = True
        return self


class ConsLog:
    """A consumer's lines (tests/cluster/agent.py consume): every delivery with its time."""

    def __init__(self, path, topic, channel):
        self.path = path
        self.topic = topic
        self.channel = channel
        self.received = collections.defaultdict(list)  # body -> [(t, host, attempts)]
        self.times = []
        self.events = []  # (t, ready|close, host)
        self.ended = False

    def read(self):
        self.received.clear()
        self.times.clear()
        self.events.clear()
        for parts in _lines(self.path):
            if parts[0] == "R":
                t = float(parts[1])
                self.received[parts[3]].append((t, _host(parts[2]), int(parts[5])))
                self.times.append(t)
            elif parts[0] == "E":
                self.events.append((float(parts[1]), parts[2], _host(parts[3])))
            elif parts[0] == "END":
                self.ended = True
        self.times.sort()
        return self


def _lines(path):
    try:
        with open(path) as f:
            lines = f.read().split("\n")
    except FileNotFoundError:
        return
    for line in lines[:-1]:  # the last one may be partly written
        yield line.split("\t")


def _host(addr):
    return addr.split(".", 1)[0].split(":", 1)[0]


# ---- HTTP from the client host ------------------------------------------------------------------

_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _post(url, timeout):
    req = urllib.request.Request(url, data=b"", method="POST")
    try:
        with _OPENER.open(req, timeout=timeout) as r:
            return r.status, r.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode("utf-8", "replace")


def http_post(cluster, role, port, path, timeout=5.0):
    return cluster.on_client(_post, "http://%s:%d%s" % (netcluster.ip_of(role), port, path),
                             timeout, timeout=timeout + 5)


def http_json(cluster, role, port, path):
    """GET from the client host: the JSON body (nsqd's v1 envelope removed), or None."""
    try:
        status, body = cluster.http(role, port, path)
    except Exception:
        return None
    if status != 200 or not isinstance(body, dict):
        return None
    if "data" in body and "status_code" in body:
        body = body["data"]
    return body


def wait_until(what, pred, timeout, interval=0.25):
    t0 = time.monotonic()
    while True:
        if pred():
            return time.monotonic() - t0
        if time.monotonic() - t0 > timeout:
            raise RunFailed("timed out after %.0fs waiting for %s" % (timeout, what))
        nap(interval)


# ---- the cluster's servers ----------------------------------------------------------------------

def nsqd_config(role, index):
    """nsqd's own TOML config file for one host: nsqd reads it, then the broker, unchanged."""
    return (
        "# nsqd config for %(host)s (nsqd's TOML keys; the broker reads the same file)\n"
        "id = %(id)d\n"
        'tcp_address = "0.0.0.0:%(tcp)d"\n'
        'http_address = "0.0.0.0:%(http)d"\n'
        'broadcast_address = "%(host)s"\n'
        "nsqlookupd_tcp_addresses = [%(lookups)s]\n"
        'msg_timeout = "30s"\n'
        "sync_timeout = 2000\n"
        'log_level = "info"\n'
    ) % {"host": fqdn(role), "id": index, "tcp": TCP, "http": HTTP,
         "lookups": ", ".join('"%s:%d"' % (fqdn(lk), LOOKUP_TCP) for lk in LOOKUPS)}


def server_args(binary, cfg, data, mem_queue_size):
    # The same command line for nsqd and for the broker that replaces it: only argv[0] changes.
    return [binary, "--config=%s" % cfg, "--data-path=%s" % data,
            "--mem-queue-size=%d" % mem_queue_size]


def lookup_producers(cluster, lookup):
    """broadcast address -> producer entry of one lookup's /nodes (empty when unreachable)."""
    body = http_json(cluster, lookup, LOOKUP_HTTP, "/nodes")
    if body is None:
        return {}
    return {p.get("broadcast_address"): p for p in body.get("producers", [])}


def registered_everywhere(cluster, role, not_remote=None):
    """Both lookups list the host with both topics (and, when given, from another connection
    than not_remote: the process that replaced the one registered before)."""
    remotes = {}
    for lk in LOOKUPS:
        p = lookup_producers(cluster, lk).get(fqdn(role))
        if p is None or not set(TOPICS) <= set(p.get("topics") or []):
            return None
        if not_remote is not None and p.get("remote_address") == not_remote.get(lk):
            return None
        remotes[lk] = p.get("remote_address")
    return remotes


def channel_stats(cluster, role):
    """(topic, channel) -> depth, on-disk depth, in flight, deferred from a host's /stats."""
    body = http_json(cluster, role, HTTP, "/stats?format=json")
    out = {}
    for t in (body or {}).get("topics", []) or []:
        for c in t.get("channels", []) or []:
            out["%s/%s" % (t.get("topic_name"), c.get("channel_name"))] = {
                k: c.get(k) for k in ("depth", "backend_depth", "in_flight_count",
                                      "deferred_count")}
    return out


def queue_files(data):
    """nsqd's disk-queue files in a data path: count and bytes (what the broker imports)."""
    n = size = 0
    for name in os.listdir(data):
        if ".diskqueue." in name and name.endswith(".dat") and ".meta." not in name:
            n += 1
            size += os.path.getsize(os.path.join(data, name))
    return {"files": n, "bytes": size}


def nsqd_files_digest(data):
    """A digest of nsqd's own files in a data path (nsqd.dat and the disk queues): the broker
    must leave them as nsqd wrote them, so that a rollback to nsqd still works."""
    h = hashlib.sha256()
    for name in sorted(os.listdir(data)):
        if name == "nsqd.dat" or ".diskqueue." in name:
            h.update(name.encode() + b"\0")
            with open(os.path.join(data, name), "rb") as f:
                h.update(f.read())
            h.update(b"\0")
    return h.hexdigest()


def import_lines(proc):
    """The broker's import summary (parsed) and its import log lines, from its log."""
    text = ANSI.sub("", proc.log(limit=10 ** 7))
    summary = None
    lines = []
    for line in text.splitlines():
        m = IMPORT_SUMMARY.search(line)
        if m:
            summary = {"nsqd version": m.group(1), "from": m.group(2),
                       "topics": int(m.group(3)), "channels": int(m.group(4)),
                       "messages": int(m.group(5)), "bytes": int(m.group(6)),
                       "damaged records skipped": int(m.group(7))}
        if "import" in line.lower():
            lines.append(line.strip()[:300])
    return summary, lines[:40]


# ---- the run ------------------------------------------------------------------------------------

class Run:
    def __init__(self, args, cluster):
        self.a = args
        self.c = cluster
        self.servers = {}  # role -> Proc (the one running now)
        self.cfg = {}
        self.data = {}
        self.pubs = []  # (Proc, PubLog)
        self.cons = []  # (Proc, ConsLog)
        self.switches = []
        self.phases = []  # (name, start time)
        self.problems = []
        self.pubs_stopped = False

    def clients(self):
        pubs = [] if self.pubs_stopped else [p for p, _ in self.pubs]
        return pubs + [p for p, _ in self.cons]

    def check_clients(self):
        dead = [p for p in self.clients() if not p.alive()]
        if dead:
            raise RunFailed("client(s) exited during the run: %s" % "; ".join(
                "%s (exit %s): %s" % (p.name, p.popen.returncode, p.log(1500)) for p in dead))

    def start_servers(self):
        for role in LOOKUPS:
            self.c.spawn(role, "%s.nsqlookupd" % role, [
                self.a.nsqlookupd, "--tcp-address=0.0.0.0:%d" % LOOKUP_TCP,
                "--http-address=0.0.0.0:%d" % LOOKUP_HTTP, "--broadcast-address=%s" % fqdn(role)])
        for p in list(self.c.procs):
            self.c.wait_accepts(p.host, [LOOKUP_TCP, LOOKUP_HTTP], proc=p)
        for i, role in enumerate(BROKERS, 1):
            self.data[role] = os.path.join(self.c.workdir, "data-%s" % role)
            os.makedirs(self.data[role])
            self.cfg[role] = os.path.join(self.c.workdir, "%s.cfg" % role)
            with open(self.cfg[role], "w") as f:
                f.write(nsqd_config(role, i))
            self.servers[role] = self.c.spawn(role, "%s.nsqd" % role, server_args(
                self.a.nsqd, self.cfg[role], self.data[role], self.a.mem_queue_size))
        for role in BROKERS:
            self.c.wait_accepts(role, [TCP, HTTP], proc=self.servers[role])
        # Topics and channels exist before the first publish, so that every channel owes every
        # acknowledged message of its topic (nsqd gives a channel only what comes after it).
        for role in BROKERS:
            for topic in TOPICS:
                paths = ["/topic/create?topic=%s" % topic] + [
                    "/channel/create?topic=%s&channel=%s" % (topic, ch) for ch in CHANNELS]
                for path in paths:
                    status, body = http_post(self.c, role, HTTP, path)
                    if status != 200:
                        raise RunFailed("%s: POST %s: %s %s" % (role, path, status, body))
        for role in BROKERS:
            wait_until("both lookups to list nsqd on %s with its topics" % role,
                       lambda: registered_everywhere(self.c, role), 20)

    def start_clients(self):
        lookupd = ["http://%s:%d" % (fqdn(lk), LOOKUP_HTTP) for lk in LOOKUPS]
        for topic in TOPICS:
            for channel in CHANNELS:
                name = "cons-%s-%s" % (topic, channel)
                out = os.path.join(self.c.workdir, name + ".out")
                slow = (topic, channel) == SLOW
                args = ["consume", "--topic", topic, "--channel", channel, "--out", out,
                        "--delay-ms", str(self.a.slow_delay_ms if slow else 0),
                        "--max-in-flight", "30" if slow else "100"]
                for url in lookupd:
                    args += ["--lookupd", url]
                self.cons.append((self.c.agent(name, *args), ConsLog(out, topic, channel)))
        brokers = ["%s:%d" % (fqdn(b), TCP) for b in BROKERS]
        for i in range(self.a.publishers):
            name = "pub-%d" % (i + 1)
            out = os.path.join(self.c.workdir, name + ".out")
            args = [self.c.python, PUBLISHER, "--name", name, "--out", out,
                    "--rate", str(self.a.rate), "--first", str(i)]
            for t in TOPICS:
                args += ["--topic", t]
            for b in brokers:
                args += ["--broker", b]
            self.pubs.append((self.c.spawn("client", name, args), PubLog(out)))
        # Steady state: every consumer gets messages from all three hosts.
        wait_until("every consumer receiving from the three hosts", lambda: all(
            {h for v in cl.read().received.values() for _, h, _ in v} >= set(BROKERS)
            for _, cl in self.cons), 60)
        self.check_clients()

    def switch(self, role):
        """nsqd on role stopped (SIGTERM), the broker started on its data path; bounded."""
        sw = {"host": role}
        before = registered_everywhere(self.c, role) or {}
        held = channel_stats(self.c, role)
        sw["nsqd backlog at SIGTERM (its /stats)"] = held
        sw["nsqd held at SIGTERM (depth + in flight + deferred, all channels)"] = sum(
            (st["depth"] or 0) + (st["in_flight_count"] or 0) + (st["deferred_count"] or 0)
            for st in held.values())
        nsqd = self.servers[role]
        t_term = time.monotonic()
        self.phases.append(("%s switching" % role, t_term))
        rc, took = nsqd.stop(timeout=self.a.stop_timeout)
        sw["nsqd exit code"] = rc
        sw["nsqd stop s"] = round(took, 2)
        if rc != 0:
            raise RunFailed("nsqd on %s exited %s on SIGTERM:\n%s" % (role, rc, nsqd.log(3000)))
        sw["nsqd disk queues left"] = queue_files(self.data[role])
        sw["digest"] = nsqd_files_digest(self.data[role])
        t0 = time.monotonic()
        sw["t_start"] = t0
        broker = self.c.spawn(role, "%s.broker" % role, server_args(
            self.a.broker, self.cfg[role], self.data[role], self.a.mem_queue_size))
        self.servers[role] = broker
        self.c.wait_accepts(role, [TCP, HTTP], timeout=self.a.start_timeout, proc=broker)
        sw["broker listening s after its start"] = round(time.monotonic() - t0, 2)
        wait_until("both lookups to list the broker on %s with its topics" % role,
                   lambda: registered_everywhere(self.c, role, not_remote=before),
                   self.a.start_timeout)
        t_reg = time.monotonic()
        sw["registered with both lookups s after SIGTERM"] = round(t_reg - t_term, 2)
        summary, lines = import_lines(broker)
        sw["import summary"] = summary
        sw["import log lines"] = lines
        marker = os.path.exists(os.path.join(self.data[role], "nsqd-import.json"))
        sw["nsqd-import.json written"] = marker
        if not self.a.no_import:
            if summary is None:
                self.problems.append("%s: no import summary line in the broker's log" % role)
            if not marker:
                self.problems.append("%s: no nsqd-import.json marker in the data path" % role)
        sw["t_term"] = t_term
        sw["t_registered"] = t_reg
        self.switches.append(sw)
        self.phases.append(("after %s replaced" % role, t_reg))
        log("%s switched: nsqd stopped in %.2fs, broker registered %.2fs after SIGTERM; "
            "import: %s" % (role, took, t_reg - t_term, summary))

    def drain(self):
        """Waits until every consumer has every acknowledged message of its topic (bounded)."""
        acked = self.acked()

        def missing_total():
            return sum(len(_missing(acked, cl.read())) for _, cl in self.cons)

        t0 = time.monotonic()
        last, idle = None, 0.0
        while time.monotonic() - t0 < self.a.drain_timeout:
            t = time.monotonic()
            n = missing_total()
            if n == 0:
                return time.monotonic() - t0
            nap(0.5)
            if n != last:
                last, idle = n, 0.0
            else:
                # Time without progress, counting at most 2 s a round: a stall of the whole
                # machine (the harness included) is not taken for a consumer that gets nothing.
                idle += min(time.monotonic() - t, 2.0)
                if idle > self.a.stall_timeout:
                    log("drain: %d deliveries still owed, none for %.0fs: giving up"
                        % (n, self.a.stall_timeout))
                    return None
        log("drain: not complete within %.0fs" % self.a.drain_timeout)
        return None

    def acked(self):
        acked = {}
        for _, pl in self.pubs:
            acked.update(pl.read().acked)
        return acked

    def go(self):
        self.start_servers()
        log("2 nsqlookupd and 3 nsqd up, topics and channels made")
        self.start_clients()
        t_load = time.monotonic()
        self.phases.append(("3 nsqd", t_load))
        log("%d publishers and %d consumers running" % (len(self.pubs), len(self.cons)))
        for k, role in enumerate(BROKERS, 1):
            at = t_load + self.a.duration * k / 4.0
            while time.monotonic() < at:
                self.check_clients()
                nap(min(1.0, max(0.0, at - time.monotonic())))
            self.check_clients()
            self.switch(role)
        while time.monotonic() < t_load + self.a.duration:
            self.check_clients()
            nap(min(1.0, max(0.0, t_load + self.a.duration - time.monotonic())))
        self.check_clients()
        t_stop = time.monotonic()
        self.phases.append(("drain (publishers stopped)", t_stop))
        self.pubs_stopped = True
        for p, pl in self.pubs:
            rc, _ = p.stop(timeout=15)
            if rc != 0 or not pl.read().ended:
                self.problems.append("publisher %s exited %s (END written: %s)"
                                     % (p.name, rc, pl.ended))
        log("publishers stopped; draining")
        drained = self.drain()
        self.check_clients()
        t_end = time.monotonic()
        final_stats = {role: {ch: (st["depth"] or 0) + (st["in_flight_count"] or 0)
                              + (st["deferred_count"] or 0)
                              for ch, st in channel_stats(self.c, role).items()}
                       for role in BROKERS}
        for p, cl in self.cons:
            rc, _ = p.stop(timeout=15)
            if rc != 0 or not cl.read().ended:
                self.problems.append("consumer %s exited %s (END written: %s)"
                                     % (p.name, rc, cl.ended))
        return self.report(t_load, t_stop, t_end, drained, final_stats)

    # ---- the checker

    def report(self, t_load, t_stop, t_end, drained, final_stats):
        acked = self.acked()
        failed = [f for _, pl in self.pubs for f in pl.failed]
        bounds = [t for _, t in self.phases] + [t_end]
        names = [n for n, _ in self.phases]

        def phase_of(t):
            for i in range(len(names)):
                if bounds[i] <= t < bounds[i + 1]:
                    return names[i]
            return "before the load" if t < bounds[0] else "after the drain"

        published = collections.Counter(phase_of(t) for t, _, _ in acked.values())
        by_topic = collections.Counter(topic for _, _, topic in acked.values())
        channels = {}
        lost_total = 0
        for _, cl in self.cons:
            cl.read()
            owed = {b for b, (_, _, topic) in acked.items() if topic == cl.topic}
            lost = sorted(_missing(acked, cl))
            lost_total += len(lost)
            deliveries = sum(len(v) for v in cl.received.values())
            delivered = collections.Counter(phase_of(t) for t in cl.times)
            lost_by = collections.Counter(acked[b][1] for b in lost)
            gap, gap_at = _longest_gap(cl.times, t_load, t_stop)
            channels["%s/%s" % (cl.topic, cl.channel)] = {
                "acknowledged": len(owed),
                "delivered (distinct)": len(owed & set(cl.received)),
                "deliveries": deliveries,
                "lost": len(lost),
                "lost by the host that acknowledged them": dict(lost_by),
                "first lost": lost[:10],
                "still queued on the brokers at the end (depth + in flight + deferred)": sum(
                    per.get("%s/%s" % (cl.topic, cl.channel), 0) for per in final_stats.values()),
                "duplicates": deliveries - len(cl.received),
                "deliveries with attempts > 1": sum(
                    1 for v in cl.received.values() for _, _, a in v if a > 1),
                "delivered but never acknowledged": len(set(cl.received) - set(acked)),
                "longest pause s (while publishing)": gap,
                "longest pause began s into the load": gap_at,
                "longest pause began in phase": None if gap_at is None else phase_of(
                    t_load + gap_at),
                "delivered per phase": {n: delivered.get(n, 0) for n in names},
                "pause per switch": {sw["host"]: _host_pause(cl, sw) for sw in self.switches},
            }
        switches = []
        for sw in self.switches:
            sw = dict(sw)
            same = nsqd_files_digest(self.data[sw["host"]]) == sw.pop("digest")
            sw["nsqd's files (nsqd.dat, disk queues) unchanged at the end"] = same
            if not same and not self.a.no_import:
                self.problems.append("%s: nsqd's files changed after the broker started"
                                     % sw["host"])
            t_term = sw.pop("t_term")
            sw.pop("t_registered")
            sw.pop("t_start")
            sw["SIGTERM at s into the load"] = round(t_term - t_load, 1)
            switches.append(sw)
        died = [p.name for p in self.c.died()]
        ok = lost_total == 0 and not died and not self.problems and drained is not None
        return ok, {
            "result": "PASS" if ok else "FAIL",
            "command": " ".join(sys.argv),
            "nsqd": self.a.nsqd, "nsqlookupd": self.a.nsqlookupd, "replacement": self.a.broker,
            "load s": round(t_stop - t_load, 1),
            "publishers": len(self.pubs),
            "publish rate per publisher": self.a.rate,
            "mem-queue-size": self.a.mem_queue_size,
            "acknowledged": len(acked),
            "acknowledged per topic": dict(by_topic),
            "acknowledged per host": dict(collections.Counter(h for _, h, _ in acked.values())),
            "published per phase": {n: published.get(n, 0) for n in names},
            "PUBs failed and sent again elsewhere": len(failed),
            "failed PUBs per host": dict(collections.Counter(h for _, h, _, _ in failed)),
            "lost": lost_total,
            "duplicates": sum(c["duplicates"] for c in channels.values()),
            "longest consumer pause s": max(
                (c["longest pause s (while publishing)"] or 0) for c in channels.values()),
            "drained within s": None if drained is None else round(drained, 1),
            "harness's own sleeps overran (the machine stalled)": LATE,
            "channels": channels,
            "switches": switches,
            "left in each channel at the end (depth + in flight + deferred, /stats)":
                final_stats,
            "clients (pid: started once, never restarted)": {
                p.name: p.popen.pid for p in [q for q, _ in self.pubs + self.cons]},
            "consumer connections closed and opened again by pynsq": {
                "%s/%s" % (cl.topic, cl.channel): sum(1 for _, ev, _ in cl.events if ev == "close")
                for _, cl in self.cons},
            "processes that died on their own": died,
            "problems": self.problems,
        }


def _missing(acked, cl):
    return [b for b, (_, _, topic) in acked.items()
            if topic == cl.topic and b not in cl.received]


def _longest_gap(times, t0, t1):
    """The longest time without a delivery between the first one after t0 and t1: (seconds,
    when it began, from t0), or (None, None)."""
    ts = [t for t in times if t0 <= t <= t1]
    if not ts:
        return None, None
    gap, start = max((b - a, a) for a, b in zip(ts, ts[1:] + [t1]))
    return round(gap, 2), round(start - t0, 1)


def _host_pause(cl, sw):
    """Around one switch, seen by this consumer: the last delivery from that host before the
    broker started there (nsqd's last) and the first after (the broker's first)."""
    before = [t for v in cl.received.values() for t, h, _ in v
              if h == sw["host"] and t <= sw["t_start"]]
    after = [t for v in cl.received.values() for t, h, _ in v
             if h == sw["host"] and t > sw["t_start"]]
    if not before or not after:
        return None
    return {"host silent s": round(min(after) - max(before), 2),
            "first delivery from the broker s after SIGTERM":
                round(min(after) - sw["t_term"], 2)}


def _interrupt(signum, frame):
    raise KeyboardInterrupt("SIGTERM")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nsqd", required=True, help="nsqd binary (1.2 or 1.3)")
    ap.add_argument("--nsqlookupd", required=True, help="nsqlookupd binary")
    ap.add_argument("--broker", default=os.path.join(REPO, "target", "release", "broker"),
                    help="what replaces nsqd (default: target/release/broker; another nsqd "
                         "checks the harness itself, with --no-import)")
    ap.add_argument("--no-import", action="store_true",
                    help="the replacement logs no import summary (e.g. nsqd replacing nsqd)")
    ap.add_argument("--duration", type=float, default=120.0,
                    help="seconds of load; the switches are at 1/4, 2/4 and 3/4 of it")
    ap.add_argument("--publishers", type=int, default=3)
    ap.add_argument("--rate", type=float, default=40.0, help="messages/s per publisher")
    ap.add_argument("--slow-delay-ms", type=float, default=25.0,
                    help="time the slow consumer (%s/%s) spends on each message" % SLOW)
    ap.add_argument("--mem-queue-size", type=int, default=10)
    ap.add_argument("--stop-timeout", type=float, default=60.0,
                    help="seconds nsqd may take to exit on SIGTERM before SIGKILL")
    ap.add_argument("--start-timeout", type=float, default=60.0,
                    help="seconds the broker may take to listen, and then to register")
    ap.add_argument("--drain-timeout", type=float, default=600.0)
    ap.add_argument("--stall-timeout", type=float, default=30.0,
                    help="the drain gives up when nothing owed arrives for this long")
    ap.add_argument("--json", help="also write the summary to this file")
    ap.add_argument("--keep", action="store_true", help="keep the work directory (logs, data)")
    args = ap.parse_args()

    for name in ("nsqd", "nsqlookupd", "broker"):
        path = getattr(args, name)
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            print("--%s: no executable at %s" % (name, path), file=sys.stderr)
            return 2
    reason = netcluster.unavailable_reason()
    if reason:
        print("network namespaces cannot be made here: %s" % reason, file=sys.stderr)
        return 2
    stale = netcluster.clean_stale()
    if stale:
        log("removed namespaces left by earlier runs: %s" % " ".join(stale))
    workdir = tempfile.mkdtemp(prefix="nsq-migration-")
    cluster = netcluster.Cluster(workdir, {}, os.path.join(REPO, "deploy"), sys.executable)
    previous = signal.signal(signal.SIGTERM, _interrupt)
    ok, summary, rc = False, None, 1
    try:
        cluster.build()
        run = Run(args, cluster)
        try:
            ok, summary = run.go()
            rc = 0 if ok else 1
        except (RunFailed, RuntimeError) as e:
            # RuntimeError: netcluster's (a server that does not start, an `ip` command).
            log("run failed: %s" % e)
            done = [{k: v for k, v in sw.items() if not k.startswith("t_") and k != "digest"}
                    for sw in run.switches]
            summary = {"result": "FAIL", "error": str(e), "switches done": done,
                       "problems": run.problems}
    except KeyboardInterrupt:
        log("interrupted")
        rc = 130
    except Exception:
        traceback.print_exc()
        rc = 2
    finally:
        cluster.teardown()
        signal.signal(signal.SIGTERM, previous)
        if summary is not None:
            text = json.dumps(summary, indent=1)
            print(text)
            with open(os.path.join(workdir, "summary.json"), "w") as f:
                f.write(text)
            if args.json:
                with open(args.json, "w") as f:
                    f.write(text)
        if ok and not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            log("logs and data kept in %s" % workdir)
    return rc


if __name__ == "__main__":
    sys.exit(main())
