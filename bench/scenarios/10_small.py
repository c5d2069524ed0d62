"""Small responses over keep-alive: raw per-core proxying cost."""

SCENARIO = {
    "name": "small",
    "title": "64-byte responses, keep-alive",
    "description": "One catch-all route; wrk keeps its connections open; the upstream answers "
    "a fixed 64-byte body.",
    "response": "small",
    "targets": [
        {"label": "small responses: Weir req/s >= 1.0x nginx",
         "metric": "rps", "of": "weir", "vs": "nginx", "min": 1.0},
        {"label": "small responses: Weir p99 <= 1.2x nginx",
         "metric": "p99_ms", "of": "weir", "vs": "nginx", "max": 1.2},
    ],
}
