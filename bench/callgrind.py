#!/usr/bin/env python3
"""Instructions per proxied request, counted by callgrind: a repeatable hot-path profile.

    python3 bench/callgrind.py                 # Weir at 1 and 10,000 routes, nginx; 20,000 requests each
    python3 bench/callgrind.py --routes 1 --requests 5000 --keep --no-nginx

Runs target/release/weir (1 worker, access log off), and nginx as the reference (1 worker,
upstream keep-alive, the same forwarding headers), under `valgrind --tool=callgrind`, a
`weir echo` upstream outside valgrind, and a keep-alive client in this process that sends a
fixed number of requests (spread over the routes). Counting starts after a warm-up
(`callgrind_control --instr=on`) and stops with `--dump`, so the figure is the proxy's user-space
instructions per request. Instruction counts do not depend on what else the machine is doing,
so before/after comparisons of a change need no quiet machine. `--keep` leaves the callgrind
file for `callgrind_annotate`.
"""

import argparse
import http.client
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
WEIR = REPO / "target" / "release" / "weir"
NGINX = shutil.which("nginx") or "/usr/sbin/nginx"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, limit: float = 60.0) -> None:
    deadline = time.time() + limit
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"port {port} did not open within {limit} s")


NGINX_CONF = """worker_processes 1;
error_log {tmp}/error.log warn;
pid {tmp}/nginx.pid;
events {{ worker_connections 1024; }}
http {{
  access_log off;
  client_body_temp_path {tmp}/cb; proxy_temp_path {tmp}/pt; fastcgi_temp_path {tmp}/ft;
  uwsgi_temp_path {tmp}/ut; scgi_temp_path {tmp}/st;
  upstream up {{ server 127.0.0.1:{up_port}; keepalive 64; }}
  server {{
    listen 127.0.0.1:{port};
    location / {{
      proxy_pass http://up;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header Host $host;
      proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
      proxy_set_header X-Forwarded-Proto $scheme;
      proxy_set_header X-Forwarded-Host $host;
      proxy_set_header X-Forwarded-Port $server_port;
      proxy_set_header X-Real-IP $remote_addr;
    }}
  }}
}}
"""


def proxy_command(contender: str, tmp: Path, routes: int, up_port: int, port: int) -> list:
    """The proxy under measurement: Weir with `routes` prefix routes, or nginx (one location,
    the same forwarding headers as Weir adds, upstream keep-alive)."""
    if contender == "nginx":
        (tmp / "nginx.conf").write_text(NGINX_CONF.format(tmp=tmp, up_port=up_port, port=port))
        return [NGINX, "-c", tmp / "nginx.conf", "-g", "daemon off; master_process off;"]
    table = {
        "version": 1,
        "routes": [{"id": f"r{i}", "paths": [{"path": f"/r/{i}"}], "service": "s"}
                   for i in range(routes)],
        "services": [{"id": "s", "host": "127.0.0.1", "port": up_port}],
    }
    (tmp / "table.json").write_text(json.dumps(table))
    return [WEIR, "proxy", "--worker-threads", "1", "--access-log", "false",
            "--listen", f"127.0.0.1:{port}", "--admin-listen", f"127.0.0.1:{free_port()}",
            "--config", tmp / "table.json"]


def run(contender: str, routes: int, requests: int, warmup: int, keep: bool,
        cache_sim: bool) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="weir-callgrind-"))
    up_port, port = free_port(), free_port()
    out = tmp / "callgrind.out"
    procs = []
    try:
        procs.append(subprocess.Popen(
            [WEIR, "echo", "--listen", f"127.0.0.1:{up_port}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        procs.append(subprocess.Popen(
            ["valgrind", "--tool=callgrind", "--compress-strings=no", "--instr-atstart=no",
             f"--cache-sim={'yes' if cache_sim else 'no'}", f"--callgrind-out-file={out}"]
            + proxy_command(contender, tmp, routes, up_port, port),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        wait_port(up_port)
        wait_port(port, 120)
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)

        def send(n: int) -> None:
            for i in range(n):
                conn.request("GET", f"/r/{i % routes}/x")
                resp = conn.getresponse()
                resp.read()
                if resp.status != 200:
                    raise SystemExit(f"status {resp.status}")

        send(warmup)
        pid = procs[1].pid
        subprocess.run(["callgrind_control", "--instr=on", str(pid)], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        send(requests)
        subprocess.run(["callgrind_control", "--dump", str(pid)], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        conn.close()
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
    # The dump after --zero is the only one with the measured requests: the largest numbered.
    dumps = sorted(tmp.glob("callgrind.out*"), key=lambda p: p.stat().st_mtime)
    measured = [p for p in dumps if re.search(r"\.\d+$", p.name)]
    text = (measured[0] if measured else dumps[-1]).read_text(errors="replace")
    events = re.search(r"^events: (.+)$", text, re.M).group(1).split()
    totals = [int(x) for x in re.search(r"^(?:summary|totals): (.+)$", text, re.M).group(1).split()]
    per = dict(zip(events, totals))
    result = {"contender": contender, "routes": routes, "requests": requests,
              "instructions_per_request": per["Ir"] // requests}
    if cache_sim:
        # Last-level misses stand in for the cache misses that more routes could cause.
        for e in ("D1mr", "DLmr", "DLmw", "ILmr"):
            result[f"{e}_per_request"] = round(per.get(e, 0) / requests, 1)
    if keep:
        result["callgrind_file"] = str(measured[0] if measured else dumps[-1])
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--routes", type=int, action="append", help="route counts (default 1 and 10000)")
    ap.add_argument("--requests", type=int, default=20_000)
    ap.add_argument("--warmup", type=int, default=2_000)
    ap.add_argument("--keep", action="store_true", help="keep the callgrind output")
    ap.add_argument("--cache-sim", action="store_true", help="also count simulated cache misses")
    ap.add_argument("--no-nginx", action="store_true", help="skip the nginx reference run")
    args = ap.parse_args()
    if not WEIR.exists():
        raise SystemExit("build first: cargo build --release")
    runs = [("weir", n) for n in args.routes or [1, 10_000]]
    if not args.no_nginx:
        runs.append(("nginx", 1))
    results = []
    for contender, n in runs:
        r = run(contender, n, args.requests, max(args.warmup, n), args.keep, args.cache_sim)
        results.append(r)
        print(json.dumps(r), flush=True)
    ngx = next((r for r in results if r["contender"] == "nginx"), None)
    if ngx:
        for r in results:
            if r["contender"] == "weir":
                ratio = r["instructions_per_request"] / ngx["instructions_per_request"]
                print(f"weir, {r['routes']} route(s): {ratio:.2f}x nginx's instructions per request")


if __name__ == "__main__":
    sys.exit(main())
