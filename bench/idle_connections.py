#!/usr/bin/env python3
"""Memory per idle keep-alive connection: Weir against nginx, HTTP/1.1 and HTTP/2 (h2c).

    python3 bench/idle_connections.py                  # 10,000 connections per protocol
    python3 bench/idle_connections.py --connections 2000 --weir /tmp/weir-old

Starts target/release/weir (1 worker, bench/run.sh's table for one route) and nginx (1 worker,
the harness's configuration, and a second listener with `http2` for h2c), each in front of a
`weir echo` upstream. For each protocol it opens N connections, sends one request on each and
reads the answer (so every connection has been served and is idle in keep-alive), then reads
the proxy's resident memory (VmRSS of every process) and prints the growth per connection
against the figure before the connections were opened. The connections are held open while
the memory is read, then closed. Python 3.11 standard library only.
"""

import argparse
import json
import os
import resource
import selectors
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import weirbench  # bench/ is this script's folder, so first on sys.path
from callgrind import free_port, wait_port

HOST = weirbench.HOST
NGINX = shutil.which("nginx") or "/usr/sbin/nginx"

# HTTP/2 (h2c, prior knowledge): the preface, an empty SETTINGS frame, and a HEADERS frame
# for `GET /` on stream 1 (HPACK: :method GET, :scheme http, :path / from the static table,
# :authority "a" as a literal), END_STREAM | END_HEADERS.
H2_HEADERS = bytes([0x82, 0x86, 0x84, 0x41, 0x01, ord("a")])
H2_REQUEST = (b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
              + bytes([0, 0, 0, 0x4, 0, 0, 0, 0, 0])
              + len(H2_HEADERS).to_bytes(3, "big") + bytes([0x1, 0x5, 0, 0, 0, 1]) + H2_HEADERS)
H1_REQUEST = b"GET / HTTP/1.1\r\nHost: a\r\n\r\n"


def rss_kb(pid: int) -> int:
    """VmRSS of a process and its children (nginx's worker)."""
    pids = [pid]
    children = Path(f"/proc/{pid}/task/{pid}/children")
    if children.exists():
        pids += [int(p) for p in children.read_text().split()]
    total = 0
    for p in pids:
        for line in Path(f"/proc/{p}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                total += int(line.split()[1])
    return total


def answered(data: bytes, h2: bool) -> bool:
    """Whether `data` holds a complete answer: an HTTP/1.1 body of the announced length, or
    an HTTP/2 frame with END_STREAM on stream 1."""
    if not h2:
        head, sep, body = data.partition(b"\r\n\r\n")
        if not sep:
            return False
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                return len(body) >= int(line.split(b":")[1])
        return False
    i = 0
    while i + 9 <= len(data):
        length = int.from_bytes(data[i:i + 3], "big")
        kind, flags, stream = data[i + 3], data[i + 4], int.from_bytes(data[i + 5:i + 9], "big")
        if stream == 1 and kind in (0x0, 0x1) and flags & 0x1:
            return True
        i += 9 + length
    return False


def open_idle(port: int, n: int, h2: bool) -> list[socket.socket]:
    """`n` connections, each served once and left open."""
    socks, sel = [], selectors.DefaultSelector()
    request = H2_REQUEST if h2 else H1_REQUEST
    for _ in range(n):
        s = socket.create_connection((HOST, port))
        s.sendall(request)
        s.setblocking(False)
        sel.register(s, selectors.EVENT_READ, bytearray())
        socks.append(s)
        # Keep the number waiting for an answer bounded (the proxy's accept queue).
        if len(sel.get_map()) >= 200:
            drain(sel, h2, 100)
    drain(sel, h2, 0)
    return socks


def drain(sel: selectors.BaseSelector, h2: bool, leave: int) -> None:
    deadline = time.time() + 60
    while len(sel.get_map()) > leave:
        if time.time() > deadline:
            raise SystemExit(f"{len(sel.get_map())} connections got no answer within 60 s")
        for key, _ in sel.select(timeout=1):
            chunk = key.fileobj.recv(65536)
            key.data.extend(chunk)
            if not chunk or answered(bytes(key.data), h2):
                if not chunk:
                    raise SystemExit("the proxy closed a connection before answering")
                sel.unregister(key.fileobj)


def measure(name: str, argv: list, ports: dict, n: int, tmp: Path) -> dict:
    """Per protocol, the proxy's memory growth with `n` idle connections on `ports[proto]`."""
    log = open(tmp / f"{name}.log", "wb")
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    try:
        for port in ports.values():
            wait_port(port)
        out = {"contender": name, "connections": n}
        for proto, h2 in (("http1.1", False), ("h2c", True)):
            port = ports[proto]
            # Warm: one connection served, so that lazily built state is in the baseline.
            for s in open_idle(port, 10, h2):
                s.close()
            time.sleep(0.5)
            before = rss_kb(proc.pid)
            socks = open_idle(port, n, h2)
            time.sleep(1.0)
            after = rss_kb(proc.pid)
            for s in socks:
                s.close()
            time.sleep(1.0)
            out[proto] = {"rss_before_kb": before, "rss_after_kb": after,
                          "bytes_per_connection": round((after - before) * 1024 / n)}
        return out
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--connections", type=int, default=10_000)
    ap.add_argument("--weir", type=Path, default=weirbench.WEIR_BIN)
    ap.add_argument("--no-nginx", action="store_true")
    args = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 2 * args.connections + 1000
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(want, hard), hard))
    tmp = Path(tempfile.mkdtemp(prefix="weir-idle-"))
    up_port = free_port()
    upstream = subprocess.Popen([args.weir, "echo", "--listen", f"{HOST}:{up_port}"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port(up_port)
        scn = {"routes": 1, "response": "small", "tls": False}
        results = []
        port = free_port()
        table = weirbench.weir_table(scn, [], up_port)
        (tmp / "table.json").write_text(json.dumps(table))
        weir = [args.weir, "proxy", "--worker-threads", "1", "--listen", f"{HOST}:{port}",
                "--admin-listen", f"{HOST}:{free_port()}", "--config", tmp / "table.json"]
        ports = {"http1.1": port, "h2c": port}
        results.append(measure("weir", weir, ports, args.connections, tmp))
        if not args.no_nginx:
            # nginx 1.22 serves h2c on a listener of its own (`http2` there is HTTP/2 only).
            ports = {"http1.1": free_port(), "h2c": free_port()}
            spec = {"port": ports["http1.1"], "upstream_port": up_port, "plugins": []}
            conf = weirbench.nginx_proxy_conf(tmp, scn, spec)
            plain = f"listen {HOST}:{ports['http1.1']} backlog=4096;"
            conf = conf.replace(plain, plain + f"\n        listen {HOST}:{ports['h2c']} http2;")
            (tmp / "nginx.conf").write_text(conf)
            nginx = [NGINX, "-c", tmp / "nginx.conf", "-g", "master_process off;"]
            results.append(measure("nginx", nginx, ports, args.connections, tmp))
        for r in results:
            print(json.dumps(r), flush=True)
    finally:
        upstream.terminate()
        upstream.wait(timeout=30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
