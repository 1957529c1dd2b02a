"""deploy/'s units: the hardening each one carries, its exposure level by `systemd-analyze
security --offline=yes`, `systemd-analyze verify` from a copy naming the built binaries, and
(root, systemd-nspawn) every unit started and exercised under a real systemd
(units_under_systemd.sh). Also: the deploy scripts pass shellcheck.
"""

import os
import re
import shutil
import subprocess
import tempfile

import pytest

from conftest import BINARIES, BUILD_DIR, DEPLOY, HERE, UNITS, URING_UNITS, need_binaries

# What every unit sets (deploy/README.md, "Hardening").
HARDENING = {
    "NoNewPrivileges": "true",
    "CapabilityBoundingSet": "",
    "AmbientCapabilities": "",
    "ProtectSystem": "strict",
    "ProtectHome": "true",
    "PrivateTmp": "true",
    "PrivateDevices": "yes",
    "PrivateMounts": "yes",
    "ProtectKernelTunables": "yes",
    "ProtectKernelModules": "yes",
    "ProtectKernelLogs": "yes",
    "ProtectControlGroups": "yes",
    "ProtectClock": "yes",
    "ProtectHostname": "yes",
    "RestrictAddressFamilies": "AF_INET AF_INET6 AF_UNIX",
    "RestrictNamespaces": "yes",
    "RestrictRealtime": "yes",
    "RestrictSUIDSGID": "yes",
    "LockPersonality": "yes",
    "MemoryDenyWriteExecute": "yes",
    "RemoveIPC": "yes",
    "UMask": "0027",
    "SystemCallArchitectures": "native",
    "SystemCallErrorNumber": "EPERM",
    "User": "nsq",
    "Group": "nsq",
}
IO_URING_CALLS = {"io_uring_setup", "io_uring_enter", "io_uring_register"}
# The exposure `systemd-analyze security` gives each unit now (1.4-1.5; 8.5 before hardening).
MAX_EXPOSURE = 2.0


def service_settings(unit):
    """[Service] as {key: [values]}, continuation lines joined."""
    with open(os.path.join(DEPLOY, unit)) as f:
        text = re.sub(r"\\\n", " ", f.read())
    section, out = None, {}
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("["):
            section = line
        elif section == "[Service]" and "=" in line and not line.startswith("#"):
            key, value = line.split("=", 1)
            out.setdefault(key, []).append(value)
    return out


@pytest.mark.parametrize("unit", UNITS)
def test_unit_carries_the_hardening(unit):
    s = service_settings(unit)
    for key, value in HARDENING.items():
        assert s.get(key) == [value], (unit, key, s.get(key))
    filters = s["SystemCallFilter"]
    assert filters[0].split()[0] == "@system-service", filters
    assert "@privileged" in filters[1].lstrip("~").split() and filters[1].startswith("~"), filters
    if unit in URING_UNITS:
        # io_uring: locked memory, and its calls named (older systemd's @system-service lacks
        # them); @resources stays allowed (CPU pinning, raising RLIMIT_MEMLOCK).
        assert s.get("LimitMEMLOCK") == ["infinity"], unit
        assert IO_URING_CALLS <= set(filters[0].split()), filters
        assert "@resources" not in filters[1], filters
    else:
        assert "LimitMEMLOCK" not in s and not IO_URING_CALLS & set(filters[0].split()), unit
    # Nothing that would undo it.
    for key in ("PermissionsStartOnly", "DynamicUser", "Delegate"):
        assert s.get(key, [""]) == [""], (unit, key)


def analyze_security_offline():
    tool = shutil.which("systemd-analyze")
    if tool is None:
        return None
    p = subprocess.run([tool, "security", "--help"], capture_output=True, text=True, timeout=30)
    return tool if "--offline" in p.stdout else None


@pytest.mark.parametrize("unit", UNITS)
def test_exposure_level(unit, tmp_path):
    tool = analyze_security_offline()
    if tool is None:
        pytest.skip("systemd-analyze security --offline needs systemd 250 or newer")
    shutil.copy(os.path.join(DEPLOY, unit), tmp_path / unit)
    p = subprocess.run([tool, "security", "--offline=yes", "--no-pager", unit], cwd=tmp_path,
                       capture_output=True, text=True, timeout=60)
    m = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", p.stdout)
    assert m, p.stdout + p.stderr
    assert float(m.group(1)) <= MAX_EXPOSURE, p.stdout


def test_units_pass_systemd_analyze_verify(tmp_path):
    tool = shutil.which("systemd-analyze")
    if tool is None:
        pytest.skip("no systemd-analyze")
    need_binaries()
    for unit in UNITS:
        with open(os.path.join(DEPLOY, unit)) as f:
            text = f.read()
        for b in BINARIES:
            text = text.replace("ExecStart=/usr/local/bin/%s " % b, "ExecStart=%s/%s " % (BUILD_DIR, b))
        assert "ExecStart=/usr/local/bin/" not in text, unit
        (tmp_path / unit).write_text(text)
    p = subprocess.run([tool, "verify"] + [str(tmp_path / u) for u in UNITS],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and not p.stderr.strip(), p.stdout + p.stderr


def test_units_run_under_a_real_systemd():
    """units_under_systemd.sh: skipped where it cannot boot systemd in a container (not root,
    no systemd-nspawn, or the kernel refuses; it exits 77 then)."""
    if os.geteuid() != 0:
        pytest.skip("needs root (systemd-nspawn)")
    if shutil.which("systemd-nspawn") is None:
        pytest.skip("no systemd-nspawn (apt-get install systemd-container)")
    need_binaries()
    p = subprocess.run(["bash", os.path.join(HERE, "units_under_systemd.sh"), BUILD_DIR],
                       capture_output=True, text=True, timeout=110)
    if p.returncode == 77:
        pytest.skip("systemd does not boot in a container here: " + p.stderr.strip()[-300:])
    assert p.returncode == 0, p.stdout + p.stderr
    assert "every check passed" in p.stdout, p.stdout


SCRIPTS = {
    "deploy/install.sh": "bash",
    "deploy/debian/build-deb.sh": "bash",
    "deploy/debian/postinst": "sh",
    "deploy/debian/prerm": "sh",
    "deploy/debian/postrm": "sh",
    "tests/deploy/units_under_systemd.sh": "bash",
}


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_script_is_shellcheck_clean(script):
    tool = shutil.which("shellcheck")
    if tool is None:
        pytest.skip("no shellcheck (apt-get install shellcheck; tests/run.sh installs it)")
    repo = os.path.dirname(DEPLOY)
    p = subprocess.run([tool, "-s", SCRIPTS[script], os.path.join(repo, script)],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
    if SCRIPTS[script] == "bash":
        with open(os.path.join(repo, script)) as f:
            assert "set -euo pipefail" in f.read(), script
