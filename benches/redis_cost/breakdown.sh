#!/bin/bash
# Where the execution time of one Tollgate script call goes (issue 26, step 1): each variant
# loaded with SCRIPT LOAD and run by redis-benchmark (EVALSHA, 16 clients, random keys over
# 10,000), then INFO commandstats's usec_per_call for evalsha and redis-server's CPU
# (used_cpu_user + used_cpu_sys) per call. Usage, from the repository root:
# benches/redis_cost/breakdown.sh src/store/lua [N] [ROUNDS] (redis-server, redis-benchmark, bc; port 6399).
set -euo pipefail
LUA=${1:?lua dir}; N=${2:-200000}; ROUNDS=${3:-3}
PORT=6399
redis-server --port $PORT --save '' --appendonly no --daemonize yes --logfile /tmp/breakdown-redis.log >/dev/null
trap 'redis-cli -p $PORT shutdown nosave >/dev/null 2>&1 || true' EXIT
sleep 0.3
cat_lua() { for f in "$@"; do cat "$LUA/$f"; echo; done; }
declare -A BODY
BODY[return1]='return 1'
BODY[get]="redis.call('GET', KEYS[1]) return 1"
BODY[time]="local t = redis.call('TIME') return 1"
BODY[set_pxat]="redis.call('SET', KEYS[1], '1795670700000000:7', 'PXAT', '9999999999999') return 1"
BODY[hmget]="redis.call('HMGET', KEYS[1], 's', 'c', 'p') return 1"
BODY[hset_pexpireat]="redis.call('HSET', KEYS[1], 's', '1795670700000000', 'c', '7', 'p', '3') redis.call('PEXPIREAT', KEYS[1], '9999999999999') return 1"
BODY[format3]="local a = string.format('%.0f', 1795670700000000) local b = string.format('%.0f', 1795670700000001) local c = string.format('%.0f', 1795670700000002) return 1"
BODY[prelude]="$(cat_lua prelude.lua)
return 1"
BODY[prelude_gcra_defs]="$(cat_lua prelude.lua algorithm/gcra.lua)
return 1"
BODY[prelude_window_defs]="$(cat_lua prelude.lua algorithm/window.lua algorithm/sliding_window.lua)
return 1"
BODY[gcra]="$(cat_lua prelude.lua algorithm/gcra.lua gcra.lua)"
BODY[sliding_window]="$(cat_lua prelude.lua algorithm/window.lua algorithm/sliding_window.lua sliding_window.lua)"
BODY[fixed_window]="$(cat_lua prelude.lua algorithm/window.lua algorithm/fixed_window.lua fixed_window.lua)"
ORDER=${ORDER:-"return1 get time set_pxat hmget hset_pexpireat format3 prelude prelude_gcra_defs prelude_window_defs gcra sliding_window fixed_window"}
cpu() { redis-cli -p $PORT info cpu | awk -F: '/^used_cpu_(user|sys):/{s+=$2} END{printf "%.6f", s}'; }
printf "%-22s %12s %14s\n" variant "us/call" "cpu_us/call"
for v in $ORDER; do
  sha=$(redis-cli -p $PORT script load "${BODY[$v]}")
  per=(); cpus=()
  for r in $(seq $ROUNDS); do
    redis-cli -p $PORT flushall >/dev/null; redis-cli -p $PORT config resetstat >/dev/null
    c0=$(cpu)
    redis-benchmark -p $PORT -n $N -c 16 -r 10000 -q EVALSHA "$sha" 1 "k:__rand_int__" 100 60000000 100 0 1 >/dev/null
    c1=$(cpu)
    stats=$(redis-cli -p $PORT info commandstats | tr -d '\r' | grep '^cmdstat_evalsha:')
    calls=$(echo "$stats" | sed "s/^cmdstat_evalsha:calls=\([0-9]*\),.*/\1/")
    usec=$(echo "$stats" | sed 's/.*usec_per_call=\([0-9.]*\).*/\1/')
    per+=("$usec"); cpus+=("$(echo "($c1 - $c0) * 1000000 / $calls" | bc -l)")
  done
  med() { printf "%s\n" "$@" | sort -g | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}'; }
  printf "%-22s %12.2f %14.2f   (rounds: %s)\n" "$v" "$(med "${per[@]}")" "$(med "${cpus[@]}")" "${per[*]}"
done
