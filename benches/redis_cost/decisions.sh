#!/usr/bin/env bash
# Redis cost per rate-limit decision of one or more Tollgate binaries sharing ONE
# redis-server, beside the null RLS (examples/null_rls.rs: answers OK, no work). Every server
# is started once and kept running; for each round × concurrency × draw × descriptors the
# servers take turns (null first, then BINS in order) under the same closed-loop loadgen run,
# so a slow spell of the machine hits all of them.
#
# Per Tollgate turn, read around the whole loadgen run (warm-up included, so divided by
# loadgen's `answered`, which includes the warm-up too): the Tollgate process's utime +
# stime (/proc/PID/stat), redis-server's used_cpu_user + used_cpu_sys (INFO cpu), and calls
# and usec of EVALSHA + EVAL + FCALL (INFO commandstats). A decision is one descriptor:
# Redis CPU per decision = per request ÷ descriptors. Exec µs per call = Δusec ÷ Δcalls (time
# inside the commands, as Redis counts it). A turn with any failure-policy decision
# (tollgate_decisions_total{result="failure_…"}) or loadgen error is INVALID: marked in its
# raw line and left out of the medians. Raw lines (key=value, one per turn) go to stderr
# (and to $RAW if set); at the end, one Markdown table per concurrency × draw on stdout,
# each cell the median over rounds ("vs null": the median of per-round ratios to null's rps).
#
# REFERENCE=1 (default) first runs redis-benchmark on the same redis-server (-c 16 -P DEPTH
# -n 2000000 -r 10000) for each DEPTH of REFERENCE_DEPTHS ("16 2"): INCRBY then EXPIRE, the
# pair a counter limiter such as envoyproxy/ratelimit sends per decision; Redis CPU and exec
# µs per call of each, and their sum. Depth 16 is the pair at its cheapest (16 commands per
# read); depth 2 is two commands per read, as envoyproxy/ratelimit sends one descriptor's
# pair by default (one pipeline per request on a pooled connection, REDIS_PIPELINE_WINDOW=0).
#
# Usage (from anywhere; binaries are release builds):
#   BINS="before=/tmp/old/tollgate after=target/release/tollgate \
#         nobatch=target/release/tollgate,--no-batch" benches/redis_cost/decisions.sh
#   BINS="before=/tmp/old/tollgate" CONCURRENCY=16 DRAWS=uniform:10000 DESCRIPTORS="1 4" ROUNDS=1 \
#     SECONDS_PER_RUN=2 benches/redis_cost/decisions.sh 2>raw.txt
# Env: BINS (LABEL=PATH[,FLAG,FLAG…]: extra `serve` flags split on commas), LOADGEN,
# NULL_RLS, CONCURRENCY ("16 128"), CONNECTIONS (4), DRAWS ("uniform:10000 zipf1.1:100000";
# uniform:KEYS or zipfS:KEYS → loadgen --keys KEYS [--zipf S]), DESCRIPTORS ("1 4 16"),
# SECONDS_PER_RUN (6), WARMUP (1), ROUNDS (3), STORE_TIMEOUT_MS (1000), ALGORITHM (gcra), UNIT (second:
# the limit's unit; with `second` a window-counting algorithm starts a new window key for nearly
# every consume at 10,000 keys, with `hour` almost never),
# REFERENCE (1), REFERENCE_DEPTHS ("16 2"), RAW (a file to append the raw lines to), DOMAIN_LINES (YAML lines added to
# the bench domain, e.g. "reservations: { key: request, ttl: 10m }"), LOADGEN_ARGS_<LABEL>
# (extra loadgen flags for that label's turns, e.g. LOADGEN_ARGS_reserve="--reserve request").
# Needs: redis-server, redis-cli, redis-benchmark (>= 7), curl, python3.
set -euo pipefail

BINS=${BINS:?BINS="LABEL=PATH[,FLAG...] ..."}
root=$(cd "$(dirname "$0")/../.." && pwd)
LOADGEN=${LOADGEN:-$root/target/release/examples/loadgen}
NULL_RLS=${NULL_RLS:-$root/target/release/examples/null_rls}
CONCURRENCY=${CONCURRENCY:-"16 128"}
CONNECTIONS=${CONNECTIONS:-4}
DRAWS=${DRAWS:-"uniform:10000 zipf1.1:100000"}
DESCRIPTORS=${DESCRIPTORS:-"1 4 16"}
SECONDS_PER_RUN=${SECONDS_PER_RUN:-6}
WARMUP=${WARMUP:-1}
ROUNDS=${ROUNDS:-3}
# Capacity, not deadlines: 128 requests of 16 descriptors queue in Redis past Envoy's 20 ms.
STORE_TIMEOUT_MS=${STORE_TIMEOUT_MS:-1000}
ALGORITHM=${ALGORITHM:-gcra}
UNIT=${UNIT:-second}
REFERENCE=${REFERENCE:-1}
REFERENCE_DEPTHS=${REFERENCE_DEPTHS:-"16 2"}
RAW=${RAW:-}

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
# `cpu_ticks PID`: utime + stime so far, in clock ticks (fields 14 and 15 of /proc/PID/stat,
# counted after the command name's closing parenthesis).
cpu_ticks() { sed 's/.*) //' "/proc/$1/stat" | awk '{print $12 + $13}'; }
clock_ticks=$(getconf CLK_TCK)
# `wait_ready PID URL NAME`: until URL answers; fails if PID exits first.
wait_ready() {
    until curl -sf "$2" >/dev/null; do
        kill -0 "$1" 2>/dev/null || { echo "$3 exited before ready; its log:" >&2; cat "$work/$3.log" >&2; exit 1; }
        sleep 0.05
    done
}

mkdir -p "$work/config"
cat >"$work/config/bench.yaml" <<EOF
# Limits far above the load: every request is a real store round trip, none is denied.
domain: bench
${DOMAIN_LINES:-}
descriptors:
  - key: user
    rate_limit: { unit: $UNIT, requests_per_unit: 1000000, algorithm: $ALGORITHM }
EOF

redis_port=$(free_port)
redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no \
    --dir "$work" --logfile "$work/redis.log" &
pids+=($!)
until redis-cli -p "$redis_port" PING >/dev/null 2>&1; do sleep 0.05; done
rcli() { redis-cli -p "$redis_port" "$@"; }
# redis-server's used_cpu_user + used_cpu_sys, seconds.
redis_cpu() { rcli INFO cpu | tr -d '\r' | awk -F: '/^used_cpu_(user|sys):/ {s += $2} END {printf "%.6f\n", s}'; }
# `cmd_stats NAME...`: total calls and usec of the commands NAME (lower case) so far.
cmd_stats() {
    local names
    names=$(IFS='|'; echo "$*")
    rcli INFO commandstats | tr -d '\r' |
        awk -F'[:=,]' -v re="^cmdstat_($names)$" '$1 ~ re {c += $3; u += $5} END {printf "%.0f %.0f\n", c, u}'
}
script_stats() { cmd_stats evalsha eval fcall; }
# Read events redis-server has processed so far (INFO stats, Redis >= 6): one per read of a
# client's socket, whatever it carried.
redis_reads() { rcli INFO stats | tr -d '\r' | sed -n 's/^total_reads_processed://p'; }

# --- The reference pair: INCRBY + EXPIRE, pipelined, by redis-benchmark.
reference=()
if [ "$REFERENCE" = 1 ]; then
    for depth in $REFERENCE_DEPTHS; do
        for cmd in "INCRBY key:__rand_int__ 1" "EXPIRE key:__rand_int__ 60"; do
            name=$(cut -d' ' -f1 <<<"$cmd" | tr '[:upper:]' '[:lower:]')
            cpu0=$(redis_cpu)
            read -r calls0 usec0 < <(cmd_stats "$name")
            # shellcheck disable=SC2086 # the command's words
            out=$(redis-benchmark -p "$redis_port" -c 16 -P "$depth" -n 2000000 -r 10000 -q --csv $cmd | tail -1 | tr -d '"')
            cpu1=$(redis_cpu)
            read -r calls1 usec1 < <(cmd_stats "$name")
            reference+=("$depth ${cmd%% *} $(cut -d, -f2 <<<"$out") $((calls1 - calls0)) $((usec1 - usec0)) $cpu0 $cpu1")
        done
    done
    rcli FLUSHALL >/dev/null
fi

# --- The servers, started once.
null_port=$(free_port)
"$NULL_RLS" --addr "127.0.0.1:$null_port" 2>"$work/null.log" &
pids+=($!)
null_pid=$!
until (exec 3<>"/dev/tcp/127.0.0.1/$null_port") 2>/dev/null; do
    kill -0 "$null_pid" 2>/dev/null || { echo "null_rls exited; its log:" >&2; cat "$work/null.log" >&2; exit 1; }
    sleep 0.05
done

labels=()
declare -A grpc_of=([null]=$null_port) admin_of=() pid_of=([null]=$null_pid) spec_of=()
for entry in $BINS; do
    label=${entry%%=*}
    IFS=, read -r -a parts <<<"${entry#*=}"
    if [ -z "$label" ] || [ "$label" = null ] || [ "$label" = "$entry" ] || [ -n "${pid_of[$label]:-}" ]; then
        echo "BINS: bad or repeated label in '$entry'" >&2
        exit 1
    fi
    grpc=$(free_port)
    admin=$(free_port)
    "${parts[0]}" serve --config "$work/config" --no-watch --drain-seconds 0 \
        --store redis --redis-url "redis://127.0.0.1:$redis_port/" --store-timeout-ms "$STORE_TIMEOUT_MS" \
        --grpc-addr "127.0.0.1:$grpc" --admin-addr "127.0.0.1:$admin" "${parts[@]:1}" 2>"$work/$label.log" &
    pids+=($!)
    labels+=("$label")
    grpc_of[$label]=$grpc admin_of[$label]=$admin pid_of[$label]=$! spec_of[$label]=${entry#*=}
    wait_ready "$!" "http://127.0.0.1:$admin/readyz" "$label"
done
failures() {
    curl -s "http://127.0.0.1:$1/metrics" |
        awk '/^tollgate_decisions_total/ && /result="failure_/ {s += $NF} END {printf "%.0f\n", s}'
}

# --- The turns.
raw="$work/raw.txt"
: >"$raw"
for round in $(seq "$ROUNDS"); do
    for c in $CONCURRENCY; do
        for draw in $DRAWS; do
            keys=${draw#*:}
            zipf=
            case $draw in
                uniform:*) ;;
                zipf*:*) zipf=${draw%%:*}; zipf=${zipf#zipf} ;;
                *) echo "DRAWS: '$draw' is neither uniform:KEYS nor zipfS:KEYS" >&2; exit 1 ;;
            esac
            for d in $DESCRIPTORS; do
                for server in null "${labels[@]}"; do
                    pid=${pid_of[$server]}
                    admin=${admin_of[$server]:-}
                    if [ -n "$admin" ]; then
                        fails0=$(failures "$admin")
                        read -r calls0 usec0 < <(script_stats)
                        rcpu0=$(redis_cpu)
                        reads0=$(redis_reads)
                    fi
                    ticks0=$(cpu_ticks "$pid")
                    extra_var="LOADGEN_ARGS_$server"
                    read -r -a extra <<<"${!extra_var:-}"
                    line=$("$LOADGEN" "${extra[@]}" --addr "127.0.0.1:${grpc_of[$server]}" --domain bench --keys "$keys" \
                        ${zipf:+--zipf "$zipf"} --descriptors "$d" --concurrency "$c" --connections "$CONNECTIONS" \
                        --seconds "$SECONDS_PER_RUN" --warmup "$WARMUP")
                    ticks=$(($(cpu_ticks "$pid") - ticks0))
                    answered=$(field answered <<<"$line")
                    errors=$(field errors <<<"$line")
                    out="round=$round concurrency=$c draw=$draw descriptors=$d server=$server"
                    out+=" rps=$(field rps <<<"$line") p50_us=$(field p50_us <<<"$line") p99_us=$(field p99_us <<<"$line")"
                    out+=" answered=$answered errors=$errors"
                    if [ -z "$admin" ]; then
                        out+=$(python3 -c "print(f' cpu_us_per_req={$ticks * 1e6 / $clock_ticks / max($answered, 1):.2f}')")
                        bad=$errors
                    else
                        rcpu1=$(redis_cpu)
                        reads1=$(redis_reads)
                        read -r calls1 usec1 < <(script_stats)
                        fails=$(($(failures "$admin") - fails0))
                        out+=$(python3 - "$ticks" "$clock_ticks" "$answered" "$d" "$rcpu0" "$rcpu1" \
                            "$((calls1 - calls0))" "$((usec1 - usec0))" "$((reads1 - reads0))" <<'PY'
import sys
ticks, hz, answered, d = (int(x) for x in sys.argv[1:5])
rcpu = float(sys.argv[6]) - float(sys.argv[5])
calls, usec, reads = int(sys.argv[7]), int(sys.argv[8]), int(sys.argv[9])
n = max(answered, 1)
redis_req = rcpu * 1e6 / n
print(f" cpu_us_per_req={ticks * 1e6 / hz / n:.2f} redis_cpu_us_per_req={redis_req:.2f}"
      f" redis_cpu_us_per_decision={redis_req / d:.2f} script_calls_per_req={calls / n:.3f}"
      f" exec_us_per_call={usec / calls if calls else 0:.2f} script_calls={calls} script_usec={usec}"
      f" redis_reads_per_req={reads / n:.3f}", end="")
PY
)
                        out+=" failure_decisions=$fails"
                        bad=$((errors + fails))
                    fi
                    [ "$bad" = 0 ] || out+=" INVALID"
                    echo "$out" >>"$raw"
                    echo "$out" >&2
                    [ -z "$RAW" ] || echo "$out" >>"$RAW"
                done
            done
        done
    done
done

# --- The tables.
echo "# Redis cost per decision — $(date -u +%Y-%m-%dT%H:%MZ)"
echo
echo "Machine: $(nproc) cores ($(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1));" \
    "$(redis-server --version | cut -d' ' -f1-3); loadgen, servers and Redis share the cores."
echo "Closed loop over $CONNECTIONS HTTP/2 connections, ${SECONDS_PER_RUN}s measured after ${WARMUP}s warm-up," \
    "algorithm $ALGORITHM per $UNIT, --store-timeout-ms $STORE_TIMEOUT_MS; each cell the median of $ROUNDS rounds of interleaved turns."
echo "Servers: null = $NULL_RLS;$(for l in "${labels[@]}"; do printf ' %s = %s;' "$l" "${spec_of[$l]}"; done)" \
    "all Tollgates on one redis-server. CPU per request over the whole run incl. warm-up."
if [ ${#reference[@]} -gt 0 ]; then
    echo
    echo "## Reference: redis-benchmark -c 16 -P DEPTH -n 2000000 -r 10000 (random keys over 10,000)"
    echo
    printf '%s\n' "${reference[@]}" | python3 -c '
import sys
rows = [l.split() for l in sys.stdin if l.strip()]
print("| depth | command | calls/s | Redis CPU µs/call | exec µs/call |")
print("|---:|---|---:|---:|---:|")
sums = {}
for depth, name, rps, calls, usec, c0, c1 in rows:
    calls = max(int(calls), 1)
    cpu = (float(c1) - float(c0)) * 1e6 / calls
    ex = int(usec) / calls
    total = sums.setdefault(depth, [0.0, 0.0])
    total[0] += cpu
    total[1] += ex
    print(f"| {depth} | {name} | {float(rps):.0f} | {cpu:.2f} | {ex:.2f} |")
for depth, (cpu, ex) in sums.items():
    print(f"| {depth} | the pair (INCRBY + EXPIRE) | - | {cpu:.2f} | {ex:.2f} |")
'
fi
python3 - "$raw" "$CONCURRENCY" "$DRAWS" "$DESCRIPTORS" "$ROUNDS" null "${labels[@]}" <<'PY'
import sys
from statistics import median

path, concurrency, draws, descriptors, rounds = sys.argv[1:6]
servers = sys.argv[6:]
turns = {}
for line in open(path):
    kv = dict(w.split("=", 1) for w in line.split() if "=" in w)
    kv["invalid"] = "INVALID" in line.split()
    turns[(kv["concurrency"], kv["draw"], kv["descriptors"], kv["server"], kv["round"])] = kv


def med(values, fmt):
    return format(median(values), fmt) if values else "-"


for c in concurrency.split():
    for draw in draws.split():
        print(f"\n## concurrency {c}, draw {draw}\n")
        print("| descriptors | server | requests/s | vs null | p50 µs | p99 µs | CPU µs/req"
              " | Redis CPU µs/decision | script calls/req | exec µs/call | Redis reads/req | valid turns |")
        print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for d in descriptors.split():
            for s in servers:
                runs = [turns.get((c, draw, d, s, str(r))) for r in range(1, int(rounds) + 1)]
                valid = [t for t in runs if t and not t["invalid"]]
                col = lambda k: [float(t[k]) for t in valid]
                ratios = []
                for r, t in enumerate(runs, 1):
                    n = turns.get((c, draw, d, "null", str(r)))
                    if t and not t["invalid"] and n and not n["invalid"] and float(n["rps"]) > 0:
                        ratios.append(100 * float(t["rps"]) / float(n["rps"]))
                tollgate = s != "null"
                cells = [
                    d, s, med(col("rps"), ".0f"),
                    med(ratios, ".0f") + "%" if tollgate and ratios else "-",
                    med(col("p50_us"), ".0f"), med(col("p99_us"), ".0f"),
                    med(col("cpu_us_per_req"), ".1f"),
                    med(col("redis_cpu_us_per_decision"), ".1f") if tollgate else "-",
                    med(col("script_calls_per_req"), ".2f") if tollgate else "-",
                    med(col("exec_us_per_call"), ".2f") if tollgate else "-",
                    med(col("redis_reads_per_req"), ".2f") if tollgate and all("redis_reads_per_req" in t for t in valid) else "-",
                    f"{len(valid)}/{rounds}" + ("" if len(valid) == int(rounds) else " INVALID"),
                ]
                print("| " + " | ".join(cells) + " |")
PY
