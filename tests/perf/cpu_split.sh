#!/usr/bin/env bash
# Where the host's CPU goes during NSQ's `bench_writer` (MPUB ingest, 200-byte messages): for
# 3 s in the middle of a 6 s run, the CPU of the server (all its threads, io_uring workers
# included), of `bench_writer` and of softirq (loopback TCP), each as ns a published message,
# and the ticks the host and its CPU 0 spent idle or in iowait.
#
#   TOOLS=DIR tests/perf/cpu_split.sh 'SERVER COMMAND' [TOPIC] [RUNS]
#
# SERVER COMMAND takes {tcp}, {http} and {data} like bench_tools_vs.py's --broker, e.g.
# 'target/release/broker --shards 2 --tcp-address={tcp} --http-address={http} --data-path={data}'
# or 'target/release/shard-bench sink --tcp-address {tcp}'. TOPIC defaults to `pa`
# (`te#ephemeral` keeps nothing on disk); RUNS (default 1) fresh servers and data directories.
# TOOLS holds bench_writer, built from NSQ's source outside the repository (docs/benchmarks.md).
set -euo pipefail
: "${TOOLS:?TOOLS=dir with bench_writer}"
server=${1:?server command}
topic=${2:-pa}
runs=${3:-1}
tck=$(getconf CLK_TCK)

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# The user + system ticks of every thread of process $1.
ticks() {
    local sum=0 t
    local -a f
    for t in /proc/"$1"/task/*/stat; do
        read -ra f < <(sed 's/.*) //' "$t" 2>/dev/null) || continue
        sum=$((sum + f[11] + f[12]))
    done
    echo "$sum"
}

for ((run = 1; run <= runs; run++)); do
    data=$(mktemp -d)
    tcp=127.0.0.1:$(free_port)
    http=127.0.0.1:$(free_port)
    cmd=${server//\{tcp\}/$tcp}
    cmd=${cmd//\{http\}/$http}
    cmd=${cmd//\{data\}/$data}
    $cmd >"$data.log" 2>&1 &
    pid=$!
    for _ in $(seq 50); do
        (exec 3<>"/dev/tcp/${tcp%:*}/${tcp#*:}") 2>/dev/null && break
        sleep 0.1
    done
    "$TOOLS/bench_writer" --nsqd-tcp-address="$tcp" --runfor=6s --size=200 --batch-size=200 \
        --topic="$topic" >"$data.bw" 2>&1 &
    bw=$!
    sleep 1.5
    s1=$(ticks "$pid"); b1=$(ticks "$bw")
    read -ra h1 < <(grep '^cpu ' /proc/stat); read -ra z1 < <(grep '^cpu0 ' /proc/stat)
    sleep 3
    s2=$(ticks "$pid"); b2=$(ticks "$bw")
    read -ra h2 < <(grep '^cpu ' /proc/stat); read -ra z2 < <(grep '^cpu0 ' /proc/stat)
    wait "$bw"
    rate=$(grep -o '[0-9.]*ops/s' "$data.bw" | cut -d. -f1)
    kill "$pid"
    wait "$pid" 2>/dev/null || true
    rm -rf "$data" "$data.log" "$data.bw"
    if [ -z "$rate" ] || [ "$rate" -eq 0 ]; then
        echo "run $run: bench_writer reported no rate" >&2
        exit 1
    fi
    msgs=$((rate * 3))
    ns() { echo $(($1 * 1000000000 / tck / msgs)); }
    softirq=$((h2[7] - h1[7]))
    idle=$((h2[4] - h1[4] + h2[5] - h1[5]))
    idle0=$((z2[4] - z1[4] + z2[5] - z1[5]))
    echo "run $run: $rate msg/s; ns a message: server $(ns $((s2 - s1))), bench_writer" \
        "$(ns $((b2 - b1))), softirq $(ns "$softirq"); idle + iowait ticks of" \
        "$((3 * tck * $(nproc))): host $idle, CPU 0 $idle0"
done
