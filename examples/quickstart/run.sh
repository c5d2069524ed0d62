#!/usr/bin/env bash
# The quick start: two `weir echo` upstreams on 127.0.0.1:9001 and :9002, and Weir in
# standalone mode serving this folder on http://127.0.0.1:8080 and https://127.0.0.1:8443.
# Ctrl-C, SIGTERM to this script, or Weir stopping ends everything it started.
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo build --release --bin weir
bin=target/release/weir

pids=()
stop() {
  trap - TERM INT EXIT
  kill "${pids[@]}" 2>/dev/null || true
  wait 2>/dev/null || true
}
trap 'stop; exit 143' TERM
trap 'stop; exit 130' INT
trap stop EXIT

"$bin" echo --listen 127.0.0.1:9001 --name echo-a &
pids+=($!)
"$bin" echo --listen 127.0.0.1:9002 --name echo-b &
pids+=($!)
"$bin" standalone examples/quickstart --listen 127.0.0.1:8080 --tls-listen 127.0.0.1:8443 "$@" &
weir=$!
pids+=("$weir")

# Say where Weir listens once it is ready (its admin API says so: a port that merely accepts
# connections could be another program's); if it stopped instead (a port in use, say), its own
# error is what the user needs, and this script ends with its status.
ready() {
  exec 3<>/dev/tcp/127.0.0.1/8100 || return 1
  printf 'GET /readyz HTTP/1.1\r\nHost: weir\r\nConnection: close\r\n\r\n' >&3
  grep -q '"status": "ready"' <&3
}
for _ in $(seq 1 100); do
  if (ready) 2>/dev/null; then
    break
  fi
  if ! kill -0 "$weir" 2>/dev/null; then
    wait "$weir" || exit $?
    exit 1
  fi
  sleep 0.1
done
# Ready, and still the Weir this script started (not one left over on the admin port).
if ! (ready) 2>/dev/null || ! kill -0 "$weir" 2>/dev/null; then
  echo "Weir did not become ready within 10 s; see its log above" >&2
  exit 1
fi
echo "Weir listens on http://127.0.0.1:8080 and https://127.0.0.1:8443 (admin on 127.0.0.1:8100). Try:"
echo "  curl -i http://127.0.0.1:8080/echo/hello"
echo "  curl -i http://127.0.0.1:8080/closed"
echo "  curl -i --cacert tests/fixtures/tls/ca.crt --resolve a.example.test:8443:127.0.0.1 https://a.example.test:8443/echo/hello"
wait "$weir"
