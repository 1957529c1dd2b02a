"""A cluster tested as hosts (issue 26): 2 lookups, 3 brokers and admin-ui, each on its own
network namespace, started from deploy/*.service with deploy/*.env (see netcluster.py).

Consumers are configured only with the two lookups' HTTP addresses (pynsq Reader); publishers
speak raw TCP to the brokers and count only messages answered OK. Every check is on counts:
each acknowledged message is received at least once ("lost" = acknowledged and never received).
Times are measured and reported (`cluster figures` at the end of the run), never asserted.

The tests share one cluster and run in file order; each uses its own topic.
"""

import collections
import os
import shutil
import subprocess
import tempfile
import time

import pytest

import conftest
import netcluster
from netcluster import BROKERS, fqdn

TCP = 4150
LOOKUPD_HTTP = ["http://%s:4161" % fqdn(r) for r in netcluster.LOOKUPS]


def broker_addr(role):
    return "%s:%d" % (fqdn(role), TCP)


def role_of(addr):
    return addr.split(".", 1)[0]


class AgentLog:
    """The lines an agent wrote so far (see agent.py)."""

    def __init__(self, path):
        self.path = path
        self.acked = {}  # body -> (t, broker role)
        self.failed = []  # (t, broker role, error)
        self.received = collections.defaultdict(list)  # body -> [(t, broker role)]
        self.events = []  # (t, event, broker role)
        self.first_pub = {}  # broker role -> seconds the first acknowledged PUB took
        self.ended = False
        self.read()

    def read(self):
        self.acked.clear()
        self.failed.clear()
        self.received.clear()
        self.events.clear()
        self.first_pub.clear()
        try:
            with open(self.path) as f:
                lines = f.read().split("\n")
        except FileNotFoundError:
            return self
        for line in lines[:-1]:  # the last one may be partly written
            parts = line.split("\t")
            kind = parts[0]
            if kind == "A":
                self.acked[parts[3]] = (float(parts[1]), role_of(parts[2]))
            elif kind == "F":
                self.failed.append((float(parts[1]), role_of(parts[2]), parts[3]))
            elif kind == "R":
                self.received[parts[3]].append((float(parts[1]), role_of(parts[2])))
            elif kind == "L":
                self.first_pub[role_of(parts[2])] = round(float(parts[3]), 3)
            elif kind == "E":
                self.events.append((float(parts[1]), parts[2], role_of(parts[3])))
            elif kind == "END":
                self.ended = True
        return self

    def acked_per_broker(self):
        return dict(collections.Counter(b for _, b in self.acked.values()))


def merge_acked(pubs):
    acked = {}
    for p in pubs:
        acked.update(p.read().acked)
    return acked


def received_per_broker(cons, bodies=None):
    """Distinct messages received, by the broker that delivered them first."""
    counts = collections.Counter()
    for body, got in cons.received.items():
        if bodies is None or body in bodies:
            counts[min(got)[1]] += 1
    return dict(counts)


def wait_until(what, pred, timeout, interval=0.25):
    """Polls pred() until it is true; returns the seconds it took. Fails after timeout."""
    t0 = time.monotonic()
    while True:
        if pred():
            return time.monotonic() - t0
        if time.monotonic() - t0 > timeout:
            raise AssertionError("timed out after %.0fs waiting for %s" % (timeout, what))
        time.sleep(interval)


def missing(acked, cons):
    cons.read()
    return [b for b in acked if b not in cons.received]


def wait_all_received(acked, cons, timeout, what):
    try:
        return wait_until(what, lambda: not missing(acked, cons), timeout)
    except AssertionError:
        lost = missing(acked, cons)
        by_broker = collections.Counter(acked[b][1] for b in lost)
        raise AssertionError("%d of %d acknowledged messages never received (%s) by broker: "
                             "%s; first: %s" % (len(lost), len(acked), what, dict(by_broker),
                                                lost[:5]))


def stop_agent(p, timeout=15):
    rc, _ = p.stop(timeout=timeout)
    assert rc == 0, "%s exited %s:\n%s" % (p.name, rc, p.log())


def publish_each(cluster, name, topic, per_broker, roles=BROKERS):
    """per_broker messages published to every broker of roles (waits for the publisher)."""
    out = os.path.join(cluster.workdir, name + ".out")
    args = ["publish", "--topic", topic, "--name", name, "--out", out,
            "--per-broker", str(per_broker)]
    for b in roles:
        args += ["--broker", broker_addr(b)]
    p = cluster.agent(name, *args)
    rc = p.wait(timeout=60)
    assert rc == 0, "publisher %s exited %s:\n%s" % (name, rc, p.log())
    log = AgentLog(out)
    assert log.acked_per_broker() == {b: per_broker for b in roles}, log.acked_per_broker()
    return log


def start_publisher(cluster, name, topic, rate):
    """A publisher in round robin over the brokers until stopped; returns (proc, log)."""
    out = os.path.join(cluster.workdir, name + ".out")
    args = ["publish", "--topic", topic, "--name", name, "--out", out, "--rate", str(rate)]
    for b in BROKERS:
        args += ["--broker", broker_addr(b)]
    return cluster.agent(name, *args), AgentLog(out)


def start_consumer(cluster, name, topic, channel="c", lookupd=None, delay_ms=0):
    out = os.path.join(cluster.workdir, name + ".out")
    args = ["consume", "--topic", topic, "--channel", channel, "--out", out,
            "--delay-ms", str(delay_ms)]
    for url in lookupd or LOOKUPD_HTTP:
        args += ["--lookupd", url]
    return cluster.agent(name, *args), AgentLog(out)


def lookup_producers(cluster, lookup, topic):
    status, body = cluster.http(lookup, 4161, "/lookup?topic=%s" % topic)
    if status != 200 or not isinstance(body, dict):
        return set()
    return {p.get("broadcast_address") for p in body.get("producers", [])}


# ---- 1. a consumer configured with lookups only receives what was published on every broker --

def test_consumer_through_lookups_receives_from_every_broker(cluster, figures):
    # Both lookups know the three brokers, by the names deploy/broker.env has them register.
    for lk in netcluster.LOOKUPS:
        wait_until("%s lists the three brokers" % lk, lambda: {
            p.get("broadcast_address") for p in cluster.http(lk, 4161, "/nodes")[1]
            .get("producers", [])} == {fqdn(b) for b in BROKERS}, 20)

    per_broker = 1000
    pub = publish_each(cluster, "pub-all", "t-all", per_broker)
    cons_p, cons = start_consumer(cluster, "cons-all", "t-all")
    took = wait_all_received(pub.acked, cons, 30, "everything published on t-all")
    stop_agent(cons_p)
    cons.read()
    got = received_per_broker(cons)
    assert got == {b: per_broker for b in BROKERS}, got
    # A copy more than once only for a PUB that timed out and was sent again (at least once).
    duplicates = sum(len(v) for v in cons.received.values()) - 3 * per_broker
    assert duplicates <= len(pub.failed), (duplicates, pub.failed)

    # admin-ui, pointed at the lookups by deploy/admin-ui.env, sees the three nodes and counts.
    status, nodes = cluster.http("admin", 4171, "/api/nodes", timeout=20)
    assert status == 200, nodes
    assert sorted(n["node"] for n in nodes["nodes"]) == ["%s:4151" % fqdn(b) for b in BROKERS]
    assert nodes["warnings"] == []
    status, topic = cluster.http("admin", 4171, "/api/topics/t-all", timeout=20)
    assert status == 200, topic
    assert {n["node"]: n["message_count"] for n in topic["nodes"]} == {
        "%s:4151" % fqdn(b): per_broker for b in BROKERS}, topic
    figures["1 lookups only"] = {
        "published per broker": pub.acked_per_broker(),
        "received per broker": got,
        "lost": 0,
        "duplicates": duplicates,
        "all received within s": round(took, 2),
        "first PUB of the new topic answered after s": pub.first_pub,
    }


# ---- 2. one broker host cut off and back -------------------------------------------------------

def test_broker_host_cut_off_and_back(cluster, figures):
    victim = "broker-2"
    others = [b for b in BROKERS if b != victim]
    # The consumer takes 2 ms a message (at most ~500/s), so that a burst leaves a backlog.
    cons_p, cons = start_consumer(cluster, "cons-cut", "t-cut", delay_ms=2)
    pub_p, pub = start_publisher(cluster, "pub-cut", "t-cut", rate=200)
    bursts = []
    try:
        # Steady state: the consumer gets messages from all three brokers.
        wait_until("the consumer receiving from all three brokers", lambda: all(
            n >= 20 for n in _counts(cons.read(), BROKERS)), 30)
        # A burst on the victim just before the cut: it is cut off with messages queued and in
        # flight to the consumer, which must all arrive once it is back.
        bursts.append(publish_each(cluster, "burst-cut", "t-cut", 1000, roles=[victim]))
        t_cut = time.monotonic()
        cluster.cut(victim)
        try:
            # Moved on: messages published after the cut, on the two others, arrive.
            wait_until("messages published after the cut received from %s" % others,
                       lambda: _received_published_after(pub, cons, t_cut, others) >= 100, 30)
            # Hold the cut long enough for heartbeats to lapse on both sides (2 s interval).
            time.sleep(max(0.0, t_cut + 8 - time.monotonic()))
        finally:
            t_back = time.monotonic()
            cluster.reconnect(victim)
        # Back: the consumer receives again from the victim, messages published after it is back.
        wait_until("messages published on %s after it came back received" % victim,
                   lambda: _received_published_after(pub, cons, t_back, [victim]) >= 20, 45)
        time.sleep(1)
    finally:
        stop_agent(pub_p)
    acked = merge_acked([pub] + bursts)
    took = wait_all_received(acked, cons, 45, "everything acknowledged around the cut")
    stop_agent(cons_p)
    cons.read()

    acked_before_cut_on_victim = {b for b, (t, r) in acked.items() if r == victim and t < t_cut}
    stranded = [b for b in acked_before_cut_on_victim if min(cons.received[b])[0] > t_back]
    fails = [t for t, r, _ in pub.failed if r == victim and t > t_cut]
    closes = [t for t, ev, r in cons.events if ev == "close" and r == victim and t > t_cut]
    readies = [t for t, ev, r in cons.events if ev == "ready" and r == victim and t > t_back]
    back_from_victim = [min(v)[0] for b, v in cons.received.items()
                        if acked.get(b, (0, None))[1] == victim and acked[b][0] > t_back]
    after_cut = sorted(min(v)[0] for b, v in cons.received.items()
                       if b in acked and acked[b][0] > t_cut)
    gaps = _longest_gap(cons, t_cut, t_back)
    figures["2 broker host cut off"] = {
        "cut": victim, "cut held s": round(t_back - t_cut, 1),
        "published per broker": dict(collections.Counter(r for _, r in acked.values())),
        "of which in a burst on the cut broker just before the cut": 1000,
        "received per broker": received_per_broker(cons, acked),
        "lost": 0,
        "duplicates": sum(len(v) - 1 for v in cons.received.values()),
        "publisher: first failed PUB on the cut broker after s": _rel(fails, t_cut),
        "consumer: first message published after the cut received after s":
            round(after_cut[0] - t_cut, 2) if after_cut else None,
        "consumer: longest pause in deliveries during the cut s": gaps,
        "consumer: connection to the cut broker closed after s": _rel(closes, t_cut),
        "consumer: reconnected to it s after the link was back": _rel(readies, t_back),
        "consumer: first message published there after the link was back received, s after":
            round(min(back_from_victim) - t_back, 2) if back_from_victim else None,
        "acknowledged on the cut broker before the cut, delivered only after it was back":
            len(stranded),
        "all received within s after publishing stopped": round(took, 2),
    }


def _counts(log, roles):
    c = collections.Counter(min(v)[1] for v in log.received.values())
    return [c.get(r, 0) for r in roles]


def _received_published_after(pub, cons, t, roles):
    pub.read()
    cons.read()
    return sum(1 for body, (ta, r) in pub.acked.items()
               if ta > t and r in roles and body in cons.received)


def _rel(times, t0):
    return round(min(times) - t0, 2) if times else None


def _longest_gap(cons, t0, t1):
    ts = sorted(t for v in cons.received.values() for t, _ in v if t0 <= t <= t1)
    points = [t0] + ts + [t1]
    return round(max(b - a for a, b in zip(points, points[1:])), 2)


# ---- 3. one lookup down: discovery goes on through the other ----------------------------------

def test_lookup_down_discovery_through_the_other(cluster, figures):
    result = {}
    # a. lookup-1's host cut off. The new consumer asks lookup-1 first (it is first in the list).
    cluster.cut("lookup-1")
    try:
        pub = publish_each(cluster, "pub-lk-cut", "t-lookup-cut", 100)
        cons_p, cons = start_consumer(cluster, "cons-lk-cut", "t-lookup-cut")
        took = wait_all_received(pub.acked, cons, 30, "t-lookup-cut with lookup-1 cut off")
        stop_agent(cons_p)
        got = received_per_broker(cons.read())
        assert got == {b: 100 for b in BROKERS}, got
        status, nodes = cluster.http("admin", 4171, "/api/nodes", timeout=20)
        assert status == 200, nodes
        assert sorted(n["node"] for n in nodes["nodes"]) == [
            "%s:4151" % fqdn(b) for b in BROKERS], nodes
        result["lookup-1 host cut off"] = {
            "published per broker": pub.acked_per_broker(), "received per broker": got,
            "lost": 0, "new consumer received everything within s": round(took, 2),
            "admin-ui /api/nodes warnings": nodes["warnings"]}
    finally:
        cluster.reconnect("lookup-1")
    # Back on the network, lookup-1 learns the topic made while it was away (re-registration).
    took = wait_until("lookup-1 to know t-lookup-cut on the three brokers", lambda:
                      lookup_producers(cluster, "lookup-1", "t-lookup-cut")
                      == {fqdn(b) for b in BROKERS}, 40)
    result["lookup-1 host cut off"]["lookup-1 knew the topic made meanwhile s after"] = round(
        took, 2)

    # b. lookup-1's process stopped (SIGTERM), then started again.
    lk = cluster.lookups["lookup-1"]
    rc, _ = lk.stop(timeout=10)
    assert rc == 0, lk.log()
    try:
        pub = publish_each(cluster, "pub-lk-stop", "t-lookup-stop", 100)
        cons_p, cons = start_consumer(cluster, "cons-lk-stop", "t-lookup-stop")
        took = wait_all_received(pub.acked, cons, 30, "t-lookup-stop with lookup-1 stopped")
        stop_agent(cons_p)
        got = received_per_broker(cons.read())
        assert got == {b: 100 for b in BROKERS}, got
        result["lookup-1 process stopped"] = {
            "published per broker": pub.acked_per_broker(), "received per broker": got,
            "lost": 0, "new consumer received everything within s": round(took, 2)}
    finally:
        lk.start()
    cluster.wait_accepts("lookup-1", [4160, 4161], proc=lk)
    # It keeps no state: the brokers register everything again.
    took = wait_until("restarted lookup-1 to know both topics on the three brokers", lambda: all(
        lookup_producers(cluster, "lookup-1", t) == {fqdn(b) for b in BROKERS}
        for t in ("t-all", "t-lookup-cut", "t-lookup-stop")), 30)
    result["lookup-1 process stopped"]["restarted lookup-1 knew every topic s after"] = round(
        took, 2)
    figures["3 one lookup down"] = result


# ---- 4. rolling restart of every broker under continuous publishing -----------------------------

def test_rolling_restart_under_publishing(cluster, figures):
    cons_p, cons = start_consumer(cluster, "cons-roll", "t-roll", delay_ms=2)
    pubs = [start_publisher(cluster, "pub-roll-%d" % i, "t-roll", rate=150) for i in (1, 2)]
    bursts = []
    restarts = {}
    try:
        wait_until("the consumer receiving from all three brokers", lambda: all(
            n >= 20 for n in _counts(cons.read(), BROKERS)), 30)
        for role in BROKERS:
            b = cluster.brokers[role]
            # A burst just before SIGTERM: the broker stops with messages in memory and in
            # flight, which it must write and deliver after its restart.
            bursts.append(publish_each(cluster, "burst-" + role, "t-roll", 1000, roles=[role]))
            depth = _depth(cluster, role, "t-roll", "c")
            rc, stop_s = b.stop(timeout=30)
            assert rc == 0, "%s exited %s on SIGTERM:\n%s" % (role, rc, b.log())
            t0 = time.monotonic()
            b.start()
            cluster.wait_accepts(role, [4150, 4151], proc=b)
            up_s = time.monotonic() - t0
            # It is back in service: the consumer gets messages published on it after restart.
            t_up = time.monotonic()
            back_s = wait_until("messages published on restarted %s received" % role,
                                lambda: sum(_received_published_after(p, cons, t_up, [role])
                                            for _, p in pubs) >= 20, 45)
            restarts[role] = {"channel depth + in flight at SIGTERM": depth,
                              "stop s": round(stop_s, 2), "start s": round(up_s, 2),
                              "consumer back on it s": round(back_s, 2)}
    finally:
        for p, _ in pubs:
            stop_agent(p)
    acked = merge_acked([log for _, log in pubs] + bursts)
    took = wait_all_received(acked, cons, 60, "everything acknowledged during the restarts")
    stop_agent(cons_p)
    cons.read()
    per_broker = collections.Counter(r for _, r in acked.values())
    failed = sum(len(log.failed) for _, log in pubs)
    figures["4 rolling restart"] = {
        "published per broker": dict(per_broker),
        "of which in a burst on each broker just before its SIGTERM": 1000,
        "received per broker": received_per_broker(cons, acked),
        "lost": 0,
        "duplicates": sum(len(v) - 1 for v in cons.received.values()),
        "PUBs that failed and were retried elsewhere": failed,
        "restarts": restarts,
        "all received within s after publishing stopped": round(took, 2),
    }


def _depth(cluster, role, topic, channel):
    """The channel's depth plus in flight on one broker (its /stats), or None."""
    try:
        status, stats = cluster.http(role, 4151, "/stats?format=json&topic=%s" % topic)
        for t in stats.get("topics", []):
            for c in t.get("channels", []):
                if c.get("channel_name") == channel:
                    return c.get("depth", 0) + c.get("in_flight_count", 0)
    except Exception:
        pass
    return None


# ---- 5. the units pass systemd-analyze verify ---------------------------------------------------

def test_units_pass_systemd_analyze_verify(figures):
    """The units name /usr/local/bin/<binary>, which verify requires to exist and be
    executable: they are checked from a temporary copy whose ExecStart names the binaries under
    test instead (nothing else changed). Needs no namespaces: runs where the rest is skipped."""
    tool = shutil.which("systemd-analyze")
    if tool is None:
        pytest.skip("systemd-analyze not installed")
    bins = conftest.bins()
    deploy_dir = os.path.join(conftest.REPO, "deploy")
    tmp = tempfile.mkdtemp(prefix="nsq-units-")
    try:
        units = []
        for name in ("broker.service", "lookup.service", "admin-ui.service"):
            with open(os.path.join(deploy_dir, name)) as f:
                text = f.read()
            binary = name.split(".")[0]
            assert "/usr/local/bin/%s" % binary in text
            assert os.path.exists(bins[binary]), "%s not built: %s" % (binary, bins[binary])
            text = text.replace("/usr/local/bin/%s" % binary, bins[binary])
            path = os.path.join(tmp, name)
            with open(path, "w") as f:
                f.write(text)
            units.append(path)
        p = subprocess.run([tool, "verify"] + units, capture_output=True, text=True, timeout=60)
        assert p.returncode == 0 and not p.stderr.strip(), (p.returncode, p.stdout, p.stderr)
        figures["5 systemd-analyze verify"] = "passed (%s, ExecStart pointed at the binaries " \
            "under test in a temporary copy)" % " ".join(os.path.basename(u) for u in units)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
