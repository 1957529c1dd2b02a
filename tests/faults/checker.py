"""The checker of a fault run: pure functions over the clients' recorded histories.

Counts as Jepsen's total-queue checker does. Every publish attempt has one body, unique in the
run, and one outcome:

    A  acknowledged (OK on the wire)
    E  the broker answered an error frame (the message may still have been stored: a replicated
       publish that times out is answered with an error while its record can still commit)
    F  not sent (no connection could be opened)
    U  unknown: the PUB was written, then a timeout or a lost connection

and consumers record every delivery. From those:

    lost        acknowledged and never received: a violation, must be 0
    unexpected  received but never sent (no attempt, or only an F attempt): a violation
    duplicates  bodies received more than once (and the extra deliveries): reported, allowed
    unknown     U outcomes, split into received and not received: reported, not violations
    error_received  E outcomes that were received anyway: reported, not violations
    longest_silence  the longest time no consumer received anything while publishers ran
    availability     the fraction of attempts acknowledged, per interval and overall

History files (one per client, tab-separated, one event per line; a last line without its
newline is a write cut short by a kill and is ignored):

    START <t>
    A|E|F|U <t> <broker> <body> <detail>
    R <t> <broker> <body> <attempts>
    END <t> <summary>

Times are seconds since the epoch: every client runs on the same host and clock.

    python tests/faults/checker.py RUN_DIR     checks RUN_DIR/history/*.tsv again
"""

import collections
import glob
import json
import os
import sys

OUTCOMES = ("A", "E", "F", "U")
# The harness's own publishes that create a replicated topic (run.py): checked like any other,
# outside the window of the longest silence and the availability (no consumer runs yet).
SETUP_CLIENT = "setup"


def parse_history(text, client):
    """The events of one history file: (publishes, receives, spans).

    publishes: [(t, kind, broker, body, client)]; receives: [(t, broker, body, client)];
    spans: {client: (start, end)} (end None when the agent did not end cleanly).
    """
    publishes, receives = [], []
    start = end = None
    lines = text.split("\n")
    for line in lines[:-1]:  # the last piece lacks its newline, or is empty
        parts = line.split("\t")
        try:
            kind = parts[0]
            if kind in OUTCOMES and len(parts) >= 4:
                publishes.append((float(parts[1]), kind, parts[2], parts[3], client))
            elif kind == "R" and len(parts) >= 4:
                receives.append((float(parts[1]), parts[2], parts[3], client))
            elif kind == "START" and len(parts) >= 2:
                start = float(parts[1])
            elif kind == "END" and len(parts) >= 2:
                end = float(parts[1])
        except ValueError:
            continue  # a damaged line (a kill mid-write cannot produce one, but be strict)
    return publishes, receives, {client: (start, end)}


def load_dir(history_dir):
    """Every history of a run directory: (publishes, receives, spans) merged."""
    publishes, receives, spans = [], [], {}
    for path in sorted(glob.glob(os.path.join(history_dir, "*.tsv"))):
        client = os.path.basename(path)[:-len(".tsv")]
        with open(path, encoding="utf-8", errors="replace") as f:
            p, r, s = parse_history(f.read(), client)
        publishes += p
        receives += r
        spans.update(s)
    return publishes, receives, spans


def longest_silence(receive_times, window_start, window_end):
    """The longest interval inside [window_start, window_end] with no receive:
    (seconds, from, to). The window's own ends count as bounds."""
    if window_end is None or window_start is None or window_end <= window_start:
        return 0.0, window_start, window_start
    best = (0.0, window_start, window_start)
    prev = window_start
    for t in sorted(receive_times):
        if t < window_start:
            continue
        if t > window_end:
            break
        if t - prev > best[0]:
            best = (t - prev, prev, t)
        prev = t
    if window_end - prev > best[0]:
        best = (window_end - prev, prev, window_end)
    return best


def availability(publishes, interval):
    """Per interval of `interval` seconds from the first attempt: (start, attempts, acked)."""
    if not publishes:
        return []
    t0 = min(p[0] for p in publishes)
    buckets = collections.defaultdict(lambda: [0, 0])
    for t, kind, _broker, _body, _client in publishes:
        b = buckets[int((t - t0) // interval)]
        b[0] += 1
        if kind == "A":
            b[1] += 1
    last = max(buckets)
    return [(t0 + i * interval, buckets[i][0], buckets[i][1]) for i in range(last + 1)]


def check(publishes, receives, publish_window=None, interval=5.0, sample=20, names=None,
          faults=None):
    """The summary of a run (a JSON-able dict). publish_window: (start, end) in which
    publishers ran, for the longest silence (default: first to last publish attempt); names:
    broker address -> the name to report it under; faults: [(begin time, kind, target)] to
    blame lost messages on (`lost_blamed_on`, see attribute_lost)."""
    names = names or {}
    outcome = {}
    acked_at = {}
    counts = collections.Counter()
    for t, kind, broker, body, _client in publishes:
        counts[kind] += 1
        # A body is attempted once; if a client ever reused one, its best outcome counts.
        if outcome.get(body) != "A":
            outcome[body] = kind
        if kind == "A":
            acked_at[body] = (t, broker)
    got = collections.Counter(body for _t, _b, body, _c in receives)

    lost = sorted(b for b in acked_at if b not in got)
    unexpected = sorted(b for b in got if outcome.get(b) in (None, "F"))
    dup_bodies = [b for b, n in got.items() if n > 1]
    unknown = [b for b, k in outcome.items() if k == "U"]
    unknown_received = sum(1 for b in unknown if b in got)
    error_received = sum(1 for b, k in outcome.items() if k == "E" and b in got)

    if publish_window is None:
        publish_window = _first_to_last(publishes)
    if publish_window is None:
        silence = (0.0, None, None)
    else:
        silence = longest_silence([r[0] for r in receives], *publish_window)

    series = availability([p for p in publishes if p[4] != SETUP_CLIENT], interval)
    fractions = [acked / n for _t, n, acked in series if n]
    lost_at = [(acked_at[b][0], names.get(acked_at[b][1], acked_at[b][1])) for b in lost]
    lost_by_broker = collections.Counter(broker for _t, broker in lost_at)
    receivers = collections.Counter(c for _t, _b, _body, c in receives)
    attempts = sum(counts.values())
    summary = {
        "attempts": attempts,
        "outcomes": {k: counts.get(k, 0) for k in OUTCOMES},
        "acked": len(acked_at),
        "received_distinct": len(got),
        "deliveries": len(receives),
        "deliveries_by_consumer": dict(sorted(receivers.items())),
        "lost": len(lost),
        "lost_by_broker": dict(sorted(lost_by_broker.items())),
        "lost_sample": lost[:sample],
        "lost_blamed_on": attribute_lost(lost_at, faults or []),
        "lost_context": lost_context(lost[:sample], acked_at, names, faults or []),
        "unexpected": len(unexpected),
        "unexpected_sample": unexpected[:sample],
        "duplicates": len(dup_bodies),
        "duplicate_deliveries": sum(got[b] - 1 for b in dup_bodies),
        "unknown": len(unknown),
        "unknown_received": unknown_received,
        "unknown_not_received": len(unknown) - unknown_received,
        "error_received": error_received,
        "longest_silence_s": round(silence[0], 3),
        "longest_silence_from": silence[1],
        "longest_silence_to": silence[2],
        "availability": round(counts.get("A", 0) / attempts, 4) if attempts else None,
        "availability_interval_s": interval,
        "availability_min": round(min(fractions), 4) if fractions else None,
        "availability_series": [[round(t, 3), n, a] for t, n, a in series],
    }
    summary["violations"] = violations(summary)
    return summary


# An acknowledgement is timestamped by the client after it arrives, the fault by the harness
# before it signals: an ack sent just before a SIGKILL can carry a later time than the fault.
ACK_SLACK_S = 1.0


def attribute_lost(lost, faults, data_losing=("wipe", "kill")):
    """Which fault each lost message can be blamed on: `lost` is [(acked at, broker name)],
    `faults` [(begin time, kind, target)]. A message is blamed on a fault of a data-losing
    kind that hit its broker after it was acknowledged (what an unreplicated broker may lose;
    within ACK_SLACK_S), the first kind of `data_losing` that did (a wipe loses everything, so
    it explains a loss before a kill that came earlier does); the rest are `unexplained`.
    Returns {kind or "unexplained": count}."""
    last = {}  # (target, kind) -> the last time that kind of fault hit that target
    for t, kind, target in faults:
        if kind in data_losing:
            last[(target, kind)] = max(t, last.get((target, kind), t))
    out = collections.Counter()
    for t_ack, broker in lost:
        blame = next((kind for kind in data_losing
                      if last.get((broker, kind), -1e18) + ACK_SLACK_S >= t_ack), "unexplained")
        out[blame] += 1
    return dict(sorted(out.items()))


def lost_context(bodies, acked_at, names, faults, around=2):
    """For each lost body: when and by which broker it was acknowledged, the fault in progress
    or last begun before that, and the next `around` faults begun after it (whatever broker
    they hit: with replicas the acknowledging broker may not hold the message)."""
    ordered = sorted(faults)
    out = []
    for body in bodies:
        t_ack, broker = acked_at[body]
        before = [f for f in ordered if f[0] <= t_ack]
        after = [f for f in ordered if f[0] > t_ack][:around]
        out.append({"body": body, "acked_at": round(t_ack, 3),
                    "acked_by": names.get(broker, broker),
                    "fault_before": [round(before[-1][0], 3)] + list(before[-1][1:])
                    if before else None,
                    "faults_after": [[round(f[0], 3)] + list(f[1:]) for f in after]})
    return out


def violations(summary):
    out = []
    if summary["lost"]:
        out.append("%d acknowledged messages lost" % summary["lost"])
    if summary["unexpected"]:
        out.append("%d messages received that were never sent" % summary["unexpected"])
    return out


def table(summary, t0=None):
    """The summary as a readable table (times relative to t0 when given)."""
    def rel(t):
        if t is None:
            return "-"
        return "%.1fs" % (t - t0) if t0 is not None else "%.3f" % t

    o = summary["outcomes"]
    rows = [
        ("publish attempts", "%d (A %d, E %d, F %d, U %d)"
         % (summary["attempts"], o["A"], o["E"], o["F"], o["U"])),
        ("acknowledged", summary["acked"]),
        ("received (distinct / deliveries)", "%d / %d"
         % (summary["received_distinct"], summary["deliveries"])),
        ("LOST (acked, never received)", "%d %s" % (
            summary["lost"], "by broker %s, blamed on %s" % (
                json.dumps(summary["lost_by_broker"]), json.dumps(summary["lost_blamed_on"]))
            if summary["lost"] else "")),
        ("unexpected (never sent)", summary["unexpected"]),
        ("duplicates (bodies / extra deliveries)", "%d / %d"
         % (summary["duplicates"], summary["duplicate_deliveries"])),
        ("unknown outcomes (received / not)", "%d (%d / %d)" % (
            summary["unknown"], summary["unknown_received"], summary["unknown_not_received"])),
        ("error answers received anyway", summary["error_received"]),
        ("longest silence (no delivery)", "%.2fs (%s to %s)" % (
            summary["longest_silence_s"], rel(summary["longest_silence_from"]),
            rel(summary["longest_silence_to"]))),
        ("availability (acked / attempts)", "%s overall, min %s per %gs" % (
            summary["availability"], summary["availability_min"],
            summary["availability_interval_s"])),
    ]
    if summary["lost"] and summary.get("lost_context"):
        c = summary["lost_context"][0]
        fb = c["fault_before"]
        rows.append(("first lost", "%s acked %s by %s; fault before: %s; after: %s" % (
            c["body"], rel(c["acked_at"]), c["acked_by"],
            "%s %s at %s" % (fb[1], fb[2], rel(fb[0])) if fb else "none",
            ", ".join("%s %s at %s" % (f[1], f[2], rel(f[0])) for f in c["faults_after"])
            or "none")))
    width = max(len(k) for k, _ in rows)
    lines = ["%-*s  %s" % (width, k, v) for k, v in rows]
    lines.append("%-*s  %s" % (width, "RESULT", "; ".join(summary["violations"]) or "ok"))
    return "\n".join(lines)


def main(argv):
    if len(argv) != 2:
        print("usage: checker.py RUN_DIR (a run directory kept by run.py --keep)", file=sys.stderr)
        return 2
    history = os.path.join(argv[1], "history")
    if not os.path.isdir(history):
        print("checker.py: no history directory in %s" % argv[1], file=sys.stderr)
        return 2
    publishes, receives, _spans = load_dir(history)
    window = publish_window(publishes)
    faults, names = [], {}
    try:
        with open(os.path.join(argv[1], "faults.json")) as f:
            record = json.load(f)
        faults = [(e["t"], e["kind"], e["target"]) for e in record["events"]
                  if e["event"] == "begin"]
        names = record.get("brokers", {})
    except (OSError, ValueError, KeyError, TypeError):
        pass  # no fault record (or not run.py's): nothing to blame lost messages on
    summary = check(publishes, receives, publish_window=window, names=names, faults=faults)
    print(table(summary, t0=window[0] if window else None))
    print(json.dumps({k: v for k, v in summary.items() if k != "availability_series"}))
    return 1 if summary["violations"] else 0


def publish_window(publishes):
    """From the first publish attempt to the last (any client but the setup, any outcome)."""
    return _first_to_last(publishes)


def _first_to_last(publishes):
    times = [p[0] for p in publishes if p[4] != SETUP_CLIENT]
    if not times:
        return None
    return min(times), max(times)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
