#!/usr/bin/env bash
# The standard matrix of issue 7: 200-byte messages against a release broker started here on
# 127.0.0.1, with `--shards 2` and again with `--shards 1`, default --mem-queue-size (except the
# row that sets it to 0). Writes one JSON per row, report.md and the SVG charts into
# shard-bench/results/ (or $OUT), and prints the table.
#
# Every row gets a fresh broker (fresh data directory), so CPU and peak RSS are that row's.
#
# Pinning on a 2-core machine: the broker pins shard i to CPU i. With --shards 1 the bench runs
# pinned to CPU 1 (the broker has CPU 0 to itself); with --shards 2 the bench is left unbound,
# since both CPUs carry a shard. The raw rows mirror that: sink on CPU 0 and bench on CPU 1
# for the 1-shard comparison, both unbound for the 2-shard one.
#
# Environment (defaults in brackets):
#   DURATION [10s]  measured time per row     WARMUP [2s]  warm-up per row
#   BACKLOG [10000000]  messages in the drain row's backlog
#   SHARDS ["2 1"]  broker shard counts to run    E2E_BATCH [10]  batch size of the 100k/s row
#   PORT [24150]    broker TCP port (HTTP on PORT+1)
#   OUT [shard-bench/results]   BUILD [1]: 0 skips `cargo build --release`
#   REPORT_ONLY [0]: 1 skips the runs and rebuilds the table and charts from $OUT/*.json
#   WRITE_DOC [1]: 0 leaves docs/benchmarks.md alone (it is written only when OUT is the
#               default; WRITE_README is the same switch's former name)
#   REPEAT [1]: run the whole matrix this many times and keep each row's best repetition
#               (highest rate; lowest e2e p99 for the fixed-rate row): on a shared, noisy
#               machine the noise only subtracts
#   BROKER_BIN, BENCH_BIN: binaries to use (default: the release builds)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
DURATION=${DURATION:-10s}
WARMUP=${WARMUP:-2s}
BACKLOG=${BACKLOG:-10000000}
SHARDS=${SHARDS:-"2 1"}
E2E_BATCH=${E2E_BATCH:-10}
PORT=${PORT:-24150}
OUT=${OUT:-$here/results}
target_dir=${CARGO_TARGET_DIR:-$root/target}
BROKER_BIN=${BROKER_BIN:-$target_dir/release/broker}
BENCH_BIN=${BENCH_BIN:-$target_dir/release/shard-bench}

REPORT_ONLY=${REPORT_ONLY:-0}
REPEAT=${REPEAT:-1}
if [[ $REPORT_ONLY == 1 ]]; then BUILD=0; fi
if [[ ${BUILD:-1} != 0 ]]; then
    (cd "$root" && cargo build --release -p broker -p shard-bench)
fi
for bin in "$BROKER_BIN" "$BENCH_BIN"; do
    [[ -x $bin ]] || { echo "run-matrix: $bin not found (build with cargo build --release)" >&2; exit 1; }
done

mkdir -p "$OUT"
[[ $REPORT_ONLY == 1 ]] || rm -f "$OUT"/*.json
addr=127.0.0.1:$PORT
broker_pid=
data_dir=

stop_broker() {
    if [[ -n $broker_pid ]]; then
        kill "$broker_pid" 2>/dev/null || true
        wait "$broker_pid" 2>/dev/null || true
        broker_pid=
    fi
    if [[ -n $data_dir ]]; then
        rm -rf "$data_dir"
        data_dir=
    fi
}
trap stop_broker EXIT

# start_broker SHARDS [extra broker flags...]
start_broker() {
    local shards=$1
    shift
    data_dir=$(mktemp -d /tmp/shard-bench-matrix.XXXXXX)
    "$BROKER_BIN" --tcp-address "$addr" --http-address "127.0.0.1:$((PORT + 1))" \
        --data-path "$data_dir" --shards "$shards" --log-level warn "$@" \
        >"$data_dir/broker.log" 2>&1 &
    broker_pid=$!
    for _ in $(seq 100); do
        if (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; then
            return 0
        fi
        kill -0 "$broker_pid" 2>/dev/null || break
        sleep 0.1
    done
    echo "run-matrix: the broker did not start:" >&2
    cat "$data_dir/broker.log" >&2
    exit 1
}

# owner_cpu TOPIC: creates TOPIC on the running broker and prints the CPU of the shard that
# owns it (the broker, not confined by taskset here, pins shard i to CPU i).
owner_cpu() {
    curl -sf -X POST "http://127.0.0.1:$((PORT + 1))/topic/create?topic=$1" >/dev/null
    curl -sf "http://127.0.0.1:$((PORT + 1))/metrics" |
        sed -n "s/^nsq_topic_shard{topic=\"$1\"} \([0-9]*\)$/\1/p"
}

# bench NAME ARGS...: one shard-bench run against the running broker, result in $OUT/NAME.json
bench() {
    local name=$1
    shift
    echo "--- $name: shard-bench $*" >&2
    "$BENCH_BIN" "$@" --json "$rep_dir/$name.json"
}

reps_root=$(mktemp -d /tmp/shard-bench-reps.XXXXXX)
for rep in $(seq "$REPEAT"); do
rep_dir=$reps_root/$rep
mkdir -p "$rep_dir"
for shards in $SHARDS; do
    [[ $REPORT_ONLY == 1 ]] && break
    if [[ $shards == 1 ]]; then pin=(--cpus 1); sink_pin=(--sink-cpu 0); else pin=(); sink_pin=(); fi
    common=(--nsqd-tcp-address "$addr" --size 200 "${pin[@]}")
    timed=(--duration "$DURATION" --warmup "$WARMUP")
    tag="shards $shards"

    start_broker "$shards"
    bench "s$shards-1-ingest" pub "${common[@]}" "${timed[@]}" --broker-pid "$broker_pid" \
        --batch-size 200 --connections 4 --label "MPUB 200 ingest, 4 conn ($tag)" \
        --target "pub_rate>=1500000" --target "cpu_us_per_pub<=0.75"
    stop_broker

    start_broker "$shards"
    bench "s$shards-2-fill" pub "${common[@]}" --duration 120s --count "$BACKLOG" \
        --batch-size 200 --connections 4 --label "fill a $BACKLOG backlog ($tag)"
    bench "s$shards-3-drain" sub "${common[@]}" --duration 120s --count "$BACKLOG" \
        --broker-pid "$broker_pid" --connections 4 \
        --label "drain the backlog, 1 ch, 4 conn ($tag)" \
        --target "sub_rate>=1500000" --target "cpu_us_per_sub<=0.6"
    stop_broker

    start_broker "$shards"
    bench "s$shards-4-pubsub" pubsub "${common[@]}" "${timed[@]}" --broker-pid "$broker_pid" \
        --batch-size 200 --connections 4 --label "pub + sub, 1 ch ($tag)" \
        --target "sub_rate>=1200000"
    stop_broker

    start_broker "$shards" --mem-queue-size 0
    bench "s$shards-5-pubsub-memq0" pubsub "${common[@]}" "${timed[@]}" --broker-pid "$broker_pid" \
        --batch-size 200 --connections 4 --label "pub + sub, --mem-queue-size 0 ($tag)" \
        --target "sub_rate>=500000"
    stop_broker

    # One round trip per message: what it costs is wake-ups, and a wake-up across vCPUs costs
    # far more than one on the same vCPU (docs/benchmarks.md, "One PUB per round trip"). So
    # this row runs the blocking client (one thread, blocked in read until each OK) on the CPU
    # of the shard that owns the topic: connection steering then gives it that shard, and the
    # whole round trip stays on one core. Its raw ceiling below is pinned the same way.
    start_broker "$shards"
    pub1_cpu=$(owner_cpu bench)
    [[ -n $pub1_cpu ]] || { echo "run-matrix: no nsq_topic_shard for bench" >&2; exit 1; }
    bench "s$shards-6-pub1" pub --nsqd-tcp-address "$addr" --size 200 "${timed[@]}" \
        --broker-pid "$broker_pid" --batch-size 1 --connections 1 --blocking --cpus "$pub1_cpu" \
        --label "PUB one at a time, 1 conn, blocking client on the owner's CPU ($tag)" \
        --target "pub_rate>=60000"
    stop_broker

    # The same PUBs, one message each, with up to 32 unacknowledged on the connection (what
    # go-nsq's PublishAsync and nsqjs do): one round trip no longer paces every message.
    start_broker "$shards"
    bench "s$shards-6b-pub1-async" pub "${common[@]}" "${timed[@]}" --broker-pid "$broker_pid" \
        --batch-size 1 --connections 1 --pipeline 32 \
        --label "PUB one at a time, 1 conn, 32 unacked ($tag)" --target "pub_rate>=60000"
    stop_broker

    start_broker "$shards"
    bench "s$shards-7-e2e-100k" pubsub "${common[@]}" "${timed[@]}" --broker-pid "$broker_pid" \
        --rate 100000 --batch-size "$E2E_BATCH" --connections 2 --sub-connections 2 \
        --label "e2e at a fixed 100k msg/s, batch $E2E_BATCH ($tag)" --target "e2e_p99_us<=1000"
    stop_broker

    bench "s$shards-8-raw-pub" raw --workload pub --size 200 "${timed[@]}" \
        "${pin[@]}" "${sink_pin[@]}" --batch-size 200 --connections 4 \
        --label "raw ceiling: MPUB 200, 4 conn (as $tag)"
    bench "s$shards-9-raw-sub" raw --workload sub --size 200 "${timed[@]}" \
        "${pin[@]}" "${sink_pin[@]}" --connections 4 \
        --label "raw ceiling: sub, 4 conn (as $tag)"
    bench "s$shards-9b-raw-pubone" raw --workload pub --size 200 "${timed[@]}" \
        --cpus "$pub1_cpu" --sink-cpu "$pub1_cpu" --batch-size 1 --connections 1 --blocking \
        --label "raw ceiling: PUB one at a time, 1 conn, blocking, one CPU (as $tag)"
done
done

# Keep each row's best repetition: the lowest e2e p99 for the fixed-rate row, else the highest
# rate (consumed if the row consumes). On a shared machine noise only ever subtracts.
if [[ $REPORT_ONLY != 1 ]]; then
    python3 - "$reps_root" "$OUT" <<'PY'
import glob, json, os, shutil, sys
root, out = sys.argv[1], sys.argv[2]
best = {}
for path in glob.glob(os.path.join(root, "*", "*.json")):
    name = os.path.basename(path)
    d = json.load(open(path))
    if "e2e-100k" in name:
        score = -(d.get("e2e_latency_us") or {}).get("p99", float("inf"))
    else:
        side = "consumed" if d["consumed"]["messages"] > 0 else "published"
        score = d[side]["msgs_per_s"]
    if name not in best or score > best[name][0]:
        best[name] = (score, path)
for name, (_, path) in sorted(best.items()):
    shutil.copy(path, os.path.join(out, name))
PY
fi
rm -rf "$reps_root"

files=()
for shards in $SHARDS; do files+=("$OUT"/s"$shards"-*.json); done
"$BENCH_BIN" report "${files[@]}" --out "$OUT" \
    --title "shard-bench matrix (200-byte messages, $(nproc) CPUs)" >/dev/null

# Broker throughput as a share of raw with the same connections.
{
    echo
    echo "| shards | ingest / raw-pub | drain / raw-sub | pub+sub / raw-sub | PUB x1 / raw PUB x1 |"
    echo "| --- | ---: | ---: | ---: | ---: |"
    for shards in $SHARDS; do
        rate() { sed -n 's/.*"msgs_per_s": \([0-9.]*\).*/\1/p' "$1" | sed -n "${2}p"; }
        f() { ls "$OUT"/s"$shards"-*-"$1".json; }
        share() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.0f%%", 100 * a / b; else print "n/a" }'; }
        # msgs_per_s appears twice per file: published (1st), consumed (2nd).
        echo "| $shards | $(share "$(rate "$(f ingest)" 1)" "$(rate "$(f raw-pub)" 1)") \
| $(share "$(rate "$(f drain)" 2)" "$(rate "$(f raw-sub)" 2)") \
| $(share "$(rate "$(f pubsub)" 2)" "$(rate "$(f raw-sub)" 2)") \
| $(share "$(rate "$(f pub1)" 1)" "$(rate "$(f raw-pubone)" 1)") |"
    done
} >>"$OUT/report.md"

cat "$OUT/report.md"

# docs/benchmarks.md's standard matrix: the table and charts between the matrix markers.
readme=$root/docs/benchmarks.md
if [[ ${WRITE_DOC:-${WRITE_README:-1}} == 1 && $OUT == "$here/results" ]] && grep -q '<!-- matrix:begin' "$readme"; then
    body=$(sed -e '1,/^$/d' -e 's|](\([a-z]*\.svg\))|](../shard-bench/results/\1)|' "$OUT/report.md")
    awk -v body="$body" '
        /<!-- matrix:begin/ { print; print body; skip = 1; next }
        /<!-- matrix:end/ { skip = 0 }
        !skip { print }
    ' "$readme" >"$readme.tmp" && mv "$readme.tmp" "$readme"
    echo "run-matrix: docs/benchmarks.md matrix table updated" >&2
fi
