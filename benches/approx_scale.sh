#!/usr/bin/env bash
# Approximate mode at scale, at production flags (issue 22): one Tollgate on one Redis, an
# approximate domain (sliding window, 1,000/minute, failure_mode: closed), closed-loop load
# of 16 requests in flight over 4 connections with uniform keys, from the first request
# after readiness (no warm-up). Per key count it prints: requests/s, syncs ok/failed,
# failure-policy decisions, first reads, buckets written per second, the backlog at the
# end, Redis commands per request and Redis CPU per request.
#
# Every flag of the server is its default (store timeout, reply timeout, --sync-interval-ms,
# --sync-staleness-ms, --memory-max-keys) but the ports, --no-watch and --drain-seconds 0.
#
#   benches/approx_scale.sh                                # 20k, 200k and 1M keys, 20 s each
#   KEYS="200000" SECONDS_PER_RUN=60 benches/approx_scale.sh
#   DESCRIPTORS=4 KEYS=1000000 benches/approx_scale.sh      # 4 buckets per request: capacity
#   TOLLGATE_BIN=/path/to/other/tollgate benches/approx_scale.sh   # another build (A/B)
#
# Needs: cargo, redis-server, redis-cli, curl, python3.
set -euo pipefail

KEYS=${KEYS:-"20000 200000 1000000"}
SECONDS_PER_RUN=${SECONDS_PER_RUN:-20}
CONCURRENCY=${CONCURRENCY:-16}
CONNECTIONS=${CONNECTIONS:-4}
DESCRIPTORS=${DESCRIPTORS:-1}

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
cargo build --release --quiet --bin tollgate --example loadgen
bin=${CARGO_TARGET_DIR:-$root/target}/release
tollgate=${TOLLGATE_BIN:-$bin/tollgate}
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
mkdir -p "$work/config"
cat >"$work/config/bench.yaml" <<'YAML'
domain: bench
consistency: approximate
failure_mode: closed
descriptors:
  - key: user
    rate_limit: { unit: minute, requests_per_unit: 1000, algorithm: sliding_window }
YAML

redis_port=$(free_port)
redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no --dir "$work" \
    --logfile "$work/redis.log" &
pids+=($!)
until redis-cli -p "$redis_port" PING >/dev/null 2>&1; do sleep 0.05; done
rcli() { redis-cli -p "$redis_port" "$@"; }
redis_pid=$(rcli INFO server | tr -d '\r' | sed -n 's/^process_id://p')
ticks=$(getconf CLK_TCK)
cpu_ticks() { sed 's/.*) //' "/proc/$1/stat" | awk '{print $12 + $13}'; }
# Commands clients sent (script calls and the heartbeat's; not the commands scripts run).
commands() {
    rcli INFO commandstats | tr -d '\r' |
        sed -n 's/^cmdstat_\(evalsha\|eval\|zadd\|zremrangebyscore\|pexpire\|zcard\|zrem\):calls=\([0-9]*\),.*/\2/p' |
        awk '{s += $1} END {print s + 0}'
}
metric() {
    curl -s "http://127.0.0.1:$1/metrics" | awk -v m="$2" 'index($0, m) == 1 {s += $NF} END {print s + 0}'
}

printf '| keys | descriptors | req/s | syncs ok | syncs failed | failure-policy decisions | first reads | buckets written/s | backlog at end (buckets, oldest s) | Redis commands/request | Redis CPU µs/request |\n'
printf '|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|\n'
for keys in $KEYS; do
    rcli FLUSHALL >/dev/null
    rcli CONFIG RESETSTAT >/dev/null
    grpc=$(free_port)
    admin=$(free_port)
    "$tollgate" serve --config "$work/config" --no-watch --drain-seconds 0 --store redis \
        --redis-url "redis://127.0.0.1:$redis_port/" --grpc-addr "127.0.0.1:$grpc" \
        --admin-addr "127.0.0.1:$admin" 2>"$work/tollgate-$keys.log" &
    pid=$!
    pids+=($pid)
    until curl -sf "http://127.0.0.1:$admin/readyz" >/dev/null; do sleep 0.02; done
    redis_before=$(cpu_ticks "$redis_pid")
    line=$("$bin/examples/loadgen" --addr "127.0.0.1:$grpc" --domain bench --keys "$keys" \
        --descriptors "$DESCRIPTORS" --concurrency "$CONCURRENCY" --connections "$CONNECTIONS" \
        --seconds "$SECONDS_PER_RUN" --warmup 0)
    redis_after=$(cpu_ticks "$redis_pid")
    answered=$(echo "$line" | field answered)
    rps=$(echo "$line" | field rps)
    ok=$(metric "$admin" 'tollgate_approximate_syncs_total{result="ok"}')
    failed=$(metric "$admin" 'tollgate_approximate_syncs_total{result="failed"}')
    failures=$(metric "$admin" 'tollgate_decisions_total{' | head -1)
    failures=$(curl -s "http://127.0.0.1:$admin/metrics" |
        awk '/^tollgate_decisions_total/ && /result="failure_/ {s += $NF} END {print s + 0}')
    reads=$(metric "$admin" 'tollgate_approximate_first_reads_total')
    written=$(metric "$admin" 'tollgate_approximate_sync_keys_total{op="write"}')
    backlog=$(metric "$admin" 'tollgate_approximate_backlog_buckets')
    oldest=$(metric "$admin" 'tollgate_approximate_backlog_oldest_seconds')
    cmds=$(commands)
    kill "$pid"
    wait "$pid" 2>/dev/null || true
    python3 - "$keys" "$DESCRIPTORS" "$rps" "$ok" "$failed" "$failures" "$reads" "$written" \
        "$backlog" "$oldest" "$cmds" "$answered" "$redis_before" "$redis_after" "$ticks" "$SECONDS_PER_RUN" <<'PY'
import sys
(keys, d, rps, ok, failed, failures, reads, written, backlog, oldest, cmds, answered, rb, ra,
 ticks, secs) = sys.argv[1:]
answered = max(float(answered or 0), 1)
cpu = (float(ra) - float(rb)) / float(ticks) * 1e6 / answered
print(f"| {int(keys):,} | {d} | {float(rps or 0):,.0f} | {float(ok):,.0f} | {float(failed):,.0f} | "
      f"{float(failures):,.0f} | {float(reads):,.0f} | {float(written) / float(secs):,.0f} | "
      f"{float(backlog):,.0f}, {float(oldest):.2f} | {float(cmds) / answered:.3f} | {cpu:.1f} |")
PY
done
