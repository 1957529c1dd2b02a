"""How the tests run deploy/install.sh: into a temporary DESTDIR, with stand-in binaries and
commands first on PATH that record their arguments in a log, so that nothing on the test's host
changes. Shared by tests/deploy (the install itself) and tests/python/test_deploy_install.py
(taking over an nsqd with --from-nsqd)."""

import os
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
INSTALL = os.path.join(REPO, "deploy", "install.sh")
# What install.sh installs from its build directory.
BINARIES = ["broker", "lookup", "admin-ui", "nsq_to_file", "nsq_tail", "to_nsq", "nsq_stat",
            "nsq_to_nsq", "nsq_to_http"]


def write(path, text, mode=0o644):
    """Writes `text` to `path` (its directories made) with `mode`."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, mode)


def run_install(args, root, build, stubs, log, env=None, timeout=60):
    """Runs install.sh with DESTDIR=`root`, BUILD_DIR=`build`, the stand-ins of `stubs` first on
    PATH and STUB_LOG=`log`, plus `env`; returns its exit status and its output."""
    e = dict(os.environ)
    e.update({"DESTDIR": root, "BUILD_DIR": build, "STUB_LOG": log,
              "PATH": stubs + os.pathsep + e["PATH"]})
    e.update(env or {})
    p = subprocess.run(["bash", INSTALL] + list(args), env=e, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=timeout)
    return p.returncode, p.stdout.decode(errors="replace")


def recorded_calls(log):
    """The stand-ins' calls, one line each, in order."""
    with open(log) as f:
        return [line.rstrip("\n") for line in f]
