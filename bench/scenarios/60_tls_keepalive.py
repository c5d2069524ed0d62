"""Small responses over HTTPS keep-alive: TLS record cost on top of the small scenario."""

SCENARIO = {
    "name": "tls-keepalive",
    "title": "64-byte responses, HTTPS keep-alive",
    "description": "As `small`, but wrk speaks HTTPS to the proxy (TLS 1.3, no ALPN, so "
    "HTTP/1.1); every contender terminates TLS with the same certificate and key "
    "(tests/fixtures/tls/a.example.test, EC P-256). The upstream stays plain HTTP. The handshakes "
    "happen once per connection, so this measures encrypting and decrypting records.",
    "response": "small",
    "tls": True,
    "targets": [
        {"label": "TLS keep-alive, small responses: Weir req/s >= 1.0x nginx",
         "metric": "rps", "of": "weir", "vs": "nginx", "min": 1.0},
    ],
}
