#!/usr/bin/env python3
"""What a mirror costs the client: requests per second (at saturation) and p99 latency (at a
paced load of about 10,000 requests per second, a third of what the worker serves) through one
Weir process on routes without a mirror, with a mirror that answers a second late, with a
mirror that never answers, and with a dead mirror (connection refused), measured in turn in
the same run; ratios to the route without a mirror.

    cargo build --release
    python3 bench/mirror.py                      # 3 rounds x 5 s per route
    python3 bench/mirror.py --seconds 10 --rounds 5 --weir PATH

The setup is bench/rate_limiting.py's: the proxy runs one worker pinned to CPU 0 with its
defaults (access log on, to a file); wrk, the upstream (nginx answering 64 bytes) and the
mirrors (one Python process) share CPU 1. The slow and hanging mirrors hold every copy
they get, so they show both the copies' own cost and the bound on copies in flight
(`weir_mirror_requests_total{outcome="dropped"}`, printed at the end).
Needs nginx, wrk and taskset.
"""

import re
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from callgrind import free_port, wait_port
from common import have, measure, parser, ratios, stop, write
from rate_limiting import nginx_upstream, start

HOST = "127.0.0.1"

# Two mirrors in one process: one answers each request a second late, one never answers.
MIRRORS = """
import asyncio, sys
async def slow(r, w):
    try:
        while True:
            head = await r.readuntil(b"\\r\\n\\r\\n")
            n = 0
            for line in head.split(b"\\r\\n"):
                if line.lower().startswith(b"content-length:"):
                    n = int(line.split(b":")[1])
            await r.readexactly(n)
            await asyncio.sleep(1)
            w.write(b"HTTP/1.1 200 OK\\r\\ncontent-length: 0\\r\\n\\r\\n")
            await w.drain()
    except Exception:
        w.close()
async def hang(r, w):
    await asyncio.sleep(3600)
async def main():
    a = await asyncio.start_server(slow, "127.0.0.1", int(sys.argv[1]), backlog=4096)
    b = await asyncio.start_server(hang, "127.0.0.1", int(sys.argv[2]), backlog=4096)
    await asyncio.gather(a.serve_forever(), b.serve_forever())
asyncio.run(main())
"""


def table(up_port: int, slow: int, hang: int, dead: int) -> dict:
    mirrors = {"slow": slow, "hanging": hang, "dead": dead}
    return {
        "routes": [{"id": "plain", "paths": [{"path": "/plain"}], "service": "s"}] + [
            {"id": name, "paths": [{"path": f"/{name}"}], "service": "s",
             "mirrors": [{"service": f"mirror-{name}"}]} for name in mirrors],
        "services": [{"id": "s", "upstream": "u"}] + [
            {"id": f"mirror-{name}", "host": HOST, "port": port, "retries": 0}
            for name, port in mirrors.items()],
        "upstreams": [{"id": "u", "targets": [{"target": f"{HOST}:{up_port}"}]}],
    }


# Each connection waits 2 ms after each answer: 20 connections send at most 10,000 a second.
PACED = "function delay() return 2 end"


def wrk(url: str, seconds: int, connections: int, paced: Path | None = None) -> tuple:
    """Requests per second and p99 latency in milliseconds; `paced`: a wrk script pacing
    each connection."""
    script = ["-s", str(paced)] if paced else []
    out = subprocess.run(["taskset", "-c", "1", "wrk", "-t1", f"-c{connections}", "--latency",
                          f"-d{seconds}s", *script, url], capture_output=True, text=True,
                         check=True).stdout
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if non2xx:
        raise RuntimeError(f"{url}: {non2xx.group(1)} failed responses\n{out}")
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    value, unit = re.search(r"99%\s+([\d.]+)(us|ms|s)", out).groups()
    p99 = float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]
    return rps, p99


def main() -> int:
    ap = parser(__doc__)
    ap.add_argument("--connections", type=int, default=32)
    args = ap.parse_args()
    if not have(("nginx", "wrk", "taskset")):
        return 2
    tmp = Path(tempfile.mkdtemp(prefix="weir-mirror-bench-"))
    procs = []
    try:
        up_port, port, admin = free_port(), free_port(), free_port()
        slow, hang, dead = free_port(), free_port(), free_port()
        procs.append(nginx_upstream(tmp, up_port))
        procs.append(start([sys.executable, "-c", MIRRORS, str(slow), str(hang)], "1"))
        (tmp / "table.json").write_text(__import__("json").dumps(table(up_port, slow, hang, dead)))
        log = open(tmp / "access.log", "w")
        procs.append(subprocess.Popen(
            ["taskset", "-c", "0", str(args.weir), "proxy", "--config", str(tmp / "table.json"),
             "--listen", f"{HOST}:{port}", "--admin-listen", f"{HOST}:{admin}",
             "--worker-threads", "1"], stdout=log, stderr=subprocess.DEVNULL,
            env={"RUST_LOG": "warn"}))
        for p in (up_port, port, slow, hang):
            wait_port(p)
        time.sleep(0.5)
        (tmp / "paced.lua").write_text(PACED)
        p99 = {}

        def one(route: str, seconds: int) -> float:
            url = f"http://{HOST}:{port}/{route}"
            rps, _ = wrk(url, seconds, args.connections)
            if seconds > 1:
                _, p = wrk(url, seconds, 20, tmp / "paced.lua")
                p99.setdefault(route, []).append(p)
            return rps

        routes = ("plain", "slow", "hanging", "dead")
        med = measure(routes, one, args.seconds, args.rounds)
        p99_med = {r: sorted(v)[len(v) // 2] for r, v in p99.items()}
        metrics = urllib.request.urlopen(f"http://{HOST}:{admin}/metrics").read().decode()
        copies = [l for l in metrics.splitlines() if l.startswith("weir_mirror_requests_total")]
        write("mirror", {
            "requests_per_second": med,
            "ratio_to_plain": ratios(med, "plain"),
            "paced_p99_ms": p99_med,
            "paced_p99_ratio_to_plain": {r: round(v / p99_med["plain"], 3) for r, v in p99_med.items()},
            "copies": copies,
            "rounds": args.rounds, "seconds": args.seconds, "connections": args.connections,
        })
        return 0
    finally:
        stop(procs, tmp)


if __name__ == "__main__":
    sys.exit(main())
