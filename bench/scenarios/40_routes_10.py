"""Baseline for the 10,000-route scenario: the same traffic shape over 10 routes."""

SCENARIO = {
    "name": "routes-10",
    "title": "10 prefix routes, requests spread over them",
    "description": "10 routes /r/0 .. /r/9; wrk cycles through the 10 paths (same Lua request "
    "path as routes-10k, so the two differ only in table size).",
    "response": "small",
    "routes": 10,
}
