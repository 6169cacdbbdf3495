# The harness and the fault-server in one image; docker-compose.yml runs both from it, each
# service with its own command (`just up`; docs/docker.md).
#
# Two stages: the workspace is compiled on the Rust image, and only the two binaries and
# the plans are copied into a slim Debian one. Both stages are Debian 12 (bookworm), so the
# binaries run against the glibc they were linked with.

# The builder. The workspace needs Rust >= 1.88 (edition 2024); 1.95.0 is the toolchain
# the lockfile is built and tested with. No system libraries are needed: HTTP is plain
# (no TLS), and the slim image's gcc covers the crates that compile C.
FROM rust:1.95.0-slim-bookworm AS builder
WORKDIR /src
COPY . .
# --locked: the image gets exactly the dependencies Cargo.lock names. The cache mounts
# (BuildKit, the default builder of Docker Engine 23 and later and of `docker compose`)
# keep the crate registry and the target directory between builds, so a rebuild after an
# edit compiles only what changed; the binaries are copied out of the cached target
# directory in the same step, since the cache is not part of the image.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p harness -p fault-server \
    && install -D -m 0755 -t /out target/release/harness target/release/fault-server

# The runtime: the two binaries, the plans, a user that is not root.
FROM debian:12.12-slim
# uid 1000, the usual first user of a Linux machine, so the reports the harness writes
# into the bind-mounted ./reports belong to you (docker-compose.yml runs the harness as
# your uid and gid when `just up` starts it).
RUN groupadd --gid 1000 chaos \
    && useradd --uid 1000 --gid chaos --home-dir /app --no-create-home --shell /usr/sbin/nologin chaos
COPY --from=builder /out/harness /out/fault-server /usr/local/bin/
WORKDIR /app
COPY plans/ /app/plans/
# Reports land in /app/reports/<plan>/<timestamp>/ (the harness writes under its working
# directory); the directory exists and is writable even without a mount.
RUN mkdir /app/reports && chown chaos:chaos /app/reports
USER chaos
# Each compose service gives its own command; alone, the image explains itself.
CMD ["harness", "--help"]
