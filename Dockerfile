# syntax=docker/dockerfile:1
# The `weir` image: one static-ish binary (glibc) on distroless/cc, run as a non-root numeric user.
#
#   docker build -t weir:0.1.0 .
#   docker build --target debug-info --output type=local,dest=out .   # out/weir.debug
#
# The builder and the runtime base are the same Debian release (bookworm = debian12), so the
# binary's glibc matches the runtime's.

ARG RUST_VERSION=1.95

FROM rust:${RUST_VERSION}-bookworm AS build
WORKDIR /src

# 1. Dependencies only: the manifests and the lock file with stub sources, so this layer (the
#    slow part: every crate of Cargo.lock, fat LTO aside) is reused until a manifest changes.
COPY Cargo.toml Cargo.lock ./
COPY proxy/Cargo.toml proxy/
COPY crds/Cargo.toml crds/
COPY controller/Cargo.toml controller/
RUN mkdir -p src proxy/src proxy/benches crds/src controller/src controller/benches \
 && echo 'fn main() {}' > src/main.rs \
 && touch proxy/src/lib.rs crds/src/lib.rs controller/src/lib.rs \
          proxy/benches/router.rs controller/benches/translate.rs \
 && cargo build --release --locked --bin weir \
 && rm -rf src proxy crds controller target/release/weir target/release/deps/*weir* \
           target/release/.fingerprint/weir*
# (Deleting Weir's own fingerprints makes the next build compile the real sources whatever
# their modification times.)

# 2. Weir itself. The release profile keeps line tables (debug = "line-tables-only"): they move
#    to out/weir.debug (the debug-info stage below) and the image gets the binary without them
#    (99 MB -> 24 MB). Symbols stay, so panics and profilers still name functions. The last
#    line checks that this is the real binary, not the stub of step 1. Every path is relative
#    to WORKDIR, so tests/dockerfile.rs runs these same lines outside a container.
#    `weir version` shows WEIR_GIT_COMMIT (a build context has no .git) and SOURCE_DATE_EPOCH
#    (the release workflow passes the commit's time, so two builds of a tag agree).
ARG WEIR_GIT_COMMIT=unknown
ARG SOURCE_DATE_EPOCH
COPY build.rs build.rs
COPY src src
COPY proxy proxy
COPY crds crds
COPY controller controller
RUN cargo build --release --locked --bin weir \
 && mkdir -p out \
 && cp target/release/weir out/weir \
 && objcopy --only-keep-debug out/weir out/weir.debug \
 && objcopy --strip-debug --add-gnu-debuglink=out/weir.debug out/weir \
 && ./out/weir crds | grep -q 'name: plugins.weir.dev'

# `docker build --target debug-info --output …` exports the debug info alone.
FROM scratch AS debug-info
COPY --from=build /src/out/weir.debug /weir.debug

# distroless/cc: glibc, libgcc, CA certificates (/etc/ssl/certs) and tzdata; no shell, no
# package manager. The `nonroot` variant's user is 65532:65532, which the chart also sets.
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /src/out/weir /usr/bin/weir
# The chart's preStop pause on Kubernetes < 1.30 (no `sleep` lifecycle action there) runs
# /usr/bin/sleep; coreutils' sleep needs nothing but glibc.
COPY --from=build /usr/bin/sleep /usr/bin/sleep
USER 65532:65532
# proxy HTTP, HTTPS, status; controller metrics (the chart's defaults). The admin API
# (127.0.0.1:8100) is loopback-only.
EXPOSE 8080 8443 8102 8101
ENTRYPOINT ["/usr/bin/weir"]
CMD ["--help"]
