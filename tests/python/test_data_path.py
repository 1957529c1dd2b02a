"""--data-path at start-up: it must exist and be writable, or the broker refuses to start,
naming the path and why. nsqd refuses a missing data path too; without --data-path both use
the current directory.

A created-on-demand path turned a typo (or a mount not there yet) into an empty store while
the data sat elsewhere; a path the broker's user cannot write started a broker whose /ping said
OK and whose /pub answered 503 EXITING.
"""

import os
import re
import shutil
import subprocess
import tempfile
import time
import urllib.request

import pytest

from conftest import broker_bin

START_LIMIT = 20.0


def run_until_exit(args):
    """(exit code or None if still running after START_LIMIT, log) of a broker started with
    `args` (after the binary); a broker still running is killed."""
    p = subprocess.Popen([broker_bin()] + args, stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        out, _ = p.communicate(timeout=START_LIMIT)
        code = p.returncode
    except subprocess.TimeoutExpired:
        p.kill()
        out, _ = p.communicate(timeout=10)
        code = None
    return code, out.decode(errors="replace")


def ports(shards):
    return ["--tcp-address=127.0.0.1:0", "--http-address=127.0.0.1:0", "--shards=%d" % shards]


def test_a_missing_data_path_is_refused_and_without_one_the_current_directory_is_used(
        tmp_path, shards):
    """A missing --data-path (or one that is no directory) stops start-up and is not created;
    as nsqd, no --data-path means the current directory, where the broker then serves."""
    missing = tmp_path / "no" / "such" / "dir"
    code, log = run_until_exit(ports(shards) + ["--data-path=%s" % missing])
    assert code == 1, "a missing --data-path must stop start-up\n" + log
    assert "--data-path %s does not exist" % missing in log, log
    assert "listening" not in log, log
    assert not (tmp_path / "no").exists(), "the broker created the path"

    a_file = tmp_path / "file"
    a_file.write_text("not a directory")
    code, log = run_until_exit(ports(shards) + ["--data-path=%s" % a_file])
    assert code == 1, log
    assert "--data-path %s is not a directory" % a_file in log, log

    cwd = tmp_path / "cwd"
    cwd.mkdir()
    with open(tmp_path / "cwd.log", "wb") as err:
        p = subprocess.Popen([broker_bin()] + ports(shards), cwd=str(cwd),
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err)
    try:
        deadline = time.monotonic() + START_LIMIT
        http = None
        while http is None and time.monotonic() < deadline and p.poll() is None:
            m = re.search(r"HTTP: listening http=[^ ]*:(\d+)", (tmp_path / "cwd.log").read_text())
            http = m and int(m.group(1))
            time.sleep(0.05)
        assert http, (tmp_path / "cwd.log").read_text()
        req = urllib.request.Request("http://127.0.0.1:%d/pub?topic=here" % http, data=b"x",
                                     method="POST")
        with urllib.request.urlopen(req, timeout=10) as r:
            assert r.read() == b"OK"
        assert (cwd / "here").is_dir(), os.listdir(cwd)
    finally:
        p.terminate()
        p.wait(timeout=15)


def _as_other_user():
    """How to run the broker as a user that cannot write a directory of mode 555: this user
    when not root, `nobody` through setpriv when root (root writes anything)."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root without setpriv: cannot test as an unprivileged user")
    return [setpriv, "--reuid=nobody", "--regid=nogroup", "--clear-groups"]


def test_a_data_path_the_broker_cannot_write_is_refused(shards):
    """Mode 555 for the broker's user: refused at start-up, naming the path and the error (it
    used to start, answer /ping OK, and refuse every /pub with 503 EXITING)."""
    prefix = _as_other_user()
    # Not pytest's tmp_path: its parents are private to root.
    top = tempfile.mkdtemp(prefix="broker-readonly-")
    try:
        os.chmod(top, 0o755)
        data = os.path.join(top, "data")
        os.mkdir(data, 0o555)
        os.chmod(data, 0o555)
        p = subprocess.Popen(prefix + [broker_bin()] + ports(shards) + ["--data-path=" + data],
                             stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT)
        try:
            out, _ = p.communicate(timeout=START_LIMIT)
        except subprocess.TimeoutExpired:
            p.kill()
            out, _ = p.communicate(timeout=10)
        log = out.decode(errors="replace")
        assert p.returncode == 1, "an unwritable --data-path must stop start-up\n" + log
        assert "--data-path %s is not writable: Permission denied" % data in log, log
        assert "listening" not in log, log
        assert os.listdir(data) == [], os.listdir(data)
    finally:
        os.chmod(os.path.join(top, "data"), 0o755)
        shutil.rmtree(top, ignore_errors=True)
