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
#   benches/table.sh                      # or: make bench-table
#   SECONDS_PER_RUN=20 CONCURRENCY=256 benches/table.sh
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

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
cargo build --release --quiet --bin tollgate --example loadgen --example null_rls
bin=$root/target/release
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
cat >"$work/config/bench.yaml" <<'EOF'
# Limits far above the load: every request is a real store round trip, none is denied.
domain: bench
descriptors:
  - key: user
    rate_limit: { unit: second, requests_per_unit: 1000000 }
EOF
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

# `start_tollgate NAME STORE-ARGS...`: sets NAME_grpc and NAME_admin.
start_tollgate() {
    local name=$1 grpc admin
    shift
    grpc=$(free_port)
    admin=$(free_port)
    "$bin/tollgate" serve --config "$work/config" --no-watch --drain-seconds 0 \
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

# `load PORT KEYS DESCRIPTORS [extra loadgen args]` prints the loadgen line.
load() {
    "$bin/examples/loadgen" --addr "127.0.0.1:$1" --domain bench --keys "$2" --descriptors "$3" \
        --concurrency "$CONCURRENCY" --connections "$CONNECTIONS" --seconds "$SECONDS_PER_RUN" \
        --warmup "$WARMUP" "${@:4}"
}
ratio() { python3 -c "print(f'{100 * $1 / $2:.0f}%')"; }

echo "# Tollgate benchmark table — $(date -u +%Y-%m-%dT%H:%MZ)"
echo
echo "Machine: $(nproc) cores ($(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1)), $(free -g | awk '/Mem:/ {print $2}') GiB;" \
    "$(redis-server --version | cut -d' ' -f1-3); loadgen, servers and Redis share the cores."
echo "Closed loop: concurrency $CONCURRENCY over $CONNECTIONS HTTP/2 connections, ${SECONDS_PER_RUN}s measured after ${WARMUP}s warm-up;" \
    "each row the median of $REPEAT rounds in which the three servers take turns."
echo
echo "| keys | descriptors | server | requests/s | p50 µs | p99 µs | vs null | EVALSHA per request |"
echo "|---:|---:|---|---:|---:|---:|---:|---:|"
sha=$(rcli SCRIPT LOAD "$(cat src/store/lua/prelude.lua src/store/lua/gcra.lua)")
for keys in $KEY_COUNTS; do
    for d in $DESCRIPTORS; do
        # REPEAT rounds, the servers taking turns, so that a slow spell of a shared machine
        # hits all three; each server's row is its median round.
        declare -A runs=([null]="" [memory]="" [redis]="")
        calls=0
        served_requests=0
        for _ in $(seq "$REPEAT"); do
            for server in null memory redis; do
                case $server in
                    null) port=$null_port ;;
                    memory) port=$memory_grpc ;;
                    redis) port=$redis_grpc ;;
                esac
                calls_before=$(evalsha_calls)
                served_before=$(served "$redis_admin")
                failed_before=$(($(failures "$memory_admin") + $(failures "$redis_admin")))
                line=$(load "$port" "$keys" "$d")
                calls=$((calls + $(evalsha_calls) - calls_before))
                served_requests=$((served_requests + $(served "$redis_admin") - served_before))
                failed=$(($(failures "$memory_admin") + $(failures "$redis_admin") - failed_before))
                if [ "$failed" != 0 ]; then
                    echo "invalid run: $failed decisions by the failure policy ($server, $keys keys, $d descriptors)" >&2
                    exit 1
                fi
                [ "$(field errors <<<"$line")" = 0 ] || { echo "errors in run: $line" >&2; exit 1; }
                runs[$server]+="$line"$'\n'
            done
        done
        null_rps=
        for server in null memory redis; do
            line=$(printf '%s' "${runs[$server]}" | awk '{for (i = 1; i <= NF; i++) if ($i ~ /^rps=/) {split($i, a, "="); print a[2], $0}}' |
                sort -n | awk -v n="$REPEAT" 'NR == int((n + 1) / 2) {$1 = ""; print}')
            rps=$(field rps <<<"$line")
            per_request=-
            if [ "$server" = redis ]; then
                per_request=$(python3 -c "print(f'{$calls / $served_requests:.2f}')")
            fi
            [ -n "$null_rps" ] || null_rps=$rps
            echo "| $keys | $d | $server | $rps | $(field p50_us <<<"$line") | $(field p99_us <<<"$line") | $(ratio "$rps" "$null_rps") | $per_request |"
        done
        # Raw Redis: the same script, one EVALSHA per descriptor, without and with pipelining
        # (a Tollgate request of d descriptors is one pipeline of d calls).
        for pipeline in 1 16; do
            n=$((pipeline == 1 ? 200000 : 800000))
            out=$(redis-benchmark -p "$redis_port" -c "$CONCURRENCY" -n "$n" -P "$pipeline" -r "$keys" --csv \
                EVALSHA "$sha" 1 "tg:bench:__rand_int__" 1000000 1000000 1000000 0 1 | tail -1 | tr -d '"')
            calls_per_s=$(cut -d, -f2 <<<"$out")
            req=$(python3 -c "print(f'{$calls_per_s / $d:.0f}')")
            p50=$(python3 -c "print(f'{1000 * $(cut -d, -f5 <<<"$out"):.0f}')")
            p99=$(python3 -c "print(f'{1000 * $(cut -d, -f7 <<<"$out"):.0f}')")
            echo "| $keys | $d | redis-benchmark -P $pipeline | $req | $p50 | $p99 | $(ratio "$req" "$null_rps") | ($calls_per_s calls/s) |"
        done
    done
done
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
