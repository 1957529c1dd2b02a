"""Shared by tests/deploy: where the repository and the release binaries are, the Debian
package built once per session (deploy/debian/build-deb.sh), and a snapshot of a directory
tree to compare before and after.

The binaries are target/release's (DEPLOY_BUILD_DIR overrides): build them first
(`cargo build --release -p broker -p lookup -p admin-ui -p tools`)."""

import hashlib
import os
import shutil
import stat
import subprocess
import tempfile

import pytest

from install_host import BINARIES, INSTALL  # noqa: F401 (the deploy tests take them from here)

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
DEPLOY = os.path.join(REPO, "deploy")
BUILD_DEB = os.path.join(DEPLOY, "debian", "build-deb.sh")
BUILD_DIR = os.environ.get("DEPLOY_BUILD_DIR", os.path.join(REPO, "target", "release"))
UNITS = ["broker.service", "lookup.service", "admin-ui.service", "nsq_to_file@.service",
         "nsq_to_nsq@.service", "nsq_to_http@.service"]
SETTINGS = ["broker", "lookup", "admin-ui", "nsq_to_file", "nsq_to_nsq", "nsq_to_http"]
# Every binary but admin-ui's runs glommio on io_uring.
URING_UNITS = [u for u in UNITS if u != "admin-ui.service"]


def need_binaries():
    missing = [b for b in BINARIES if not os.access(os.path.join(BUILD_DIR, b), os.X_OK)]
    assert not missing, ("no %s in %s: cargo build --release -p broker -p lookup -p admin-ui "
                         "-p tools (or DEPLOY_BUILD_DIR=dir)" % (", ".join(missing), BUILD_DIR))


@pytest.fixture(scope="session")
def deb():
    """The package, built once into a temporary directory: (path, seconds the build took).
    gzip rather than the default xz: the same tree, a third of the time."""
    need_binaries()
    out = tempfile.mkdtemp(prefix="deploy-deb-")
    env = dict(os.environ, DEB_COMPRESSION="gzip", BUILD_DIR=BUILD_DIR)
    p = subprocess.run(["bash", BUILD_DEB, "--out", out], cwd=REPO, env=env,
                       capture_output=True, text=True, timeout=100)
    assert p.returncode == 0, p.stdout + p.stderr
    path = p.stdout.strip().splitlines()[-1]
    assert os.path.dirname(path) == out and os.path.isfile(path), p.stdout
    yield path
    shutil.rmtree(out, ignore_errors=True)


def snapshot(root):
    """Every path under root (relative), with its type, mode, owner and content hash: two
    snapshots are equal when nothing was added, removed or changed."""
    seen = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            full = os.path.join(dirpath, name)
            st = os.lstat(full)
            rel = os.path.relpath(full, root)
            if stat.S_ISLNK(st.st_mode):
                what = "link " + os.readlink(full)
            elif stat.S_ISDIR(st.st_mode):
                what = "dir"
            else:
                with open(full, "rb") as f:
                    what = "file " + hashlib.sha256(f.read()).hexdigest()
            seen[rel] = (what, oct(stat.S_IMODE(st.st_mode)), st.st_uid, st.st_gid)
    return seen
