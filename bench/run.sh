#!/usr/bin/env bash
# Weir against nginx and HAProxy, one worker each, same upstream, same wrk load.
#
#   bench/run.sh                 full run (3 x 10 s per contender and scenario, ~25 min)
#   bench/run.sh --quick         smoke test (1 x 3 s)
#   bench/run.sh --help          every option (scenarios, contenders, reps, pinning, ...)
#   bench/run.sh --skip-build    use target/release/weir as it is
#   bench/run.sh --access-log off   every contender without access logs (default: on, as shipped)
#   WEIR_BASE_BIN=/tmp/weir-old bench/run.sh   also run another Weir build ("weir-base"), for a
#                                before/after comparison in the same run
#
# Builds Weir in release mode (under the shared build lock), installs nginx, haproxy and wrk
# with apt-get when missing, then runs bench/weirbench.py. Results: bench/results/*.json.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$here")"

skip_build=0
args=()
for a in "$@"; do
  case "$a" in
    --skip-build) skip_build=1 ;;
    *) args+=("$a") ;;
  esac
done

case " ${args[*]-} " in
  *" --help "*|*" -h "*|*" --report "*) exec python3 "$here/weirbench.py" "${args[@]}" ;;
esac

python3 -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' \
  || { echo "bench needs Python 3.11 or newer" >&2; exit 1; }

missing=()
command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || missing+=(nginx)
command -v haproxy >/dev/null 2>&1 || [ -x /usr/sbin/haproxy ] || missing+=(haproxy)
command -v wrk >/dev/null 2>&1 || missing+=(wrk)
command -v taskset >/dev/null 2>&1 || missing+=(util-linux)
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing ${missing[*]} ..." >&2
  sudo_=""
  [ "$(id -u)" -eq 0 ] || sudo_="sudo"
  $sudo_ apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_ apt-get install -y -qq "${missing[@]}" >/dev/null
fi
# The Debian packages may start system-wide services; the bench uses its own instances only.

if [ "$skip_build" -eq 0 ]; then
  echo "building weir (release) ..." >&2
  (cd "$repo" && flock /tmp/weir-build.lock cargo build --release --quiet)
fi

exec python3 "$here/weirbench.py" "${args[@]}"
