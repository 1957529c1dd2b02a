"""The fault run through its command line (run.py), root only (docs/testing/faults.md).
`tests/run.sh` runs the short form (`-k short_form`) as its last step.

    tests/.venv/bin/python -m pytest tests/faults/test_fault_run.py -q

- the short form with replicas 3: 90 s of SIGKILL, SIGSTOP, cut links and wiped data
  directories, one at a time on a whole topic: no acknowledged message may be lost (skipped
  where the broker has no --replicas);
- the checker's proof that it can fail: with replicas 1, wiping data directories loses
  acknowledged messages, reported as lost, each blamed on a wipe.
"""

import json
import os
import re
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import hosts  # noqa: E402
import run  # noqa: E402


def fault_run(tmp_path, *flags, bound=420):
    out = tmp_path / "summary.json"
    p = subprocess.run([sys.executable, os.path.join(HERE, "run.py"), "--json", str(out),
                        "--workdir", str(tmp_path)] + list(flags),
                       capture_output=True, text=True, timeout=bound)
    summary = json.loads(out.read_text()) if out.exists() else None
    return p, summary


@pytest.fixture(autouse=True)
def namespaces():
    reason = hosts.unavailable_reason()
    if reason:
        pytest.skip("network namespaces cannot be made here: %s" % reason)
    for name, path in run.binaries().items():
        if not os.path.exists(path):
            pytest.fail("%s not found: %s (cargo build --release --workspace --all-targets)"
                        % (name, path))


def test_short_form_with_replicas_3_loses_nothing(tmp_path):
    if not run.broker_has_flag(run.binaries()["broker"], "--replicas"):
        pytest.skip("the broker has no --replicas (replication is not in this build)")
    p, s = fault_run(tmp_path, "--seed", "1", "--duration", "90", "--faults",
                     "kill,pause,partition,wipe", "--replicas", "3", "--settle", "30",
                     "--drain-timeout", "60", bound=300)
    assert s is not None, p.stdout + p.stderr
    assert s["lost"] == 0 and s["unexpected"] == 0, p.stdout
    assert p.returncode == 0, p.stdout + p.stderr
    # Faults did happen, wipes among them, and messages went through them.
    assert s["faults"] >= 4 and s["faults_by_kind"].get("wipe", 0) >= 1, p.stdout
    assert s["acked"] >= 500 and s["drained"], p.stdout
    assert leftovers() == [], "namespaces left behind by the run"


def test_a_wiped_unreplicated_broker_loses_acknowledged_messages(tmp_path):
    p, s = fault_run(tmp_path, "--seed", "10", "--duration", "30", "--faults", "wipe")
    assert s is not None, p.stdout + p.stderr
    assert p.returncode == 1, p.stdout + p.stderr
    assert s["faults_by_kind"].get("wipe", 0) >= 2
    assert s["lost"] > 0 and s["violations"], p.stdout
    assert s["lost_blamed_on"] == {"wipe": s["lost"]}, p.stdout
    assert s["unexpected"] == 0
    assert leftovers() == [], "namespaces left behind by the run"


def leftovers():
    """`fi-` namespaces whose run is gone (what the harness must always delete)."""
    out = []
    for name in hosts.list_netns():
        m = re.match(re.escape(hosts.PREFIX) + r"(\d+)-", name)
        if m and not hosts._pid_is_a_live_run(int(m.group(1))):
            out.append(name)
    return out
