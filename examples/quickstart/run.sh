#!/usr/bin/env bash
# The quick start: two `weir echo` upstreams on 127.0.0.1:9001 and :9002, and Weir in
# standalone mode serving this folder on http://127.0.0.1:8080 and https://127.0.0.1:8443.
# Ctrl-C stops everything.
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo build --release --bin weir
bin=target/release/weir
"$bin" echo --listen 127.0.0.1:9001 --name echo-a &
a=$!
"$bin" echo --listen 127.0.0.1:9002 --name echo-b &
b=$!
trap 'kill "$a" "$b" 2>/dev/null || true' EXIT
echo "Weir listens on http://127.0.0.1:8080 (admin on 127.0.0.1:8100). Try:"
echo "  curl -i http://127.0.0.1:8080/echo/hello"
echo "  curl -i http://127.0.0.1:8080/closed"
echo "  curl -i --cacert tests/fixtures/tls/ca.crt --resolve a.example.test:8443:127.0.0.1 https://a.example.test:8443/echo/hello"
"$bin" standalone examples/quickstart --listen 127.0.0.1:8080 --tls-listen 127.0.0.1:8443 "$@"
