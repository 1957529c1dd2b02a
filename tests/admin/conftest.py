"""Fixtures for the admin-ui tests (tests/admin).

- `cluster` (one per test module): a lookup, two brokers with --shards 2 registered with it, an
  admin-ui reading the lookup (`cluster.admin`) and one reading only the two brokers through
  --nsqd-http-address (`cluster.admin_nsqd`). Tests share it and use their own topic names.
- `fresh_cluster` (one per test): the same, for tests that need exact cluster-wide figures.
- `start_admin`: factory for extra admin-ui processes (stopped at the end of the test).
- `certs` (one per module): a test CA, server and client certificates, and an untrusted CA's
  server certificate (fakebroker.Certs, made with the openssl CLI).
- `driver` (one per module): a headless Chromium through Selenium (browserlib); `page`: a
  browserlib.Page on `cluster.admin`.
- `fakes`: factory for fakebroker's HTTPS-only brokers and lookups (closed at the end).

A process that dies on its own fails the test at teardown; the stderr of every process still
running is attached to the report of a failed test.
"""

import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import adminlib  # noqa: E402
from adminlib import AdminUI, Cluster  # noqa: E402
from fakebroker import Certs  # noqa: E402


def pytest_report_header(config):
    return "admin-ui: %s, broker: %s, lookup: %s" % (
        adminlib.admin_bin(), adminlib.broker_bin(), adminlib.lookup_bin())


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.failed:
        for p in list(adminlib.ACTIVE):
            rep.sections.append(("%s stderr (ports %s, alive=%s)" % (p.kind, p.ports, p.alive()),
                                 "args: %s\n%s" % (" ".join(p.args), p.stderr())))


def _running_cluster():
    """A Cluster for the fixture's lifetime; fails the test if a process died on its own."""
    c = Cluster()
    yield c
    report = c.stop()
    if report:
        pytest.fail(report)


@pytest.fixture(scope="module")
def cluster():
    yield from _running_cluster()


@pytest.fixture
def fresh_cluster():
    yield from _running_cluster()


@pytest.fixture
def start_admin():
    """Factory: start_admin(lookups=[...], nsqds=[...], extra=[flags]) -> a running AdminUI;
    start_admin(raw=[flags]) runs it with exactly those flags (no --http-address added)."""
    started = []

    def start(lookups=(), nsqds=(), extra=(), raw=None):
        a = AdminUI(lookups=lookups, nsqds=nsqds, extra=extra)
        if raw is not None:
            a.args = [a.bin_path] + list(raw)
        started.append(a)
        return a.start()

    yield start
    crashed = [a for a in started if a.stop()]
    report = adminlib.crash_report(crashed)
    for a in started:
        a.cleanup()
    if report:
        pytest.fail(report)


@pytest.fixture(scope="module")
def driver():
    """A headless Chromium (browserlib.start_driver), one per test module."""
    from browserlib import start_driver
    d = start_driver()
    yield d
    d.quit()


@pytest.fixture
def page(driver, cluster):
    """browserlib.Page on the module's cluster's admin-ui (reading the lookup)."""
    from browserlib import Page
    return Page(driver, cluster.admin)


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return Certs(str(tmp_path_factory.mktemp("admin-tls-certs")))


@pytest.fixture
def fakes():
    """Factory: fakes(FakeTlsBroker, certs, ...) -> a running fake, closed after the test."""
    made = []

    def make(cls, *args, **kw):
        f = cls(*args, **kw)
        made.append(f)
        return f

    yield make
    for f in made:
        f.close()
