#!/usr/bin/env bash
# The HTTP ceiling of this machine against the broker: ${ROUNDS:-3} alternating rounds of
# `wrk -t2 -c16 -d10s --latency -s pub.lua` against tests/perf/http_sink.c (a do-nothing
# keep-alive server, one pinned epoll thread per CPU) and against a release broker with
# --shards 2 (tests/perf/wrk_pub.sh), each with its CPU time per request. Needs wrk and gcc.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../.."
command -v wrk >/dev/null || { echo "wrk_ceiling: wrk not found (apt-get install wrk)" >&2; exit 1; }
sink=$(mktemp /tmp/http_sink.XXXXXX)
gcc -O2 -pthread tests/perf/http_sink.c -o "$sink"
port=${SINK_PORT:-28900}
for i in $(seq "${ROUNDS:-3}"); do
  "$sink" "$port" >/dev/null & sp=$!; sleep 0.3
  t0=$(cat /proc/$sp/task/*/stat | awk '{s+=$14+$15} END {print s}')
  out=$(wrk -t2 -c16 -d10s --latency -s tests/perf/pub.lua http://127.0.0.1:$port/)
  t1=$(cat /proc/$sp/task/*/stat | awk '{s+=$14+$15} END {print s}')
  kill $sp; wait $sp 2>/dev/null || true
  n=$(echo "$out" | awk '/requests in/ {print $1}')
  echo "sink:   $(echo "$out" | awk '/Requests\/sec/ {print $2}') req/s, p99 $(echo "$out" | awk '$1=="99%" {print $2}'), $(awk -v t=$((t1 - t0)) -v n="$n" -v hz="$(getconf CLK_TCK)" 'BEGIN { printf "%.1f", t / hz * 1e6 / n }') us CPU/req"
  ROUNDS=1 DURATION=10s bash tests/perf/wrk_pub.sh 2>&1 | awk '/Requests\/sec/ {r=$2} $1=="99%" {p=$2} /broker CPU/ {c=$3} END {print "broker: " r " req/s, p99 " p ", " c " us CPU/req"}'
done
rm -f "$sink"
