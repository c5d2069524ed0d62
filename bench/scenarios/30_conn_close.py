"""A new client connection per request: accept/close cost."""

SCENARIO = {
    "name": "conn-close",
    "title": "64-byte responses, new connection per request",
    "description": "wrk sends `Connection: close`, so every request opens a new TCP connection "
    "to the proxy; proxy-to-upstream connections stay pooled.",
    "response": "small",
    "headers": ["Connection: close"],
}
