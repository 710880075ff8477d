# Tollgate container image: build with the Rust toolchain, run on distroless as non-root.
#
#   docker build -t tollgate:0.1.0 .
#   docker run --rm -p 8081:8081 -p 9102:9102 tollgate:0.1.0
#
# Used by examples/compose/docker-compose.yml and envoy/istio/tollgate.yaml.

# --- build: the toolchain named by Cargo.toml's rust-version, on the runtime's Debian ---
# The release profile strips the binary (Cargo.toml); `--profile profiling` keeps symbols
# for perf, outside the image.
FROM rust:1.88-bookworm AS build
WORKDIR /src
COPY . .
# Cache mounts (BuildKit) keep the registry and the build between image builds; the binary
# is copied out of the cached target directory before the mount goes away.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin tollgate \
    && cp target/release/tollgate /tollgate

# --- run: glibc + CA certificates (for rediss://), no shell, no package manager ---
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /tollgate /usr/local/bin/tollgate
# envoyproxy/ratelimit's command: started as `ratelimit`, Tollgate reads the peer's
# environment (peer mode), so Envoy Gateway's generated Deployment (`/bin/ratelimit`, no
# arguments) runs it with only the image changed. A copy, not a link: distroless has no
# shell to make one, and COPY of a lone symlink copies its target anyway.
COPY --from=build /tollgate /bin/ratelimit
# The example policies, so the image runs on its own; mount yours over this directory.
COPY config /etc/tollgate/config
# distroless' "nonroot" user (65532), also named in envoy/istio/tollgate.yaml.
USER 65532:65532
# gRPC (Envoy's ratelimit filter) and admin HTTP (/metrics, /healthz, /readyz, /rlconfig).
EXPOSE 8081 9102
ENTRYPOINT ["/usr/local/bin/tollgate"]
# Off loopback: a container is reached from outside itself.
CMD ["serve", "--config", "/etc/tollgate/config", "--grpc-addr", "0.0.0.0:8081", "--admin-addr", "0.0.0.0:9102"]
