#!/usr/bin/env python3
"""Does a plugin that waits hold up other requests? Latency of a plain route, alone and while
200 requests on another route are parked in a plugin's network round trip.

    cargo build --tests                         # the test build carries the test-* plugins
    python3 bench/await_plugin.py               # target/debug/weir, 2 workers
    python3 bench/await_plugin.py --weir PATH --workers 1 --requests 500

The `test-await` plugin (compiled only into test builds) sends `PING` to a line service in its
`access` handler and waits for the answer. The line service here holds every answer until told
to release them, so the parked requests stay parked while the plain route `/fast` is measured:
`--requests` sequential keep-alive GETs, once before parking and once with all of them parked.
The figure is the ratio of the two latency distributions in the same run (1.0 means the parked
requests cost the other route nothing); absolute times depend on the build and the machine.
"""

import argparse
import http.client
import json
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from callgrind import free_port, wait_port  # bench/ is this script's folder, so on sys.path

HOST = "127.0.0.1"
REPO = Path(__file__).resolve().parent.parent


class Gate:
    """A line service answering `PONG` to each `PING` once released."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind((HOST, 0))
        self.sock.listen(1024)
        self.port = self.sock.getsockname()[1]
        self.waiting = 0
        self.lock = threading.Lock()
        self.released = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            conn, _ = self.sock.accept()
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            f = conn.makefile("rb")
            if not f.readline():
                return
            with self.lock:
                self.waiting += 1
            self.released.wait(120)
            conn.sendall(b"PONG\n")


def timed_gets(port: int, path: str, n: int) -> list[float]:
    conn = http.client.HTTPConnection(HOST, port, timeout=30)
    out = []
    for _ in range(n):
        t = time.perf_counter()
        conn.request("GET", path)
        r = conn.getresponse()
        r.read()
        out.append((time.perf_counter() - t) * 1000)
        if r.status != 200:
            raise SystemExit(f"{path}: status {r.status}")
    conn.close()
    return out


def summary(ms: list[float]) -> dict:
    q = statistics.quantiles(ms, n=100)
    return {"p50_ms": round(q[49], 3), "p99_ms": round(q[98], 3), "mean_ms": round(statistics.fmean(ms), 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--weir", type=Path, default=REPO / "target" / "debug" / "weir")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--parked", type=int, default=200)
    ap.add_argument("--requests", type=int, default=300)
    a = ap.parse_args()
    if not a.weir.exists():
        raise SystemExit(f"{a.weir} missing: cargo build --tests")
    gate = Gate()
    up, port, admin = free_port(), free_port(), free_port()
    tmp = Path(tempfile.mkdtemp(prefix="weir-await-"))
    (tmp / "table.yaml").write_text(
        "routes:\n"
        "- {id: slow, paths: [{path: /slow}], service: s}\n"
        "- {id: fast, paths: [{path: /fast}], service: s}\n"
        f"services: [{{id: s, host: {HOST}, port: {up}}}]\n"
        f"plugins: [{{id: wait, name: test-await, route: slow, config: {{addr: \"{HOST}:{gate.port}\"}}}}]\n")
    procs = [
        subprocess.Popen([a.weir, "echo", "--listen", f"{HOST}:{up}"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
        subprocess.Popen([a.weir, "proxy", "--listen", f"{HOST}:{port}", "--admin-listen", f"{HOST}:{admin}",
                          "--worker-threads", str(a.workers), "--access-log", "false",
                          "--config", tmp / "table.yaml"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
    ]
    try:
        wait_port(up)
        wait_port(port)
        timed_gets(port, "/fast", 50)  # warm-up
        alone = timed_gets(port, "/fast", a.requests)

        results: list[int] = []

        def slow() -> None:
            c = http.client.HTTPConnection(HOST, port, timeout=120)
            c.request("GET", "/slow")
            r = c.getresponse()
            r.read()
            results.append(r.status)

        threads = [threading.Thread(target=slow) for _ in range(a.parked)]
        for t in threads:
            t.start()
        deadline = time.time() + 60
        while gate.waiting < a.parked and time.time() < deadline:
            time.sleep(0.02)
        if gate.waiting < a.parked:
            raise SystemExit(f"only {gate.waiting} of {a.parked} requests parked")
        parked = timed_gets(port, "/fast", a.requests)
        still = gate.waiting == a.parked and not results
        gate.released.set()
        for t in threads:
            t.join(120)
        ok = sum(1 for s in results if s == 200)
        out = {
            "weir": str(a.weir), "workers": a.workers, "parked": a.parked, "requests": a.requests,
            "alone": summary(alone), "while_parked": summary(parked),
            "parked_held_throughout": still, "parked_answered_200": ok,
        }
        out["p50_ratio"] = round(out["while_parked"]["p50_ms"] / out["alone"]["p50_ms"], 2)
        out["p99_ratio"] = round(out["while_parked"]["p99_ms"] / out["alone"]["p99_ms"], 2)
        print(json.dumps(out, indent=1))
    finally:
        for p in procs:
            p.terminate()
            p.wait(10)


if __name__ == "__main__":
    sys.exit(main())
