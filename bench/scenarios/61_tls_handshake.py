"""A new TLS connection per request: handshakes per second."""

SCENARIO = {
    "name": "tls-handshake",
    "title": "64-byte responses, new HTTPS connection per request (TLS handshakes)",
    "description": "As `conn-close`, over HTTPS: wrk sends `Connection: close`, so every "
    "request opens a new TCP connection and does a TLS handshake with the proxy; "
    "proxy-to-upstream connections (plain HTTP) stay pooled. wrk offers the session of the "
    "previous connection on the same slot and every contender accepts it, so after the first "
    "handshake per connection slot these are resumed TLS 1.3 handshakes (PSK with an X25519 key "
    "exchange; no certificate, no signature).",
    "response": "small",
    "tls": True,
    "headers": ["Connection: close"],
    "targets": [
        {"label": "TLS handshakes (resumed), new connection per request: Weir req/s >= 1.0x nginx",
         "metric": "rps", "of": "weir", "vs": "nginx", "min": 1.0},
        # wrk's own handshakes (OpenSSL) can fill the load CPU before the proxy's CPU is full
        # ("load CPU" near 100%); the proxy's CPU per handshake still compares the proxies.
        {"label": "TLS handshakes (resumed): Weir CPU per request <= 1.0x nginx",
         "metric": "cpu_us_per_req", "of": "weir", "vs": "nginx", "max": 1.0},
    ],
}
