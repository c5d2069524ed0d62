"""Diagnostic (optional): no upstream at all, so what is left is each proxy's own HTTP server,
router and plugin pipeline. Run with `bench/run.sh --all` or `--scenarios local-routes-10,...`."""

SCENARIO = {
    "name": "local-routes-10",
    "title": "answered by the proxy itself, 10 routes (diagnostic)",
    "description": "Every contender answers the 64-byte body itself (Weir: request-termination "
    "with status 200; nginx: `return 200`; HAProxy: `http-request return`). No upstream "
    "connection is involved, so this isolates the HTTP server, routing and plugin phases.",
    "response": "local",
    "routes": 10,
    "optional": True,
    "contenders": [
        "direct",
        "nginx",
        "haproxy",
        "weir",
        {"name": "weir-cid", "kind": "weir", "plugins": [{"name": "correlation-id", "config": {}}]},
    ],
    "targets": [
        {"label": "(diagnostic) local answers: Weir req/s >= 1.0x nginx",
         "metric": "rps", "of": "weir", "vs": "nginx", "min": 1.0},
        {"label": "(diagnostic) local answers: Weir + correlation-id req/s >= 0.9x Weir",
         "metric": "rps", "of": "weir-cid", "vs": "weir", "min": 0.9},
    ],
}
