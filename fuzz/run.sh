#!/usr/bin/env bash
# Runs every fuzz target for SECONDS each, from the committed seeds, then prints the executions
# per target. Needs `cargo +nightly fuzz` (cargo install cargo-fuzz).
#
#   fuzz/run.sh SECONDS [TARGET...]
#
# The seeds in fuzz/seeds/<target>/ are copied into fuzz/corpus/<target>/ (git-ignored), where
# the fuzzer also keeps what it grows; crashes land in fuzz/artifacts/<target>/, each run's log
# in fuzz/logs/<target>.log. Exits non-zero if any target failed. On a shared machine, wrap the
# whole run in the build lock: `flock /tmp/weir-build.lock fuzz/run.sh 60`.
set -uo pipefail

secs=${1:?usage: fuzz/run.sh SECONDS [TARGET...]}
shift
cd "$(dirname "$0")"
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  targets=(request_head chunked response_head path_routing resp_reply dns_response client_hello)
fi
# -a: debug assertions (overflow checks) on, in the build and in every run (the same flags, so
# `run` does not rebuild).
flags=(+nightly fuzz run -a)

if ! cargo +nightly fuzz build -a; then
  echo "fuzz build failed" >&2
  exit 2
fi

mkdir -p logs
declare -A execs seconds status
failed=0
for t in "${targets[@]}"; do
  mkdir -p "corpus/$t" "artifacts/$t"
  cp -n seeds/"$t"/* "corpus/$t/" 2>/dev/null || true
  start=$(date +%s)
  cargo "${flags[@]}" "$t" "corpus/$t" -- \
    -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -max_len=4096 \
    -print_final_stats=1 >"logs/$t.log" 2>&1
  rc=$?
  seconds[$t]=$(($(date +%s) - start))
  execs[$t]=$(sed -n 's/^stat::number_of_executed_units: *//p' "logs/$t.log" | tail -1)
  if [ $rc -eq 0 ]; then
    status[$t]=ok
  else
    status[$t]="FAILED (rc $rc; see fuzz/logs/$t.log, fuzz/artifacts/$t/)"
    failed=1
  fi
done

printf '\n%-16s %12s %8s  %s\n' target executions seconds result
for t in "${targets[@]}"; do
  printf '%-16s %12s %8s  %s\n' "$t" "${execs[$t]:-?}" "${seconds[$t]}" "${status[$t]}"
done
exit $failed
