#!/usr/bin/env bash
# HTTP /pub under load: starts a release broker on 127.0.0.1 (ephemeral ports, temporary data
# directory, --shards ${SHARDS:-2}), runs `wrk -t2 -c16 -d${DURATION:-10s} --latency -s pub.lua`
# against it ${ROUNDS:-3} times, prints wrk's summary of each round and the broker's CPU time
# per request (user + system, from /proc), how wrk's connections were split between the
# shards and how many were handed from one shard to the other, and stops the broker. Needs wrk (Debian package
# `wrk`). Extra arguments go to the broker. To compare two builds, alternate them:
#   for i in 1 2 3 4; do for b in OLD NEW; do BROKER_BIN=$b ROUNDS=1 DURATION=5s bash $0; done; done
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
broker=${BROKER_BIN:-$root/target/release/broker}
command -v wrk >/dev/null || { echo "wrk_pub: wrk not found (apt-get install wrk)" >&2; exit 1; }
[[ -x $broker ]] || { echo "wrk_pub: $broker not found (cargo build --release -p broker)" >&2; exit 1; }
data=$(mktemp -d /tmp/wrk-pub.XXXXXX)
"$broker" --tcp-address 127.0.0.1:0 --http-address 127.0.0.1:0 --data-path "$data" \
    --shards "${SHARDS:-2}" --log-level info "$@" 2>"$data/broker.log" &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$data"' EXIT
port=
for _ in $(seq 100); do
    port=$(sed -n 's/.*HTTP: listening http=127.0.0.1:\([0-9]*\).*/\1/p' "$data/broker.log" | head -1)
    [[ -n $port ]] && break
    sleep 0.05
done
[[ -n $port ]] || { echo "wrk_pub: the broker did not start" >&2; cat "$data/broker.log" >&2; exit 1; }
# Connections handed to another shard so far (they follow their client's CPU), all shards.
handovers() {
    curl -s "http://127.0.0.1:$port/metrics" |
        awk '/^nsq_shard_http_handovers_total/ { n += $2 } END { print n + 0 }'
}
for round in $(seq "${ROUNDS:-3}"); do
    echo "--- round $round: wrk -t2 -c16 -d${DURATION:-10s} --latency -s pub.lua http://127.0.0.1:$port/"
    ticks_before=$(awk '{print $14 + $15}' "/proc/$pid/stat")
    moves_before=$(handovers)
    wrk -t2 -c16 -d"${DURATION:-10s}" --latency -s "$here/pub.lua" "http://127.0.0.1:$port/" \
        >"$data/wrk.out" &
    wrk_pid=$!
    # Where the connections landed: steering gives each the shard of the CPU its wrk thread
    # connected from, and wrk's two threads sometimes start on one CPU (the rate then drops).
    sleep 1
    split=$(curl -s "http://127.0.0.1:$port/metrics" |
        sed -n 's/^nsq_shard_http_connections{shard="\([0-9]*\)"} \([0-9]*\)$/shard \1: \2/p' |
        paste -sd, -)
    wait "$wrk_pid"
    out=$(cat "$data/wrk.out")
    ticks_after=$(awk '{print $14 + $15}' "/proc/$pid/stat")
    moves=$(($(handovers) - moves_before))
    echo "$out" | grep -E "Latency  |50%|90%|99%|Requests/sec|requests in|Non-2xx"
    echo "HTTP connections (wrk's 16 and this script's one): $split; handed over during the round: $moves"
    requests=$(echo "$out" | awk '/requests in/ {print $1}')
    awk -v t=$((ticks_after - ticks_before)) -v n="$requests" -v hz="$(getconf CLK_TCK)" \
        'BEGIN { if (n > 0) printf "broker CPU: %.1f us per request\n", t / hz * 1e6 / n }'
done
