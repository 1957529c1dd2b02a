"""What the wire tests read of a running broker process from /proc."""


def rss_kib(pid):
    """The process's resident set (VmRSS), in KiB."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS for %d" % pid)


def fd_count(pid):
    """How many file descriptors the process holds."""
    import os
    return len(os.listdir("/proc/%d/fd" % pid))
