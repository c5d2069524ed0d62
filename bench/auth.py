#!/usr/bin/env python3
"""What authentication costs: requests per second through one Weir process on four routes, no
plugin, `key-auth`, `basic-auth` and `jwt` (HS256), as ratios to the plain route measured in
the same run.

    cargo build --release
    python3 bench/auth.py                       # 3 rounds x 5 s per route
    python3 bench/auth.py --seconds 10 --rounds 5 --weir PATH --consumers 10000

The setup is bench/rate_limiting.py's: the proxy runs one worker pinned to CPU 0; wrk and the
upstream (nginx answering 64 bytes) share CPU 1. Every request carries a valid credential of
one of `--consumers` consumers, so the figure is the cost of a successful authentication: a
SHA-256 and a map probe (key-auth), a salted SHA-256 and a constant-time compare (basic-auth),
or an HMAC-SHA256 check and the claims (jwt), plus the identity headers sent upstream.
Needs nginx, wrk and taskset.
"""

import base64
import hashlib
import hmac
import json
import sys
import tempfile
import time
from pathlib import Path

from callgrind import free_port, wait_port
from common import have, measure, parser, ratios, stop, write
from rate_limiting import nginx_upstream, start, wrk

HOST = "127.0.0.1"
JWT_SECRET = "bench-secret-0123456789abcdef"


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def hs256_token(iss: str) -> str:
    head = b64url(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    body = b64url(json.dumps({"iss": iss, "exp": int(time.time()) + 86400}).encode())
    sig = hmac.new(JWT_SECRET.encode(), f"{head}.{body}".encode(), hashlib.sha256).digest()
    return f"{head}.{body}.{b64url(sig)}"


def table(up_port: int, consumers: int) -> dict:
    salt = b"bench-salt-16byt"
    people = []
    for i in range(consumers):
        password = f"password-{i}"
        digest = hashlib.sha256(salt + password.encode()).hexdigest()
        people.append({
            "id": f"c{i}", "username": f"user{i}",
            "credentials": [
                {"type": "key-auth", "id": f"c{i}-key",
                 "key_sha256": hashlib.sha256(f"key-{i}".encode()).hexdigest()},
                {"type": "basic-auth", "id": f"c{i}-pw", "username": f"user{i}",
                 "password_hash": f"sha256${salt.hex()}${digest}"},
                {"type": "jwt", "id": f"c{i}-jwt", "key": f"issuer-{i}", "algorithm": "HS256",
                 "secret": JWT_SECRET},
            ],
        })
    routes = ("plain", "key-auth", "basic-auth", "jwt")
    return {
        "routes": [{"id": r, "paths": [{"path": f"/{r}"}], "service": "s"} for r in routes],
        "services": [{"id": "s", "upstream": "u"}],
        "upstreams": [{"id": "u", "targets": [{"target": f"{HOST}:{up_port}"}]}],
        "consumers": people,
        "plugins": [{"id": r, "name": r, "route": r} for r in routes[1:]],
    }


def main() -> int:
    ap = parser(__doc__)
    ap.add_argument("--connections", type=int, default=32)
    ap.add_argument("--consumers", type=int, default=1000)
    args = ap.parse_args()
    if not have(("nginx", "wrk", "taskset")):
        return 2
    tmp = Path(tempfile.mkdtemp(prefix="weir-auth-bench-"))
    procs = []
    try:
        up_port, port, admin = free_port(), free_port(), free_port()
        procs.append(nginx_upstream(tmp, up_port))
        (tmp / "table.json").write_text(json.dumps(table(up_port, args.consumers)))
        procs.append(start([str(args.weir), "proxy", "--config", str(tmp / "table.json"),
                            "--listen", f"{HOST}:{port}", "--admin-listen", f"{HOST}:{admin}",
                            "--worker-threads", "1"], "0", env={"RUST_LOG": "warn"}))
        for p in (up_port, port):
            wait_port(p)
        time.sleep(0.5)
        # The last consumer's credentials: a lookup in a full table.
        last = args.consumers - 1
        basic = base64.b64encode(f"user{last}:password-{last}".encode()).decode()
        headers = {
            "plain": (),
            "key-auth": (f"apikey: key-{last}",),
            "basic-auth": (f"Authorization: Basic {basic}",),
            "jwt": (f"Authorization: Bearer {hs256_token(f'issuer-{last}')}",),
        }
        # wrk fails on any non-2xx answer: a refused credential fails the warm-up.
        med = measure(headers, lambda r, s: wrk(f"http://{HOST}:{port}/{r}", s, args.connections,
                                                headers[r]), args.seconds, args.rounds)
        write("auth", {
            "requests_per_second": med,
            "ratio_to_plain": ratios(med, "plain"),
            "consumers": args.consumers, "rounds": args.rounds, "seconds": args.seconds,
            "connections": args.connections,
        })
        return 0
    finally:
        stop(procs, tmp)


if __name__ == "__main__":
    sys.exit(main())
