#!/usr/bin/env bash
# A/B of per-key coalescing on the Redis store: one redis-server, two Tollgate instances
# (default = coalescing on; --no-coalesce), the same loadgen runs against each in turn.
# Workloads: Zipf 1.1 over 100,000 keys and uniform over 10,000 keys, 1 descriptor, limit
# far above the load. Prints one line per run (requests/s, p50/p99, script calls per
# request from INFO commandstats in the measured window, CPU µs per request of Tollgate and
# of redis-server from /proc over the whole run, warm-up included) and the median of
# REPEAT turns.
# A run with any failure-policy decision aborts the script.
#
# Needs: a release build in $CARGO_TARGET_DIR (or target/), redis-server, curl, python3.
set -euo pipefail

SECONDS_PER_RUN=${SECONDS_PER_RUN:-6}
WARMUP=${WARMUP:-1}
CONCURRENCY=${CONCURRENCY:-128}
CONNECTIONS=${CONNECTIONS:-4}
STORE_TIMEOUT_MS=${STORE_TIMEOUT_MS:-1000}
REPEAT=${REPEAT:-3}

root=$(cd "$(dirname "$0")/.." && pwd)
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
field() { sed -n "s/.*\b$1=\([^ ]*\).*/\1/p"; }
wait_http() { until curl -sf "$1" >/dev/null; do sleep 0.05; done; }

mkdir -p "$work/config"
cat >"$work/config/bench.yaml" <<'YAML'
domain: bench
descriptors:
  - key: user
    rate_limit: { unit: second, requests_per_unit: 1000000 }
YAML

redis_port=$(free_port)
redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no \
    --dir "$work" --logfile "$work/redis.log" &
pids+=($!)
redis_pid=$!
until redis-cli -p "$redis_port" PING >/dev/null 2>&1; do sleep 0.05; done

start_tollgate() {
    local name=$1 grpc admin
    shift
    grpc=$(free_port)
    admin=$(free_port)
    "$bin/tollgate" serve --config "$work/config" --no-watch --drain-seconds 0 \
        --grpc-addr "127.0.0.1:$grpc" --admin-addr "127.0.0.1:$admin" --store-timeout-ms "$STORE_TIMEOUT_MS" \
        --store redis --redis-url "redis://127.0.0.1:$redis_port/" "$@" 2>"$work/$name.log" &
    pids+=($!)
    eval "${name}_grpc=$grpc ${name}_admin=$admin ${name}_pid=$!"
    wait_http "http://127.0.0.1:$admin/readyz"
}
# CPU time of a process so far, in µs (utime + stime from /proc, in clock ticks).
cpu_us() { awk -v hz="$(getconf CLK_TCK)" '{print ($14 + $15) * 1000000 / hz}' "/proc/$1/stat"; }
failures() {
    curl -s "http://127.0.0.1:$1/metrics" |
        awk '/^tollgate_decisions_total/ && /result="failure_(open|closed)"/ {s += $NF} END {print s + 0}'
}

start_tollgate on
start_tollgate off --no-coalesce

echo "uptime before: $(uptime)"
declare -A results
for turn in $(seq 1 "$REPEAT"); do
    for workload in zipf uniform; do
        case $workload in
            zipf) args=(--keys 100000 --zipf 1.1) ;;
            uniform) args=(--keys 10000) ;;
        esac
        for mode in on off; do
            grpc_var="${mode}_grpc"
            admin_var="${mode}_admin"
            pid_var="${mode}_pid"
            t0=$(cpu_us "${!pid_var}")
            r0=$(cpu_us "$redis_pid")
            line=$("$bin/examples/loadgen" --addr "127.0.0.1:${!grpc_var}" --domain bench --descriptors 1 \
                --concurrency "$CONCURRENCY" --connections "$CONNECTIONS" --seconds "$SECONDS_PER_RUN" \
                --warmup "$WARMUP" --redis-url "redis://127.0.0.1:$redis_port/" "${args[@]}")
            t1=$(cpu_us "${!pid_var}")
            r1=$(cpu_us "$redis_pid")
            n=$(failures "${!admin_var}")
            if [ "$n" != 0 ]; then
                echo "invalid run: $n failure-policy decisions ($mode, $workload)" >&2
                exit 1
            fi
            rps=$(echo "$line" | field rps)
            calls=$(echo "$line" | field script_calls_per_request)
            p50=$(echo "$line" | field p50_us)
            p99=$(echo "$line" | field p99_us)
            # Requests of the whole run (warm-up too), for the CPU spent over the whole run.
            all=$(python3 -c "print($rps * ($SECONDS_PER_RUN + $WARMUP))")
            tcpu=$(python3 -c "print(f'{($t1 - $t0) / $all:.1f}')")
            rcpu=$(python3 -c "print(f'{($r1 - $r0) / $all:.1f}')")
            echo "turn=$turn workload=$workload coalesce=$mode rps=$rps p50_us=$p50 p99_us=$p99" \
                "script_calls_per_request=$calls tollgate_cpu_us=$tcpu redis_cpu_us=$rcpu"
            results["$workload,$mode"]+="$rps,$calls,$tcpu,$rcpu "
        done
    done
done
echo "uptime after: $(uptime)"
for key in zipf,on zipf,off uniform,on uniform,off; do
    python3 - "$key" ${results[$key]} <<'PY'
import statistics, sys
key, runs = sys.argv[1], [r.split(",") for r in sys.argv[2:]]
med = [statistics.median(float(r[i]) for r in runs) for i in range(4)]
print(f"median {key}: rps={med[0]:.0f} script_calls_per_request={med[1]:.3f}"
      f" tollgate_cpu_us={med[2]:.1f} redis_cpu_us={med[3]:.1f} (rps runs: {' '.join(r[0] for r in runs)})")
PY
done
