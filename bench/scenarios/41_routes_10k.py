"""Router scaling: 10,000 routes, requests spread over all of them."""

SCENARIO = {
    "name": "routes-10k",
    "title": "10,000 prefix routes, requests spread over them",
    "description": "10,000 routes /r/0 .. /r/9999 (Weir: Prefix rules; nginx: 10,000 prefix "
    "locations; HAProxy: a 10,000-line map_beg map file); wrk cycles through every path.",
    "response": "small",
    "routes": 10_000,
    "targets": [
        {"label": "10,000 routes: Weir req/s >= 0.95x Weir with 10 routes",
         "metric": "rps", "of": "weir", "vs": "routes-10/weir", "min": 0.95},
    ],
}
