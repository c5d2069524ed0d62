"""1 MiB responses: body streaming cost."""

SCENARIO = {
    "name": "1mb",
    "title": "1 MiB responses, keep-alive",
    "description": "The upstream serves a 1 MiB static file (sendfile); the proxy streams it.",
    "response": "1mb",
}
