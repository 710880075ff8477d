#!/usr/bin/env bash
# What tracing costs per request (issue 27): the null RLS, and Tollgate with tracing off,
# on at ratio 0.01 and on at ratio 1.0 (OTLP/gRPC to examples/otlp_sink.rs, a collector
# that accepts and keeps nothing), taking turns, ROUNDS (default 3) rounds, each line one
# run. Closed loop, 128 requests in flight over 4 connections, 8 s after 2 s warm-up,
# 10k keys, DESCRIPTORS per request ("1 4"); STORE=memory (default) or redis. The
# requests carry no trace context: the ratio alone decides (as for a client without
# tracing, or Envoy not tracing). CPU per request: the server's utime + stime from /proc
# over the run ÷ requests answered (as benches/table.sh). Each traced run also prints the
# spans exported and dropped (tollgate_trace_spans_*): a run that dropped spans measured
# less than it claims.
#
#   benches/tracing.sh                 # or: make bench-tracing
#   STORE=redis ROUNDS=5 benches/tracing.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
cargo build --release --quiet --bin tollgate --example loadgen --example null_rls --example otlp_sink
bin=${CARGO_TARGET_DIR:-$root/target}/release
work=$(mktemp -d); pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
cpu_ticks() { sed 's/.*) //' "/proc/$1/stat" | awk '{print $12 + $13}'; }
mkdir -p "$work/config"
printf 'domain: bench\ndescriptors:\n  - key: user\n    rate_limit: { unit: second, requests_per_unit: 1000000 }\n' > "$work/config/bench.yaml"
store_args=(--store memory --memory-max-keys 2000000)
if [ "${STORE:-memory}" = redis ]; then
  rport=$(free_port)
  redis-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly no --dir "$work" --logfile "$work/redis.log" &
  pids+=($!)
  until redis-cli -p "$rport" PING >/dev/null 2>&1; do sleep 0.05; done
  store_args=(--store redis --redis-url "redis://127.0.0.1:$rport/")
fi
sink_port=$(free_port)
"$bin/examples/otlp_sink" "127.0.0.1:$sink_port" > "$work/sink.out" &
pids+=($!)
until python3 -c "import socket; socket.create_connection(('127.0.0.1', $sink_port), 1)" 2>/dev/null; do sleep 0.05; done
trace_args=(--tracing --tracing-protocol grpc --tracing-endpoint "http://127.0.0.1:$sink_port")
metric() { curl -s "http://127.0.0.1:$1/metrics" | awk -v m="$2" 'index($0, m) == 1 {s += $NF} END {print s + 0}'; }
for round in $(seq "${ROUNDS:-3}"); do
  for d in ${DESCRIPTORS:-1 4}; do
    for label in null off ratio-0.01 ratio-1; do
      grpc=$(free_port); admin=$(free_port)
      case $label in
        null) "$bin/examples/null_rls" --addr "127.0.0.1:$grpc" 2>/dev/null & ;;
        *)
          extra=()
          [ $label = ratio-0.01 ] && extra=("${trace_args[@]}" --tracing-sample-ratio 0.01)
          [ $label = ratio-1 ] && extra=("${trace_args[@]}" --tracing-sample-ratio 1)
          "$bin/tollgate" serve --config "$work/config" --no-watch --drain-seconds 0 "${store_args[@]}" \
            --store-timeout-ms 1000 --grpc-addr "127.0.0.1:$grpc" --admin-addr "127.0.0.1:$admin" \
            ${extra[@]+"${extra[@]}"} 2>"$work/$label.log" & ;;
      esac
      sp=$!
      if [ $label = null ]; then
        until python3 -c "import socket; socket.create_connection(('127.0.0.1', $grpc), 1)" 2>/dev/null; do sleep 0.05; done
      else
        until curl -sf "http://127.0.0.1:$admin/readyz" >/dev/null; do sleep 0.05; done
      fi
      ticks=$(cpu_ticks $sp)
      line=$("$bin/examples/loadgen" --addr "127.0.0.1:$grpc" --domain bench --keys 10000 --descriptors "$d" \
          --concurrency 128 --connections 4 --seconds 8 --warmup 2)
      ticks=$(($(cpu_ticks $sp) - ticks))
      rps=$(sed -n 's/.*\brps=\([^ ]*\).*/\1/p' <<<"$line"); p50=$(sed -n 's/.*\bp50_us=\([^ ]*\).*/\1/p' <<<"$line")
      p99=$(sed -n 's/.*\bp99_us=\([^ ]*\).*/\1/p' <<<"$line"); answered=$(sed -n 's/.*\banswered=\([^ ]*\).*/\1/p' <<<"$line")
      cpu=$(python3 -c "print(f'{$ticks * 1e6 / $(getconf CLK_TCK) / max($answered, 1):.1f}')")
      spans=""
      if [ $label != null ]; then
        exported=$(metric "$admin" tollgate_trace_spans_exported_total)
        dropped=$(metric "$admin" tollgate_trace_spans_dropped_total)
        failures=$(curl -s "http://127.0.0.1:$admin/metrics" | awk '/^tollgate_decisions_total/ && /failure_/ {s += $NF} END {print s + 0}')
        spans=" spans_exported=$exported spans_dropped=$dropped failure_decisions=$failures"
      fi
      echo "round=$round descriptors=$d $label rps=$rps p50_us=$p50 p99_us=$p99 cpu_us=$cpu$spans"
      kill $sp; wait $sp 2>/dev/null || true
    done
  done
done
