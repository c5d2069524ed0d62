#!/usr/bin/env python3
"""What one endpoint change costs the proxy with a large routing table: the time to apply a
pushed table that differs from the one in service only in one upstream's targets, and the heap
allocations that takes; a one-route change (a full compile) is timed alongside for reference.

    python3 bench/endpoint_change.py                                  # target/release/weir
    python3 bench/endpoint_change.py --old /tmp/old-target/release/weir --new target/release/weir
    python3 bench/endpoint_change.py --weir A --weir B --routes 2000 --repeat 9 --no-dhat

The table (bench/weirbench.py's `weir_table` shape, 10,000 routes by default): route i matches
the prefix /r/i and has its own service s{i} over its own upstream u{i} of two unreachable
targets 10.x.y.1:8080 and 10.x.y.2:8080 (no traffic is sent); two global plugins
(correlation-id, cors with an origin regex), a route plugin on every fifth route (alternately
response-transformer and cors) and the bench certificate, so that a full compile has router,
plugin and certificate work to do.

Timing: each binary runs `weir proxy --worker-threads 2 --access-log false` (RUST_LOG=info) with
the table pushed once over POST /config; then, `--repeat` times and the binaries in turn, each
gets (a) the table in service with one upstream's second target replaced by another address:
the endpoint change, and (b) the table in service with one route's path changed: a full
compile. Reported per kind: median and min of the POST /config round trip (the client holds the
serialised body; the round trip includes the proxy's JSON parsing) and of the `elapsed_ms` of
the proxy's `routing table applied` log line (compile and swap only, whole milliseconds). One
untimed (a) and (b) warm each proxy up first. The timed part holds the cargo build lock
(/tmp/weir-build.lock), as bench/weirbench.py does, so that no build shares the CPUs with it.

Allocations: the proxy under `valgrind --tool=dhat`, twice per binary: once pushing the table
only, once pushing it and then one endpoint change, each stopped with SIGTERM (dhat writes its
file at exit); the difference in blocks and bytes allocated over the whole run (the sum of
`tbk`/`tb` over dhat's program points) is the endpoint change's cost. A third run with a full
compile instead gives the reference. The weir binary allocates with a statically linked
mimalloc, which dhat cannot see; a small preloaded library (SHIM below, compiled with gcc into
the temporary folder) makes valgrind replace the binary's mi_malloc, mi_free, ... with glibc's
malloc, free, ..., which dhat counts: the figures are the Rust allocation requests, whatever
allocator serves them. At 10,000 routes one run under valgrind takes from 15 s to a few
minutes; `--dhat-routes` sets a smaller table for these runs.

Prints a table; writes bench/results/endpoint_change.json. Needs valgrind, its headers and gcc
(unless --no-dhat).
"""

import argparse
import contextlib
import http.client
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import weirbench  # bench/ is this script's folder, so first on sys.path
from callgrind import free_port
from common import REPO, have, write

HOST = weirbench.HOST
APPLIED = re.compile(r"routing table applied.*?elapsed_ms[=\":]+(\d+)|elapsed_ms[=\":]+(\d+).*?routing table applied")
GLOBAL_PLUGINS = [
    {"name": "correlation-id", "config": {}},
    {"name": "cors", "config": {"origins": ["https://app.example.test", r"https://.*\.example\.test"],
                                "credentials": True, "max_age": 600}},
]
START_LIMIT = 60.0  # seconds for a proxy to answer /healthz, natively
DHAT_LIMIT = 3600.0  # seconds for any one step of a run under valgrind

# Valgrind replaces these functions of the main executable (soname NONE) with the ones here:
# mimalloc's entry points (those src/alloc.rs calls) served by glibc's, which dhat intercepts.
SHIM = r"""
#include <malloc.h>
#include <stdlib.h>
#include <string.h>
#include <valgrind/valgrind.h>

#define R(ret, name) ret I_REPLACE_SONAME_FNNAME_ZU(NONE, name)

R(void *, mi_malloc)(size_t n) { return malloc(n); }
R(void *, mi_zalloc)(size_t n) { return calloc(1, n); }
R(void, mi_free)(void *p) { free(p); }
R(void *, mi_realloc)(void *p, size_t n) { return realloc(p, n); }
R(void *, mi_malloc_aligned)(size_t n, size_t a) { return memalign(a, n); }
R(void *, mi_zalloc_aligned)(size_t n, size_t a) {
    void *p = memalign(a, n);
    if (p) memset(p, 0, n);
    return p;
}
R(void *, mi_realloc_aligned)(void *p, size_t n, size_t a) {
    void *q = memalign(a, n);
    if (q && p) {
        size_t old = malloc_usable_size(p);
        memcpy(q, p, old < n ? old : n);
        free(p);
    }
    return q;
}
"""


# --------------------------------------------------------------------------------------------
# Tables
# --------------------------------------------------------------------------------------------

def target(i: int, host: int) -> str:
    return f"10.{i >> 8 & 255}.{i & 255}.{host}:8080"


def base_table(routes: int) -> dict:
    """`routes` routes, each with its own service and upstream of two targets; global and route
    plugins; the bench certificate."""
    table = weirbench.weir_table({"routes": routes, "response": "small", "tls": True},
                                 GLOBAL_PLUGINS, 0)
    for i, r in enumerate(table["routes"]):
        r["service"] = f"s{i}"
    table["services"] = [{"id": f"s{i}", "upstream": f"u{i}"} for i in range(routes)]
    table["upstreams"] = [{"id": f"u{i}", "targets": [{"target": target(i, 1)},
                                                      {"target": target(i, 2)}]}
                          for i in range(routes)]
    for i in range(0, routes, 5):
        if i % 10 == 0:
            p = {"name": "response-transformer", "config": {"add": {"headers": [f"x-route:r{i}"]}}}
        else:
            p = {"name": "cors", "config": {"origins": [f"https://r{i}.example.test"]}}
        table["plugins"].append({"id": f"route-{i}-{p['name']}", "route": f"r{i}", **p})
    return table


def endpoint_change(table: dict, n: int) -> dict:
    """`table` with the second target of the middle upstream moved to an address of its own
    (`n` makes each change differ from the last)."""
    t = dict(table, upstreams=list(table["upstreams"]))
    i = len(t["upstreams"]) // 2
    u = t["upstreams"][i]
    t["upstreams"][i] = dict(u, targets=[u["targets"][0], {"target": f"10.255.{n >> 8 & 255}.{n & 255}:8080"}])
    return t


def route_change(table: dict, n: int) -> dict:
    """`table` with the middle route's path changed (`n` makes each change differ from the last)."""
    t = dict(table, routes=list(table["routes"]))
    i = len(t["routes"]) // 2
    t["routes"][i] = dict(t["routes"][i], paths=[{"path": f"/r/{i}-v{n}", "kind": "Prefix"}])
    return t


def body(table: dict) -> bytes:
    return json.dumps(table, separators=(",", ":")).encode()


# --------------------------------------------------------------------------------------------
# One proxy
# --------------------------------------------------------------------------------------------

def slug(name: str) -> str:
    """`name` (a binary's name may be its path) fit for a file name."""
    return re.sub(r"[^\w.-]+", "_", name).strip("_")


class Proxy:
    """`weir proxy` (optionally under a wrapper such as valgrind), its stderr in a file."""

    def __init__(self, weir: Path, tmp: Path, name: str, wrapper: tuple = ()):
        self.admin = free_port()
        self.log = tmp / f"{slug(name)}.log"
        argv = [*wrapper, str(weir), "proxy", "--listen", f"{HOST}:{free_port()}",
                "--admin-listen", f"{HOST}:{self.admin}", "--worker-threads", "2",
                "--access-log", "false", "--shutdown-grace", "1s"]
        with open(self.log, "wb") as log:
            self.p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                      env=os.environ | {"RUST_LOG": "info"},
                                      start_new_session=True)
        self.conn = None

    def wait_healthy(self, limit: float) -> None:
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            if self.p.poll() is not None:
                raise SystemExit(f"proxy exited while starting:\n{self.tail()}")
            with contextlib.suppress(OSError):
                c = http.client.HTTPConnection(HOST, self.admin, timeout=2)
                c.request("GET", "/healthz")
                if c.getresponse().status == 200:
                    c.close()
                    return
            time.sleep(0.2)
        raise SystemExit(f"proxy not healthy after {limit:.0f} s:\n{self.tail()}")

    def applied(self) -> list[int]:
        """The `elapsed_ms` of every `routing table applied` line so far."""
        out = []
        for line in self.log.read_text(errors="replace").splitlines():
            m = APPLIED.search(line)
            if m:
                out.append(int(m.group(1) or m.group(2)))
        return out

    def push(self, data: bytes, timeout: float = 120) -> tuple[float, int]:
        """POSTs a table; returns the round trip in ms and the proxy's own `elapsed_ms`."""
        before = len(self.applied())
        if self.conn is None:
            self.conn = http.client.HTTPConnection(HOST, self.admin, timeout=timeout)
        t0 = time.perf_counter()
        self.conn.request("POST", "/config", body=data, headers={"Content-Type": "application/json"})
        resp = self.conn.getresponse()
        answer = resp.read()
        ms = (time.perf_counter() - t0) * 1000
        if resp.status != 200:
            raise SystemExit(f"POST /config: {resp.status} {answer[:2000].decode(errors='replace')}")
        # The line is written before the answer is sent; allow for a slow file system anyway.
        for _ in range(100):
            done = self.applied()
            if len(done) > before:
                return ms, done[-1]
            time.sleep(0.01)
        raise SystemExit(f"no 'routing table applied' line after a push:\n{self.tail()}")

    def stop(self, limit: float = 10) -> int:
        """SIGTERM, then SIGKILL of its process group after `limit` seconds; the exit status."""
        if self.conn:
            self.conn.close()
        if self.p.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.p.pid, signal.SIGTERM)
        try:
            return self.p.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.p.pid, signal.SIGKILL)
            self.p.wait()
            return -9

    def tail(self, n: int = 20) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])
        return ""


# --------------------------------------------------------------------------------------------
# Measurements
# --------------------------------------------------------------------------------------------

def summary(samples: list[float]) -> dict:
    return {"median": round(statistics.median(samples), 2), "min": round(min(samples), 2),
            "samples": [round(s, 2) for s in samples]}


def timings(binaries: dict, routes: int, repeat: int, tmp: Path, lock: bool) -> dict:
    """Per binary and kind of change, the POST round trips and the proxy's `elapsed_ms`."""
    table = base_table(routes)
    data = body(table)
    print(f"table: {routes} routes, {len(table['plugins'])} plugins, {len(data) / 1e6:.1f} MB of JSON",
          file=sys.stderr)
    proxies = {}
    try:
        for name, weir in binaries.items():
            proxies[name] = p = Proxy(weir, tmp, f"time-{name}")
            p.wait_healthy(START_LIMIT)
            ms, elapsed = p.push(data)
            print(f"{name}: first table applied in {ms:.0f} ms (proxy: {elapsed} ms)", file=sys.stderr)
        current = {name: table for name in binaries}
        samples = {name: {"endpoint": {"post_ms": [], "applied_ms": []},
                          "route": {"post_ms": [], "applied_ms": []}} for name in binaries}
        with weirbench.quiet(lock, 600, lambda m: print(m, file=sys.stderr)):
            for n in range(repeat + 1):  # the first round warms up
                for name, p in proxies.items():
                    for kind, change in (("endpoint", endpoint_change), ("route", route_change)):
                        current[name] = change(current[name], n)
                        ms, elapsed = p.push(body(current[name]))
                        if n:
                            samples[name][kind]["post_ms"].append(ms)
                            samples[name][kind]["applied_ms"].append(elapsed)
                if n:
                    print(f"round {n}: " + "; ".join(
                        f"{name} endpoint {s['endpoint']['post_ms'][-1]:.1f} ms, "
                        f"route {s['route']['post_ms'][-1]:.1f} ms"
                        for name, s in samples.items()), file=sys.stderr)
        return {name: {kind: {k: summary(v) for k, v in kinds.items()} for kind, kinds in s.items()}
                for name, s in samples.items()}
    finally:
        for p in proxies.values():
            p.stop()


def dhat_totals(path: Path) -> dict:
    """Blocks and bytes allocated over a whole dhat run, and the heap at its peak."""
    d = json.loads(path.read_text())
    pps = d["pps"]
    return {"blocks": sum(p["tbk"] for p in pps), "bytes": sum(p["tb"] for p in pps),
            "peak_bytes": sum(p.get("gb", 0) for p in pps)}


def build_shim(tmp: Path) -> Path:
    src, lib = tmp / "mi-to-libc.c", tmp / "mi-to-libc.so"
    src.write_text(SHIM)
    subprocess.run(["gcc", "-O1", "-shared", "-fPIC", "-o", lib, src], check=True)
    return lib


def dhat_run(weir: Path, tmp: Path, shim: Path, name: str, tables: list[bytes]) -> dict:
    """The totals of a proxy under dhat that is sent `tables` in turn and stopped."""
    out = tmp / f"dhat-{slug(name)}.json"
    p = Proxy(weir, tmp, f"dhat-{name}",
              ("env", f"LD_PRELOAD={shim}", "valgrind", "--tool=dhat", f"--dhat-out-file={out}"))
    t0 = time.monotonic()
    try:
        p.wait_healthy(DHAT_LIMIT)
        for data in tables:
            p.push(data, timeout=DHAT_LIMIT)
        time.sleep(1)
    finally:
        status = p.stop(DHAT_LIMIT)
    if status != 0 or not out.exists():
        raise SystemExit(f"{name}: valgrind exited with {status}, no dhat file:\n{p.tail()}")
    totals = dhat_totals(out)
    print(f"{name}: {totals['blocks']:,} blocks, {totals['bytes']:,} bytes "
          f"({time.monotonic() - t0:.0f} s under valgrind)", file=sys.stderr)
    return totals


def allocations(binaries: dict, routes: int, tmp: Path) -> dict:
    """Per binary, the blocks and bytes an endpoint change (and, for reference, a one-route
    change) allocates: runs with the change minus the run with the table only."""
    table = base_table(routes)
    base = body(table)
    shim = build_shim(tmp)
    result = {}
    for name, weir in binaries.items():
        runs = {
            "table_only": dhat_run(weir, tmp, shim, f"{name}-table", [base]),
            "endpoint": dhat_run(weir, tmp, shim, f"{name}-endpoint",
                                 [base, body(endpoint_change(table, 0))]),
            "route": dhat_run(weir, tmp, shim, f"{name}-route", [base, body(route_change(table, 0))]),
        }
        result[name] = {
            "runs": runs,
            **{kind: {k: runs[kind][k] - runs["table_only"][k] for k in ("blocks", "bytes")}
               for kind in ("endpoint", "route")},
        }
    return result


# --------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------

def report(binaries: dict, times: dict | None, allocs: dict | None) -> str:
    names = list(binaries)
    rows = []
    if times:
        for kind, label in (("endpoint", "endpoint change"), ("route", "route change")):
            for metric, what in (("post_ms", "POST /config ms"), ("applied_ms", "applied, proxy ms")):
                for stat in ("median", "min"):
                    rows.append((f"{label}: {what}, {stat}",
                                 [f"{times[n][kind][metric][stat]:,.1f}" for n in names]))
    if allocs:
        for kind, label in (("endpoint", "endpoint change"), ("route", "route change")):
            for k in ("blocks", "bytes"):
                rows.append((f"{label}: {k} allocated", [f"{allocs[n][kind][k]:,}" for n in names]))
    width = max(len(r[0]) for r in rows)
    cols = [max(len(n), *(len(r[1][i]) for r in rows)) for i, n in enumerate(names)]
    lines = [" " * width + "  " + "  ".join(n.rjust(c) for n, c in zip(names, cols))]
    lines += [r[0].ljust(width) + "  " + "  ".join(v.rjust(c) for v, c in zip(r[1], cols))
              for r in rows]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--weir", type=Path, action="append", default=[],
                    help="a weir binary to measure (repeatable; default target/release/weir)")
    ap.add_argument("--old", type=Path, help="the binary before the change (named 'old')")
    ap.add_argument("--new", type=Path, help="the binary after the change (named 'new')")
    ap.add_argument("--routes", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=5, help="timed changes of each kind (default 5)")
    ap.add_argument("--dhat-routes", type=int, help="routes of the dhat runs (default --routes)")
    ap.add_argument("--no-dhat", action="store_true", help="timings only")
    ap.add_argument("--no-timing", action="store_true", help="allocations only")
    ap.add_argument("--no-build-lock", dest="lock", action="store_false",
                    help=f"do not hold {weirbench.BUILD_LOCK} while timing")
    ap.add_argument("--out", default="endpoint_change",
                    help="result name: bench/results/<out>.json (default endpoint_change)")
    args = ap.parse_args()
    binaries = {}
    for name, path in (("old", args.old), ("new", args.new)):
        if path:
            binaries[name] = path
    for path in args.weir:
        binaries[str(path)] = path
    if not binaries:
        binaries["weir"] = REPO / "target/release/weir"
    for path in binaries.values():
        if not path.exists():
            raise SystemExit(f"no binary at {path} (cargo build --release --bin weir)")
    if not args.no_dhat and not have(("valgrind", "gcc")):
        return 2
    if args.routes < 2 or args.repeat < 1:
        ap.error("--routes must be at least 2 and --repeat at least 1")
    dhat_routes = args.dhat_routes or args.routes
    tmp = Path(tempfile.mkdtemp(prefix="weir-endpoint-change-"))
    try:
        times = None if args.no_timing else timings(binaries, args.routes, args.repeat, tmp, args.lock)
        allocs = None if args.no_dhat else allocations(binaries, dhat_routes, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    result = {
        "binaries": {n: str(p.resolve()) for n, p in binaries.items()},
        "routes": args.routes, "repeat": args.repeat,
        "timings": times,
        "allocations": allocs and {"routes": dhat_routes, **allocs},
    }
    write(args.out, result)
    print(report(binaries, times, allocs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
