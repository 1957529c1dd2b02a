"""deploy/install.sh, run under a temporary DESTDIR: the plain install, and `--from-nsqd`, which
takes over an nsqd (stops and disables its unit, gives the broker's unit nsqd's command line,
config file and data path in a drop-in, hands the data path to the nsq user, shows the dry run's
counts before starting the broker, prints the rollback).

systemctl, useradd, id and chown are stand-ins first on PATH that record their arguments (the
test runs no systemd and changes nothing on the host); the binaries are stand-ins too, except in
the last test, where the real broker's `import-nsqd --dry-run` reads an nsqd data directory.
"""

import fcntl
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

import pytest

from conftest import REPO, broker_bin

sys.path.insert(0, os.path.join(REPO, "tests", "deploy"))
from install_host import BINARIES, INSTALL, recorded_calls, run_install, write  # noqa: E402
DROPIN = "etc/systemd/system/broker.service.d/nsqd.conf"
FAKE_SUMMARY = ("imported nsqd 1.3.0 data from DIR: 1 topics, 2 channels, 4 messages, "
                "120 bytes, 0 damaged records skipped")

NSQD_UNIT = """\
# /etc/systemd/system/nsqd.service
[Unit]
Description=nsqd

[Service]
User=nsqd
EnvironmentFile=-/etc/default/nsqd
ExecStart=/usr/local/bin/nsqd -config=/etc/nsqd.cfg \\
    -broadcast-address=node-1.internal $NSQD_EXTRA
Restart=always
"""

STUBS = {
    "systemctl": """#!/bin/sh
echo "systemctl $*" >> "$STUB_LOG"
case "$1" in
  cat)
    [ "$2" = "--" ] && unit="$3" || unit="$2"
    [ -f "$STUB_UNITS/$unit" ] || exit 1
    cat "$STUB_UNITS/$unit" ;;
  is-enabled) echo enabled ;;
esac
exit 0
""",
    "useradd": '#!/bin/sh\necho "useradd $*" >> "$STUB_LOG"\n',
    "id": '#!/bin/sh\necho "id $*" >> "$STUB_LOG"\n',
    "chown": '#!/bin/sh\necho "chown $*" >> "$STUB_LOG"\n',
}

FAKE_BROKER = """#!/bin/sh
echo "broker $*" >> "$STUB_LOG"
echo "%s"
exit "${FAKE_BROKER_RC:-0}"
""" % FAKE_SUMMARY


class Host:
    """A DESTDIR with nsqd's config file and data path, stand-in commands and binaries."""

    def __init__(self, base, data_path="/var/lib/nsqd", config=True, unit=True):
        self.base = base
        self.root = os.path.join(base, "root")
        self.log = os.path.join(base, "calls.log")
        self.stubs = os.path.join(base, "stubs")
        self.units = os.path.join(base, "units")
        self.build = os.path.join(base, "build")
        self.data = os.path.join(self.root, data_path.lstrip("/"))
        os.makedirs(self.data)
        write(os.path.join(self.data, "nsqd.dat"), json.dumps({"topics": [], "version": "1.3.0"}))
        if config:
            write(os.path.join(self.root, "etc/nsqd.cfg"),
                  'tcp_address = "0.0.0.0:4150"\ndata_path = "%s"  # nsqd\'s\n' % data_path)
        os.makedirs(self.units)
        if unit:
            write(os.path.join(self.units, "nsqd.service"), NSQD_UNIT)
        for name, text in STUBS.items():
            write(os.path.join(self.stubs, name), text, 0o755)
        for name in BINARIES:
            write(os.path.join(self.build, name), "#!/bin/sh\nexit 0\n", 0o755)
        write(os.path.join(self.build, "broker"), FAKE_BROKER, 0o755)
        open(self.log, "w").close()

    def run(self, *args, env=None):
        with open(INSTALL) as f:
            if "DESTDIR" not in f.read():
                pytest.fail("deploy/install.sh takes no DESTDIR: not run, it would install on this host")
        e = {"STUB_UNITS": self.units}
        e.update(env or {})
        return run_install(args, self.root, self.build, self.stubs, self.log, e, timeout=30)

    def calls(self):
        return recorded_calls(self.log)

    def file(self, rel):
        with open(os.path.join(self.root, rel)) as f:
            return f.read()

    def exists(self, rel):
        return os.path.exists(os.path.join(self.root, rel))


@pytest.fixture
def host():
    base = tempfile.mkdtemp(prefix="install-test-")
    yield lambda **kw: Host(base, **kw)
    shutil.rmtree(base, ignore_errors=True)


def index(calls, wanted):
    assert wanted in calls, "%r not called; calls: %s" % (wanted, calls)
    return calls.index(wanted)


def test_plain_install_writes_units_and_settings_and_no_dropin(host):
    h = host()
    rc, out = h.run()
    assert rc == 0, out
    for name in BINARIES:
        assert os.access(os.path.join(h.root, "usr/local/bin", name), os.X_OK), name
    with open(os.path.join(REPO, "deploy", "broker.service")) as f:
        assert h.file("etc/systemd/system/broker.service") == f.read()
    with open(os.path.join(REPO, "deploy", "broker.env")) as f:
        assert h.file("etc/default/broker") == f.read()
    assert h.exists("usr/local/share/doc/broker/docs/migrating-from-nsqd.md")
    assert h.exists("usr/local/share/doc/broker/DEPLOY.md")
    assert not h.exists(DROPIN)
    assert "systemctl enable --now lookup broker admin-ui" in out
    # nsqd is none of its business, and nothing is started.
    calls = h.calls()
    assert not [c for c in calls if c.startswith(("systemctl stop", "systemctl restart",
                                                    "chown", "broker"))], calls
    assert "systemctl daemon-reload" in calls


def test_from_nsqd_takes_over_the_unit_config_and_data_path(host):
    h = host()
    data = os.path.join(h.root, "var/lib/nsqd")
    owner = subprocess.check_output(["stat", "-c", "%U:%G", data]).decode().strip()
    rc, out = h.run("--from-nsqd")
    assert rc == 0, out
    calls = h.calls()
    stop = index(calls, "systemctl stop -- nsqd.service")
    index(calls, "systemctl disable -- nsqd.service")
    dry = index(calls, "broker import-nsqd --data-path %s --dry-run" % data)
    chown = index(calls, "chown -R nsq:nsq %s" % data)
    restart = index(calls, "systemctl restart broker")
    index(calls, "systemctl enable broker")
    # nsqd has written what it held before the dry run counts it; the counts come before the
    # broker starts.
    assert stop < dry < chown < restart, calls
    assert FAKE_SUMMARY in out
    assert out.index(FAKE_SUMMARY) < out.index("the broker runs on /var/lib/nsqd")

    dropin = h.file(DROPIN)
    lines = [line for line in dropin.splitlines() if not line.startswith("#")]
    # nsqd's command line (found through its unit, continuation joined) and environment, then
    # the config file and data path; the unit's own ExecStart is reset first.
    assert lines == [
        "[Service]",
        "EnvironmentFile=-/etc/default/nsqd",
        "ExecStart=",
        "ExecStart=/usr/local/bin/broker -config=/etc/nsqd.cfg "
        "-broadcast-address=node-1.internal $NSQD_EXTRA --data-path=/var/lib/nsqd "
        "$BROKER_EXTRA_FLAGS",
        "ReadWritePaths=/var/lib/nsqd",
    ], dropin
    # The rollback, printed and kept in the drop-in (`systemctl cat broker` shows it).
    for text in ("systemctl disable --now broker", "systemctl enable --now nsqd.service",
                 "chown -R %s /var/lib/nsqd" % owner,
                 "rm /etc/systemd/system/broker.service.d/nsqd.conf"):
        assert text in out, out
        assert text in dropin, dropin
    # The plain install happened too, unchanged.
    with open(os.path.join(REPO, "deploy", "broker.service")) as f:
        assert h.file("etc/systemd/system/broker.service") == f.read()
    verify_unit_with_dropin(h)


def verify_unit_with_dropin(h):
    """systemd-analyze verify of the installed unit with its drop-in (from a copy naming the
    installed binary, which verify requires to exist): one ExecStart in effect, settings valid."""
    tool = shutil.which("systemd-analyze")
    if tool is None:
        return
    copy = os.path.join(h.base, "verify")
    binary = os.path.join(h.root, "usr/local/bin/broker")
    for rel in ("broker.service", "broker.service.d/nsqd.conf"):
        text = h.file("etc/systemd/system/" + rel).replace("/usr/local/bin/broker", binary)
        write(os.path.join(copy, rel), text)
    p = subprocess.run([tool, "verify", os.path.join(copy, "broker.service")],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and not p.stderr.strip(), (p.returncode, p.stdout, p.stderr)


def test_from_nsqd_without_unit_reads_the_data_path_from_the_config_file(host):
    h = host(data_path="/srv/nsq-data", unit=False)
    rc, out = h.run("--from-nsqd", "--nsqd-config", "/etc/nsqd.cfg")
    assert rc == 0, out
    calls = h.calls()
    assert not [c for c in calls if c.startswith(("systemctl stop", "systemctl disable"))], calls
    index(calls, "broker import-nsqd --data-path %s --dry-run" % h.data)
    index(calls, "chown -R nsq:nsq %s" % h.data)
    lines = [line for line in h.file(DROPIN).splitlines() if not line.startswith("#")]
    assert lines == [
        "[Service]",
        "ExecStart=",
        "ExecStart=/usr/local/bin/broker --config=/etc/nsqd.cfg --data-path=/srv/nsq-data "
        "$BROKER_EXTRA_FLAGS",
        "ReadWritePaths=/srv/nsq-data",
    ]
    assert "start nsqd as before" in out


def test_from_nsqd_unit_without_config_file_gives_its_command_line(host):
    # No config file anywhere: nsqd's flags are all on its command line (`-data-path DIR`, a
    # systemd `@` prefix naming argv[0]); the broker gets them as they are.
    h = host(data_path="/srv/queues", config=False, unit=False)
    write(os.path.join(h.units, "nsqd.service"),
          "[Service]\nExecStart=-@/opt/nsq/bin/nsqd nsqd -data-path /srv/queues "
          "-lookupd-tcp-address=lookup-1:4160\n")
    rc, out = h.run("--from-nsqd")
    assert rc == 0, out
    index(h.calls(), "broker import-nsqd --data-path %s --dry-run" % h.data)
    lines = [line for line in h.file(DROPIN).splitlines() if not line.startswith("#")]
    assert lines == [
        "[Service]",
        "ExecStart=",
        "ExecStart=/usr/local/bin/broker -data-path /srv/queues -lookupd-tcp-address=lookup-1:4160 "
        "--data-path=/srv/queues $BROKER_EXTRA_FLAGS",
        "ReadWritePaths=/srv/queues",
    ]


def test_from_nsqd_refused_dry_run_puts_nsqd_back(host):
    h = host()
    rc, out = h.run("--from-nsqd", env={"FAKE_BROKER_RC": "1"})
    assert rc == 1, out
    assert "the dry run refused /var/lib/nsqd" in out
    calls = h.calls()
    stop = index(calls, "systemctl stop -- nsqd.service")
    start = index(calls, "systemctl start -- nsqd.service")
    assert stop < start
    index(calls, "systemctl enable -- nsqd.service")
    assert not h.exists(DROPIN)
    assert not [c for c in calls if c.startswith(("chown", "systemctl restart broker"))], calls


def test_from_nsqd_data_path_still_locked_is_refused(host):
    # An nsqd that its unit does not run still holds its data path (flock, as nsqd does).
    h = host()
    fd = os.open(h.data, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        rc, out = h.run("--from-nsqd")
    finally:
        os.close(fd)
    assert rc == 1, out
    assert "a process still holds /var/lib/nsqd" in out
    calls = h.calls()
    assert not [c for c in calls if c.startswith(("broker", "chown", "systemctl restart"))], calls
    assert not h.exists(DROPIN)


def test_from_nsqd_bad_arguments_change_nothing(host):
    h = host(config=False, unit=False)
    rc, out = h.run("--from-nsqd", "--nsqd-data", "/var/lib/elsewhere")
    assert rc == 1 and "found neither nsqd's unit nsqd.service nor /etc/nsqd.cfg" in out, out
    rc, out = h.run("--from-nsqd", "--nsqd-config", "/etc/nsqd.cfg")
    assert rc == 1 and "nsqd config file /etc/nsqd.cfg does not exist" in out, out
    write(os.path.join(h.root, "etc/nsqd.cfg"), "")
    rc, out = h.run("--from-nsqd", "--nsqd-data", "/var/lib/elsewhere")
    assert rc == 1 and "nsqd data path /var/lib/elsewhere is not a directory" in out, out
    rc, out = h.run("--from-nsqd", "--nsqd-data", "/var/lib/with space")
    assert rc == 1 and "give an absolute path without spaces" in out, out
    rc, out = h.run("--nsqd-data", "/var/lib/nsqd")
    assert rc == 1 and "go with --from-nsqd" in out, out
    # Nothing but reading nsqd's unit ran, and nothing was installed.
    assert [c for c in h.calls() if not c.startswith("systemctl cat")] == []
    assert not h.exists("usr/local/bin/broker")


def test_from_nsqd_second_run_is_refused(host):
    h = host()
    rc, out = h.run("--from-nsqd")
    assert rc == 0, out
    rc, out = h.run("--from-nsqd")
    assert rc == 1 and "already runs the broker on nsqd's data" in out, out


def nsqd_record(msg_id, body, attempts=0, ts=1_700_000_000_000_000_000):
    """One record of nsqd's disk queue: a 4-byte length, then the message as nsqd writes it."""
    msg = struct.pack(">qH", ts, attempts) + msg_id + body
    return struct.pack(">I", len(msg)) + msg


def write_queue(data, name, records):
    blob = b"".join(records)
    with open(os.path.join(data, "%s.diskqueue.000000.dat" % name), "wb") as f:
        f.write(blob)
    with open(os.path.join(data, "%s.diskqueue.meta.dat" % name), "w") as f:
        f.write("%d\n0,0\n0,%d\n" % (len(records), len(blob)))


def test_from_nsqd_dry_run_with_the_real_broker_counts_and_writes_nothing(host):
    h = host()
    shutil.copy(broker_bin(), os.path.join(h.build, "broker"))
    write(os.path.join(h.data, "nsqd.dat"), json.dumps({
        "topics": [{"name": "orders", "paused": False,
                    "channels": [{"name": "billing", "paused": False},
                                 {"name": "audit", "paused": True}]}],
        "version": "1.3.0"}))
    write_queue(h.data, "orders", [nsqd_record(b"%016x" % (0xa00 + i), b"order %d" % i)
                                   for i in range(3)])
    write_queue(h.data, "orders:billing", [nsqd_record(b"%016x" % 0xb00, b"retry", attempts=2)])
    before = sorted(os.listdir(h.data))
    rc, out = h.run("--from-nsqd")
    assert rc == 0, out
    # The topic's 3 once (each for every channel) and the channel's own 1.
    assert "1 topics, 2 channels, 4 messages" in out, out
    assert "channel audit (paused)" in out and "dry run: nothing written" in out, out
    # Only the stand-in chown and systemctl ran after it: the dry run itself wrote nothing.
    assert sorted(os.listdir(h.data)) == before
    assert h.exists(DROPIN)
