#!/usr/bin/env bash
# A/B of two tollgate binaries on one redis-server: 1 and 4 descriptors, 10k keys, closed
# loop 128 in flight over 4 connections, 8 s after 2 s warm-up, --store-timeout-ms 1000;
# ROUNDS (default 3) interleaved turns. Prints one line per run, with the failure-policy
# decisions it saw (a run with any is not a measurement).
# Usage: benches/ab.sh OLD_TOLLGATE NEW_TOLLGATE LOADGEN   (release builds; e.g. build the
# old one from a `git worktree` of the older commit)
# Env: STORE (redis, or memory: `--store memory --memory-max-keys 2000000`), KEYS (10000),
# DESCRIPTORS ("1 4"). Each line also gives the server's CPU µs per answered request
# (utime + stime from /proc, as benches/table.sh). The memory store with key churn:
#   STORE=memory KEYS=1000000 DESCRIPTORS="4 16" ROUNDS=3 benches/ab.sh OLD NEW LOADGEN
set -euo pipefail
old=$1; new=$2; loadgen=$3
work=$(mktemp -d); pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
mkdir -p "$work/config"
printf 'domain: bench\ndescriptors:\n  - key: user\n    rate_limit: { unit: second, requests_per_unit: 1000000 }\n' > "$work/config/bench.yaml"
rport=$(free_port)
redis-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly no --dir "$work" --logfile "$work/redis.log" &
pids+=($!)
until redis-cli -p "$rport" PING >/dev/null 2>&1; do sleep 0.05; done
store_args=(--store redis --redis-url "redis://127.0.0.1:$rport/")
[ "${STORE:-redis}" = memory ] && store_args=(--store memory --memory-max-keys 2000000)
cpu_ticks() { sed 's/.*) //' "/proc/$1/stat" | awk '{print $12 + $13}'; }
for round in $(seq "${ROUNDS:-3}"); do
  for d in ${DESCRIPTORS:-1 4}; do
    for label in old new; do
      bin=$old; [ $label = new ] && bin=$new
      grpc=$(free_port); admin=$(free_port)
      "$bin" serve --config "$work/config" --no-watch --drain-seconds 0 "${store_args[@]}" \
        --store-timeout-ms 1000 --grpc-addr "127.0.0.1:$grpc" --admin-addr "127.0.0.1:$admin" 2>/dev/null &
      tp=$!
      until curl -sf "http://127.0.0.1:$admin/readyz" >/dev/null; do sleep 0.05; done
      ticks=$(cpu_ticks $tp)
      line=$("$loadgen" --addr "127.0.0.1:$grpc" --domain bench --keys "${KEYS:-10000}" --descriptors $d \
          --concurrency 128 --connections 4 --seconds 8 --warmup 2)
      ticks=$(($(cpu_ticks $tp) - ticks))
      fails=$(curl -s "http://127.0.0.1:$admin/metrics" | awk '/^tollgate_decisions_total/ && /failure_/ {s += $NF} END {print s + 0}')
      rps=$(sed -n 's/.*\brps=\([^ ]*\).*/\1/p' <<<"$line"); p99=$(sed -n 's/.*\bp99_us=\([^ ]*\).*/\1/p' <<<"$line")
      answered=$(sed -n 's/.*\banswered=\([^ ]*\).*/\1/p' <<<"$line")
      cpu=$(python3 -c "print(f'{$ticks * 1e6 / $(getconf CLK_TCK) / max($answered, 1):.1f}')")
      echo "round=$round descriptors=$d $label rps=$rps p99_us=$p99 cpu_us=$cpu failure_decisions=$fails"
      kill $tp; wait $tp 2>/dev/null || true
    done
  done
done
