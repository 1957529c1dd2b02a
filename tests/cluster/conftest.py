"""The cluster test (tests/cluster): hosts made of network namespaces, see netcluster.py.

Binaries: target/release/{broker,lookup,admin-ui}, or BROKER_BIN, LOOKUP_BIN, ADMIN_UI_BIN.
Skipped, saying why, where network namespaces cannot be made (not root, no `ip`, no bridge).
The figures measured are printed at the end of the run (and written to $CLUSTER_FIGURES if set).
"""

import json
import os
import shutil
import signal
import sys
import tempfile

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)

import netcluster  # noqa: E402

FIGURES = {}


def bins():
    rel = os.path.join(REPO, "target", "release")
    return {
        "broker": os.environ.get("BROKER_BIN") or os.path.join(rel, "broker"),
        "lookup": os.environ.get("LOOKUP_BIN") or os.path.join(rel, "lookup"),
        "admin-ui": os.environ.get("ADMIN_UI_BIN") or os.path.join(rel, "admin-ui"),
    }


def pytest_report_header(config):
    return "cluster: %s" % ", ".join("%s=%s" % kv for kv in bins().items())


@pytest.fixture(scope="session")
def figures():
    return FIGURES


@pytest.fixture(scope="module")
def cluster():
    reason = netcluster.unavailable_reason()
    if reason:
        pytest.skip("cluster test skipped: network namespaces cannot be made here: %s" % reason)
    for name, path in bins().items():
        if not os.path.exists(path):
            pytest.fail("%s binary not found: %s (cargo build --release -p broker -p lookup "
                        "-p admin-ui)" % (name, path))
    stale = netcluster.clean_stale()
    if stale:
        print("removed namespaces left by earlier runs: %s" % " ".join(stale))
    workdir = tempfile.mkdtemp(prefix="nsq-cluster-")
    c = netcluster.Cluster(workdir, bins(), os.path.join(REPO, "deploy"), sys.executable)
    # SIGTERM (a CI job stopped) ends the run like ^C, so the teardown below still runs.
    previous = signal.signal(signal.SIGTERM, _interrupt)
    c.build()
    try:
        c.lookups = {}
        for role in netcluster.LOOKUPS:
            c.lookups[role] = c.spawn(role, role, c.lookup_args(role))
        for role in netcluster.LOOKUPS:
            c.wait_accepts(role, [4160, 4161], proc=c.lookups[role])
        c.brokers = {}
        for role in netcluster.BROKERS:
            c.brokers[role] = c.spawn(role, role, c.broker_args(role))
        for role in netcluster.BROKERS:
            c.wait_accepts(role, [4150, 4151], proc=c.brokers[role])
        c.admin = c.spawn("admin", "admin-ui", c.admin_args())
        c.wait_accepts("admin", [4171], proc=c.admin)
        yield c
        died = c.died()
        if died:
            pytest.fail("\n\n".join("%s died on its own with exit %s:\n%s"
                                    % (p.name, p.popen.returncode, p.log()) for p in died))
    finally:
        c.teardown()
        signal.signal(signal.SIGTERM, previous)
        if os.environ.get("CLUSTER_KEEP_LOGS"):
            print("cluster logs kept in %s" % workdir)
        else:
            shutil.rmtree(workdir, ignore_errors=True)



def _interrupt(signum, frame):
    raise KeyboardInterrupt("SIGTERM")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.failed and "cluster" in getattr(item, "fixturenames", ()):
        try:
            c = item.funcargs.get("cluster")
        except Exception:
            c = None
        if c is not None:
            for p in c.procs:
                if p.name.startswith(("broker", "lookup", "admin")) or p.alive() is False:
                    rep.sections.append(("%s log (alive=%s, args: %s)"
                                         % (p.name, p.alive(), " ".join(p.args)), p.log(4000)))


def pytest_terminal_summary(terminalreporter):
    if not FIGURES:
        return
    terminalreporter.section("cluster figures")
    for key, value in FIGURES.items():
        terminalreporter.write_line("%s: %s" % (key, json.dumps(value, sort_keys=False)))
    path = os.environ.get("CLUSTER_FIGURES")
    if path:
        with open(path, "w") as f:
            json.dump(FIGURES, f, indent=1)
