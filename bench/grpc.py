#!/usr/bin/env python3
"""gRPC-shaped unary calls over HTTP/2: requests per second straight to the upstream, through
Weir (`protocol: grpc`), and through nginx's `grpc_pass`, measured in turn in one run.

    cargo build --release
    python3 bench/grpc.py                       # 3 rounds x 5 s per contender
    python3 bench/grpc.py --seconds 10 --rounds 5 --weir PATH
    python3 bench/grpc.py --weir OLD --echo target/release/weir   # an older proxy, today's upstream

Every call is a POST with `content-type: application/grpc`, `te: trailers` and one 5-byte
length-prefixed message, from h2load (nghttp2) over h2c: 32 connections, 8 streams each. The
upstream is `weir echo` (an h2c server, which answers a gRPC call as a gRPC server does: the
message back, then `grpc-status: 0` in trailers) on CPU 1 with h2load; Weir and nginx each run
one worker pinned to CPU 0, one after the other, so each proxy forwards the trailers of every
call. Needs h2load (`apt-get install nghttp2-client`), nginx and taskset.
"""

import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from callgrind import free_port, wait_port  # bench/ is this script's folder, so on sys.path
from common import have, measure, parser, ratios, stop, write

HOST = "127.0.0.1"
PATH = "/weir.test.Echo/Unary"


def start(argv: list, cpu: str, **kw) -> subprocess.Popen:
    return subprocess.Popen(["taskset", "-c", cpu] + argv, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, **kw)


def h2load(port: int, body: Path, seconds: int) -> float:
    out = subprocess.run(
        ["taskset", "-c", "1", "h2load", "-c", "32", "-m", "8", "-D", str(seconds),
         "-H", "content-type: application/grpc", "-H", "te: trailers", "-d", str(body),
         f"http://{HOST}:{port}{PATH}"],
        capture_output=True, text=True, check=True).stdout
    # With -D, the calls in flight when time is up count as failed: at most 32 x 8 of them.
    failed = re.search(r"requests: .* (\d+) failed", out)
    codes = re.search(r"status codes: \d+ 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx", out)
    if not failed or int(failed.group(1)) > 256 or not codes or codes.groups() != ("0", "0", "0"):
        raise RuntimeError(f"failed calls through port {port}:\n{out}")
    return float(re.search(r"finished in [\d.]+\w+, ([\d.]+) req/s", out).group(1))


def main() -> int:
    ap = parser(__doc__)
    ap.add_argument("--echo", type=Path, help="the binary whose `weir echo` is the upstream "
                    "(default: --weir), to compare two proxies behind one upstream")
    args = ap.parse_args()
    if not have(("h2load", "nginx", "taskset")):
        return 2
    tmp = Path(tempfile.mkdtemp(prefix="weir-grpc-bench-"))
    procs = []
    try:
        up, weir_port, admin, nginx_port = free_port(), free_port(), free_port(), free_port()
        body = tmp / "call.bin"
        body.write_bytes(bytes([0, 0, 0, 0, 5]) + b"hello")
        procs.append(start([str(args.echo or args.weir), "echo", "--listen", f"{HOST}:{up}", "--name", "up"], "1",
                           env={"RUST_LOG": "warn"}))
        (tmp / "table.json").write_text(json.dumps({
            "routes": [{"id": "g", "paths": [{"path": "/weir.test.Echo"}], "service": "g"}],
            "services": [{"id": "g", "protocol": "grpc", "host": HOST, "port": up}],
        }))
        procs.append(start([str(args.weir), "proxy", "--config", str(tmp / "table.json"),
                            "--listen", f"{HOST}:{weir_port}", "--admin-listen", f"{HOST}:{admin}",
                            "--worker-threads", "1", "--access-log", "false"], "0",
                           env={"RUST_LOG": "warn"}))
        (tmp / "nginx.conf").write_text(f"""
worker_processes 1; daemon off; pid {tmp}/nginx.pid; error_log /dev/null;
events {{ worker_connections 4096; }}
http {{ access_log off; keepalive_requests 10000000;
  upstream up {{ server {HOST}:{up}; keepalive 64; keepalive_requests 10000000; }}
  server {{ listen {HOST}:{nginx_port} http2; http2_max_concurrent_streams 128;
    location / {{ grpc_pass grpc://up; }} }} }}
""")
        procs.append(start(["nginx", "-c", str(tmp / "nginx.conf"), "-p", str(tmp)], "0"))
        for p in (up, weir_port, nginx_port):
            wait_port(p)
        time.sleep(0.5)
        contenders = {"direct": up, "weir": weir_port, "nginx": nginx_port}
        med = measure(contenders, lambda c, s: h2load(contenders[c], body, s), args.seconds,
                      args.rounds)
        write("grpc", {
            "requests_per_second": med,
            "ratio_to_direct": ratios(med, "direct"),
            "weir_to_nginx": round(med["weir"] / med["nginx"], 3),
            "rounds": args.rounds, "seconds": args.seconds,
        })
        return 0
    finally:
        stop(procs, tmp)


if __name__ == "__main__":
    sys.exit(main())
