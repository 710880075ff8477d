#!/bin/bash
# What one batch.lua call costs Redis per member, by the number of members (issue 26,
# step 3): redis-benchmark runs batch.lua (as src/store/redis/scripts.rs builds it) with B
# independent GCRA charges on random keys over 10,000 (one rule: 1000 per minute, burst
# 1000), 16 clients, one command per request; then INFO commandstats's usec_per_call and
# redis-server's CPU (used_cpu_user + used_cpu_sys), each divided by B. Three rounds each.
# Usage, from the repository root:
#   benches/redis_cost/batch.sh [LUA_DIR] ["1 4 16"]   (redis-server, redis-benchmark, bc; port 6397)
set -euo pipefail
L=${1:-src/store/lua}; BS=${2:-"1 4 16"}; N=${N:-100000}
PORT=6397
redis-server --port $PORT --save '' --appendonly no --daemonize yes --logfile /tmp/batch-bench-redis.log >/dev/null
trap 'redis-cli -p $PORT shutdown nosave >/dev/null 2>&1 || true' EXIT
until redis-cli -p $PORT ping >/dev/null 2>&1; do sleep 0.05; done
body="$(cat "$L/prelude.lua" "$L/algorithm/gcra.lua" "$L/algorithm/window.lua" "$L/algorithm/sliding_window.lua" \
    "$L/algorithm/fixed_window.lua" "$L/batch.lua")"
sha=$(redis-cli -p $PORT script load "$body")
cpu() { redis-cli -p $PORT info cpu | awk -F: '/^used_cpu_(user|sys):/{s+=$2} END{printf "%.6f", s}'; }
printf "%-6s %26s\n" members "exec / CPU µs per member (3 rounds)"
for B in $BS; do
  args=(EVALSHA "$sha" "$B")
  for _ in $(seq "$B"); do args+=("k:__rand_int__"); done
  args+=("" 1 gcra 1000 60000000 1000)
  for i in $(seq "$B"); do args+=(e 1 "$i" 1 0 1); done
  res=""
  for _ in 1 2 3; do
    redis-cli -p $PORT flushall >/dev/null; redis-cli -p $PORT config resetstat >/dev/null
    c0=$(cpu)
    redis-benchmark -p $PORT -n $((N / B)) -c 16 -r 10000 -q "${args[@]}" >/dev/null
    c1=$(cpu)
    st=$(redis-cli -p $PORT info commandstats | tr -d '\r' | grep '^cmdstat_evalsha:')
    calls=$(echo "$st" | sed 's/^cmdstat_evalsha:calls=\([0-9]*\),.*/\1/')
    us=$(echo "$st" | sed 's/.*usec_per_call=\([0-9.]*\).*/\1/')
    res="$res $(echo "scale=2; $us / $B" | bc)/$(echo "scale=2; ($c1 - $c0) * 1000000 / $calls / $B" | bc)"
  done
  printf "%-6s %s\n" "$B" "$res"
done
