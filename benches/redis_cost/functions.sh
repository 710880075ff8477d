#!/bin/bash
# Usage (from the repository root): benches/redis_cost/functions.sh src/store/lua [N] [ROUNDS]; port 6398.
# Redis Functions (FUNCTION LOAD once, FCALL) against EVALSHA for the same GCRA and sliding
# window code: the prelude's and the algorithms' closures made once per library load.
set -euo pipefail
LUA=${1:?lua dir}; N=${2:-200000}; ROUNDS=${3:-3}; PORT=6398
redis-server --port $PORT --save '' --appendonly no --daemonize yes --logfile /tmp/functions-redis.log >/dev/null
trap 'redis-cli -p $PORT shutdown nosave >/dev/null 2>&1 || true' EXIT
sleep 0.3
prelude=$(sed 's/^local function single(run, kind)$/local function single(run, kind, KEYS, ARGV)/' "$LUA/prelude.lua")
lib="#!lua name=tgbench
$prelude
$(cat "$LUA/algorithm/gcra.lua")
$(cat "$LUA/algorithm/window.lua")
$(cat "$LUA/algorithm/sliding_window.lua")
redis.register_function('tg_gcra', function(keys, args) return single(gcra, 'g', keys, args) end)
redis.register_function('tg_sliding', function(keys, args) return single(sliding, 'w', keys, args) end)
redis.register_function('tg_return1', function(keys, args) return 1 end)"
echo "$lib" | redis-cli -p $PORT -x FUNCTION LOAD REPLACE
cpu() { redis-cli -p $PORT info cpu | awk -F: '/^used_cpu_(user|sys):/{s+=$2} END{printf "%.6f", s}'; }
for f in tg_return1 tg_gcra tg_sliding; do
  per=(); cpus=()
  for r in $(seq $ROUNDS); do
    redis-cli -p $PORT flushall >/dev/null; redis-cli -p $PORT config resetstat >/dev/null
    c0=$(cpu)
    redis-benchmark -p $PORT -n $N -c 16 -r 10000 -q FCALL $f 1 "k:__rand_int__" 100 60000000 100 0 1 >/dev/null
    c1=$(cpu)
    stats=$(redis-cli -p $PORT info commandstats | tr -d '\r' | grep '^cmdstat_fcall:')
    calls=$(echo "$stats" | sed "s/^cmdstat_fcall:calls=\([0-9]*\),.*/\1/")
    usec=$(echo "$stats" | sed 's/.*usec_per_call=\([0-9.]*\).*/\1/')
    per+=("$usec"); cpus+=("$(echo "($c1 - $c0) * 1000000 / $calls" | bc -l)")
  done
  med() { printf "%s\n" "$@" | sort -g | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}'; }
  printf "%-22s %12.2f %14.2f   (rounds: %s)\n" "FCALL $f" "$(med "${per[@]}")" "$(med "${cpus[@]}")" "${per[*]}"
done
redis-cli -p $PORT fcall tg_gcra 1 check 100 60000000 100 0 1 1795670700000000
