#!/usr/bin/env bash
# The table of docs/performance.md, in one run on this machine: the null-work RLS
# (examples/null_rls.rs), Tollgate on its memory store and on Redis, and raw
# `redis-benchmark` EVALSHA of the same script, at 1, 4 and 16 descriptors per request and
# 10k and 1M keys; then Redis connection counts, latency at half load, an over-limit flood
# on one key, and bytes per key. Every server is started here on free loopback ports and
# stopped at the end. A Tollgate run counts only if no decision came from the failure
# policy: the script fails if `tollgate_decisions_total{result=~"failure_.*"}` moved
# during any run.
#
# CPU per request: utime + stime of the server's process (/proc/<pid>/stat) over each run,
# divided by the requests it answered (loadgen's `answered`, warm-up included); Redis rows
# add redis-server's own. The ratio to the null server's of the same row carries over
# between machines better than requests/s.
#
#   benches/table.sh                      # or: make bench-table
#   SECONDS_PER_RUN=20 CONCURRENCY=256 benches/table.sh
#   # Skewed keys (issue 15 §4): Zipf 1.1 over 100,000 keys, the main table only, with
#   # extra Tollgate-on-Redis servers given as LABEL=FLAGS (flags split on commas):
#   ZIPF=1.1 KEY_COUNTS=100000 DESCRIPTORS="1 4" MAIN_ONLY=1 \
#     REDIS_VARIANTS="redis+leases=--lease-hot-keys redis-no-coalesce=--no-coalesce" benches/table.sh
#   # Approximate mode (issue 17): every row on the sliding window, plus a server whose
#   # bench domain is `consistency: approximate` on the same Redis:
#   ALGORITHM=sliding_window APPROX=1 ZIPF=1.1 KEY_COUNTS=100000 DESCRIPTORS="1 4" MAIN_ONLY=1 benches/table.sh
#
# Needs: cargo, redis-server and redis-benchmark (>= 7), curl, python3 (free ports).
set -euo pipefail

SECONDS_PER_RUN=${SECONDS_PER_RUN:-6}
WARMUP=${WARMUP:-1}
CONCURRENCY=${CONCURRENCY:-128}
CONNECTIONS=${CONNECTIONS:-4}
KEY_COUNTS=${KEY_COUNTS:-"10000 1000000"}
DESCRIPTORS=${DESCRIPTORS:-"1 4 16"}
# Capacity, not deadlines: with 128 requests of 16 descriptors in flight, Redis queues past
# Envoy's 20 ms and the failure policy would answer (and void the run).
STORE_TIMEOUT_MS=${STORE_TIMEOUT_MS:-1000}
REPEAT=${REPEAT:-3}
# Zipf exponent of the key ranks (loadgen --zipf); empty: uniform keys.
ZIPF=${ZIPF:-}
# More Tollgate-on-Redis servers taking turns in the main table: "LABEL=FLAG,FLAG ...".
REDIS_VARIANTS=${REDIS_VARIANTS:-}
# 1: print the main table only (skip connections, half load, flood, bytes per key).
MAIN_ONLY=${MAIN_ONLY:-0}
# The bench domain's algorithm (every server of the main table).
ALGORITHM=${ALGORITHM:-gcra}
# 1: add a server `approximate` (the bench domain with `consistency: approximate`, Redis
# store); needs ALGORITHM=sliding_window or fixed_window.
APPROX=${APPROX:-0}

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
cargo build --release --quiet --bin tollgate --example loadgen --example null_rls
bin=${CARGO_TARGET_DIR:-$root/target}/release
work=$(mktemp -d)
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
# `field NAME` reads NAME=value from a loadgen line on stdin.
field() { sed -n "s/.*\b$1=\([^ ]*\).*/\1/p"; }
wait_http() { until curl -sf "$1" >/dev/null; do sleep 0.05; done; }

mkdir -p "$work/config"
cat >"$work/config/bench.yaml" <<EOF
# Limits far above the load: every request is a real store round trip, none is denied.
domain: bench
descriptors:
  - key: user
    rate_limit: { unit: second, requests_per_unit: 1000000, algorithm: $ALGORITHM }
EOF
if [ "$APPROX" = 1 ]; then
    mkdir -p "$work/approx-config"
    { echo "consistency: approximate"; cat "$work/config/bench.yaml"; } >"$work/approx-config/bench.yaml"
fi
cat >"$work/config/flood.yaml" <<'EOF'
# One abusive key: 10 per minute, then denied until the window's debt clears.
domain: flood
descriptors:
  - key: user
    rate_limit: { unit: minute, requests_per_unit: 10 }
EOF
cat >"$work/config/persist.yaml" <<'EOF'
# Buckets that stay live for a day after one hit: for bytes per key.
domain: persist
descriptors:
  - key: user
    rate_limit: { unit: day, requests_per_unit: 1 }
EOF

redis_port=$(free_port)
redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no \
    --dir "$work" --logfile "$work/redis.log" &
pids+=($!)
until redis-cli -p "$redis_port" PING >/dev/null 2>&1; do sleep 0.05; done
rcli() { redis-cli -p "$redis_port" "$@"; }
# `rstat NAME` reads one field of INFO (all sections).
rstat() { rcli INFO all | tr -d '\r' | sed -n "s/^$1:\(.*\)/\1/p"; }
evalsha_calls() { rcli INFO commandstats | tr -d '\r' | sed -n 's/^cmdstat_evalsha:calls=\([0-9]*\),.*/\1/p'; }

null_port=$(free_port)
"$bin/examples/null_rls" --addr "127.0.0.1:$null_port" 2>"$work/null.log" &
pids+=($!)
null_pid=$!
redis_server_pid=$(rcli INFO server | tr -d '\r' | sed -n 's/^process_id://p')
clock_ticks=$(getconf CLK_TCK)
# `cpu_ticks PID`: utime + stime of a process so far, in clock ticks (fields 14 and 15 of
# /proc/PID/stat, counted after the command name's closing parenthesis).
cpu_ticks() { sed 's/.*) //' "/proc/$1/stat" | awk '{print $12 + $13}'; }

# `start_tollgate NAME STORE-ARGS...`: sets NAME_grpc and NAME_admin.
start_tollgate() {
    local name=$1 grpc admin
    shift
    grpc=$(free_port)
    admin=$(free_port)
    "$bin/tollgate" serve --config "${CONFIG_DIR:-$work/config}" --no-watch --drain-seconds 0 \
        --grpc-addr "127.0.0.1:$grpc" --admin-addr "127.0.0.1:$admin" --store-timeout-ms "$STORE_TIMEOUT_MS" "$@" \
        2>"$work/$name.log" &
    pids+=($!)
    eval "${name}_grpc=$grpc ${name}_admin=$admin ${name}_pid=$!"
    wait_http "http://127.0.0.1:$admin/readyz"
}
stop_tollgate() {
    local pid_var="${1}_pid"
    kill "${!pid_var}"
    wait "${!pid_var}" 2>/dev/null || true
}
failures() {
    curl -s "http://127.0.0.1:$1/metrics" |
        awk '/^tollgate_decisions_total/ && /result="failure_(open|closed)"/ {s += $NF} END {print s + 0}'
}
served() {
    curl -s "http://127.0.0.1:$1/metrics" |
        awk '/^tollgate_request_duration_seconds_count/ {s += $NF} END {print s + 0}'
}
check_no_failures() {
    local n
    n=$(failures "$1")
    if [ "$n" != 0 ]; then
        echo "invalid run: $n decisions by the failure policy on $2 (store too slow?)" >&2
        exit 1
    fi
}

start_tollgate memory --store memory --memory-max-keys 2000000
start_tollgate redis --store redis --redis-url "redis://127.0.0.1:$redis_port/"
# The servers of the main table: label → gRPC port, admin port (tollgate only), pid.
servers=(null memory redis)
declare -A grpc_of=([null]=$null_port [memory]=$memory_grpc [redis]=$redis_grpc)
declare -A admin_of=([memory]=$memory_admin [redis]=$redis_admin)
declare -A pid_of=([null]=$null_pid [memory]=$memory_pid [redis]=$redis_pid)
n=0
for variant in $REDIS_VARIANTS; do
    n=$((n + 1))
    label=${variant%%=*}
    IFS=, read -r -a flags <<<"${variant#*=}"
    start_tollgate "variant$n" --store redis --redis-url "redis://127.0.0.1:$redis_port/" "${flags[@]}"
    servers+=("$label")
    grpc_var="variant${n}_grpc" admin_var="variant${n}_admin" pid_var="variant${n}_pid"
    grpc_of[$label]=${!grpc_var} admin_of[$label]=${!admin_var} pid_of[$label]=${!pid_var}
done
if [ "$APPROX" = 1 ]; then
    CONFIG_DIR="$work/approx-config" start_tollgate approximate --store redis --redis-url "redis://127.0.0.1:$redis_port/"
    servers+=(approximate)
    grpc_of[approximate]=$approximate_grpc admin_of[approximate]=$approximate_admin pid_of[approximate]=$approximate_pid
fi
# Failure-policy decisions so far, over every Tollgate of the main table.
all_failures() {
    local total=0 label
    for label in "${!admin_of[@]}"; do total=$((total + $(failures "${admin_of[$label]}"))); done
    echo "$total"
}

# `load PORT KEYS DESCRIPTORS [extra loadgen args]` prints the loadgen line.
load() {
    "$bin/examples/loadgen" --addr "127.0.0.1:$1" --domain bench --keys "$2" --descriptors "$3" \
        --concurrency "$CONCURRENCY" --connections "$CONNECTIONS" --seconds "$SECONDS_PER_RUN" \
        --warmup "$WARMUP" ${ZIPF:+--zipf "$ZIPF"} "${@:4}"
}
ratio() { python3 -c "print(f'{100 * $1 / $2:.0f}%')"; }

echo "# Tollgate benchmark table — $(date -u +%Y-%m-%dT%H:%MZ)"
echo
echo "Machine: $(nproc) cores ($(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1)), $(free -g | awk '/Mem:/ {print $2}') GiB;" \
    "$(redis-server --version | cut -d' ' -f1-3); loadgen, servers and Redis share the cores."
echo "Closed loop: concurrency $CONCURRENCY over $CONNECTIONS HTTP/2 connections, ${SECONDS_PER_RUN}s measured after ${WARMUP}s warm-up;" \
    "each row the median of $REPEAT rounds in which the three servers take turns."
echo
keys_drawn="uniform"
[ -z "$ZIPF" ] || keys_drawn="Zipf $ZIPF (loadgen --zipf; raw redis-benchmark rows skipped: its keys are uniform)"
echo "Keys: $keys_drawn."
echo
echo "| keys | descriptors | server | requests/s | p50 µs | p99 µs | vs null | EVALSHA per request | CPU µs per request | CPU µs per request ÷ null's |"
echo "|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|"
sha=$(rcli SCRIPT LOAD "$(cat src/store/lua/prelude.lua src/store/lua/gcra.lua)")
for keys in $KEY_COUNTS; do
    for d in $DESCRIPTORS; do
        # REPEAT rounds, the servers taking turns, so that a slow spell of a shared machine
        # hits all of them; each server's row is its median round. Each run's line gets its
        # CPU time per request appended (cpu_us=, redis_cpu_us=).
        declare -A runs=() calls=() served_requests=()
        for _ in $(seq "$REPEAT"); do
            for server in "${servers[@]}"; do
                admin=${admin_of[$server]:-}
                calls_before=$(evalsha_calls)
                served_before=0
                [ -z "$admin" ] || served_before=$(served "$admin")
                failed_before=$(all_failures)
                ticks_before=$(cpu_ticks "${pid_of[$server]}")
                redis_ticks_before=$(cpu_ticks "$redis_server_pid")
                line=$(load "${grpc_of[$server]}" "$keys" "$d")
                ticks=$(($(cpu_ticks "${pid_of[$server]}") - ticks_before))
                redis_ticks=$(($(cpu_ticks "$redis_server_pid") - redis_ticks_before))
                calls[$server]=$((${calls[$server]:-0} + $(evalsha_calls) - calls_before))
                [ -z "$admin" ] ||
                    served_requests[$server]=$((${served_requests[$server]:-0} + $(served "$admin") - served_before))
                failed=$(($(all_failures) - failed_before))
                if [ "$failed" != 0 ]; then
                    echo "invalid run: $failed decisions by the failure policy ($server, $keys keys, $d descriptors)" >&2
                    exit 1
                fi
                [ "$(field errors <<<"$line")" = 0 ] || { echo "errors in run: $line" >&2; exit 1; }
                answered=$(field answered <<<"$line")
                cpu=$(python3 -c "print(f'{$ticks * 1e6 / $clock_ticks / max($answered, 1):.1f}')")
                redis_cpu=$(python3 -c "print(f'{$redis_ticks * 1e6 / $clock_ticks / max($answered, 1):.1f}')")
                runs[$server]+="$line cpu_us=$cpu redis_cpu_us=$redis_cpu"$'\n'
            done
        done
        null_rps=
        null_cpu=
        for server in "${servers[@]}"; do
            line=$(printf '%s' "${runs[$server]}" | awk '{for (i = 1; i <= NF; i++) if ($i ~ /^rps=/) {split($i, a, "="); print a[2], $0}}' |
                sort -n | awk -v n="$REPEAT" 'NR == int((n + 1) / 2) {$1 = ""; print}')
            rps=$(field rps <<<"$line")
            cpu=$(field cpu_us <<<"$line")
            per_request=-
            cpu_text=$cpu
            if [ "${served_requests[$server]:-0}" != 0 ] && [ "${calls[$server]}" != 0 ]; then
                per_request=$(python3 -c "print(f'{${calls[$server]} / ${served_requests[$server]}:.2f}')")
                cpu_text="$cpu + redis $(field redis_cpu_us <<<"$line")"
            fi
            [ -n "$null_rps" ] || { null_rps=$rps; null_cpu=$cpu; }
            cpu_ratio=$(python3 -c "print(f'{$cpu / $null_cpu:.2f}' if $null_cpu > 0 else '-')")
            echo "| $keys | $d | $server | $rps | $(field p50_us <<<"$line") | $(field p99_us <<<"$line") | $(ratio "$rps" "$null_rps") | $per_request | $cpu_text | $cpu_ratio |"
        done
        # Raw Redis: the same script, one EVALSHA per descriptor, without and with pipelining
        # (a Tollgate request of d descriptors is one pipeline of d calls). Uniform keys only.
        [ -z "$ZIPF" ] || continue
        for pipeline in 1 16; do
            n=$((pipeline == 1 ? 200000 : 800000))
            out=$(redis-benchmark -p "$redis_port" -c "$CONCURRENCY" -n "$n" -P "$pipeline" -r "$keys" --csv \
                EVALSHA "$sha" 1 "tg:bench:__rand_int__" 1000000 1000000 1000000 0 1 | tail -1 | tr -d '"')
            calls_per_s=$(cut -d, -f2 <<<"$out")
            req=$(python3 -c "print(f'{$calls_per_s / $d:.0f}')")
            p50=$(python3 -c "print(f'{1000 * $(cut -d, -f5 <<<"$out"):.0f}')")
            p99=$(python3 -c "print(f'{1000 * $(cut -d, -f7 <<<"$out"):.0f}')")
            echo "| $keys | $d | redis-benchmark -P $pipeline | $req | $p50 | $p99 | $(ratio "$req" "$null_rps") | ($calls_per_s calls/s) | - | - |"
        done
    done
done
[ "$MAIN_ONLY" != 1 ] || exit 0
echo
echo "## Redis connections (--redis-connections), 1 descriptor, 10k keys"
echo
echo "| connections | requests/s | p50 µs | p99 µs | EVALSHA per Redis read |"
echo "|---:|---:|---:|---:|---:|"
stop_tollgate redis
for c in 1 2 4; do
    start_tollgate redis --store redis --redis-url "redis://127.0.0.1:$redis_port/" --redis-connections "$c"
    calls_before=$(evalsha_calls)
    reads_before=$(rstat total_reads_processed)
    line=$(load "$redis_grpc" 10000 1)
    per_read=$(python3 -c "print(f'{($(evalsha_calls) - $calls_before) / ($(rstat total_reads_processed) - $reads_before):.1f}')")
    check_no_failures "$redis_admin" "redis (connections $c)"
    echo "| $c | $(field rps <<<"$line") | $(field p50_us <<<"$line") | $(field p99_us <<<"$line") | $per_read |"
    stop_tollgate redis
done
start_tollgate redis --store redis --redis-url "redis://127.0.0.1:$redis_port/"

echo
echo "## Latency at half load (open loop), 1 descriptor, 10k keys"
echo
echo "| server | offered requests/s | achieved | p50 µs | p99 µs | p99.9 µs |"
echo "|---|---:|---:|---:|---:|---:|"
for server in memory redis; do
    port_var="${server}_grpc"
    max=$(load "${!port_var}" 10000 1 | field rps)
    half=$((max / 2))
    line=$(load "${!port_var}" 10000 1 --rate "$half")
    echo "| $server | $half | $(field rps <<<"$line") | $(field p50_us <<<"$line") | $(field p99_us <<<"$line") | $(field p999_us <<<"$line") |"
done

echo
echo "## Over-limit flood on one key (limit 10/minute), Redis store"
echo
echo "| offered requests/s | OK | OVER_LIMIT | EVALSHA calls/s |"
echo "|---:|---:|---:|---:|"
for rate in 1000 4000 16000; do
    calls_before=$(evalsha_calls)
    line=$("$bin/examples/loadgen" --addr "127.0.0.1:$redis_grpc" --domain flood --keys 1 --descriptors 1 \
        --concurrency 64 --connections "$CONNECTIONS" --seconds "$SECONDS_PER_RUN" --warmup 0 --rate "$rate")
    per_s=$(python3 -c "print(f'{($(evalsha_calls) - $calls_before) / $SECONDS_PER_RUN:.1f}')")
    echo "| $rate | $(field ok <<<"$line") | $(field over_limit <<<"$line") | $per_s |"
done

echo
echo "## Bytes per key"
echo
rcli FLUSHALL >/dev/null
used_before=$(rstat used_memory)
"$bin/examples/loadgen" --addr "127.0.0.1:$redis_grpc" --domain persist --keys 100000 --descriptors 1 \
    --concurrency 64 --prefill --seconds 0 --warmup 0 >/dev/null 2>&1
dbsize=$(rcli DBSIZE)
used_after=$(rstat used_memory)
sample=$(rcli RANDOMKEY)
echo "- Redis: $dbsize GCRA keys, used_memory grew $(((used_after - used_before) / dbsize)) bytes/key;" \
    "\`MEMORY USAGE\` of one key (\`$sample\`, ${#sample} bytes): $(rcli MEMORY USAGE "$sample") bytes."
memory_line=$(cargo run --release --quiet --example memory_bytes -- --keys 1000000)
echo "- Memory store: $memory_line (RSS growth per key)."
