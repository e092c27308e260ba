# syntax=docker/dockerfile:1.7
# caprl CPU image: the one `caprl` binary runs every role (learner, actor, reward-worker,
# data synth, eval) — the Kubernetes manifests pick the role with the first argument.
#
#   docker build -t caprl:dev .
#
# Dependency caching: the cargo registry, git checkouts and the target directory are
# BuildKit cache mounts, so a rebuild after a source edit recompiles only the workspace
# crates. The runtime stage is Debian slim with the binary, CA certificates and a
# non-root user (uid 10001), nothing else.

# At least the highest rust-version of the locked crates (tests/dockerfile_toolchain.rs).
ARG RUST_VERSION=1.89
ARG DEBIAN_RELEASE=bookworm

FROM rust:${RUST_VERSION}-slim-${DEBIAN_RELEASE} AS build
WORKDIR /src
# Only the paths the workspace build reads (tests/k8s_dockerfile.rs checks they exist).
COPY Cargo.toml Cargo.lock ./
COPY src src
COPY common common
COPY actor actor
COPY learner learner
COPY reward-worker reward-worker
COPY benches benches
COPY python python
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/usr/local/cargo/git \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin caprl \
    && install -D -m 0755 target/release/caprl /out/caprl

FROM debian:${DEBIAN_RELEASE}-slim AS runtime
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 10001 caprl \
    && useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/caprl --create-home caprl
COPY --from=build /out/caprl /usr/local/bin/caprl
USER 10001:10001
WORKDIR /var/lib/caprl
ENTRYPOINT ["/usr/local/bin/caprl"]
CMD ["--help"]
