"""The fault schedule of a run: a pure function of the seed and the settings.

A schedule is a list of `Fault(at, kind, target, duration)`, `at` in seconds from the start of
the fault phase, one fault at a time: each is healed `duration` seconds after it began, and the
next begins at least `min_gap` seconds after that. Kinds:

    kill       SIGKILL a broker, restart it after `duration`
    restart    SIGTERM a broker (a clean stop), restart it after `duration`
    pause      SIGSTOP a broker, SIGCONT after `duration`
    partition  cut a broker off the network (its switch port down), heal after `duration`
    wipe       SIGKILL a broker, delete its data directory, restart it after `duration`
    lookup     SIGKILL a lookup, restart it after `duration`

One fault at a time, and the same seed and settings always give the same schedule. Replicas 3
with min-insync 2 promise no acknowledged message lost while fewer than 2 of a topic's holders
fail at once; one process down at a time is not enough for that, since a replica back from a
fault (or a new one, after a wipe) holds the data again only once it has caught up. With
replicas > 1, run.py therefore begins each fault only once the topic is whole again (every
replica live and in sync), waiting at most --settle seconds, and skips a wipe of one of its
replicas that finds it not whole by then: the times here are the earliest each fault begins.
"""

import collections
import random

KINDS = ("kill", "restart", "pause", "partition", "wipe", "lookup")
BROKER_KINDS = ("kill", "restart", "pause", "partition", "wipe")

Fault = collections.namedtuple("Fault", "at kind target duration")


def parse_kinds(text):
    """`kill,pause,...` (or `all`) -> a tuple of kinds; ValueError naming a bad one."""
    if text.strip() == "all":
        return KINDS
    kinds = tuple(k.strip() for k in text.split(",") if k.strip())
    bad = [k for k in kinds if k not in KINDS]
    if bad or not kinds:
        raise ValueError("unknown fault kind(s) %s: choose from %s or all"
                         % (", ".join(bad) or "(none)", ", ".join(KINDS)))
    return kinds


def make(seed, duration, kinds, brokers, lookups, min_gap=3.0, fault_time=(2.0, 6.0),
         warmup=3.0):
    """The faults that begin within `duration` seconds (each may end after it)."""
    if min_gap < 0 or fault_time[0] <= 0 or fault_time[1] < fault_time[0]:
        raise ValueError("min_gap must be >= 0 and fault durations positive and ordered")
    rng = random.Random(seed)
    faults = []
    t = warmup
    while t < duration:
        kind = rng.choice(kinds)
        target = rng.choice(lookups if kind == "lookup" else brokers)
        length = round(rng.uniform(*fault_time), 3)
        faults.append(Fault(round(t, 3), kind, target, length))
        t += length + min_gap + rng.uniform(0.0, min_gap)
    return faults
