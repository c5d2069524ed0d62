"""Diagnostic (optional): the router with 10,000 routes and no upstream."""

SCENARIO = {
    "name": "local-routes-10k",
    "title": "answered by the proxy itself, 10,000 routes (diagnostic)",
    "description": "As local-routes-10 with 10,000 routes; wrk cycles through every path.",
    "response": "local",
    "routes": 10_000,
    "optional": True,
    "targets": [
        {"label": "(diagnostic) local answers, 10,000 routes: Weir req/s >= 0.95x Weir with 10 routes",
         "metric": "rps", "of": "weir", "vs": "local-routes-10/weir", "min": 0.95},
    ],
}
