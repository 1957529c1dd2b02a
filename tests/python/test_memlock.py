"""Issue 40 item 8: every binary under a small RLIMIT_MEMLOCK (64 KiB, as `prlimit
--memlock=65536:65536` or `ulimit -l 64` sets it). The ones that run glommio executors (broker,
lookup, nsq_tail, nsq_stat, nsq_to_file, nsq_to_http, nsq_to_nsq) raise the soft limit
themselves when the hard limit allows it, and otherwise exit 1 at once with a message naming
RLIMIT_MEMLOCK and the `ulimit -l` to set (not glommio's raw `MemLockLimit(65536/524288)`).
admin-ui and to_nsq use no io_uring and run under any limit.
"""

import os
import resource
import subprocess
import time
import urllib.request

import pytest

from conftest import REPO, free_port, port_accepts
from test_tools import body, create_channel, mpub, tool, wait_until

SMALL = 64 * 1024
_, HARD = resource.getrlimit(resource.RLIMIT_MEMLOCK)


def limited(soft, hard):
    """A preexec_fn setting RLIMIT_MEMLOCK in the child, as prlimit does."""
    return lambda: resource.setrlimit(resource.RLIMIT_MEMLOCK, (soft, hard))


def binary(name):
    return tool(name) if name not in ("broker", "lookup", "admin-ui") else \
        os.path.join(REPO, "target", "release", name)


IO_URING = {
    "broker": ["--tcp-address=127.0.0.1:0", "--http-address=127.0.0.1:0", "--shards=2"],
    "lookup": ["--tcp-address=127.0.0.1:0", "--http-address=127.0.0.1:0"],
    "nsq_tail": ["--topic=t", "--nsqd-tcp-address=127.0.0.1:1"],
    "nsq_stat": ["--topic=t", "--channel=c", "--nsqd-http-address=127.0.0.1:1", "--count=1"],
    "nsq_to_file": ["--topic=t", "--nsqd-tcp-address=127.0.0.1:1"],
    "nsq_to_http": ["--topic=t", "--nsqd-tcp-address=127.0.0.1:1", "--post=http://127.0.0.1:1/"],
    "nsq_to_nsq": ["--topic=t", "--nsqd-tcp-address=127.0.0.1:1",
                   "--destination-nsqd-tcp-address=127.0.0.1:1"],
}


@pytest.mark.parametrize("name", sorted(IO_URING))
def test_a_hard_limit_too_small_is_refused_with_what_to_set(name, tmp_path):
    args = [binary(name)] + IO_URING[name]
    if name == "broker":
        args.append("--data-path=%s" % tmp_path)
    if name == "nsq_to_file":
        args.append("--output-dir=%s" % tmp_path)
    r = subprocess.run(args, capture_output=True, timeout=30, stdin=subprocess.DEVNULL,
                       preexec_fn=limited(SMALL, SMALL))
    err = r.stderr.decode()
    assert r.returncode == 1, (r.returncode, err)
    assert "RLIMIT_MEMLOCK is 64 KiB (hard 64 KiB)" in err and "ulimit -l " in err, err
    assert "LimitMEMLOCK" in err and "MemLockLimit" not in err, err


def assert_serves_ping(name, args, preexec):
    """Starts binary `name` with `args` and an --http-address under `preexec`'s limit, and
    checks that it stays up and answers /ping OK."""
    port = free_port()
    proc = subprocess.Popen([binary(name), "--http-address=127.0.0.1:%d" % port] + args,
                            stderr=subprocess.PIPE, preexec_fn=preexec)
    try:
        wait_until(lambda: port_accepts("127.0.0.1", port) or proc.poll() is not None, 30,
                   "%s listening" % name)
        assert proc.poll() is None, proc.stderr.read()
        with urllib.request.urlopen("http://127.0.0.1:%d/ping" % port, timeout=10) as resp:
            assert resp.read() == b"OK"
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.mark.skipif(HARD != resource.RLIM_INFINITY and HARD < 1024 * 1024,
                    reason="the hard RLIMIT_MEMLOCK here is below what a raise needs")
def test_a_small_soft_limit_is_raised_and_the_binaries_run(start_broker, tmp_path):
    low = limited(SMALL, HARD)
    # lookup: serves.
    assert_serves_ping("lookup", ["--tcp-address=127.0.0.1:0"], low)
    # the tools: nsq_tail and nsq_stat against a broker.
    broker = start_broker()
    create_channel(broker, "ml", "c")
    mpub(broker, "ml", [body(1)])
    r = subprocess.run([binary("nsq_tail"), "--topic=ml", "--channel=c", "-n", "1",
                        "--nsqd-tcp-address", broker.tcp_address],
                       capture_output=True, timeout=60, preexec_fn=low)
    assert r.returncode == 0 and r.stdout == body(1) + b"\n", r
    r = subprocess.run([binary("nsq_stat"), "--topic=ml", "--channel=c", "--count=1",
                        "--interval=100ms", "--nsqd-http-address=127.0.0.1:%d" % broker.http_port],
                       capture_output=True, timeout=60, preexec_fn=low)
    assert r.returncode == 0, r


def test_the_binaries_without_io_uring_run_under_any_limit(start_broker):
    low = limited(SMALL, SMALL)
    broker = start_broker()
    r = subprocess.run([binary("to_nsq"), "--topic=ml2", "--nsqd-tcp-address", broker.tcp_address],
                       input=b"one\n", capture_output=True, timeout=60, preexec_fn=low)
    assert r.returncode == 0, r
    assert_serves_ping("admin-ui", ["--nsqd-http-address=127.0.0.1:%d" % broker.http_port], low)
