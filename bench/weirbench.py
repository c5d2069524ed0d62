#!/usr/bin/env python3
"""Weir against peer proxies: one upstream, one worker each, same wrk load.

Run through `bench/run.sh` (which builds Weir and installs nginx, HAProxy and wrk), or
directly once those exist. Python 3.11 standard library only.

Layout of a run:
  * one upstream nginx (own config in a temp dir) pinned to the load CPU, answering a fixed
    64-byte body on every path and a 1 MiB file on /1mb;
  * per scenario (bench/scenarios/*.py), every contender started side by side on its own port,
    the proxies pinned to the proxy CPU, checked once, warmed up, then measured in rounds:
    each round runs wrk once against every contender (rotating the order), so slow drift of the
    machine hits everyone alike;
  * per wrk run: requests/s, latency percentiles (p99.9 from bench/lua/bench.lua), the
    contender's CPU time from /proc/PID/stat, and the CPU used by anything that is not part of
    the benchmark (a run disturbed by foreign work is repeated, see --noise-limit);
  * scenarios with `"tls": True`: every contender terminates HTTPS with the test certificate
    tests/fixtures/tls/a.example.test, wrk uses https:// (the upstream stays plain HTTP);
  * a table on stdout, and bench/results/<timestamp>.json plus bench/results/latest.json.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import datetime as _dt
import errno
import fcntl
import importlib.util
import json
import os
import platform
import resource
import shutil
import signal
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
WEIR_BIN = REPO / "target" / "release" / "weir"
LUA = BENCH / "lua" / "bench.lua"
TABLES = BENCH / "tables"
RESULTS = BENCH / "results"
BUILD_LOCK = "/tmp/weir-build.lock"

HOST = "127.0.0.1"  # the only address anything here listens on or targets
SMALL_BODY = (b"weir-bench:0123456789abcdefghijklmnopqrstuvwxyz" + b"ABCDEFGHIJKLMNOPQRSTUVWXYZ")[:64]
LARGE_BYTES = 1 << 20
CHECK_PATH = "/__check"  # upstream answers with the request headers it saw (checks only)
CID_HEADER = "Weir-Request-ID"  # correlation-id's default header name

# TLS scenarios (`"tls": True`): every contender terminates TLS with this certificate and key
# (EC P-256, CN/SAN a.example.test, signed by ca.crt; test fixtures, valid until 2126).
TLS_DIR = REPO / "tests" / "fixtures" / "tls"
TLS_CERT = TLS_DIR / "a.example.test.crt"
TLS_KEY = TLS_DIR / "a.example.test.key"
TLS_CA = TLS_DIR / "ca.crt"
TLS_SNI = "a.example.test"  # the checks send it; wrk sends the URL's host (127.0.0.1)
# Alike on every contender where it can be configured (Weir: rustls defaults, not configurable):
# TLS 1.2 and 1.3, the groups rustls+ring offers, ALPN h2 and http/1.1.
TLS_PROTOCOLS = ("TLSv1.2", "TLSv1.3")
TLS_GROUPS = ("X25519", "P-256", "P-384")  # OpenSSL group names (nginx and HAProxy)
TLS_ALPN = ("h2", "http/1.1")

CLK_TCK = os.sysconf("SC_CLK_TCK")

assert len(SMALL_BODY) == 64

# How many seconds any process gets to come up, and to go away.
START_TIMEOUT = 20.0
STOP_TIMEOUT = 10.0


# --------------------------------------------------------------------------------------------
# Weir: everything about how Weir is started for a scenario lives in `weir_launch`.
# --------------------------------------------------------------------------------------------

# "table": `weir proxy --config bench/tables/<scenario>.json` (works today).
# "standalone": `weir standalone DIR` over generated Kubernetes manifests (switch once the
# standalone mode has landed; `write_weir_manifests` is written against DESIGN.md but could not
# be run yet, so check it the first time).
WEIR_MODE = "table"

# Access logs, as users run them (`--access-log on`, the default): Weir's JSON line per request
# on stdout (to the contender's output file), nginx's `combined` format to a file, HAProxy's
# `option httplog` to stdout. `--access-log off` measures every contender without.
ACCESS_LOG = True


def weir_launch(scn: dict, spec: dict, port: int, admin_port: int, workdir: Path) -> tuple[list[str], str]:
    """Writes Weir's configuration for a scenario; returns (argv, readiness URL)."""
    # TLS: the measured port is the HTTPS listener; Weir always has a plain listener too, which
    # gets a port of its own and no traffic.
    listen = (["--listen", f"{HOST}:{spec['plain_port']}", "--tls-listen", f"{HOST}:{port}"]
              if scn["tls"] else ["--listen", f"{HOST}:{port}"])
    common = [
        *listen,
        "--admin-listen", f"{HOST}:{admin_port}",
        "--worker-threads", "1",
        *([] if ACCESS_LOG else ["--access-log", "false"]),
    ]
    ready = f"http://{HOST}:{admin_port}/readyz"
    if WEIR_MODE == "table":
        table = write_weir_table(scn, spec)
        weir = spec.get("bin", str(WEIR_BIN))
        return [weir, "proxy", *common, "--shutdown-grace", "1s", "--config", str(table)], ready
    if WEIR_MODE == "standalone":
        folder = write_weir_manifests(scn, spec, workdir / f"manifests-{spec['name']}")
        return [spec.get("bin", str(WEIR_BIN)), "standalone", str(folder), *common], ready
    raise SystemExit(f"unknown WEIR_MODE {WEIR_MODE!r}")


def weir_table(scn: dict, plugins: list[dict], upstream_port: int) -> dict:
    local = scn["response"] == "local"
    routes = [
        {"id": f"r{i}", "paths": [{"path": p, "kind": "Prefix"}]} | ({} if local else {"service": "bench"})
        for i, p in enumerate(route_prefixes(scn))
    ]
    plugin_list = [
        {"id": f"p{i}-{p['name']}", "name": p["name"], "config": p.get("config", {})}
        for i, p in enumerate(plugins)
    ]
    if local:
        # The proxy answers itself: request-termination with the upstream's 64-byte body.
        plugin_list.append({"id": "local-answer", "name": "request-termination",
                            "config": {"status_code": 200, "body": SMALL_BODY.decode(),
                                       "content_type": "text/plain"}})
    return {
        "version": 1,
        "routes": routes,
        "services": [] if local else [{"id": "bench", "upstream": "bench"}],
        "upstreams": [] if local else [{"id": "bench", "targets": [{"target": f"{HOST}:{upstream_port}"}]}],
        "plugins": plugin_list,
    } | ({"certificates": [weir_certificate()]} if scn["tls"] else {})


def weir_certificate() -> dict:
    """The bench certificate as the table's default (empty `snis`: served for any SNI)."""
    return {"id": "bench", "cert": TLS_CERT.read_text(), "key": TLS_KEY.read_text(), "snis": []}


def write_weir_table(scn: dict, spec: dict) -> Path:
    TABLES.mkdir(parents=True, exist_ok=True)
    path = TABLES / f"{scn['name']}--{spec['name']}.json"
    table = weir_table(scn, spec["plugins"], spec["upstream_port"])
    indent = 1 if len(table["routes"]) <= 100 else None
    text = json.dumps(table, indent=indent) + "\n"
    if not path.exists() or path.read_text() != text:
        path.write_text(text)
    return path


def write_weir_manifests(scn: dict, spec: dict, folder: Path) -> Path:
    """The same table as Kubernetes objects for `weir standalone` (unverified until it lands).

    Written against crds/weir.dev.yaml (ClusterPlugin `spec.plugin`/`global`/`config`) and the
    translator's defaults (IngressClass `weir`, controller `weir.dev/ingress-controller`).
    """
    folder.mkdir(parents=True, exist_ok=True)
    ns = "bench"
    docs = [
        {"apiVersion": "networking.k8s.io/v1", "kind": "IngressClass",
         "metadata": {"name": "weir"},
         "spec": {"controller": "weir.dev/ingress-controller"}},
        {"apiVersion": "v1", "kind": "Service",
         "metadata": {"name": "upstream", "namespace": ns},
         "spec": {"ports": [{"name": "http", "port": 80, "targetPort": spec["upstream_port"]}]}},
        {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
         "metadata": {"name": "upstream-1", "namespace": ns,
                      "labels": {"kubernetes.io/service-name": "upstream"}},
         "addressType": "IPv4",
         "ports": [{"name": "http", "port": spec["upstream_port"], "protocol": "TCP"}],
         "endpoints": [{"addresses": [HOST], "conditions": {"ready": True}}]},
        {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
         "metadata": {"name": "bench", "namespace": ns},
         "spec": {"ingressClassName": "weir", "rules": [{"http": {"paths": [
             {"path": p, "pathType": "Prefix",
              "backend": {"service": {"name": "upstream", "port": {"number": 80}}}}
             for p in route_prefixes(scn)]}}]}},
    ]
    if scn["tls"]:
        # An Ingress `tls` entry without hosts: the Secret becomes the default certificate.
        docs[-1]["spec"]["tls"] = [{"secretName": "bench-tls"}]
        docs.append({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
                     "metadata": {"name": "bench-tls", "namespace": ns},
                     "stringData": {"tls.crt": TLS_CERT.read_text(), "tls.key": TLS_KEY.read_text()}})
    for i, p in enumerate(spec["plugins"]):
        docs.append({"apiVersion": "weir.dev/v1alpha1", "kind": "ClusterPlugin",
                     "metadata": {"name": f"p{i}-{p['name']}"},
                     "spec": {"plugin": p["name"], "global": True, "config": p.get("config", {})}})
    # YAML is a superset of JSON: one JSON document per object.
    text = "\n---\n".join(json.dumps(d, indent=1) for d in docs) + "\n"
    (folder / "bench.yaml").write_text(text)
    return folder


# --------------------------------------------------------------------------------------------
# Peer configurations
# --------------------------------------------------------------------------------------------

# How each peer expresses a Weir plugin. A plugin missing here skips that contender.
PLUGIN_SNIPPETS = {
    "nginx": {
        # Keep the client's id, else generate one (nginx's $request_id: 32 random hex digits).
        "correlation-id": {
            "http": f"map $http_{CID_HEADER.lower().replace('-', '_')} $bench_cid {{\n"
                    f"    \"\" $request_id;\n    default $http_{CID_HEADER.lower().replace('-', '_')};\n}}",
            "server": f"proxy_set_header {CID_HEADER} $bench_cid;",
        },
    },
    "haproxy": {
        "correlation-id": {
            "frontend": f"http-request set-header {CID_HEADER} %[uuid] "
                        f"unless {{ req.hdr({CID_HEADER}) -m found }}",
        },
    },
}


def route_prefixes(scn: dict) -> list[str]:
    n = scn["routes"]
    return ["/"] if n <= 1 else [f"/r/{i}" for i in range(n)]


def request_paths(scn: dict) -> list[str]:
    """Paths wrk requests: one fixed path, or every route's path in turn."""
    if scn["routes"] > 1:
        return route_prefixes(scn)
    return ["/1mb" if scn["response"] == "1mb" else "/"]


def nginx_upstream_conf(d: Path, port: int) -> str:
    body = SMALL_BODY.decode()
    check = " ".join(
        f"{h}=$http_{h.lower().replace('-', '_')}"
        for h in ["Host", "Connection", "X-Forwarded-For", "X-Real-IP", "X-Forwarded-Proto",
                  "X-Forwarded-Host", "X-Forwarded-Port", "Via", CID_HEADER]
    )
    return f"""# upstream for the Weir benchmark (generated)
worker_processes 1;
daemon off;
pid {d}/nginx.pid;
error_log {d}/error.log warn;
events {{ worker_connections 16384; }}
http {{
    access_log off;
    server_tokens off;
    sendfile on;
    tcp_nopush on;
    keepalive_requests 100000000;
    keepalive_timeout 300s;
    default_type text/plain;
    client_body_temp_path {d}/client_body;
    proxy_temp_path {d}/proxy;
    fastcgi_temp_path {d}/fastcgi;
    uwsgi_temp_path {d}/uwsgi;
    scgi_temp_path {d}/scgi;
    server {{
        listen {HOST}:{port} backlog=4096;
        location / {{ return 200 "{body}"; }}
        location = /1mb {{ default_type application/octet-stream; alias {d}/1mb.bin; }}
        location = {CHECK_PATH} {{ return 200 "{check}"; }}
    }}
}}
"""


def proxy_access_log(d: Path) -> str:
    """nginx's access-log directive: its default `combined` format to a file, unbuffered (as
    a stock nginx.conf has it), or off."""
    return f"access_log {d}/access.log combined;" if ACCESS_LOG else "access_log off;"


def nginx_proxy_conf(d: Path, scn: dict, spec: dict) -> str:
    snippets = [PLUGIN_SNIPPETS["nginx"][p["name"]] for p in spec["plugins"]]
    http_extra = "\n".join(s.get("http", "") for s in snippets)
    server_extra = "\n        ".join(s.get("server", "") for s in snippets)
    prefixes = route_prefixes(scn)
    action = ("return 200 \"" + SMALL_BODY.decode() + "\";" if scn["response"] == "local"
              else "proxy_pass http://bench_upstream;")
    locations = "\n        ".join(f"location {p} {{ {action} }}" for p in prefixes)
    if scn["tls"]:
        listen = f"""listen {HOST}:{spec['port']} ssl http2 backlog=4096;
        ssl_certificate {TLS_CERT};
        ssl_certificate_key {TLS_KEY};
        ssl_protocols {' '.join(TLS_PROTOCOLS)};
        ssl_ecdh_curve {':'.join(TLS_GROUPS)};
        # Resumption as the others offer it (nginx's default; 1.22's default protocols lack
        # TLSv1.3, hence ssl_protocols above): TLS 1.3 tickets, TLS 1.2 tickets or session ids.
        ssl_session_tickets on;
        ssl_session_cache shared:bench_tls:10m;"""
    else:
        listen = f"listen {HOST}:{spec['port']} backlog=4096;"
    return f"""# nginx as reverse proxy for the Weir benchmark (generated)
worker_processes 1;
daemon off;
pid {d}/nginx.pid;
error_log {d}/error.log warn;
events {{ worker_connections 16384; }}
http {{
    {proxy_access_log(d)}
    server_tokens off;
    keepalive_requests 100000000;
    keepalive_timeout 300s;
    default_type text/plain;
    client_body_temp_path {d}/client_body;
    proxy_temp_path {d}/proxy;
    fastcgi_temp_path {d}/fastcgi;
    uwsgi_temp_path {d}/uwsgi;
    scgi_temp_path {d}/scgi;
    # Large responses: stream through memory buffers, never spill to disk.
    proxy_max_temp_file_size 0;
    {http_extra}
    upstream bench_upstream {{
        server {HOST}:{spec['upstream_port']};
        keepalive 64;
        keepalive_requests 100000000;
        keepalive_timeout 300s;
    }}
    server {{
        {listen}
        # The forwarding headers Weir sets, so both do the same work.
        proxy_http_version 1.1;
        proxy_set_header Connection "";
        proxy_set_header Host $proxy_host;
        proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
        proxy_set_header X-Real-IP $remote_addr;
        proxy_set_header X-Forwarded-Proto $scheme;
        proxy_set_header X-Forwarded-Host $http_host;
        proxy_set_header X-Forwarded-Port $server_port;
        {server_extra}
        {locations}
    }}
}}
"""


def haproxy_conf(d: Path, scn: dict, spec: dict) -> str:
    snippets = [PLUGIN_SNIPPETS["haproxy"][p["name"]] for p in spec["plugins"]]
    fe_extra = "\n    ".join(s.get("frontend", "") for s in snippets)
    prefixes = route_prefixes(scn)
    local = scn["response"] == "local"
    answer = f'http-request return status 200 content-type text/plain string "{SMALL_BODY.decode()}"'
    if len(prefixes) == 1:
        routing = answer if local else "default_backend be_upstream"
    else:
        mapfile = d / f"routes-{spec['name']}.map"
        mapfile.write_text("".join(f"{p} be_upstream\n" for p in prefixes))
        # map_beg is indexed (prefix tree), longest match wins, as in Weir and nginx.
        routing = (f"http-request set-var(txn.route) path,map_beg({mapfile})\n"
                   f"    http-request return status 404 if !{{ var(txn.route) -m found }}\n"
                   + (f"    {answer}" if local else "    use_backend %[var(txn.route)]"))
    bind = f"{HOST}:{spec['port']}"
    if scn["tls"]:
        pem = d / f"bench-{spec['name']}.pem"  # HAProxy wants certificate and key in one file
        pem.write_text(TLS_CERT.read_text().rstrip("\n") + "\n" + TLS_KEY.read_text())
        # Session tickets and the session cache are on by default, as resumption is in the others.
        bind += (f" ssl crt {pem} alpn {','.join(TLS_ALPN)} ssl-min-ver {TLS_PROTOCOLS[0]}"
                 f" ssl-max-ver {TLS_PROTOCOLS[-1]} curves {':'.join(TLS_GROUPS)}")
    proto = "https" if scn["tls"] else "http"
    return f"""# HAProxy for the Weir benchmark (generated)
global
    nbthread 1
    maxconn 8000
    pidfile {d}/haproxy-{spec['name']}.pid
    {"log stdout format raw local0" if ACCESS_LOG else ""}

defaults
    mode http
    {"log global" if ACCESS_LOG else ""}
    {"option httplog" if ACCESS_LOG else ""}
    timeout connect 5s
    timeout client 60s
    timeout server 60s
    timeout http-keep-alive 300s
    http-reuse always
    # The forwarding headers Weir sets, so both do the same work.
    option forwardfor

frontend fe
    bind {bind}
    http-request set-header X-Real-IP %[src]
    http-request set-header X-Forwarded-Proto {proto}
    http-request set-header X-Forwarded-Host %[req.hdr(host)]
    http-request set-header X-Forwarded-Port %[dst_port]
    {fe_extra}
    {routing}

backend be_upstream
    server up {HOST}:{spec['upstream_port']}
"""


# --------------------------------------------------------------------------------------------
# Processes
# --------------------------------------------------------------------------------------------

_STARTED: list["Proc"] = []


class Proc:
    """A process we started (optionally pinned with taskset), stopped by its own id."""

    def __init__(self, name: str, argv: list[str], cpus: str | None, log: Path,
                 env: dict | None = None, stop_signal: int = signal.SIGTERM):
        self.name = name
        self.argv = ([shutil.which("taskset") or "taskset", "-c", cpus] if cpus else []) + argv
        self.log = log
        self.stop_signal = stop_signal
        self._logf = open(log, "wb")
        # taskset execs the program, so the pid is the program's own.
        self.p = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=self._logf,
                                  stderr=subprocess.STDOUT, env=env, start_new_session=True)
        _STARTED.append(self)

    @property
    def pid(self) -> int:
        return self.p.pid

    def alive(self) -> bool:
        return self.p.poll() is None

    def pids(self) -> list[int]:
        """The process and its children (nginx workers)."""
        out = [self.pid]
        with contextlib.suppress(OSError):
            for t in os.listdir(f"/proc/{self.pid}/task"):
                with contextlib.suppress(OSError):
                    kids = Path(f"/proc/{self.pid}/task/{t}/children").read_text().split()
                    out.extend(int(k) for k in kids)
        return out

    def tail(self, n: int = 20) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])
        return ""

    def stop(self) -> None:
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, self.stop_signal)
            try:
                self.p.wait(timeout=STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                # Its own process group (start_new_session): the program and its workers only.
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.pid, signal.SIGKILL)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.p.wait(timeout=STOP_TIMEOUT)
        self._logf.close()
        if self in _STARTED:
            _STARTED.remove(self)


def stop_all() -> None:
    for p in list(reversed(_STARTED)):
        with contextlib.suppress(Exception):
            p.stop()


def _on_signal(signum, _frame):
    stop_all()
    sys.exit(128 + signum)


def port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((HOST, port))
        except OSError:
            return False
    return True


class Ports:
    def __init__(self, base: int):
        self.next = base

    def take(self) -> int:
        for _ in range(1000):
            p, self.next = self.next, self.next + 1
            if port_free(p):
                return p
        raise SystemExit("no free port found near the base port")


def tls_check_context(alpn: tuple[str, ...] = (), check_hostname: bool = False) -> ssl.SSLContext:
    """Client context of the checks: trusts only the fixtures' CA (so a contender serving some
    other certificate fails); the host name is checked where the probe sends the SNI."""
    ctx = ssl.create_default_context(cafile=str(TLS_CA))
    ctx.check_hostname = check_hostname
    if alpn:
        ctx.set_alpn_protocols(list(alpn))
    return ctx


def http_get(url: str, timeout: float = 2.0) -> tuple[int, bytes]:
    req = urllib.request.Request(url, headers={"Connection": "close"})
    kw = {}
    if url.startswith("https:"):
        kw["context"] = tls_check_context()
    try:
        with urllib.request.urlopen(req, timeout=timeout, **kw) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def wait_http(url: str, proc: Proc, expect: int = 200) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    last = None
    while time.monotonic() < deadline:
        if not proc.alive():
            raise RuntimeError(f"{proc.name} exited while starting:\n{proc.tail()}")
        try:
            status, _ = http_get(url, timeout=1.0)
            if status == expect:
                return
            last = f"status {status}"
        except OSError as e:
            last = str(e)
        time.sleep(0.1)
    raise RuntimeError(f"{proc.name} not ready at {url} after {START_TIMEOUT}s ({last}):\n{proc.tail()}")


# --------------------------------------------------------------------------------------------
# /proc accounting
# --------------------------------------------------------------------------------------------

def proc_cpu_ticks(pids: list[int]) -> int:
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError):
            s = Path(f"/proc/{pid}/stat").read_text()
            rest = s[s.rfind(")") + 2:].split()
            total += int(rest[11]) + int(rest[12])  # utime + stime (whole thread group)
    return total


def proc_ctx_switches(pids: list[int]) -> int:
    """Context switches (voluntary and not) of every thread of the processes so far."""
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError):
            for task in Path(f"/proc/{pid}/task").iterdir():
                with contextlib.suppress(OSError):
                    for line in (task / "status").read_text().splitlines():
                        if line.startswith(("voluntary_ctxt_switches:",
                                            "nonvoluntary_ctxt_switches:")):
                            total += int(line.split()[1])
    return total


def proc_hwm_kb(pids: list[int]) -> int:
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    total += int(line.split()[1])
    return total


def system_cpu() -> dict[str, list[int]]:
    """Per-CPU tick counters from /proc/stat (cpu, cpu0, cpu1, ...)."""
    out = {}
    for line in Path("/proc/stat").read_text().splitlines():
        if line.startswith("cpu"):
            name, *vals = line.split()
            out[name] = [int(v) for v in vals]
    return out


def cpu_delta(before: dict, after: dict) -> dict:
    """Seconds per category and per-CPU busy fractions between two /proc/stat samples."""
    res = {}
    for name in after:
        b, a = before.get(name), after[name]
        if b is None:
            continue
        d = [x - y for x, y in zip(a, b)]
        user, nice, system, idle, iowait, irq, softirq, steal = (d + [0] * 8)[:8]
        total = sum(d[:8]) or 1
        res[name] = {
            "task_s": (user + nice + system) / CLK_TCK,
            "busy": (total - idle - iowait) / total,
            "softirq": softirq / total,
            "steal": steal / total,
        }
    return res


def time_wait_sockets() -> int:
    for line in Path("/proc/net/sockstat").read_text().splitlines():
        if line.startswith("TCP:"):
            f = line.split()
            return int(f[f.index("tw") + 1])
    return -1


def children_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def self_cpu_s() -> float:
    t = os.times()
    return t.user + t.system


# --------------------------------------------------------------------------------------------
# Quiet machine: the build lock
# --------------------------------------------------------------------------------------------

@contextlib.contextmanager
def quiet(enabled: bool, max_wait: float, log):
    """Holds the shared cargo build lock for one round, so no build overlaps a measurement.

    Waits at most `max_wait` seconds for a running build; measures anyway after that (the
    noise check still catches the disturbance).
    """
    if not enabled:
        yield 0.0
        return
    f = open(BUILD_LOCK, "a")
    start = time.monotonic()
    got = False
    announced = False
    try:
        while True:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                got = True
                break
            except OSError as e:
                if e.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
            waited = time.monotonic() - start
            if waited >= max_wait:
                log(f"  build lock still busy after {waited:.0f}s; measuring anyway")
                break
            if not announced:
                log("  waiting for a cargo build to finish (build lock) ...")
                announced = True
            time.sleep(0.5)
        yield time.monotonic() - start
    finally:
        if got:
            fcntl.flock(f, fcntl.LOCK_UN)
        f.close()


# --------------------------------------------------------------------------------------------
# Contenders
# --------------------------------------------------------------------------------------------

@dataclass
class Contender:
    name: str
    kind: str  # direct | nginx | haproxy | weir
    url: str = ""
    proc: Proc | None = None
    note: str = ""
    skipped: bool = False
    upstream_saw: str = ""
    tls: dict = field(default_factory=dict)
    runs: list = field(default_factory=list)
    rss_kb: int = 0

    def pids(self) -> list[int]:
        return self.proc.pids() if self.proc else []


def contender_specs(scn: dict) -> list[dict]:
    specs = []
    for c in scn["contenders"]:
        spec = {"name": c, "kind": c} if isinstance(c, str) else dict(c)
        spec.setdefault("kind", spec["name"])
        spec.setdefault("plugins", scn["plugins"])
        specs.append(spec)
    # Another Weir build beside this one (before/after a change, in the same run).
    base = os.environ.get("WEIR_BASE_BIN")
    if base:
        for spec in [s for s in specs if s["kind"] == "weir"]:
            specs.append(dict(spec, name=spec["name"] + "-base", bin=base))
    return specs


def unsupported(spec: dict) -> str:
    kind = spec["kind"]
    if kind in ("weir", "direct"):
        return ""
    missing = [p["name"] for p in spec["plugins"] if p["name"] not in PLUGIN_SNIPPETS.get(kind, {})]
    if missing:
        return f"{kind} has no equivalent of plugin(s) {', '.join(missing)}"
    return ""


def start_contender(spec: dict, scn: dict, ctx: "Ctx") -> Contender:
    kind = spec["kind"]
    c = Contender(name=spec["name"], kind=kind)
    why = unsupported(spec)
    if why:
        c.skipped, c.note = True, why
        return c
    if kind == "direct" and scn["tls"]:
        c.skipped, c.note = True, "the upstream speaks plain HTTP only"
        return c
    if kind == "direct":
        c.proc = ctx.upstream
        c.url = f"http://{HOST}:{ctx.upstream_port}"
        c.note = "upstream itself (ceiling); CPU/RSS are the upstream's"
        return c
    spec = dict(spec, upstream_port=ctx.upstream_port, port=ctx.ports.take())
    scheme = "https" if scn["tls"] else "http"
    d = ctx.workdir / f"{scn['name']}-{spec['name']}"
    d.mkdir(parents=True, exist_ok=True)
    os.chmod(d, 0o755)
    log = d / "output.log"
    cpus = ctx.proxy_cpus
    if kind == "nginx":
        conf = d / "nginx.conf"
        conf.write_text(nginx_proxy_conf(d, scn, spec))
        c.proc = Proc(c.name, [ctx.tools["nginx"], "-p", f"{d}/", "-c", str(conf), "-e", "stderr"],
                      cpus, log, stop_signal=signal.SIGTERM)
        ready = f"{scheme}://{HOST}:{spec['port']}{request_paths(scn)[0]}"
    elif kind == "haproxy":
        conf = d / "haproxy.cfg"
        conf.write_text(haproxy_conf(d, scn, spec))
        c.proc = Proc(c.name, [ctx.tools["haproxy"], "-db", "-f", str(conf)], cpus, log,
                      stop_signal=signal.SIGTERM)
        ready = f"{scheme}://{HOST}:{spec['port']}{request_paths(scn)[0]}"
    elif kind == "weir":
        admin = ctx.ports.take()
        if scn["tls"]:
            spec["plain_port"] = ctx.ports.take()
        argv, ready = weir_launch(scn, spec, spec["port"], admin, d)
        env = dict(os.environ, RUST_LOG="warn")
        c.proc = Proc(c.name, argv, cpus, log, env=env)
    else:
        raise SystemExit(f"unknown contender kind {kind!r}")
    c.url = f"{scheme}://{HOST}:{spec['port']}"
    wait_http(ready, c.proc)
    if scn["tls"] and kind == "weir":
        # Weir's readiness is on the admin port; also wait for the TLS listener to answer.
        wait_http(c.url + request_paths(scn)[0], c.proc)
    return c


def check_contender(c: Contender, scn: dict) -> None:
    """One request per sampled path: 200 and the right body; for one-route scenarios also the
    headers the upstream saw (and a request id where a correlation plugin runs)."""
    paths = request_paths(scn)
    sample = sorted({paths[0], paths[len(paths) // 2], paths[-1]})
    want = LARGE_BYTES if scn["response"] == "1mb" else len(SMALL_BODY)  # small and local: 64
    for p in sample:
        status, body = http_get(c.url + p, timeout=5.0)
        if status != 200 or len(body) != want:
            raise RuntimeError(f"{c.name}: GET {p} gave {status} with {len(body)} bytes, "
                               f"expected 200 with {want}")
    if scn["routes"] <= 1 and scn["response"] != "local":
        status, body = http_get(c.url + CHECK_PATH)
        c.upstream_saw = body.decode(errors="replace") if status == 200 else f"status {status}"
        wants_cid = c.kind != "direct" and any(
            p["name"] == "correlation-id" for p in (scn["_specs"][c.name]["plugins"]))
        if wants_cid and f"{CID_HEADER}= " in c.upstream_saw + " ":
            raise RuntimeError(f"{c.name}: no {CID_HEADER} reached the upstream: {c.upstream_saw}")
    if scn["tls"]:
        c.tls = tls_probe(c, request_paths(scn)[0])


def tls_probe(c: Contender, path: str) -> dict:
    """What a contender negotiates: version, cipher and ALPN (offering h2 and http/1.1), and
    whether it resumes a session the way wrk does (wrk keeps each connection's SSL object and
    offers the last session it got on its next handshake)."""
    port = int(c.url.rsplit(":", 1)[1])
    # SNI a.example.test, verified against the fixtures' CA.
    plain = tls_check_context(check_hostname=True)
    with_alpn = tls_check_context(TLS_ALPN, check_hostname=True)

    def connect(cx: ssl.SSLContext, session=None) -> ssl.SSLSocket:
        raw = socket.create_connection((HOST, port), timeout=5.0)
        return cx.wrap_socket(raw, server_hostname=TLS_SNI, session=session)

    with connect(with_alpn) as s:
        alpn = s.selected_alpn_protocol()

    def request(session=None):
        # Like wrk: no ALPN, HTTP/1.1, read to the end so TLS 1.3 tickets are processed.
        with connect(plain, session) as s:
            s.sendall(f"GET {path} HTTP/1.1\r\nHost: {TLS_SNI}\r\nConnection: close\r\n\r\n".encode())
            data = b""
            with contextlib.suppress(ssl.SSLError, OSError):
                while chunk := s.recv(65536):
                    data += chunk
            if not data.startswith(b"HTTP/1.1 200"):
                raise RuntimeError(f"{c.name}: TLS GET {path} answered {data[:40]!r}")
            return (s.version(), s.cipher()[0]), s.session_reused, s.session

    (version, cipher), _, session = request()
    _, reused, _ = request(session)
    return {"version": version, "cipher": cipher, "alpn_offered_h2_http11": alpn,
            "session_resumed": reused}


# --------------------------------------------------------------------------------------------
# Measuring
# --------------------------------------------------------------------------------------------

@dataclass
class Ctx:
    args: argparse.Namespace
    tools: dict
    workdir: Path
    ports: Ports
    upstream: Proc | None = None
    upstream_port: int = 0
    proxy_cpus: str | None = None
    load_cpus: str | None = None
    quiet_spent: float = 0.0
    log: callable = lambda msg: print(msg, flush=True)  # noqa: E731


def run_wrk(ctx: Ctx, c: Contender, scn: dict, duration: float, paths_file: Path | None) -> dict:
    a = ctx.args
    conns = scn.get("connections") or a.connections
    argv = [ctx.tools["wrk"], "-t", str(a.threads), "-c", str(conns), "-d", f"{duration:g}s",
            "--timeout", "5s", "-s", str(LUA)]
    for h in scn["headers"]:
        argv += ["-H", h]
    argv.append(c.url + request_paths(scn)[0])
    if ctx.load_cpus:
        argv = [shutil.which("taskset") or "taskset", "-c", ctx.load_cpus] + argv
    env = dict(os.environ)
    if paths_file:
        env["WEIR_BENCH_PATHS"] = str(paths_file)
    else:
        env.pop("WEIR_BENCH_PATHS", None)

    tw = time_wait_sockets()
    ours = [p for proc in _STARTED for p in proc.pids()]
    mine_pids = c.pids()
    up_pids = ctx.upstream.pids() if ctx.upstream else []
    cpu0 = proc_cpu_ticks(mine_pids)
    cs0 = proc_ctx_switches(mine_pids)
    up0 = proc_cpu_ticks(up_pids)
    ours0 = proc_cpu_ticks(ours)
    kids0, self0 = children_cpu_s(), self_cpu_s()
    sys0 = system_cpu()
    t0 = time.monotonic()
    out = subprocess.run(argv, capture_output=True, text=True, env=env,
                         timeout=duration + 60, check=False)
    wall = time.monotonic() - t0
    sys1 = system_cpu()
    kids1, self1 = children_cpu_s(), self_cpu_s()
    ours1 = proc_cpu_ticks(ours)
    up1 = proc_cpu_ticks(up_pids)
    cpu1 = proc_cpu_ticks(mine_pids)
    cs1 = proc_ctx_switches(mine_pids)
    line = next((l for l in out.stdout.splitlines() if l.startswith("WRKJSON ")), None)
    if out.returncode != 0 or line is None:
        raise RuntimeError(f"wrk failed against {c.name} (rc {out.returncode}):\n{out.stdout}\n{out.stderr}")
    w = json.loads(line[len("WRKJSON "):])
    n = max(w["requests"], 1)
    secs = w["duration_us"] / 1e6
    lat = w["latency_us"]
    cpu = cpu_delta(sys0, sys1)
    wrk_s = kids1 - kids0
    ours_s = (ours1 - ours0) / CLK_TCK + wrk_s + (self1 - self0)
    foreign = max(0.0, cpu["cpu"]["task_s"] - ours_s) / max(wall, 1e-9)
    proxy_ticks = cpu1 - cpu0
    run = {
        "requests": w["requests"],
        "seconds": round(secs, 3),
        "rps": round(w["requests"] / secs, 1),
        "mb_per_s": round(w["bytes"] / secs / 1e6, 1),
        "errors": w["errors"],
        "errors_total": sum(w["errors"].values()),
        "p50_ms": lat["p50"] / 1000, "p75_ms": lat["p75"] / 1000, "p90_ms": lat["p90"] / 1000,
        "p99_ms": lat["p99"] / 1000, "p999_ms": lat["p999"] / 1000,
        "max_ms": lat["max"] / 1000, "mean_ms": lat["mean"] / 1000,
        "cpu_us_per_req": round(proxy_ticks / CLK_TCK * 1e6 / n, 3),
        # The proxy's threads' context switches per request (a per-request wake-up of another
        # thread shows here).
        "ctx_switches_per_req": round((cs1 - cs0) / n, 3),
        "proxy_cpu_cores": round(proxy_ticks / CLK_TCK / secs, 3),
        "upstream_cpu_us_per_req": round((up1 - up0) / CLK_TCK * 1e6 / n, 3),
        "wrk_cpu_cores": round(wrk_s / secs, 3),
        "cpu_busy": {k: round(v["busy"], 3) for k, v in cpu.items() if k != "cpu"},
        "softirq": {k: round(v["softirq"], 3) for k, v in cpu.items() if k != "cpu"},
        "steal": round(cpu["cpu"]["steal"], 4),
        "foreign_cores": round(foreign, 3),
        # TIME_WAIT sockets on the machine when the run started (connection churn of earlier
        # runs lingers for 60 s and makes connect() dearer for everyone).
        "time_wait_at_start": tw,
    }
    return run


def foreign_cores_now(seconds: float = 1.0) -> float:
    """Cores used, over `seconds`, by processes that are not part of the benchmark."""
    ours = [p for proc in _STARTED for p in proc.pids()]
    s0, o0, m0 = system_cpu(), proc_cpu_ticks(ours), self_cpu_s()
    time.sleep(seconds)
    s1, o1, m1 = system_cpu(), proc_cpu_ticks(ours), self_cpu_s()
    task_s = cpu_delta(s0, s1)["cpu"]["task_s"]
    return max(0.0, task_s - (o1 - o0) / CLK_TCK - (m1 - m0)) / seconds


def wait_quiet(ctx: Ctx) -> float:
    """Waits (bounded) until foreign work stays under --noise-limit for 2 s in a row.

    Each wait is at most --quiet-wait seconds and all waits together at most --quiet-budget;
    after that runs are measured anyway (and marked noisy if disturbed).
    """
    a = ctx.args
    if a.quiet_wait <= 0 or ctx.quiet_spent >= a.quiet_budget:
        return 0.0
    start = time.monotonic()
    calm, announced, last = 0, False, 0.0
    limit = min(a.quiet_wait, a.quiet_budget - ctx.quiet_spent)
    while time.monotonic() - start < limit:
        last = foreign_cores_now(1.0)
        if last <= a.noise_limit:
            calm += 1
            if calm >= 2:
                break
        else:
            calm = 0
            if not announced:
                ctx.log(f"    machine busy ({last:.2f} cores of foreign CPU); waiting up to {limit:.0f}s")
                announced = True
    waited = time.monotonic() - start
    if calm < 2:
        ctx.log(f"    still busy after {waited:.0f}s ({last:.2f} cores); measuring anyway")
    ctx.quiet_spent += waited
    return waited


def disturbance(run: dict, a: argparse.Namespace) -> str:
    """Why a run does not count as clean ("" if it does)."""
    why = []
    if run["foreign_cores"] > a.noise_limit:
        why.append(f"{run['foreign_cores']:.2f} cores of foreign CPU")
    if run["steal"] > a.steal_limit:
        why.append(f"{run['steal']:.0%} steal time")
    return " and ".join(why)


def measure(ctx: Ctx, c: Contender, scn: dict, paths_file: Path | None) -> dict:
    """One counted run; repeated (at most --noise-retries times) while it is disturbed by
    foreign work on this machine or by the hypervisor (steal time)."""
    a = ctx.args
    best = None
    for attempt in range(a.noise_retries + 1):
        waited = wait_quiet(ctx)
        run = run_wrk(ctx, c, scn, a.duration, paths_file)
        run["waited_for_quiet_s"] = round(waited, 1)
        run["attempt"] = attempt + 1
        score = run["foreign_cores"] + run["steal"]
        if best is None or score < best["foreign_cores"] + best["steal"]:
            best = run
        why = disturbance(run, a)
        if not why:
            break
        ctx.log(f"    {c.name}: {run['rps']:,.0f} req/s with {why}; "
                + ("repeating" if attempt < a.noise_retries else "keeping the least disturbed run"))
    best["noisy"] = bool(disturbance(best, a))
    return best


def summarize(c: Contender) -> dict:
    runs = c.runs
    if not runs:
        return {}
    med = lambda k: statistics.median(r[k] for r in runs)  # noqa: E731
    return {
        "rps": round(med("rps"), 1),
        "rps_min": min(r["rps"] for r in runs),
        "rps_max": max(r["rps"] for r in runs),
        "mb_per_s": round(med("mb_per_s"), 1),
        "p50_ms": round(med("p50_ms"), 3),
        "p99_ms": round(med("p99_ms"), 3),
        "p99_ms_min": min(r["p99_ms"] for r in runs),
        "p99_ms_max": max(r["p99_ms"] for r in runs),
        "p999_ms": round(med("p999_ms"), 3),
        "cpu_us_per_req": round(med("cpu_us_per_req"), 2),
        "ctx_switches_per_req": round(med("ctx_switches_per_req"), 3),
        "proxy_cpu_cores": round(med("proxy_cpu_cores"), 2),
        "upstream_cpu_us_per_req": round(med("upstream_cpu_us_per_req"), 2),
        "rss_mb": round(c.rss_kb / 1024, 1),
        "errors": sum(r["errors_total"] for r in runs),
        "noisy_runs": sum(1 for r in runs if r["noisy"]),
        "max_foreign_cores": max(r["foreign_cores"] for r in runs),
        "max_steal": max(r["steal"] for r in runs),
        # Busiest CPU of the load side (wrk + upstream): near 1.0 means the load generator,
        # not the contender, may be what limits the figure.
        "max_load_cpu_busy": (max(r["cpu_busy"].get(f"cpu{x}", 0) for r in runs for x in _LOAD_CPUS)
                              if _LOAD_CPUS else None),
    }


_LOAD_CPUS: list[int] = []


def run_scenario(ctx: Ctx, scn: dict) -> dict:
    a = ctx.args
    log = ctx.log
    log(f"\n== {scn['name']}: {scn['title']}")
    specs = contender_specs(scn)
    if a.contenders:
        specs = [s for s in specs if s["name"] in a.contenders or s["kind"] in a.contenders]
    scn["_specs"] = {s["name"]: s for s in specs}
    paths = request_paths(scn)
    paths_file = None
    if len(paths) > 1:
        paths_file = ctx.workdir / f"paths-{scn['name']}.txt"
        paths_file.write_text("\n".join(paths) + "\n")

    contenders: list[Contender] = []
    try:
        for spec in specs:
            c = start_contender(spec, scn, ctx)
            if c.skipped:
                log(f"  {c.name}: skipped ({c.note})")
            else:
                check_contender(c, scn)
                if c.tls:
                    log(f"  {c.name}: {c.tls['version']} {c.tls['cipher']}, ALPN "
                        f"{c.tls['alpn_offered_h2_http11']}, session resumed: {c.tls['session_resumed']}")
            contenders.append(c)
        live = [c for c in contenders if not c.skipped]

        with quiet(a.build_lock, a.lock_wait, log):
            for c in live:
                log(f"  warm-up {c.name} ({a.warmup:g}s)")
                run_wrk(ctx, c, scn, a.warmup, paths_file)
        for rep in range(a.reps):
            shift = rep % len(live) if live else 0
            order = live[shift:] + live[:shift]
            with quiet(a.build_lock, a.lock_wait, log) as waited:
                if waited > 1:
                    log(f"  (waited {waited:.0f}s for the build lock)")
                for c in order:
                    run = measure(ctx, c, scn, paths_file)
                    run["round"] = rep + 1
                    c.runs.append(run)
                    log(f"  round {rep + 1}/{a.reps} {c.name:16} {run['rps']:>10,.0f} req/s  "
                        f"p99 {run['p99_ms']:.2f} ms  cpu {run['cpu_us_per_req']:.1f} us/req  "
                        f"switches {run['ctx_switches_per_req']:.2f}/req  "
                        f"errors {run['errors_total']}  foreign {run['foreign_cores']:.2f}  "
                        f"steal {run['steal']:.1%}")
        for c in live:
            c.rss_kb = proc_hwm_kb(c.pids())
            if c.proc is not ctx.upstream and not c.proc.alive():
                raise RuntimeError(f"{c.name} died during the scenario:\n{c.proc.tail()}")
    finally:
        for c in contenders:
            if c.proc and c.proc is not ctx.upstream:
                c.proc.stop()

    result = {
        "name": scn["name"], "title": scn["title"], "description": scn["description"],
        "response": scn["response"], "routes": scn["routes"], "headers": scn["headers"],
        "plugins": scn["plugins"], "connections": scn.get("connections") or a.connections,
        "tls": scn["tls"], "contenders": [],
    }
    for c in contenders:
        entry = {"name": c.name, "kind": c.kind, "skipped": c.skipped, "note": c.note,
                 "plugins": scn["_specs"][c.name]["plugins"], "runs": c.runs,
                 "summary": summarize(c)}
        if c.upstream_saw:
            entry["upstream_saw"] = c.upstream_saw
        if c.tls:
            entry["tls"] = c.tls
        result["contenders"].append(entry)
    add_ratios(result)
    return result


def add_ratios(result: dict) -> None:
    by = {c["name"]: c for c in result["contenders"] if c["summary"]}
    base = by.get("nginx")
    for c in by.values():
        s = c["summary"]
        if base:
            b = base["summary"]
            s["rps_vs_nginx"] = round(s["rps"] / b["rps"], 3)
            s["rps_vs_nginx_range"] = [round(s["rps_min"] / b["rps_max"], 3),
                                       round(s["rps_max"] / b["rps_min"], 3)]
            s["p99_vs_nginx"] = round(s["p99_ms"] / b["p99_ms"], 3)
            s["p999_vs_nginx"] = round(s["p999_ms"] / b["p999_ms"], 3)
            s["cpu_vs_nginx"] = round(s["cpu_us_per_req"] / b["cpu_us_per_req"], 3) if b["cpu_us_per_req"] else None


def evaluate_targets(scenarios: list[dict], defs: dict) -> list[dict]:
    index = {(s["name"], c["name"]): c for s in scenarios for c in s["contenders"]}
    out = []
    for scn in scenarios:
        for t in defs.get(scn["name"], []):
            def ref(r):
                key = tuple(r.split("/", 1)) if "/" in r else (scn["name"], r)
                c = index.get(key)
                return c["summary"] if c and c["summary"] else None
            of, vs = ref(t["of"]), ref(t["vs"])
            entry = dict(t, scenario=scn["name"])
            if of is None or vs is None:
                entry.update(value=None, verdict="not measured")
            else:
                m = t["metric"]
                entry["value"] = round(of[m] / vs[m], 3)
                if m == "rps":
                    entry["range"] = [round(of["rps_min"] / vs["rps_max"], 3),
                                      round(of["rps_max"] / vs["rps_min"], 3)]
                elif m == "p99_ms":
                    entry["range"] = [round(of["p99_ms_min"] / vs["p99_ms_max"], 3),
                                      round(of["p99_ms_max"] / vs["p99_ms_min"], 3)]
                ok = entry["value"] >= t["min"] if "min" in t else entry["value"] <= t["max"]
                entry["verdict"] = "met" if ok else "MISSED"
            out.append(entry)
    return out


# --------------------------------------------------------------------------------------------
# Reporting
# --------------------------------------------------------------------------------------------

def fmt_table(results: dict, markdown: bool = False) -> str:
    lines = []
    head = ["contender", "req/s (median)", "min–max", "×nginx", "p50 ms", "p99 ms", "p99.9 ms",
            "p99 ×nginx", "CPU µs/req", "CPU ×nginx", "switches/req", "peak RSS MB", "load CPU", "errors"]
    for s in results["scenarios"]:
        rows = []
        for c in s["contenders"]:
            if c["skipped"]:
                rows.append([c["name"], "skipped: " + c["note"]] + [""] * (len(head) - 2))
                continue
            m = c["summary"]
            big = s["response"] == "1mb"
            rps = f"{m['rps']:,.0f}" + (f" ({m['mb_per_s'] / 1000:.2f} GB/s)" if big else "")
            rows.append([
                c["name"] + ("*" if c["kind"] == "direct" else ""),
                rps,
                f"{m['rps_min']:,.0f}–{m['rps_max']:,.0f}",
                f"{m['rps_vs_nginx']:.2f}" if "rps_vs_nginx" in m else "",
                f"{m['p50_ms']:.2f}", f"{m['p99_ms']:.2f}", f"{m['p999_ms']:.2f}",
                f"{m['p99_vs_nginx']:.2f}" if "p99_vs_nginx" in m else "",
                f"{m['cpu_us_per_req']:.1f}",
                f"{m['cpu_vs_nginx']:.2f}" if m.get("cpu_vs_nginx") else "",
                f"{m['ctx_switches_per_req']:.2f}" if "ctx_switches_per_req" in m else "",
                f"{m['rss_mb']:.1f}",
                f"{m['max_load_cpu_busy']:.0%}" if m.get("max_load_cpu_busy") is not None else "",
                str(m["errors"]) + (f" ({m['noisy_runs']} noisy)" if m["noisy_runs"] else ""),
            ])
        if markdown:
            lines.append(f"\n**{s['name']}** — {s['title']}\n")
            lines.append("| " + " | ".join(head) + " |")
            lines.append("|" + "|".join("---" if i == 0 else "--:" for i in range(len(head))) + "|")
            for r in rows:
                lines.append("| " + " | ".join(r) + " |")
        else:
            widths = [max(len(str(x[i])) for x in [head] + rows) for i in range(len(head))]
            lines.append(f"\n{s['name']}: {s['title']}")
            lines.append("  ".join(h.ljust(w) if i == 0 else h.rjust(w) for i, (h, w) in enumerate(zip(head, widths))))
            for r in rows:
                if r[1].startswith("skipped"):
                    lines.append(f"{r[0].ljust(widths[0])}  {r[1]}")
                else:
                    lines.append("  ".join(str(x).ljust(w) if i == 0 else str(x).rjust(w)
                                           for i, (x, w) in enumerate(zip(r, widths))))
    lines.append("")
    lines.append("* direct = the upstream without a proxy (ceiling of this setup); its CPU and RSS are the upstream's.")
    lines.append("CPU µs/req: the contender's user+system time per request. load CPU: busiest run's use of the")
    lines.append("CPU that wrk and the upstream share; near 100% the load side, not the contender, caps req/s.")
    return "\n".join(lines)


def fmt_targets(results: dict, markdown: bool = False) -> str:
    lines = []
    if markdown:
        lines += ["| target | measured | spread | verdict |", "|---|--:|--:|---|"]
    for t in results["targets"]:
        val = "n/a" if t["value"] is None else f"{t['value']:.3f}"
        rng = f"{t['range'][0]:.2f}–{t['range'][1]:.2f}" if t.get("range") else ""
        if markdown:
            lines.append(f"| {t['label']} | {val} | {rng} | {t['verdict']} |")
        else:
            lines.append(f"  {t['verdict']:>12}  {t['label']}: {val}" + (f" (spread {rng})" if rng else ""))
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------------

def load_scenarios(names: list[str] | None, all_: bool = False) -> tuple[list[dict], dict]:
    scns, targets = [], {}
    for f in sorted((BENCH / "scenarios").glob("*.py")):
        spec = importlib.util.spec_from_file_location(f"bench_scenario_{f.stem}", f)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        s = dict(mod.SCENARIO)
        s.setdefault("title", s["name"])
        s.setdefault("description", "")
        s.setdefault("response", "small")
        s.setdefault("routes", 1)
        s.setdefault("plugins", [])
        s.setdefault("headers", [])
        s.setdefault("contenders", ["direct", "nginx", "haproxy", "weir"])
        s.setdefault("optional", False)
        s.setdefault("tls", False)
        s["file"] = str(f.relative_to(REPO))
        targets[s["name"]] = s.pop("targets", [])
        scns.append(s)
    if names:
        known = {s["name"] for s in scns}
        unknown = [n for n in names if n not in known]
        if unknown:
            raise SystemExit(f"unknown scenario(s) {unknown}; known: {sorted(known)}")
        scns = [s for s in scns if s["name"] in names]
    elif not all_:
        scns = [s for s in scns if not s["optional"]]
    return scns, targets


def tool_versions(tools: dict) -> dict:
    def out(argv):
        with contextlib.suppress(Exception):
            r = subprocess.run(argv, capture_output=True, text=True, timeout=10)
            return (r.stdout + r.stderr).strip().splitlines()[0]
        return None
    git = lambda *a: out(["git", "-C", str(REPO), *a])  # noqa: E731
    dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True).stdout.strip()
    return {
        "weir": {"commit": git("rev-parse", "HEAD"), "dirty_files": dirty.splitlines(),
                 "binary": str(WEIR_BIN),
                 "binary_mtime": _dt.datetime.fromtimestamp(WEIR_BIN.stat().st_mtime).isoformat(timespec="seconds"),
                 "mode": WEIR_MODE},
        "nginx": out([tools["nginx"], "-v"]),
        "haproxy": out([tools["haproxy"], "-v"]),
        "wrk": out([tools["wrk"], "-v"]),
        "python": platform.python_version(),
    }


def machine_info() -> dict:
    cpu = Path("/proc/cpuinfo").read_text()
    model = next((l.split(":", 1)[1].strip() for l in cpu.splitlines() if l.startswith("model name")), "?")
    mhz = next((l.split(":", 1)[1].strip() for l in cpu.splitlines() if l.startswith("cpu MHz")), "?")
    mem = next((l.split()[1] for l in Path("/proc/meminfo").read_text().splitlines()
                if l.startswith("MemTotal")), "0")
    return {"nproc": os.cpu_count(), "cpu_model": model, "cpu_mhz": mhz,
            "kernel": platform.release(), "mem_gb": round(int(mem) / 1024 / 1024, 1),
            "loadavg_at_start": Path("/proc/loadavg").read_text().split()[:3]}


def parse_args(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="bench/run.sh", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smoke test: 1 repetition of 3 s, 1 s warm-up")
    ap.add_argument("--reps", type=int, default=3, help="measured repetitions per contender (default 3)")
    ap.add_argument("--duration", type=float, default=10, help="seconds per wrk run (default 10)")
    ap.add_argument("--warmup", type=float, default=3, help="seconds of discarded warm-up per contender (default 3)")
    ap.add_argument("--connections", type=int, default=32, help="wrk connections (default 32)")
    ap.add_argument("--threads", type=int, default=1, help="wrk threads (default 1: wrk shares the load CPU)")
    ap.add_argument("--scenarios", help="comma-separated scenario names (default: every scenario not marked optional)")
    ap.add_argument("--all", action="store_true", help="also run the optional (diagnostic) scenarios")
    ap.add_argument("--contenders", help="comma-separated contender names or kinds (default: all)")
    ap.add_argument("--proxy-cpus", default="1", help="CPU list for the proxy under test (default 1)")
    ap.add_argument("--load-cpus", default="0", help="CPU list for wrk and the upstream (default 0)")
    ap.add_argument("--no-pin", action="store_true", help="do not pin with taskset")
    ap.add_argument("--base-port", type=int, default=24080, help="first port to try (default 24080)")
    ap.add_argument("--noise-limit", type=float, default=0.05,
                    help="cores of CPU used by processes outside the benchmark above which a run is repeated (default 0.05)")
    ap.add_argument("--steal-limit", type=float, default=0.03,
                    help="share of CPU time stolen by the hypervisor above which a run is repeated (default 0.03)")
    ap.add_argument("--noise-retries", type=int, default=2, help="repeats of a disturbed run (default 2)")
    ap.add_argument("--quiet-wait", type=float, default=120,
                    help="before each run, wait at most this many seconds for foreign CPU use to drop "
                         "under --noise-limit (default 120; 0 disables)")
    ap.add_argument("--quiet-budget", type=float, default=900,
                    help="total seconds all those waits may take in one invocation (default 900)")
    ap.add_argument("--no-build-lock", dest="build_lock", action="store_false",
                    help=f"do not hold {BUILD_LOCK} while measuring (by default each round holds it, "
                         "so no cargo build that uses the lock runs during a measurement)")
    ap.add_argument("--lock-wait", type=float, default=300, help="seconds to wait for the build lock per round (default 300)")
    ap.add_argument("--access-log", choices=["on", "off"], default="on",
                    help="access logs in every contender (default on, as each ships: Weir's JSON "
                    "on stdout, nginx's combined to a file, HAProxy's httplog on stdout)")
    ap.add_argument("--out", help="results file (default bench/results/<timestamp>.json, also copied to latest.json)")
    ap.add_argument("--report", metavar="RESULTS_JSON", help="print the tables of a results file as Markdown and exit")
    a = ap.parse_args(argv)
    if a.quick:
        a.reps, a.duration, a.warmup = 1, 3, 1
    if a.reps < 1 or a.duration <= 0 or a.warmup < 0 or a.connections < 1 or a.threads < 1:
        ap.error("reps, duration, connections and threads must be positive")
    a.scenarios = a.scenarios.split(",") if a.scenarios else None
    a.contenders = set(a.contenders.split(",")) if a.contenders else None
    return a


def main(argv: list[str]) -> int:
    a = parse_args(argv)
    global ACCESS_LOG
    ACCESS_LOG = a.access_log == "on"
    if a.report:
        results = json.loads(Path(a.report).read_text())
        print(fmt_table(results, markdown=True))
        print()
        print(fmt_targets(results, markdown=True))
        return 0

    tools = {t: shutil.which(t) or f"/usr/sbin/{t}" for t in ("nginx", "haproxy", "wrk")}
    for t, p in tools.items():
        if not os.access(p, os.X_OK):
            raise SystemExit(f"{t} not found; run bench/run.sh (it installs nginx, haproxy and wrk)")
    if not WEIR_BIN.exists():
        raise SystemExit(f"{WEIR_BIN} missing; run bench/run.sh (it builds Weir in release mode)")
    scenarios, target_defs = load_scenarios(a.scenarios, a.all)

    atexit.register(stop_all)
    signal.signal(signal.SIGINT, _on_signal)
    signal.signal(signal.SIGTERM, _on_signal)

    ncpu = os.cpu_count() or 1
    pin = not a.no_pin and shutil.which("taskset") and ncpu >= 2
    workdir = Path(tempfile.mkdtemp(prefix="weir-bench-"))
    os.chmod(workdir, 0o755)
    ctx = Ctx(args=a, tools=tools, workdir=workdir, ports=Ports(a.base_port),
              proxy_cpus=a.proxy_cpus if pin else None, load_cpus=a.load_cpus if pin else None)
    if pin:
        _LOAD_CPUS.extend(int(x) for x in a.load_cpus.split(",") if x.isdigit())
    started = _dt.datetime.now()
    t_start = time.monotonic()
    log = ctx.log
    log(f"weir bench: {len(scenarios)} scenario(s), {a.reps} x {a.duration:g}s per contender "
        f"(+{a.warmup:g}s warm-up), {a.connections} connections, wrk threads {a.threads}")
    log(f"pinning: {'proxy on CPU ' + a.proxy_cpus + ', wrk + upstream on CPU ' + a.load_cpus if pin else 'none'}")
    log(f"work dir: {workdir}")

    try:
        # The upstream, shared by every contender and scenario.
        (workdir / "upstream").mkdir()
        os.chmod(workdir / "upstream", 0o755)
        (workdir / "upstream" / "1mb.bin").write_bytes(os.urandom(LARGE_BYTES))
        os.chmod(workdir / "upstream" / "1mb.bin", 0o644)
        ctx.upstream_port = ctx.ports.take()
        conf = workdir / "upstream" / "nginx.conf"
        conf.write_text(nginx_upstream_conf(workdir / "upstream", ctx.upstream_port))
        ctx.upstream = Proc("upstream", [tools["nginx"], "-p", f"{workdir}/upstream/", "-c", str(conf),
                                         "-e", "stderr"], ctx.load_cpus, workdir / "upstream" / "output.log")
        wait_http(f"http://{HOST}:{ctx.upstream_port}/", ctx.upstream)
        status, body = http_get(f"http://{HOST}:{ctx.upstream_port}/1mb")
        if status != 200 or len(body) != LARGE_BYTES:
            raise RuntimeError(f"upstream /1mb gave {status} with {len(body)} bytes")

        results = {
            "started": started.isoformat(timespec="seconds"),
            "command": "bench/run.sh " + " ".join(argv),
            "machine": machine_info(),
            "versions": tool_versions(tools),
            "settings": {
                "reps": a.reps, "duration_s": a.duration, "warmup_s": a.warmup,
                "connections": a.connections, "wrk_threads": a.threads,
                "pinning": ({"proxy_cpus": a.proxy_cpus, "wrk_cpus": a.load_cpus,
                             "upstream_cpus": a.load_cpus, "tool": "taskset -c"} if pin else None),
                "upstream": "nginx, 1 worker, 64-byte `return 200` body, 1 MiB file via sendfile",
                "weir_flags": ("--worker-threads 1 (defaults otherwise)" if ACCESS_LOG
                               else "--worker-threads 1 --access-log false (defaults otherwise)"),
                "access_log": ("on: Weir JSON to stdout (a file), nginx combined to a file, "
                               "HAProxy httplog to stdout (a file)" if ACCESS_LOG else "off"),
                "tls": (f"scenarios with tls: {TLS_CERT.relative_to(REPO)} on every contender, "
                        f"{'/'.join(TLS_PROTOCOLS)}, groups {':'.join(TLS_GROUPS)}, ALPN "
                        f"{','.join(TLS_ALPN)}, session resumption on (wrk resumes)"),
                "noise_limit_cores": a.noise_limit, "steal_limit": a.steal_limit,
                "noise_retries": a.noise_retries,
                "quiet_wait_s": a.quiet_wait, "quiet_budget_s": a.quiet_budget,
                "build_lock_held_while_measuring": a.build_lock,
                "order": "per round every contender once, order rotated each round",
            },
            "scenarios": [],
        }
        RESULTS.mkdir(parents=True, exist_ok=True)
        stamp = started.strftime("%Y%m%dT%H%M%S") + ("-quick" if a.quick else "")
        out = Path(a.out) if a.out else RESULTS / f"{stamp}.json"
        for scn in scenarios:
            res = run_scenario(ctx, scn)
            res["file"] = scn["file"]
            results["scenarios"].append(res)
            # Partial results survive an interrupted run.
            results["complete"] = False
            out.write_text(json.dumps(results, indent=1) + "\n")
        results["complete"] = True
        results["targets"] = evaluate_targets(results["scenarios"], target_defs)
        results["elapsed_s"] = round(time.monotonic() - t_start, 1)
        results["waited_for_quiet_s"] = round(ctx.quiet_spent, 1)
    finally:
        stop_all()

    text = json.dumps(results, indent=1) + "\n"
    out.write_text(text)
    if not a.out:
        (RESULTS / "latest.json").write_text(text)
    print(fmt_table(results))
    print("\ntargets:")
    print(fmt_targets(results))
    print(f"\nresults: {out.relative_to(REPO) if out.is_relative_to(REPO) else out}  "
          f"(elapsed {results['elapsed_s'] / 60:.1f} min)")
    shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
