#!/usr/bin/env bash
# The table "against nsqd" of docs/benchmarks.md in one sitting: every row with NSQ's own
# bench tools (bench_writer, bench_reader) or wrk, ours (--shards 2) against nsqd with its
# defaults, alternating, a fresh broker and data directory per run; the ingest and pub + sub
# rows also against `shard-bench sink` (what a server doing nothing, or only keeping what it
# is sent, makes with these clients).
#
#   TOOLS=DIR NSQD=PATH tests/perf/nsqd_table.sh [BROKER [BASE]]
#
# TOOLS holds bench_writer and bench_reader and NSQD is nsqd, all built from NSQ's source
# outside the repository (docs/benchmarks.md, "Against nsqd"). BROKER defaults to the release
# build; BASE, if given, is a second build of ours run alongside (before / after a change).
# RUNS (default 3) alternating runs per row, 5 s each; the --durable row takes 5. Needs wrk for
# the HTTP row (Debian package `wrk`). Prints each run and each row's medians and ratios.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cd "$root"
: "${TOOLS:?TOOLS=dir with bench_writer and bench_reader}" "${NSQD:?NSQD=path to nsqd}"
broker=${1:-target/release/broker}
base=${2:-}
runs=${RUNS:-3}
python=${PYTHON:-tests/.venv/bin/python}
bench=${BENCH_BIN:-target/release/shard-bench}
ours="--shards 2 --tcp-address={tcp} --http-address={http} --data-path={data}"
theirs="--tcp-address={tcp} --http-address={http} --data-path={data}"

# row NAME ROWS RUNS OURS_FLAGS NSQD_FLAGS [SINK_FLAGS...]: each SINK_FLAGS adds a
# `shard-bench sink` with those flags (sink, sink2, ...)
row() {
    local name=$1 rows=$2 n=$3 our_flags=$4 nsqd_flags=$5
    shift 5
    local brokers=(--broker "ours=$broker $ours $our_flags" --broker "nsqd=$NSQD $theirs $nsqd_flags")
    local i=0 sink_flags sink_name
    for sink_flags in "$@"; do
        i=$((i + 1))
        sink_name=sink; ((i > 1)) && sink_name=sink$i
        brokers+=(--broker "$sink_name=$bench sink --tcp-address {tcp} $sink_flags")
    done
    [[ -n $base ]] && brokers+=(--broker "base=$base $ours $our_flags")
    echo "== ROW $name"
    "$python" tests/perf/bench_tools_vs.py --tools "$TOOLS" "${brokers[@]}" --rows "$rows" \
        --runs "$n" --runfor 5s
}

echo "### $(date -u '+%F %T UTC') $(lscpu | sed -n 's/^Model name: *//p'), load $(cut -d' ' -f1-3 /proc/loadavg)"
# The sinks: doing nothing; keeping what it is sent on disk; delivering only what was
# published; and that, answering each publish after its write (--mem-queue-size 0's ceiling).
row "MPUB ingest (bench_writer)" ingest "$runs" "" "" "" "--data-path {data}"
row "pub + sub (bench_writer + bench_reader)" pubsub "$runs" "" "" "--relay"
row "pub + sub, --mem-queue-size 0 on both" pubsub "$runs" "--mem-queue-size 0" \
    "--mem-queue-size 0" "--relay --data-path {data} --ack-after-write"
row "--durable against nsqd --mem-queue-size 0 --sync-every 1" ingest 5 "--durable" \
    "--mem-queue-size 0 --sync-every 1"
row "one PUB per round trip (bench_writer --batch-size 1)" pub1 "$runs" "" ""

echo "== ROW drain a 2,000,000 backlog (shard-bench compare)"
drain=(--broker "ours=$broker $ours" --broker "nsqd=$NSQD $theirs")
[[ -n $base ]] && drain+=(--broker "base=$base $ours")
"$bench" compare --runs "$runs" --workload sub --prefill 2000000 --duration 5s --warmup 1s \
    --quiet "${drain[@]}" 2>&1 | sed -n '/^medians/,$p'

echo "== ROW HTTP /pub (wrk -t2 -c16 -d5s --latency -s tests/perf/pub.lua)"
command -v wrk >/dev/null || { echo "nsqd_table: wrk not found (apt-get install wrk)" >&2; exit 1; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
http_run() {  # NAME COMMAND...: one wrk run against a fresh broker
    local name=$1; shift
    local data port tcp pid
    data=$(mktemp -d /tmp/nsqd-table.XXXXXX); port=$(free_port); tcp=$(free_port)
    "$@" --tcp-address="127.0.0.1:$tcp" --http-address="127.0.0.1:$port" --data-path="$data" \
        >"$data/log" 2>&1 &
    pid=$!
    for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/ping" >/dev/null && break; sleep 0.05; done
    local t0 t1 out
    t0=$(awk '{print $14 + $15}' "/proc/$pid/stat")
    out=$(wrk -t2 -c16 -d5s --latency -s "$here/pub.lua" "http://127.0.0.1:$port/")
    t1=$(awk '{print $14 + $15}' "/proc/$pid/stat")
    local rps p99 rss
    rps=$(sed -n 's/^Requests\/sec: *//p' <<<"$out")
    p99=$(awk '$1 == "99%" {print $2}' <<<"$out")
    rss=$(awk '/^VmHWM:/ {printf "%.2f", $2 / 1024}' "/proc/$pid/status")
    kill "$pid"; wait "$pid" 2>/dev/null || true; rm -rf "$data"
    printf 'http %s: req/s %s, p99 %s, cpu_us %s, rss %s\n' "$name" "$rps" "$p99" \
        "$(python3 -c "print(f'{($t1 - $t0) / $(getconf CLK_TCK) * 1e6 / ($rps * 5):.2f}')")" "$rss"
}
for i in $(seq "$runs"); do
    http_run ours $broker --shards 2
    http_run nsqd "$NSQD"
    [[ -n $base ]] && http_run base $base --shards 2
done
echo "### end $(date -u '+%F %T UTC'), load $(cut -d' ' -f1-3 /proc/loadavg)"
