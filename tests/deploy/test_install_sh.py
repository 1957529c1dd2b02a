"""deploy/install.sh into a temporary DESTDIR (tests/python/test_deploy_install.py covers
--from-nsqd): the files and the manifest it writes, a second run that changes nothing, a
foreign nsq_tail refused and then replaced with --replace-nsq, --uninstall removing exactly
what was installed (and putting the replaced file back), --prefix, --no-systemd, a host
without systemd, bad arguments, and the refusal to run without root or DESTDIR.

systemctl is a stand-in first on PATH that records its arguments; `show-environment` (how
install.sh asks whether systemd runs) succeeds or fails as a test says. No user is created
with DESTDIR, so nothing on this host changes.
"""

import hashlib
import os
import shutil
import subprocess
import tempfile

import pytest

from conftest import BINARIES, DEPLOY, INSTALL, REPO, SETTINGS, UNITS, snapshot
from install_host import recorded_calls, run_install, write

MANIFEST = "usr/local/share/nsq-broker/install-manifest"
SYSTEMCTL = """#!/bin/sh
echo "systemctl $*" >> "$STUB_LOG"
if [ "$1" = show-environment ] && [ "${STUB_NO_SYSTEMD:-0}" = 1 ]; then
  echo "System has not been booted with systemd as init system (PID 1). Can't operate." >&2
  exit 1
fi
exit 0
"""


class Host:
    """A DESTDIR, stand-in binaries (a different script each) and a recording systemctl."""

    def __init__(self, base):
        self.base = base
        self.root = os.path.join(base, "root")
        self.build = os.path.join(base, "build")
        self.stubs = os.path.join(base, "stubs")
        self.log = os.path.join(base, "calls.log")
        os.makedirs(self.root)
        for b in BINARIES:
            write(os.path.join(self.build, b), "#!/bin/sh\necho %s\n" % b, 0o755)
        write(os.path.join(self.stubs, "systemctl"), SYSTEMCTL, 0o755)
        open(self.log, "w").close()

    def run(self, *args, systemd=True, env=None):
        e = {"STUB_NO_SYSTEMD": "0" if systemd else "1"}
        e.update(env or {})
        return run_install(args, self.root, self.build, self.stubs, self.log, e)

    def calls(self):
        return recorded_calls(self.log)

    def path(self, rel):
        return os.path.join(self.root, rel)

    def read(self, rel):
        with open(self.path(rel)) as f:
            return f.read()

    def manifest(self, rel=MANIFEST):
        """{path: (kind, sha256)} of the file and conf lines; dir and saved lines apart."""
        files, dirs, saved = {}, [], []
        for line in self.read(rel).splitlines():
            if line.startswith("#"):
                continue
            kind, sha, path = line.split(" ", 2)
            if kind in ("file", "conf"):
                files[path] = (kind, sha)
            elif kind == "dir":
                dirs.append(path)
            else:
                assert kind == "saved", line
                saved.append(path)
        return files, dirs, saved


@pytest.fixture
def host():
    base = tempfile.mkdtemp(prefix="deploy-install-")
    yield Host(base)
    shutil.rmtree(base, ignore_errors=True)


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def installed_files(root):
    """Every regular file under root, as a host path."""
    out = set()
    for dirpath, _, filenames in os.walk(root):
        for name in filenames:
            out.add("/" + os.path.relpath(os.path.join(dirpath, name), root))
    return out


def test_install_writes_files_and_a_manifest_of_exactly_them(host):
    rc, out = host.run()
    assert rc == 0, out
    for b in BINARIES:
        f = host.path("usr/local/bin/" + b)
        assert os.stat(f).st_mode & 0o777 == 0o755, b
        assert host.read("usr/local/bin/" + b) == "#!/bin/sh\necho %s\n" % b
    for u in UNITS:
        with open(os.path.join(DEPLOY, u)) as f:
            assert host.read("etc/systemd/system/" + u) == f.read(), u
    for s in SETTINGS:
        with open(os.path.join(DEPLOY, s + ".env")) as f:
            assert host.read("etc/default/" + s) == f.read(), s
    assert os.path.isfile(host.path("usr/local/share/doc/broker/docs/flags.md"))
    assert os.path.isfile(host.path("usr/local/share/doc/broker/DEPLOY.md"))
    # The manifest lists every file written (itself aside), with the hash of what was written.
    files, dirs, saved = host.manifest()
    assert set(files) == installed_files(host.root) - {"/" + MANIFEST}
    for path, (kind, sha) in files.items():
        assert kind == ("conf" if path.startswith("/etc/default/") else "file"), path
        assert sha256(host.path(path.lstrip("/"))) == sha, path
    # Every directory it made (here, all of them: DESTDIR was empty).
    made = {"/" + os.path.relpath(d, host.root) for d, _, _ in os.walk(host.root)} - {"/."}
    assert set(dirs) == made, sorted(made ^ set(dirs))
    assert saved == []
    assert "systemctl daemon-reload" in host.calls()
    assert "/usr/local/share/nsq-broker/install-manifest" in out


def test_second_run_changes_nothing(host):
    rc, out = host.run()
    assert rc == 0, out
    first = snapshot(host.root)
    rc, out = host.run()
    assert rc == 0, out
    assert snapshot(host.root) == first


def test_settings_files_are_never_overwritten(host):
    write(host.path("etc/default/broker"), "BROKER_TCP_ADDRESS=10.0.0.1:4150\n")
    rc, out = host.run()
    assert rc == 0, out
    assert host.read("etc/default/broker") == "BROKER_TCP_ADDRESS=10.0.0.1:4150\n"
    files, _, _ = host.manifest()
    # Not this script's: not in the manifest, so --uninstall leaves it too.
    assert "/etc/default/broker" not in files and "/etc/default/lookup" in files
    # One it installed and the operator edited is kept by the next run as well.
    write(host.path("etc/default/lookup"), "LOOKUP_BROADCAST_ADDRESS=lookup-9\n")
    rc, out = host.run()
    assert rc == 0, out
    assert host.read("etc/default/lookup") == "LOOKUP_BROADCAST_ADDRESS=lookup-9\n"


def test_foreign_nsq_tail_is_refused_then_replaced_and_put_back(host):
    nsq_tail = host.path("usr/local/bin/nsq_tail")
    write(nsq_tail, "NSQ's own nsq_tail\n", 0o755)
    before = snapshot(host.root)
    rc, out = host.run()
    assert rc != 0, out
    assert "refusing to overwrite" in out and "/usr/local/bin/nsq_tail" in out, out
    assert "--replace-nsq" in out and "nothing was changed" in out, out
    # Untouched, and nothing else installed either.
    assert snapshot(host.root) == before
    assert host.calls() == []

    rc, out = host.run("--replace-nsq")
    assert rc == 0, out
    assert host.read("usr/local/bin/nsq_tail") == "#!/bin/sh\necho nsq_tail\n"
    kept = host.path("usr/local/share/nsq-broker/replaced/usr/local/bin/nsq_tail")
    with open(kept) as f:
        assert f.read() == "NSQ's own nsq_tail\n"
    files, _, saved = host.manifest()
    assert saved == ["/usr/local/bin/nsq_tail"] and "/usr/local/bin/nsq_tail" in files
    # Ours now: a plain run no longer refuses.
    rc, out = host.run()
    assert rc == 0, out

    rc, out = host.run("--uninstall")
    assert rc == 0, out
    assert "put back: /usr/local/bin/nsq_tail" in out, out
    assert snapshot(host.root) == before


def test_uninstall_removes_exactly_what_was_installed(host):
    # Things that were there before and are not the install's.
    write(host.path("usr/local/bin/other-tool"), "#!/bin/sh\n", 0o755)
    write(host.path("etc/default/broker"), "BROKER_BROADCAST_ADDRESS=node-7\n")
    write(host.path("etc/systemd/system/other.service"), "[Service]\nExecStart=/bin/true\n")
    write(host.path("var/lib/broker/segment"), "data")
    before = snapshot(host.root)
    rc, out = host.run()
    assert rc == 0, out
    # Settings the install wrote and the operator then edited are kept, and said so.
    write(host.path("etc/default/lookup"), "LOOKUP_BROADCAST_ADDRESS=lookup-9\n")
    open(host.log, "w").close()
    rc, out = host.run("--uninstall")
    assert rc == 0, out
    after = snapshot(host.root)
    assert after.pop("etc/default/lookup")[0].startswith("file ")
    assert after == before, sorted(set(after.items()) ^ set(before.items()))
    assert "/etc/default/lookup" in out and "kept" in out, out
    calls = host.calls()
    stop = [c for c in calls if c.startswith("systemctl stop")]
    assert len(stop) == 1, calls
    for unit in ("broker.service", "lookup.service", "admin-ui.service", "nsq_to_file@*.service",
                 "nsq_to_nsq@*.service", "nsq_to_http@*.service"):
        assert unit in stop[0].split(), stop
    assert calls[-1] == "systemctl daemon-reload", calls
    # Nothing left to uninstall.
    rc, out = host.run("--uninstall")
    assert rc != 0 and "no manifest" in out, out


def test_uninstall_disables_enabled_instances(host):
    rc, out = host.run()
    assert rc == 0, out
    os.makedirs(host.path("etc/systemd/system/multi-user.target.wants"))
    os.symlink("/etc/systemd/system/nsq_to_file@.service",
               host.path("etc/systemd/system/multi-user.target.wants/nsq_to_file@events.service"))
    rc, out = host.run("--uninstall")
    assert rc == 0, out
    disable = [c for c in host.calls() if c.startswith("systemctl disable")]
    assert disable and "nsq_to_file@events.service" in disable[0].split(), host.calls()
    assert "broker.service" in disable[0].split(), disable


def test_prefix_moves_binaries_docs_manifest_and_the_units_commands(host):
    rc, out = host.run("--prefix", "/opt/nsq")
    assert rc == 0, out
    for b in BINARIES:
        assert os.access(host.path("opt/nsq/bin/" + b), os.X_OK), b
    assert not os.path.exists(host.path("usr/local"))
    unit = host.read("etc/systemd/system/broker.service")
    assert "ExecStart=/opt/nsq/bin/broker " in unit and "/usr/local" not in unit, unit
    assert "Documentation=file:///opt/nsq/share/doc/broker/README.md" in unit
    assert os.path.isfile(host.path("opt/nsq/share/doc/broker/README.md"))
    files, _, _ = host.manifest("opt/nsq/share/nsq-broker/install-manifest")
    assert "/opt/nsq/bin/broker" in files
    assert "uninstall --prefix /opt/nsq" in out, out
    # Another prefix's uninstall finds no manifest and removes nothing.
    rc, out = host.run("--uninstall")
    assert rc != 0 and "no manifest" in out, out
    rc, out = host.run("--uninstall", "--prefix=/opt/nsq")
    assert rc == 0, out
    assert os.listdir(host.root) == []


def test_no_systemd_installs_no_units_and_runs_no_systemctl(host):
    before = snapshot(host.root)
    rc, out = host.run("--no-systemd")
    assert rc == 0, out
    assert not os.path.exists(host.path("etc/systemd"))
    assert os.access(host.path("usr/local/bin/broker"), os.X_OK)
    assert os.path.isfile(host.path("etc/default/broker"))
    assert "without units" in out, out
    rc, out = host.run("--uninstall", "--no-systemd")
    assert rc == 0, out
    assert host.calls() == []
    assert snapshot(host.root) == before


def test_host_without_systemd_installs_the_units_and_does_not_fail(host):
    # systemctl is there but no manager answers (a container, a chroot, another init).
    rc, out = host.run(systemd=False)
    assert rc == 0, out
    assert os.path.isfile(host.path("etc/systemd/system/broker.service"))
    assert "systemd does not run here" in out, out
    assert host.calls() == ["systemctl show-environment"], host.calls()
    rc, out = host.run("--uninstall", systemd=False)
    assert rc == 0, out
    assert [c for c in host.calls() if c != "systemctl show-environment"] == [], host.calls()
    # --from-nsqd needs systemd: refused before anything is written.
    write(host.path("etc/nsqd.cfg"), 'data_path = "/var/lib/nsqd"\n')
    os.makedirs(host.path("var/lib/nsqd"))
    before = snapshot(host.root)
    rc, out = host.run("--from-nsqd", systemd=False)
    assert rc != 0 and "--from-nsqd needs systemd running" in out, out
    assert snapshot(host.root) == before


@pytest.mark.parametrize("args,message", [
    (["--prefix", "usr/local"], "--prefix 'usr/local': give an absolute path"),
    (["--prefix", "/opt/my nsq"], "give an absolute path without spaces"),
    (["--prefix"], "--prefix needs a value"),
    (["--uninstall", "--from-nsqd"], "--uninstall takes only --prefix and --no-systemd"),
    (["--uninstall", "--replace-nsq"], "--uninstall takes only --prefix and --no-systemd"),
    (["--from-nsqd", "--no-systemd"], "it cannot go with --no-systemd"),
    (["--frobnicate"], "unknown argument '--frobnicate'"),
    (["--uninstall"], "no manifest"),
])
def test_bad_arguments_are_refused_and_change_nothing(host, args, message):
    rc, out = host.run(*args)
    assert rc != 0, out
    assert message in out, out
    assert os.listdir(host.root) == [] and host.calls() == []


def as_nobody():
    """The command prefix that runs as nobody (setpriv or runuser), or None."""
    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv"):
        return ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    if shutil.which("runuser"):
        return ["runuser", "-u", "nobody", "--"]
    return None


def test_refused_without_root_unless_destdir(host):
    prefix = as_nobody()
    if prefix is None:
        pytest.skip("running as root, and neither setpriv nor runuser can drop to nobody")
    os.chmod(host.base, 0o755)
    if os.geteuid() == 0:
        os.chown(host.root, 65534, 65534)
    env = dict(os.environ, BUILD_DIR=host.build, STUB_LOG=os.devnull,
               PATH=host.stubs + os.pathsep + os.environ["PATH"])
    env.pop("DESTDIR", None)
    existed = os.path.exists("/usr/local/share/nsq-broker")
    p = subprocess.run(prefix + ["bash", INSTALL], env=env, cwd=REPO, capture_output=True,
                       text=True, timeout=60)
    assert p.returncode != 0, p.stdout + p.stderr
    assert "run as root" in p.stderr and "DESTDIR" in p.stderr, p.stderr
    assert os.path.exists("/usr/local/share/nsq-broker") == existed
    # With DESTDIR, no root is needed.
    env["DESTDIR"] = host.root
    p = subprocess.run(prefix + ["bash", INSTALL], env=env, cwd=REPO, capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
    assert os.path.isfile(host.path(MANIFEST))
    assert os.stat(host.path("usr/local/bin/broker")).st_uid == (65534 if prefix else os.geteuid())
