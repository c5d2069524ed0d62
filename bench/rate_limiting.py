#!/usr/bin/env python3
"""What rate limiting costs: requests per second through one Weir process on three routes, no
plugin, `rate-limiting` with `policy: local`, and with `policy: redis` against a real
`redis-server`, as ratios to the plain route measured in the same run.

    cargo build --release
    python3 bench/rate_limiting.py                       # 3 rounds x 5 s per route
    python3 bench/rate_limiting.py --seconds 10 --rounds 5 --weir PATH

The proxy runs one worker pinned to CPU 0; wrk, the upstream (nginx answering 64 bytes) and
redis-server share CPU 1. The limits are far above the load (every request is allowed), so the
figure is the cost of a decision: the local counters, or one EVALSHA round trip to Redis per
request. The routes are measured in turn, round after round, so drift affects them alike.
Needs nginx, wrk, redis-server and taskset.
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


def start(argv: list, cpu: str, **kw) -> subprocess.Popen:
    return subprocess.Popen(["taskset", "-c", cpu] + argv, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, **kw)


def nginx_upstream(tmp: Path, port: int) -> subprocess.Popen:
    conf = tmp / "nginx.conf"
    conf.write_text(f"""
worker_processes 1; daemon off; pid {tmp}/nginx.pid; error_log /dev/null;
events {{ worker_connections 4096; }}
http {{ access_log off;
  server {{ listen {HOST}:{port} reuseport; keepalive_requests 1000000;
    location / {{ return 200 "{'x' * 64}"; }} }} }}
""")
    return start(["nginx", "-c", str(conf), "-p", str(tmp)], "1")


def table(up_port: int, redis_port: int) -> dict:
    # Limits no load reaches: every request is decided and allowed.
    limit = {"second": 100_000_000, "limit_by": "ip"}
    return {
        "routes": [{"id": r, "paths": [{"path": f"/{r}"}], "service": "s"}
                   for r in ("plain", "local", "redis")],
        "services": [{"id": "s", "upstream": "u"}],
        "upstreams": [{"id": "u", "targets": [{"target": f"{HOST}:{up_port}"}]}],
        "plugins": [
            {"id": "rl-local", "name": "rate-limiting", "route": "local",
             "config": dict(limit, policy="local")},
            {"id": "rl-redis", "name": "rate-limiting", "route": "redis",
             "config": dict(limit, policy="redis",
                            redis={"host": HOST, "port": redis_port, "timeout": 1000})},
        ],
    }


def wrk(url: str, seconds: int, connections: int, headers: tuple = ()) -> float:
    extra = [a for h in headers for a in ("-H", h)]
    out = subprocess.run(["taskset", "-c", "1", "wrk", "-t1", f"-c{connections}",
                          f"-d{seconds}s", *extra, url], capture_output=True, text=True,
                         check=True).stdout
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if non2xx:
        raise RuntimeError(f"{url}: {non2xx.group(1)} failed responses\n{out}")
    return float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))


def main() -> int:
    ap = parser(__doc__)
    ap.add_argument("--connections", type=int, default=32)
    args = ap.parse_args()
    if not have(("nginx", "wrk", "redis-server", "taskset")):
        return 2
    tmp = Path(tempfile.mkdtemp(prefix="weir-rl-bench-"))
    procs = []
    try:
        up_port, redis_port, port, admin = free_port(), free_port(), free_port(), free_port()
        procs.append(nginx_upstream(tmp, up_port))
        procs.append(start(["redis-server", "--port", str(redis_port), "--bind", HOST, "--save", "",
                            "--appendonly", "no"], "1"))
        (tmp / "table.json").write_text(json.dumps(table(up_port, redis_port)))
        procs.append(start([str(args.weir), "proxy", "--config", str(tmp / "table.json"),
                            "--listen", f"{HOST}:{port}", "--admin-listen", f"{HOST}:{admin}",
                            "--worker-threads", "1"], "0", env={"RUST_LOG": "warn"}))
        for p in (up_port, redis_port, port):
            wait_port(p)
        time.sleep(0.5)
        # The warm-up opens the connections and fills Redis's script cache.
        med = measure(("plain", "local", "redis"),
                      lambda r, s: wrk(f"http://{HOST}:{port}/{r}", s, args.connections),
                      args.seconds, args.rounds)
        write("rate_limiting", {
            "requests_per_second": med,
            "ratio_to_plain": ratios(med, "plain"),
            "rounds": args.rounds, "seconds": args.seconds, "connections": args.connections,
        })
        return 0
    finally:
        stop(procs, tmp)


if __name__ == "__main__":
    sys.exit(main())
