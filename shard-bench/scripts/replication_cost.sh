#!/usr/bin/env bash
# The cost of replication (issue 43): MPUB ingest and publish latency at a fixed rate against
#   repl3 - the LEADER of a --replicas=3 topic on three brokers (each --shards 1) with three
#           lookups running the controller,
#   nsqd  - a single nsqd (unreplicated, its defaults),
#   plain - a single broker of ours, --shards 1, no replication flags (replicas 1).
# Sides alternate run by run (repl3 nsqd plain, repl3 nsqd plain, ...), each run on a fresh
# cluster / broker with fresh data directories, every run bounded by shard-bench's --duration.
# Everything listens on 127.0.0.1 on free ports, lives under one temp directory, and is killed
# on exit. Prints a table of medians; each run's JSON stays in $OUT.
#
# Usage: shard-bench/scripts/replication_cost.sh [ingest] [latency]   (default: both)
# Environment (defaults in brackets):
#   RUNS [3]  runs per side and row      DURATION [10s]  shard-bench --duration
#   RATES ["2000 10000"]  fixed rates (msg/s) of the latency rows (sides repl3 and plain)
#   NSQD [/work/nsqd-build/bin/nsqd-1.3.0]   BIN [target/release]: broker, lookup, shard-bench
#   OUT [a new temp directory]   PERF [0]: 1 records `perf record -g` on the repl3 leader for
#   10 s during the first repl3 ingest run (perf.data and a report into $OUT)
#   SPREAD [1]: the three replicated brokers run on CPUs 0, 1, 0 (taskset); 0 leaves them all
#   on the CPU their one shard pins to by default (CPU 0)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
RUNS=${RUNS:-3}
DURATION=${DURATION:-10s}
RATES=${RATES:-"2000 10000"}
NSQD=${NSQD:-/work/nsqd-build/bin/nsqd-1.3.0}
BIN=${BIN:-$root/target/release}
PERF=${PERF:-0}
SPREAD=${SPREAD:-1}
TOPIC=bench
rows=("$@")
[[ ${#rows[@]} -gt 0 ]] || rows=(ingest latency)

for b in "$BIN/broker" "$BIN/lookup" "$BIN/shard-bench" "$NSQD"; do
    [[ -x $b ]] || { echo "replication_cost: $b not found (cargo build --release --workspace)" >&2; exit 1; }
done
scratch=$(mktemp -d /tmp/replication-cost.XXXXXX)
OUT=${OUT:-$scratch/results}
mkdir -p "$OUT"
pids=()

stop_all() {
    local p
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do
        # Bounded: SIGKILL whatever has not gone within 5 s.
        for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$p" 2>/dev/null || true
        wait "$p" 2>/dev/null || true
    done
    pids=()
}
cleanup() {
    stop_all
    rm -rf "$scratch/run"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# wait_for SECONDS DESCRIPTION COMMAND...: polls COMMAND every 0.1 s until it succeeds.
wait_for() {
    local limit=$1 what=$2
    shift 2
    local deadline=$((SECONDS + limit))
    until "$@" >/dev/null 2>&1; do
        if ((SECONDS >= deadline)); then
            echo "replication_cost: never: $what (logs in $scratch/run)" >&2
            tail -n 20 "$scratch"/run/*/log >&2 || true
            exit 1
        fi
        sleep 0.1
    done
}

json_get() { # URL JQ-FILTER
    curl -sf --max-time 2 "$1" | jq -er "$2"
}

# start NAME CPUS COMMAND...: runs COMMAND in $scratch/run/NAME with its log there.
start() {
    local name=$1 cpus=$2
    shift 2
    mkdir -p "$scratch/run/$name/data"
    if [[ -n $cpus ]]; then
        taskset -c "$cpus" "$@" >"$scratch/run/$name/log" 2>&1 &
    else
        "$@" >"$scratch/run/$name/log" 2>&1 &
    fi
    pids+=($!)
}

# One message through the wire so the topic exists (and, replicated, is placed) before the run.
first_publish() {
    "$BIN/shard-bench" pub --nsqd-tcp-address "$1" --topic $TOPIC --batch-size 1 --connections 1 \
        --count 1 --duration 3s --quiet >/dev/null 2>&1
}

# Sets target_tcp / target_pid for the side: a fresh plain broker, nsqd, or repl3 cluster.
declare -a b_tcp b_http
up() {
    rm -rf "$scratch/run"
    case $1 in
    plain)
        local t h
        t=127.0.0.1:$(free_port) h=127.0.0.1:$(free_port)
        start plain "" "$BIN/broker" --shards 1 --tcp-address "$t" --http-address "$h" \
            --data-path "$scratch/run/plain/data"
        target_pid=${pids[-1]} target_tcp=$t
        wait_for 10 "plain broker answers /ping" curl -sf --max-time 1 "http://$h/ping"
        wait_for 10 "first publish (plain)" first_publish "$t"
        ;;
    nsqd)
        local t h
        t=127.0.0.1:$(free_port) h=127.0.0.1:$(free_port)
        start nsqd "" "$NSQD" --tcp-address "$t" --http-address "$h" --data-path "$scratch/run/nsqd/data"
        target_pid=${pids[-1]} target_tcp=$t
        wait_for 10 "nsqd answers /ping" curl -sf --max-time 1 "http://$h/ping"
        wait_for 10 "first publish (nsqd)" first_publish "$t"
        ;;
    repl3)
        local raft=() ltcp=() lhttp=() peers="" i
        for i in 1 2 3; do
            raft+=("127.0.0.1:$(free_port)") ltcp+=("127.0.0.1:$(free_port)") lhttp+=("127.0.0.1:$(free_port)")
        done
        peers="1=${raft[0]},2=${raft[1]},3=${raft[2]}"
        for i in 1 2 3; do
            start "lookup$i" "" "$BIN/lookup" --tcp-address "${ltcp[i - 1]}" \
                --http-address "${lhttp[i - 1]}" --broadcast-address 127.0.0.1 \
                --controller-id "$i" --controller-peers "$peers" --data-path "$scratch/run/lookup$i/data"
        done
        wait_for 30 "the controller elects a leader" \
            json_get "http://${lhttp[0]}/controller" 'select(.leader > 0) | .leader'
        local lookups=() cpus
        for i in 1 2 3; do lookups+=(--lookupd-tcp-address "${ltcp[i - 1]}"); done
        b_tcp=() b_http=()
        for i in 0 1 2; do
            b_tcp+=("127.0.0.1:$(free_port)") b_http+=("127.0.0.1:$(free_port)")
            cpus=""
            [[ $SPREAD == 1 ]] && cpus=$((i % 2))
            start "broker$i" "$cpus" "$BIN/broker" --shards 1 --tcp-address "${b_tcp[i]}" \
                --http-address "${b_http[i]}" --data-path "$scratch/run/broker$i/data" \
                --replication-address "127.0.0.1:$(free_port)" --replicas 3 "${lookups[@]}"
            b_pid[i]=${pids[-1]}
        done
        wait_for 30 "three live brokers in the controller's metadata" \
            json_get "http://${lhttp[0]}/controller" \
            'select([.metadata.brokers[] | select(.fenced == false)] | length == 3) | 1'
        wait_for 30 "first publish (repl3)" first_publish "${b_tcp[0]}"
        local leader="" id
        local deadline=$((SECONDS + 30))
        while [[ -z $leader ]]; do
            ((SECONDS < deadline)) || { echo "replication_cost: no agreed leader" >&2; exit 1; }
            local lid
            lid=$(json_get "http://${b_http[0]}/stats?format=json" ".cluster.topics.$TOPIC.leader" 2>/dev/null) || lid=""
            if [[ -n $lid && $lid != null ]]; then
                for i in 0 1 2; do
                    id=$(json_get "http://${b_http[i]}/stats?format=json" '.cluster.broker_id' 2>/dev/null) || id=""
                    [[ $id == "$lid" ]] && leader=$i
                done
            fi
            [[ -n $leader ]] || sleep 0.1
        done
        target_pid=${b_pid[leader]} target_tcp=${b_tcp[leader]}
        leader_cpu=$([[ $SPREAD == 1 ]] && echo $((leader % 2)) || echo 0)
        ;;
    esac
}
declare -a b_pid

run() { # SIDE ROW RUN-INDEX shard-bench-pub-flags...
    local side=$1 row=$2 i=$3
    shift 3
    up "$side"
    local json="$OUT/$row-$side-$i.json" perf_pid=""
    if [[ $PERF == 1 && $side == repl3 && $row == ingest && $i == 1 ]]; then
        perf record -g -o "$OUT/perf-leader.data" -p "$target_pid" -- sleep 10 >/dev/null 2>&1 &
        perf_pid=$!
    fi
    # In the background, so that a signal stops the run at once rather than after the bench.
    "$BIN/shard-bench" pub --nsqd-tcp-address "$target_tcp" --topic $TOPIC --duration "$DURATION" \
        --broker-pid "$target_pid" --json "$json" --label "$row $side" --quiet "$@" >/dev/null &
    pids+=($!)
    wait "${pids[-1]}"
    if [[ -n $perf_pid ]]; then
        wait "$perf_pid" || true
        perf report -i "$OUT/perf-leader.data" --no-children --percent-limit 1 --stdio \
            >"$OUT/perf-leader.txt" 2>/dev/null || true
    fi
    printf '%s %-8s %-6s run %s: %s\n' "$(date +%T)" "$row" "$side" "$i" \
        "$(jq -r '"\(.published.msgs_per_s|floor) msg/s, ack p50/p99/p99.9 \(.ack_latency_us.p50)/\(.ack_latency_us.p99)/\(.ack_latency_us.p999) us, errors \(.errors)"' "$json")$(
            [[ $side == repl3 ]] && echo " (leader on CPU $leader_cpu)")"
    stop_all
}

echo "host: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs; load at start: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "build: $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown); results: $OUT"
for row in "${rows[@]}"; do
    case $row in
    ingest)
        for i in $(seq "$RUNS"); do
            for side in repl3 nsqd plain; do
                run "$side" ingest "$i" --batch-size 200 --size 200 --connections 4
            done
        done
        ;;
    latency)
        for rate in $RATES; do
            for i in $(seq "$RUNS"); do
                for side in repl3 plain; do
                    run "$side" "rate$rate" "$i" --rate "$rate" --batch-size 1 --size 200 --connections 4
                done
            done
        done
        ;;
    *) echo "replication_cost: unknown row $row (ingest, latency)" >&2; exit 2 ;;
    esac
done
echo "load at end: $(cut -d' ' -f1-3 /proc/loadavg)"

# Medians per row and side.
python3 - "$OUT" <<'EOF'
import json, glob, os, statistics, sys
out = sys.argv[1]
by = {}
for f in sorted(glob.glob(os.path.join(out, "*.json"))):
    row, side, _ = os.path.basename(f)[:-5].rsplit("-", 2)
    by.setdefault(row, {}).setdefault(side, []).append(json.load(open(f)))
med = lambda xs: statistics.median(xs) if xs else float("nan")
print("\n| row | side | runs | msg/s median | ack p50 / p99 / p99.9 us (medians) | broker CPU us/msg | errors |")
print("| --- | --- | ---: | ---: | --- | ---: | ---: |")
ratios = []
for row in sorted(by):
    for side in ("repl3", "nsqd", "plain"):
        rs = by[row].get(side)
        if not rs:
            continue
        lat = [r["ack_latency_us"] for r in rs if r.get("ack_latency_us")]
        cpu = [r["broker"]["cpu_s_per_million_pub"] for r in rs if r.get("broker") and r["broker"].get("cpu_s_per_million_pub")]
        print(f"| {row} | {side} | {len(rs)} | {med([r['published']['msgs_per_s'] for r in rs]):,.0f} | "
              f"{med([l['p50'] for l in lat]):.0f} / {med([l['p99'] for l in lat]):.0f} / {med([l['p999'] for l in lat]):.0f} | "
              f"{med(cpu):.2f} | {sum(r['errors'] for r in rs)} |")
    if "repl3" in by[row] and "nsqd" in by[row]:
        a = med([r["published"]["msgs_per_s"] for r in by[row]["repl3"]])
        b = med([r["published"]["msgs_per_s"] for r in by[row]["nsqd"]])
        ratios.append(f"{row}: repl3 / nsqd = {a / b:.2f}x")
    if "repl3" in by[row] and "plain" in by[row]:
        a = med([r["published"]["msgs_per_s"] for r in by[row]["repl3"]])
        c = med([r["published"]["msgs_per_s"] for r in by[row]["plain"]])
        ratios.append(f"{row}: repl3 / plain = {a / c:.2f}x")
print("\n" + "\n".join(ratios))
EOF
