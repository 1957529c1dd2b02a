"""The Debian package nsq-broker, built by deploy/debian/build-deb.sh from the release binaries:

- what it holds (dpkg-deb -c): every file at its path with its mode and owner, nothing else;
  its control fields (dpkg-deb -f), conffiles and md5sums; the units and settings as deploy/
  has them, pointed at /usr/bin; manual pages, changelog and copyright;
- lintian finds no error or warning (the overrides it carries are all used);
- installed into a scratch root with dpkg --root (maintainer scripts chrootless, DPKG_ROOT
  set), on a host whose root file system is read-only for the run: the nsq user and group, the
  data directories, systemd's state; an upgrade keeps data and edited settings; remove keeps
  data and settings; purge removes them and keeps the user. Nothing on the host changes;
- installed with plain dpkg on a copy of this host booted with systemd (units_under_systemd.sh
  --deb, root and systemd-nspawn): adduser, no unit enabled or started, then every unit started
  and serving, an upgrade restarting them, remove stopping them, purge.
"""

import gzip
import hashlib
import os
import re
import shutil
import subprocess
import tempfile

import pytest

from conftest import (BINARIES, BUILD_DIR, DEPLOY, REPO, SETTINGS, UNITS)

PKG = "nsq-broker"
DOC = "usr/share/doc/%s" % PKG


def run(*args, **kw):
    p = subprocess.run(list(args), capture_output=True, text=True, timeout=kw.pop("timeout", 60),
                       **kw)
    assert p.returncode == 0, "%s: exit %d\n%s%s" % (" ".join(args), p.returncode, p.stdout,
                                                    p.stderr)
    return p.stdout


def workspace_version():
    section = None
    with open(os.path.join(REPO, "Cargo.toml")) as f:
        for line in f:
            line = line.strip()
            if line.startswith("["):
                section = line
            elif section == "[workspace.package]" and line.startswith("version"):
                return line.split('"')[1]
    raise AssertionError("no version in Cargo.toml's [workspace.package]")


def contents(deb):
    """dpkg-deb -c as {path: (mode string, owner/group, size, date)}, paths without ./"""
    out = {}
    for line in run("dpkg-deb", "-c", deb).splitlines():
        mode, owner, size, date, time, path = line.split(None, 5)
        path = path.split(" -> ")[0].lstrip(".").lstrip("/")
        out[path.rstrip("/")] = (mode, owner, int(size), date + " " + time)
    return out


@pytest.fixture(scope="module")
def unpacked(deb):
    """The package's files (dpkg-deb -x) and control files (dpkg-deb -e)."""
    d = tempfile.mkdtemp(prefix="deploy-deb-x-")
    run("dpkg-deb", "-x", deb, os.path.join(d, "root"))
    run("dpkg-deb", "-e", deb, os.path.join(d, "DEBIAN"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


def repo_docs():
    out = []
    for dirpath, _, filenames in os.walk(os.path.join(REPO, "docs")):
        for name in filenames:
            out.append(os.path.relpath(os.path.join(dirpath, name), REPO))
    return sorted(out)


# ---- (a) what the package holds ---------------------------------------------------------------

def test_every_file_at_its_path_with_its_mode_and_owner(deb):
    c = contents(deb)
    expected = {}
    for b in BINARIES:
        expected["usr/bin/" + b] = "-rwxr-xr-x"
        expected["usr/share/man/man1/%s.1.gz" % b] = "-rw-r--r--"
    for u in UNITS:
        expected["lib/systemd/system/" + u] = "-rw-r--r--"
    for s in SETTINGS:
        expected["etc/default/" + s] = "-rw-r--r--"
    for f in ["README.md", "ARCHITECTURE.md", "deploy/README.md", "copyright",
              "changelog.Debian.gz"] + repo_docs():
        expected["%s/%s" % (DOC, f)] = "-rw-r--r--"
    expected["usr/share/lintian/overrides/" + PKG] = "-rw-r--r--"
    files = {p: v for p, v in c.items() if not v[0].startswith("d")}
    assert sorted(files) == sorted(expected), (
        "unexpected: %s; missing: %s" % (sorted(set(files) - set(expected)),
                                         sorted(set(expected) - set(files))))
    for path, mode in expected.items():
        assert files[path][0] == mode, (path, files[path])
    for path, (mode, owner, _, _) in c.items():
        assert owner == "root/root", (path, owner)
        if mode.startswith("d"):
            assert mode == "drwxr-xr-x", (path, mode)
    # Nothing the package may not ship: /usr/local, data under /var (postinst makes it).
    assert not [p for p in c if p.startswith(("usr/local", "var", "opt", "home"))], sorted(c)
    # Stripped: the release binaries carry their debug info, the package does not.
    for b in BINARIES:
        assert files["usr/bin/" + b][2] < os.path.getsize(os.path.join(BUILD_DIR, b)), b
    # Every file dated the same (SOURCE_DATE_EPOCH: a rebuild of a commit is identical).
    assert len({v[3] for v in c.values()}) == 1, sorted({v[3] for v in c.values()})


def test_control_fields(deb):
    fields = {}
    for line in run("dpkg-deb", "-f", deb).splitlines():
        if line[:1] not in (" ", "\t") and ":" in line:
            key, value = line.split(":", 1)
            fields[key] = value.strip()
    assert fields["Package"] == PKG
    assert fields["Version"] == workspace_version().replace("-", "~") + "-1"
    assert fields["Architecture"] == run("dpkg", "--print-architecture").strip()
    assert fields["Conflicts"] == "nsq"
    assert fields["Section"] == "net" and fields["Priority"] == "optional"
    assert re.match(r"^[^<>]+ <[^<>@ ]+@[^<>@ ]+>$", fields["Maintainer"]), fields["Maintainer"]
    depends = [d.strip() for d in fields["Depends"].split(",")]
    assert "adduser" in depends, depends
    libc = [d for d in depends if d.startswith("libc6 ")]
    assert libc and re.match(r"^libc6 \(>= 2\.\d+\)$", libc[0]), depends
    # What Debian's own tool derives from the binaries, when it is installed (dpkg-dev).
    if shutil.which("dpkg-shlibdeps"):
        d = tempfile.mkdtemp(prefix="shlibdeps-")
        try:
            os.makedirs(os.path.join(d, "debian"))
            with open(os.path.join(d, "debian", "control"), "w") as f:
                f.write("Source: x\n\nPackage: x\nArchitecture: any\n")
            out = run("dpkg-shlibdeps", "-O", *["-e" + os.path.join(BUILD_DIR, b)
                                                 for b in BINARIES], cwd=d)
        finally:
            shutil.rmtree(d, ignore_errors=True)
        shlibs = out.strip().split("=", 1)[1].split(", ")
        assert sorted(d for d in depends if d != "adduser") == sorted(shlibs), (depends, shlibs)
    # Installed-Size: the files' size in KiB, give or take the blocks du counts.
    size = sum(v[2] for v in contents(deb).values()) / 1024
    assert size <= int(fields["Installed-Size"]) <= size * 1.1 + 200, (fields, size)
    assert "NSQ" in fields["Description"]


def test_conffiles_md5sums_and_maintainer_scripts(unpacked, deb):
    control = os.path.join(unpacked, "DEBIAN")
    root = os.path.join(unpacked, "root")
    with open(os.path.join(control, "conffiles")) as f:
        conffiles = f.read().split()
    etc = sorted("/" + p for p, v in contents(deb).items()
                 if p.startswith("etc/") and not v[0].startswith("d"))
    assert conffiles == etc == ["/etc/default/" + s for s in sorted(SETTINGS)], conffiles
    with open(os.path.join(control, "md5sums")) as f:
        sums = dict(reversed(line.split(None, 1)) for line in f.read().splitlines())
    sums = {k.strip(): v for k, v in sums.items()}
    files = [p for p, v in contents(deb).items() if not v[0].startswith("d")]
    assert sorted(sums) == sorted(files)
    for path, md5 in sums.items():
        with open(os.path.join(root, path), "rb") as f:
            assert hashlib.md5(f.read()).hexdigest() == md5, path
    for script in ("postinst", "prerm", "postrm"):
        path = os.path.join(control, script)
        assert os.stat(path).st_mode & 0o777 == 0o755, script
        with open(path) as f:
            assert f.readline() == "#!/bin/sh\n", script
        run("sh", "-n", path)
        with open(path) as f, open(os.path.join(DEPLOY, "debian", script)) as g:
            assert f.read() == g.read(), script


def test_units_and_settings_are_deploys_pointed_at_usr_bin(unpacked):
    root = os.path.join(unpacked, "root")
    for u in UNITS:
        with open(os.path.join(root, "lib/systemd/system", u)) as f:
            packaged = f.read()
        with open(os.path.join(DEPLOY, u)) as f:
            source = f.read()
        binary = "admin-ui" if u == "admin-ui.service" else u.split("@")[0].split(".")[0]
        assert "ExecStart=/usr/bin/%s " % binary in packaged, u
        assert "/usr/local" not in packaged, u
        docs = re.findall(r"^Documentation=file://(\S+)$", packaged, re.M)
        assert docs == ["/%s/README.md" % DOC], (u, docs)
        assert os.path.isfile(os.path.join(root, docs[0].lstrip("/")))

        def body(text):
            lines = text.splitlines()
            while lines and lines[0].startswith("#"):
                lines.pop(0)
            return lines
        rewritten = [line.replace("/usr/local/bin/", "/usr/bin/").replace(
            "file:///usr/local/share/doc/broker/", "file:///%s/" % DOC) for line in body(source)]
        assert body(packaged) == rewritten, u
    for s in SETTINGS:
        with open(os.path.join(root, "etc/default", s)) as f, \
                open(os.path.join(DEPLOY, s + ".env")) as g:
            assert f.read() == g.read(), s
    with open(os.path.join(root, DOC, "deploy/README.md")) as f, \
            open(os.path.join(DEPLOY, "README.md")) as g:
        assert f.read() == g.read()


def test_man_pages_changelog_and_copyright(unpacked):
    root = os.path.join(unpacked, "root")
    version = workspace_version()
    for b in BINARIES:
        page = os.path.join(root, "usr/share/man/man1/%s.1.gz" % b)
        with gzip.open(page, "rt") as f:
            text = f.read()
        assert text.startswith('.TH %s 1 ' % b.upper().replace("-", "\\-")), text[:80]
        assert "\n.SH OPTIONS\n" in text and "\\-\\-help" in text, b
        if shutil.which("man"):
            p = subprocess.run(["man", "--warnings", "-E", "UTF-8", "-l", "-Tutf8", "-Z", page],
                               capture_output=True, text=True, timeout=30,
                               env=dict(os.environ, MANWIDTH="80", LC_ALL="C.UTF-8"))
            assert p.returncode == 0 and not p.stderr.strip(), (b, p.stderr)
    with gzip.open(os.path.join(root, DOC, "changelog.Debian.gz"), "rt") as f:
        changelog = f.read()
    assert changelog.startswith("%s (%s-1) unstable; urgency=medium\n" % (
        PKG, version.replace("-", "~"))), changelog
    assert re.search(r"\n -- [^<]+ <[^>]+>  \w{3}, \d\d \w{3} \d{4} \d\d:\d\d:\d\d \+0000\n$",
                     changelog), changelog
    with open(os.path.join(root, DOC, "copyright")) as f:
        copyright_ = f.read()
    assert copyright_.startswith(
        "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\n")
    assert "\nLicense: Expat\n" in copyright_
    assert "/usr/share/common-licenses/Apache-2.0" in copyright_
    # The crates linked into the binaries, each with its license (cargo tree at build time).
    assert re.search(r"\n glommio 0\.\d+\.\d+: ", copyright_), copyright_[:2000]


# ---- (b) lintian ------------------------------------------------------------------------------

def lintian():
    """lintian's path: installed here with apt-get when missing and root (tests/run.sh does
    so first); None when that is impossible."""
    if shutil.which("lintian") is None and os.geteuid() == 0 and shutil.which("apt-get"):
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        subprocess.run(["apt-get", "install", "-y", "-q", "--no-install-recommends", "lintian"],
                       env=env, capture_output=True, timeout=300)
    return shutil.which("lintian")


def test_lintian_reports_no_error_or_warning(deb):
    tool = lintian()
    if tool is None:
        pytest.skip("lintian is not installed and `apt-get install lintian` failed here "
                    "(tests/run.sh installs it)")
    p = subprocess.run([tool, "--pedantic", "--display-info", "--show-overrides", deb],
                       capture_output=True, text=True, timeout=110)
    tags = [line for line in (p.stdout + p.stderr).splitlines()
            if re.match(r"^[EWIPXO]: ", line)]
    bad = [t for t in tags if t.startswith(("E:", "W:"))]
    assert not bad, "\n".join(tags)
    # Every override still matches something (but the spelling one: what lintian reads as words
    # in the binaries' bytes changes with each build), and nothing but the overridden is left.
    stale = [t for t in tags if ("unused-override" in t or "mismatched-override" in t)
             and "spelling-error-in-binary" not in t]
    assert not stale, tags
    left = [t for t in tags if not t.startswith("O:") and not (
        "unused-override" in t and "spelling-error-in-binary" in t)]
    assert left == [], "\n".join(tags)
    assert p.returncode == 0, p.stdout + p.stderr


# ---- (c) dpkg into a scratch root --------------------------------------------------------------

HOST_FILES = ["/etc/passwd", "/etc/group", "/etc/shadow", "/etc/gshadow"]
HOST_PATHS = ["/var/lib/broker", "/var/lib/nsq_to_file",
              "/var/lib/systemd/deb-systemd-helper-enabled/broker.service.dsh-also",
              "/var/lib/dpkg/info/%s.list" % PKG, "/usr/bin/broker", "/lib/systemd/system/broker.service"]


def host_state():
    state = {}
    for path in HOST_FILES:
        try:
            with open(path, "rb") as f:
                state[path] = hashlib.sha256(f.read()).hexdigest()
        except FileNotFoundError:
            state[path] = None
    for path in HOST_PATHS:
        state[path] = os.path.lexists(path)
    return state


def can_guard():
    """Whether a mount namespace with a read-only host root can be made here."""
    if shutil.which("unshare") is None:
        return False
    p = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                        "mount -o remount,bind,ro / && ! touch /.nsq-guard-probe 2>/dev/null"],
                       capture_output=True, timeout=20)
    return p.returncode == 0


class Scratch:
    """An empty system for dpkg --root: its database, passwd and group files, nothing else."""

    def __init__(self, base):
        self.root = os.path.join(base, "root")
        for d in ("var/lib/dpkg/info", "var/lib/dpkg/updates", "var/lib/dpkg/triggers",
                  "var/log", "etc", "tmp"):
            os.makedirs(os.path.join(self.root, d))
        for name, text, mode in (("var/lib/dpkg/status", "", 0o644),
                                 ("var/lib/dpkg/available", "", 0o644),
                                 ("etc/passwd", "root:x:0:0:root:/root:/bin/sh\n", 0o644),
                                 ("etc/group", "root:x:0:\n", 0o644),
                                 ("etc/shadow", "root:*:19000:0:99999:7:::\n", 0o640),
                                 ("etc/gshadow", "root:*::\n", 0o640)):
            with open(os.path.join(self.root, name), "w") as f:
                f.write(text)
            os.chmod(os.path.join(self.root, name), mode)
        self.guarded = can_guard()

    def dpkg(self, *args):
        """dpkg on the scratch root, its maintainer scripts run here with DPKG_ROOT set
        (--force-script-chrootless), the dependencies not installed there (--force-depends);
        inside a mount namespace where the host's root is read-only, so that a script that
        wrote outside DPKG_ROOT would fail."""
        r = self.root
        cmd = ("TMPDIR='%s/tmp' dpkg --root='%s' --log='%s/var/log/dpkg.log' "
               "--force-script-chrootless --force-depends %s" % (r, r, r, " ".join(args)))
        if self.guarded:
            cmd = ("mount --bind '%s' '%s' && mount -o remount,bind,ro / && "
                   "! touch /.nsq-guard-probe 2>/dev/null && %s" % (r, r, cmd))
            argv = ["unshare", "--mount", "--propagation", "private", "sh", "-c", cmd]
        else:
            argv = ["sh", "-c", cmd]
        p = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        out = p.stdout + p.stderr
        assert p.returncode == 0, out
        assert "Read-only file system" not in out, out
        assert "error" not in out.lower().replace("errors=", ""), out
        return out

    def path(self, rel):
        return os.path.join(self.root, rel.lstrip("/"))

    def account(self, kind, name):
        with open(self.path("etc/" + kind)) as f:
            return [line.rstrip("\n").split(":") for line in f if line.startswith(name + ":")]

    def status(self):
        with open(self.path("var/lib/dpkg/status")) as f:
            for block in f.read().split("\n\n"):
                if "Package: %s\n" % PKG in block + "\n":
                    return re.search(r"^Status: (.*)$", block, re.M).group(1)
        return None


def test_dpkg_install_upgrade_remove_purge_in_a_scratch_root(deb):
    if os.geteuid() != 0:
        pytest.skip("dpkg --root and useradd --prefix need root (CI runs as root)")
    base = tempfile.mkdtemp(prefix="deploy-dpkg-root-")
    before = host_state()
    try:
        s = Scratch(base)
        s.dpkg("--install", deb)
        assert s.status() == "install ok installed"
        for b in BINARIES:
            assert os.access(s.path("usr/bin/" + b), os.X_OK), b
        # The nsq system user and group, in the scratch root's files only.
        users, groups = s.account("passwd", "nsq"), s.account("group", "nsq")
        assert len(users) == 1 and len(groups) == 1, (users, groups)
        _, _, uid, gid, _, home, shell = users[0]
        assert int(uid) < 1000 and gid == groups[0][2], (users, groups)
        assert (home, shell) == ("/nonexistent", "/usr/sbin/nologin")
        for d in ("var/lib/broker", "var/lib/nsq_to_file"):
            st = os.stat(s.path(d))
            assert (st.st_uid, st.st_gid, oct(st.st_mode & 0o7777)) == (
                int(uid), int(gid), "0o750"), d
        # deb-systemd-helper kept its state in the scratch root (purge uses it).
        for u in ("broker", "lookup", "admin-ui"):
            assert os.path.exists(s.path(
                "var/lib/systemd/deb-systemd-helper-enabled/%s.service.dsh-also" % u)), u

        # An upgrade (the same version again: postinst runs with the old version) keeps the
        # data, the edited settings and the one user.
        with open(s.path("var/lib/broker/segment"), "w") as f:
            f.write("data")
        with open(s.path("etc/default/broker"), "a") as f:
            f.write("BROKER_EXTRA_FLAGS=--durable\n")
        s.dpkg("--install", deb)
        assert len(s.account("passwd", "nsq")) == 1 and len(s.account("group", "nsq")) == 1
        with open(s.path("etc/default/broker")) as f:
            assert f.read().endswith("BROKER_EXTRA_FLAGS=--durable\n")
        assert os.path.exists(s.path("var/lib/broker/segment"))

        # remove: the programs go; data and settings stay.
        s.dpkg("--remove", PKG)
        assert s.status() == "deinstall ok config-files"
        assert not os.path.exists(s.path("usr/bin/broker"))
        assert not os.path.exists(s.path("lib/systemd/system/broker.service"))
        assert os.path.exists(s.path("var/lib/broker/segment"))
        assert os.path.exists(s.path("etc/default/broker"))

        # purge: data, settings and systemd's state go; the user stays.
        s.dpkg("--purge", PKG)
        assert s.status() is None
        for gone in ("var/lib/broker", "var/lib/nsq_to_file", "etc/default/broker",
                     "var/lib/systemd/deb-systemd-helper-enabled/broker.service.dsh-also"):
            assert not os.path.exists(s.path(gone)), gone
        assert len(s.account("passwd", "nsq")) == 1
    finally:
        shutil.rmtree(base, ignore_errors=True)
    assert host_state() == before


def test_dpkg_on_a_host_that_runs_systemd(deb):
    """units_under_systemd.sh --deb: skipped where it cannot boot systemd in a container (not
    root, no systemd-nspawn, or the kernel refuses; it exits 77 then)."""
    if os.geteuid() != 0:
        pytest.skip("needs root (systemd-nspawn)")
    if shutil.which("systemd-nspawn") is None:
        pytest.skip("no systemd-nspawn (apt-get install systemd-container)")
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "units_under_systemd.sh")
    p = subprocess.run(["bash", script, "--deb", deb], capture_output=True, text=True,
                       timeout=110)
    if p.returncode == 77:
        pytest.skip("systemd does not boot in a container here: " + p.stderr.strip()[-300:])
    assert p.returncode == 0, p.stdout + p.stderr
    assert "every check passed" in p.stdout, p.stdout
    for line in ("ok   postinst made nsq a system user without login",
                 "ok   the upgrade restarted broker.service",
                 "ok   remove stopped broker.service cleanly",
                 "ok   purge removed the data, the settings and the enable links"):
        assert line in p.stdout, p.stdout
