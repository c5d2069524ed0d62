"""The plugin pipeline with every plugin that exists enabled, against Weir without plugins."""

# Every plugin Weir has that can run on a proxied request. request-termination answers the
# request itself, so it cannot be part of a pipeline that still reaches the upstream.
PLUGINS = [
    {"name": "correlation-id", "config": {}},
]

SCENARIO = {
    "name": "plugins",
    "title": "plugin pipeline (correlation-id, global), 64-byte responses",
    "description": "Every forwarding plugin enabled globally. nginx and HAProxy do the "
    "equivalent (set a request-id header unless the client sent one).",
    "response": "small",
    "plugins": PLUGINS,
    "contenders": [
        "direct",
        "nginx",
        "haproxy",
        {"name": "weir-no-plugins", "kind": "weir", "plugins": []},
        "weir",
    ],
    "targets": [
        {"label": "plugin pipeline: Weir req/s >= 0.9x Weir without plugins",
         "metric": "rps", "of": "weir", "vs": "weir-no-plugins", "min": 0.9},
    ],
}
