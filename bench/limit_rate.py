#!/usr/bin/env python3
"""How closely Weir's response pacing (`response_rate`, ingress-nginx's `limit-rate` and
`limit-rate-after`) keeps to its limit, against nginx's own `limit_rate` and
`limit_rate_after` in the same run: one download at a time and several at once, each a 1 MiB
answer from an nginx upstream, with 128 KiB free and 512 KiB a second after that.

    cargo build --release
    python3 bench/limit_rate.py                  # 3 rounds
    python3 bench/limit_rate.py --rounds 5 --weir PATH

For each contender: the time to the end of the free bytes (how fast the free part goes), the
paced rate (bytes after the free ones over the time they took) as a ratio to the limit, and the
same with --parallel downloads at once (the limit is per request, so each should get it).
Weir runs with its defaults (access log on, to a file). Needs nginx and taskset.
"""

import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from callgrind import free_port, wait_port
from common import have, parser, stop, write
from rate_limiting import start

HOST = "127.0.0.1"
SIZE = 1 << 20
FREE = 128 << 10
RATE = 512 << 10


def upstream(tmp: Path, port: int) -> subprocess.Popen:
    # nginx's workers run as another user: the answer must be readable to them.
    tmp.chmod(0o755)
    (tmp / "www").mkdir(mode=0o755)
    (tmp / "www/big").write_bytes(b"x" * SIZE)
    conf = tmp / "upstream.conf"
    conf.write_text(f"""
worker_processes 1; daemon off; pid {tmp}/upstream.pid; error_log /dev/null;
events {{ worker_connections 1024; }}
http {{ access_log off;
  server {{ listen {HOST}:{port}; root {tmp}/www; }} }}
""")
    return start(["nginx", "-c", str(conf), "-p", str(tmp)], "1")


def nginx_proxy(tmp: Path, port: int, up: int) -> subprocess.Popen:
    conf = tmp / "proxy.conf"
    conf.write_text(f"""
worker_processes 1; daemon off; pid {tmp}/proxy.pid; error_log /dev/null;
events {{ worker_connections 1024; }}
http {{ access_log {tmp}/nginx-access.log;
  upstream u {{ server {HOST}:{up}; keepalive 16; }}
  server {{ listen {HOST}:{port};
    location / {{ proxy_pass http://u; proxy_http_version 1.1; proxy_set_header Connection "";
      limit_rate {RATE // 1024}k; limit_rate_after {FREE // 1024}k; }} }} }}
""")
    return start(["nginx", "-c", str(conf), "-p", str(tmp)], "0")


def table(up: int) -> dict:
    return {
        "routes": [{"id": "paced", "paths": [{"path": "/"}], "service": "s",
                    "response_rate": {"bytes_per_second": RATE, "after_bytes": FREE}}],
        "services": [{"id": "s", "host": HOST, "port": up}],
    }


def download(url: str) -> tuple:
    """Seconds to the end of the free bytes, and the paced rate after them (bytes/s)."""
    start_t = time.monotonic()
    got, free_done = 0, None
    with urllib.request.urlopen(url, timeout=60) as r:
        while chunk := r.read(16 << 10):
            got += len(chunk)
            if free_done is None and got >= FREE:
                free_done = time.monotonic()
    end = time.monotonic()
    if got != SIZE:
        raise RuntimeError(f"{url}: {got} bytes of {SIZE}")
    return free_done - start_t, (SIZE - FREE) / (end - free_done)


def parallel(url: str, n: int) -> list:
    out = [None] * n

    def one(i):
        out[i] = download(url)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def main() -> int:
    ap = parser(__doc__)
    ap.add_argument("--parallel", type=int, default=8)
    args = ap.parse_args()
    if not have(("nginx", "taskset")):
        return 2
    tmp = Path(tempfile.mkdtemp(prefix="weir-limit-rate-bench-"))
    procs = []
    try:
        up, weir, admin, ngx = free_port(), free_port(), free_port(), free_port()
        procs.append(upstream(tmp, up))
        procs.append(nginx_proxy(tmp, ngx, up))
        (tmp / "table.json").write_text(__import__("json").dumps(table(up)))
        log = open(tmp / "access.log", "w")
        procs.append(subprocess.Popen(
            ["taskset", "-c", "0", str(args.weir), "proxy", "--config", str(tmp / "table.json"),
             "--listen", f"{HOST}:{weir}", "--admin-listen", f"{HOST}:{admin}",
             "--worker-threads", "1"], stdout=log, stderr=subprocess.DEVNULL,
            env={"RUST_LOG": "warn"}))
        for p in (up, weir, ngx):
            wait_port(p)
        urls = {"weir": f"http://{HOST}:{weir}/big", "nginx": f"http://{HOST}:{ngx}/big"}
        single = {n: [] for n in urls}
        many = {n: [] for n in urls}
        for i in range(args.rounds):
            for name, url in urls.items():
                single[name].append(download(url))
                many[name].extend(parallel(url, args.parallel))
            print(f"round {i + 1}: " + ", ".join(
                f"{n} {single[n][-1][1] / RATE:.3f}" for n in urls), file=sys.stderr)

        def summary(samples: list) -> dict:
            return {
                "free_bytes_ms": round(statistics.median(s[0] for s in samples) * 1000, 1),
                "paced_rate_to_limit": round(statistics.median(s[1] for s in samples) / RATE, 3),
                "slowest_paced_rate_to_limit": round(min(s[1] for s in samples) / RATE, 3),
            }

        write("limit_rate", {
            "limit_bytes_per_second": RATE, "free_bytes": FREE, "answer_bytes": SIZE,
            "one_at_a_time": {n: summary(v) for n, v in single.items()},
            f"{args.parallel}_at_once": {n: summary(v) for n, v in many.items()},
            "rounds": args.rounds,
        })
        return 0
    finally:
        stop(procs, tmp)


if __name__ == "__main__":
    sys.exit(main())
