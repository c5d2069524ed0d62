#!/usr/bin/env python3
"""Instructions per proxied request, counted by callgrind: a repeatable hot-path profile.

    python3 bench/callgrind.py                 # Weir at 1 and 10,000 routes, nginx; 20,000 requests each
    python3 bench/callgrind.py --routes 1 --requests 5000 --keep --no-nginx
    python3 bench/callgrind.py --scenario plugins --routes 1 --weir /tmp/weir-old   # another build
    python3 bench/callgrind.py --source ingress --source httproute --routes 1 --no-nginx

Runs target/release/weir (1 worker, its JSON access log on as by default; `--no-access-log`
turns it off in both), and nginx as the reference (its `combined` access log to a file), each
configured as bench/run.sh configures it (bench/weirbench.py's generators), under `valgrind --tool=callgrind`, a
`weir echo` upstream outside valgrind, and a keep-alive client in this process that sends a
fixed number of requests (spread over the routes). Counting starts after a warm-up
(`callgrind_control --instr=on`) and stops with `--dump`, so the figure is the proxy's user-space
instructions per request. Instruction counts do not depend on what else the machine is doing,
so before/after comparisons of a change need no quiet machine. `--keep` leaves the callgrind
file for `callgrind_annotate`. `--scenario plugins` enables the plugins scenario's plugins
(bench/scenarios/50_plugins.py, globally) in both proxies; `--weir` measures another build.
`--source ingress` / `--source httproute` make Weir's table from manifests instead (one
Ingress rule, or one HTTPRoute on a Gateway, per route; translated by `weir standalone`
outside valgrind, then served by `weir proxy` from the table it produced), so the same
request's cost through an Ingress and through the equivalent HTTPRoute can be compared.
"""

import argparse
import hashlib
import http.client
import json
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import weirbench  # bench/ is this script's folder, so first on sys.path

HOST = weirbench.HOST
WEIR = weirbench.WEIR_BIN
SCENARIO_PLUGINS = {"small": [], "plugins": [{"name": "correlation-id", "config": {}}],
                    "key-auth": [{"name": "key-auth", "config": {}}]}
# `--scenario key-auth` (Weir only): 1,000 consumers with a key each; every request sends the
# last one's.
KEY_AUTH_CONSUMERS = 1000
NGINX = shutil.which("nginx") or "/usr/sbin/nginx"


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def wait_port(port: int, limit: float = 60.0) -> None:
    deadline = time.time() + limit
    while time.time() < deadline:
        try:
            socket.create_connection((HOST, port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"port {port} did not open within {limit} s")


def manifests(source: str, routes: int, up_port: int) -> str:
    """`routes` prefix routes `/r/N` to one Service (its endpoint the echo upstream), as
    Ingress rules or as HTTPRoute rules on a Gateway."""
    docs = ["apiVersion: v1\nkind: Service\nmetadata: {name: echo, namespace: bench}\n"
            "spec: {ports: [{name: http, port: 80}]}",
            "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {name: echo-1, "
            "namespace: bench, labels: {kubernetes.io/service-name: echo}}\naddressType: IPv4\n"
            f"ports: [{{name: http, port: {up_port}}}]\nendpoints:\n- addresses: [{HOST}]\n"
            "  conditions: {ready: true}"]
    if source == "ingress":
        paths = "\n".join(f"      - {{path: /r/{i}, pathType: Prefix, backend: {{service: "
                          "{name: echo, port: {name: http}}}}" for i in range(routes))
        docs.append("apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {name: bench, "
                    "namespace: bench}\nspec:\n  ingressClassName: weir\n  rules:\n  - http:\n"
                    f"      paths:\n{paths}")
    else:
        docs.append("apiVersion: gateway.networking.k8s.io/v1\nkind: GatewayClass\n"
                    "metadata: {name: weir}\nspec: {controllerName: weir.dev/gateway-controller}")
        docs.append("apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {name: gw, "
                    "namespace: bench}\nspec:\n  gatewayClassName: weir\n"
                    "  listeners: [{name: http, port: 80, protocol: HTTP}]")
        rules = "\n".join(f"  - matches: [{{path: {{type: PathPrefix, value: /r/{i}}}}}]\n"
                          "    backendRefs: [{name: echo, port: 80}]" for i in range(routes))
        docs.append("apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: "
                    "{name: bench, namespace: bench}\nspec:\n  parentRefs: [{name: gw}]\n"
                    f"  rules:\n{rules}")
    return "\n---\n".join(docs) + "\n"


def translated_table(weir: Path, tmp: Path, source: str, routes: int, up_port: int) -> dict:
    """The routing table `weir standalone` makes of `manifests(...)`, read from its admin API."""
    folder = tmp / "manifests"
    folder.mkdir()
    (folder / "bench.yaml").write_text(manifests(source, routes, up_port))
    admin = free_port()
    proc = subprocess.Popen([weir, "standalone", folder, "--listen", f"{HOST}:{free_port()}",
                             "--admin-listen", f"{HOST}:{admin}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 60
        while True:
            try:
                conn = http.client.HTTPConnection(HOST, admin, timeout=5)
                conn.request("GET", "/config")
                table = json.loads(conn.getresponse().read())
                conn.close()
                if len(table.get("routes", [])) == routes:
                    return table
            except (OSError, ValueError):
                pass
            if time.time() > deadline:
                raise SystemExit(f"weir standalone did not serve {routes} {source} route(s)")
            time.sleep(0.2)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def proxy_command(contender: str, tmp: Path, routes: int, up_port: int, port: int,
                  plugins: list, weir: Path, source: str = "table",
                  access_log: bool = True) -> list:
    """The proxy under measurement, configured as bench/run.sh configures it (weirbench's
    generators): Weir with `routes` prefix routes, or nginx with its forwarding headers."""
    scn = {"routes": routes, "response": "small", "tls": False}
    if contender == "nginx":
        spec = {"port": port, "upstream_port": up_port, "plugins": plugins}
        # nginx's default format to a file, unbuffered, as a stock nginx.conf has it.
        weirbench.ACCESS_LOG = access_log
        conf = weirbench.nginx_proxy_conf(tmp, scn, spec)
        (tmp / "nginx.conf").write_text(conf)
        return [NGINX, "-c", tmp / "nginx.conf", "-g", "master_process off;"]
    if source == "table":
        table = weirbench.weir_table(scn, plugins, up_port)
    else:
        table = translated_table(weir, tmp, source, routes, up_port)
    if any(p["name"] == "key-auth" for p in plugins):
        table["consumers"] = [
            {"id": f"c{i}", "credentials": [{"type": "key-auth", "id": f"c{i}-key",
             "key_sha256": hashlib.sha256(f"key-{i}".encode()).hexdigest()}]}
            for i in range(KEY_AUTH_CONSUMERS)]
    (tmp / "table.json").write_text(json.dumps(table))
    # Weir's default is its JSON access log on stdout (here to /dev/null: the formatting and
    # the write are counted, the disk is not).
    log = [] if access_log else ["--access-log", "false"]
    return [weir, "proxy", "--worker-threads", "1", *log,
            "--listen", f"{HOST}:{port}", "--admin-listen", f"{HOST}:{free_port()}",
            "--config", tmp / "table.json"]


def run(contender: str, routes: int, requests: int, warmup: int, keep: bool,
        cache_sim: bool, scenario: str = "small", weir: Path = WEIR, source: str = "table",
        access_log: bool = True) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="weir-callgrind-"))
    up_port, port = free_port(), free_port()
    out = tmp / "callgrind.out"
    procs = []
    try:
        procs.append(subprocess.Popen(
            [weir, "echo", "--listen", f"{HOST}:{up_port}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        procs.append(subprocess.Popen(
            ["valgrind", "--tool=callgrind", "--compress-strings=no", "--instr-atstart=no",
             f"--cache-sim={'yes' if cache_sim else 'no'}", f"--callgrind-out-file={out}"]
            + proxy_command(contender, tmp, routes, up_port, port,
                            SCENARIO_PLUGINS[scenario], weir, source, access_log),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        wait_port(up_port)
        wait_port(port, 120)
        conn = http.client.HTTPConnection(HOST, port, timeout=30)

        headers = {"apikey": f"key-{KEY_AUTH_CONSUMERS - 1}"} if scenario == "key-auth" else {}

        def send(n: int) -> None:
            for i in range(n):
                conn.request("GET", f"/r/{i % routes}/x", headers=headers)
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
    # `--dump` writes callgrind.out.1: exactly the measured requests (the file written at exit
    # covers only what ran after the dump).
    measured = tmp / "callgrind.out.1"
    if not measured.exists():
        raise SystemExit(f"no callgrind dump in {tmp}")
    text = measured.read_text(errors="replace")
    events = re.search(r"^events: (.+)$", text, re.M).group(1).split()
    totals = [int(x) for x in re.search(r"^(?:summary|totals): (.+)$", text, re.M).group(1).split()]
    per = dict(zip(events, totals))
    result = {"contender": contender, "scenario": scenario, "routes": routes, "requests": requests,
              "source": source, "access_log": access_log,
              "instructions_per_request": per["Ir"] // requests}
    if cache_sim:
        # Last-level misses stand in for the cache misses that more routes could cause.
        for e in ("D1mr", "DLmr", "DLmw", "ILmr"):
            result[f"{e}_per_request"] = round(per.get(e, 0) / requests, 1)
    if keep:
        result["callgrind_file"] = str(measured)
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
    ap.add_argument("--scenario", choices=sorted(SCENARIO_PLUGINS), default="small",
                    help="small (no plugins), plugins (the plugins scenario's, global) or "
                    "key-auth (global key-auth, 1,000 consumers; use with --no-nginx)")
    ap.add_argument("--weir", type=Path, default=WEIR, help="the weir binary to measure")
    ap.add_argument("--source", choices=["table", "ingress", "httproute"], action="append",
                    help="where Weir's table comes from: weirbench's generator (default), or "
                    "Ingress / HTTPRoute manifests translated by weir standalone (repeatable)")
    ap.add_argument("--access-log", action=argparse.BooleanOptionalAction, default=True,
                    help="access logs in both (default on, Weir's default; nginx's combined "
                    "format to a file); --no-access-log turns them off")
    args = ap.parse_args()
    if not args.weir.exists():
        raise SystemExit("build first: cargo build --release")
    if not shutil.which("valgrind"):
        raise SystemExit("needs valgrind (apt-get install valgrind)")
    runs = [("weir", n, src) for src in args.source or ["table"] for n in args.routes or [1, 10_000]]
    if not args.no_nginx:
        runs.append(("nginx", 1, "table"))
    results = []
    for contender, n, source in runs:
        r = run(contender, n, args.requests, max(args.warmup, n), args.keep, args.cache_sim,
                args.scenario, args.weir, source, args.access_log)
        results.append(r)
        print(json.dumps(r), flush=True)
    ngx = next((r for r in results if r["contender"] == "nginx"), None)
    if ngx:
        for r in results:
            if r["contender"] == "weir":
                ratio = r["instructions_per_request"] / ngx["instructions_per_request"]
                print(f"weir ({r['source']}), {r['routes']} route(s): {ratio:.2f}x nginx's "
                      "instructions per request")


if __name__ == "__main__":
    sys.exit(main())
