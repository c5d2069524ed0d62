#!/usr/bin/env python3
"""Writes the hand-made seed corpus under fuzz/seeds/<target>/ (committed; run.sh copies it into
the git-ignored fuzz/corpus/<target>/). Each file is a fuzz input in its target's format, which
weir_proxy::fuzzing::fuzz_<target> documents. Re-run after changing a format; seeds found by the
fuzzer (regressions) are added by hand and not touched here (this script only writes `h-*`)."""
import hashlib
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def write(target, name, data):
    d = os.path.join(HERE, "seeds", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "h-" + name), "wb") as f:
        f.write(data)


def crlf(s):
    return s.replace("\n", "\r\n").encode("latin-1")


# --- request_head: [limits, max_headers, pad, head...] ------------------------------------------
# limits & 7 picks 0, 16, 100, 1024, 8192, 65535, 65536 (the default), 1 MiB; limits >= 248 pads.
DEFAULT = bytes([6, 100, 0])
requests = {
    "get": crlf("GET / HTTP/1.1\nHost: example.test\n\n"),
    "get-pipelined": crlf("GET /a/b?x=1 HTTP/1.1\nHost: example.test\nX-Two: a\nx-two: b\n\nGET /next HTTP/1.1\n\n"),
    "delete-close": crlf("DELETE /x HTTP/1.1\nConnection: keep-alive, close\nContent-Length: 0\n\n"),
    "post-body": crlf("POST / HTTP/1.1\nContent-Length: 3\n\nabc"),
    "post-chunked": crlf("POST / HTTP/1.1\nTransfer-Encoding: chunked\n\n3\nabc\n0\n\n"),
    "websocket": crlf("GET /ws HTTP/1.1\nHost: a\nConnection: Upgrade\nUpgrade: websocket\n\n"),
    "h2c": crlf("GET / HTTP/1.1\nUpgrade: h2c\nHTTP2-Settings: AAMAAABkAAQAAP__\n\n"),
    "expect": crlf("PUT / HTTP/1.1\nExpect: 100-continue\nContent-Length: 0\n\n"),
    "http10": crlf("GET / HTTP/1.0\n\n"),
    "head": crlf("HEAD / HTTP/1.1\n\n"),
    "connect": crlf("CONNECT a:443 HTTP/1.1\nHost: a:443\n\n"),
    "h2-preface": crlf("PRI * HTTP/2.0\n\nSM\n\n"),
    "bad-header-name": crlf("GET / HTTP/1.1\nBad Header: x\n\n"),
    "bad-target": crlf("GET http://[::1 HTTP/1.1\n\n"),
    "absolute-form": crlf("GET HTTP://Example.test/x?y=1 HTTP/1.1\nHost: other\n\n"),
    "absolute-no-path": crlf("GET http://example.test HTTP/1.1\n\n"),
    "asterisk": crlf("OPTIONS * HTTP/1.1\nHost: a\n\n"),
    "fragment": crlf("GET /a#frag HTTP/1.1\n\n"),
    "obs-text": b"GET / HTTP/1.1\r\nX-A: caf\xe9\tand tab\r\n\r\n",
    "lf-only": b"GET /lf HTTP/1.1\nHost: a\nConnection: close\n\n",
    "leading-crlf": crlf("\nGET / HTTP/1.1\n\n"),
    "partial": crlf("GET / HTTP/1.1\nHost: a"),
    "empty-value": crlf("GET / HTTP/1.1\nHost:\nX-Empty:   \n\n"),
    "space-before-colon": crlf("GET / HTTP/1.1\nHost : a\n\n"),
    "lower-method": crlf("get / HTTP/1.1\n\n"),
    "odd-method": crlf("M-SEARCH * HTTP/1.1\nMan: \"ssdp:discover\"\n\n"),
    "cl-zero-variants": crlf("PATCH /p HTTP/1.1\nContent-Length: 0\nContent-Length:  0 \n\n"),
    "cl-double-zero": crlf("POST /p HTTP/1.1\nContent-Length: 00\n\n"),
    "te-lower": crlf("POST / HTTP/1.1\ntransfer-encoding : chunked\n\n"),
    "connection-upgrade-lower": crlf("GET / HTTP/1.1\nconnection: keep-alive,upgrade\n\n"),
    "path-escapes": crlf("GET /a/%2e%2E/b%2fc;p=1/..\\d?q=%zz HTTP/1.1\nHost: a\n\n"),
    "path-utf8": "GET /café HTTP/1.1\r\n\r\n".encode("utf-8"),
    "del-in-value": b"GET / HTTP/1.1\r\nX-A: a\x7fb\r\n\r\n",
    "cr-in-value": b"GET / HTTP/1.1\r\nX-A: a\rb\r\n\r\n",
    "http11-uppercase": crlf("GET / http/1.1\n\n"),
    "cookie": crlf("GET / HTTP/1.1\nCookie: a=1\nCookie: b=2\nHost: a\n\n"),
}
for name, head in requests.items():
    write("request_head", name, DEFAULT + head)
get = requests["get"]
write("request_head", "limit-0", bytes([0, 100, 0]) + get)
write("request_head", "limit-16", bytes([1, 100, 0]) + get)
write("request_head", "limit-100-partial", bytes([2, 100, 0]) + get[:-2])
write("request_head", "limit-1mib", bytes([7, 100, 0]) + get)
write("request_head", "max-headers-0", bytes([6, 0, 0]) + get)
write("request_head", "max-headers-2", bytes([4, 2, 0]) + crlf("GET / HTTP/1.1\na: 1\nb: 2\nc: 3\n\n"))
write("request_head", "max-headers-200", bytes([6, 200, 0]) + requests["cookie"])
# Grown to around the limits: pad % 3 picks the limit, pad / 3 % 16 - 8 the distance to it.
write("request_head", "pad-1024", bytes([0xF8 | 3, 100, 0 + 3 * 8]) + get)
write("request_head", "pad-fast-max-under", bytes([0xF8 | 5, 100, 1 + 3 * 7]) + get)
write("request_head", "pad-fast-max-over", bytes([0xF8 | 6, 100, 2 + 3 * 9]) + get)
write("request_head", "pad-partial", bytes([0xF8 | 5, 100, 1 + 3 * 8]) + get[:-2])

# --- chunked: [mode, ...] ------------------------------------------------------------------------
decode = {
    "hello": crlf("5\nhello\n0\n\n"),
    "extension": crlf('A;name="v"\n0123456789\n0\n\n'),
    "trailers-next": crlf("5\nhello\n0\nx-trailer: 1\nx-two: 2\n\nNEXT"),
    "bare-lf-end": b"3\r\nabc\r\n0\r\n\n",
    "bare-lf-trailer": b"0\r\nx: y\n\n",
    "upper-hex": b"1F\r\n" + b"0123456789012345678901234567890" + b"\r\n0\r\n\r\n",
    "leading-zeros": crlf("0005\nhello\n0000\n\n"),
    "bws-extension": b"5 \t;a=b\r\nhello\r\n0\r\n\r\n",
    "bad-size": b"x\r\n",
    "lf-size-line": b"5\nhello\r\n",
    "seventeen-digits": b"11111111111111111\r\n",
    "sixteen-digits": b"ffffffffffffffff\r\nabc",
    "missing-crlf": b"3\r\nabcX",
    "missing-lf": b"3\r\nabc\rX",
    "end-missing-lf": b"0\r\n\rX",
    "empty-line": b"\r\n",
    "nothing": b"",
    "two-bodies": crlf("1\na\n0\n\n1\nb\n0\n\n"),
    "zero-chunk-ext": crlf("0;last\n\n"),
}
for i, (name, body) in enumerate(decode.items()):
    reads = [0x00, 0x11, 0x2F, 0xF0, 0x34][i % 5]
    write("chunked", "decode-" + name, bytes([0, reads]) + body)


def roundtrip(name, lens, reads, style, payload):
    write("chunked", "roundtrip-" + name, bytes([2, len(lens), reads, style]) + bytes(lens) + payload)


roundtrip("one", [], 0x00, 0, b"hello world")
roundtrip("empty", [], 0x00, 0, b"")
roundtrip("splits", [1, 0, 5, 2], 0x13, 0, b"abcdefghijklmnop")
roundtrip("crlf-data", [2, 3], 0x21, 0, b"\r\n0\r\n\r\n;x")
roundtrip("styled-all", [3, 4], 0x00, 31, b"0123456789")
roundtrip("styled-upper-tail", [10], 0x10, 0x20 | 1, bytes(range(256))[:40])
roundtrip("styled-ext-tail", [1, 1], 0x05, 0x40 | 4 | 8, b"xyz")
roundtrip("styled-trailers-tail", [0, 0], 0xFF, 0x80 | 16, b"tail")
roundtrip("styled-zero-tail", [7], 0x31, 0x60 | 2, b"\x00" * 20)


def size(name, n, mode=3, data=b"body bytes"):
    write("chunked", "size-" + name, bytes([mode]) + struct.pack("<Q", n) + data)


size("zero", 0)
size("one", 1)
size("ff", 0xFF)
size("64k", 0x10000)
size("max", 2**64 - 1)
size("masked", 0xDEADBEEF0005, mode=7)
size("exact", 10)

# --- response_head: [method, pad, head...] -------------------------------------------------------
# method & 3: GET, HEAD, POST, CONNECT; method >= 252 pads to around 64 KiB.
GET, HEAD, POST, CONNECT = 0, 1, 2, 3
responses = {
    "length": (GET, crlf("HTTP/1.1 200 OK\nContent-Length: 5\nX-A: b\n\n") + b"hello"),
    "chunked-and-length": (GET, crlf("HTTP/1.1 200 OK\nTransfer-Encoding: gzip, chunked\nContent-Length: 3\n\n")),
    "http10-chunked": (GET, crlf("HTTP/1.0 200 OK\nConnection: keep-alive\nTransfer-Encoding: chunked\n\n")),
    "chunked-not-last": (GET, crlf("HTTP/1.1 200 OK\nTransfer-Encoding: chunked, gzip\n\n")),
    "chunked-comma": (GET, crlf("HTTP/1.1 200 OK\nTransfer-Encoding: chunked,\n\n")),
    "te-two-lines": (GET, crlf("HTTP/1.1 200 OK\nTransfer-Encoding: gzip\nTransfer-Encoding: chunked\n\n5\nhello\n0\n\n")),
    "until-close": (GET, crlf("HTTP/1.1 200 OK\n\n") + b"body until close"),
    "no-content": (GET, crlf("HTTP/1.1 204 No Content\nContent-Length: 9\n\n")),
    "not-modified": (GET, crlf("HTTP/1.1 304 Not Modified\nContent-Length: 9\nTransfer-Encoding: chunked\n\n")),
    "continue": (POST, crlf("HTTP/1.1 100 Continue\n\nHTTP/1.1 200 OK\nContent-Length: 0\n\n")),
    "switching": (GET, crlf("HTTP/1.1 101 Switching Protocols\nConnection: Upgrade\nUpgrade: websocket\n\n")),
    "to-head": (HEAD, crlf("HTTP/1.1 200 OK\nContent-Length: 9\n\n")),
    "to-connect": (CONNECT, crlf("HTTP/1.1 200 Connection Established\n\n")),
    "same-lengths": (GET, crlf("HTTP/1.1 200 OK\nContent-Length: 4, 4\nContent-Length: 4\n\nbody")),
    "conflicting-lengths": (GET, crlf("HTTP/1.1 200 OK\nContent-Length: 4\nContent-Length: 5\n\n")),
    "negative-length": (GET, crlf("HTTP/1.1 200 OK\nContent-Length: -1\n\n")),
    "plus-length": (GET, crlf("HTTP/1.1 200 OK\nContent-Length: +4\n\n")),
    "huge-length": (GET, crlf("HTTP/1.1 200 OK\nContent-Length: 99999999999999999999\n\n")),
    "nineteen-digits": (GET, crlf("HTTP/1.1 200 OK\nContent-Length: 0000000000000000001\n\nx")),
    "two-digit-status": (GET, crlf("HTTP/1.1 99 Odd\n\n")),
    "status-099": (GET, crlf("HTTP/1.1 099 Odd\n\n")),
    "status-999": (GET, crlf("HTTP/1.1 999 Odd\nContent-Length: 0\n\n")),
    "http2": (GET, crlf("HTTP/2.0 200 OK\n\n")),
    "bad-name": (GET, crlf("HTTP/1.1 200 OK\nBad Name: x\n\n")),
    "del-in-value": (GET, b"HTTP/1.1 200 OK\r\nX-A: a\x7fb\r\n\r\n"),
    "own-reason": (GET, crlf("HTTP/1.1 200 Fine\nContent-Length: 0\n\n")),
    "empty-reason": (GET, crlf("HTTP/1.1 599 \nContent-Length: 0\n\n")),
    "obs-reason": (GET, b"HTTP/1.1 200 Tr\xe8s bien\r\nContent-Length: 0\r\n\r\n"),
    "partial": (GET, crlf("HTTP/1.1 200 OK\ncontent-le")),
    "close": (GET, crlf("HTTP/1.1 200 OK\nConnection: close\nContent-Length: 0\n\n")),
    "http10-keep-alive": (GET, crlf("HTTP/1.0 200 OK\nConnection: Keep-Alive\nContent-Length: 0\n\n")),
    "http10-plain": (GET, crlf("HTTP/1.0 200 OK\nContent-Length: 0\n\n")),
    "lf-only": (GET, b"HTTP/1.1 200 OK\nContent-Length: 2\n\nhi"),
    "many-headers": (GET, crlf("HTTP/1.1 200 OK\n" + "".join("x-%d: 1\n" % i for i in range(101)) + "\n")),
}
for name, (method, head) in responses.items():
    write("response_head", name, bytes([method, 0]) + head)
write("response_head", "pad-under", bytes([0xFC, 0]) + responses["length"][1])
write("response_head", "pad-at", bytes([0xFC, 8]) + responses["length"][1])
write("response_head", "pad-over", bytes([0xFC, 15]) + responses["length"][1])
write("response_head", "pad-partial", bytes([0xFC, 9]) + responses["partial"][1])

# --- path_routing: [flags, seed (8 bytes), rules and path, one a line] ---------------------------
# flags bit 0 merges slashes; bits 1-2: reject, keep, unescape-and-redirect, unescape-and-forward;
# bit 3 adds the Regex route /re/[a-z]+\.txt.
RULES = "P/api\nE/a/b\nP/~user/x/\nE/admin\nP/caf%C3%A9\n"
paths = [
    "/api/v1", "/a/./b", "/a/../b", "/../../b", "/%61pi/x", "/a/%2e%2E/api", "/a%2fb",
    "/a%2Fb/../api", "/caf%C3%A9/x", "/café", "//a///b//", "/a%zz", "a", "",
    "/admin;jsessionid=1/x", "/..;/admin", "/x/.;a/admin", "/x\\..\\api", "/x%5C..%5Capi",
    "/%7Euser/x/y", "/api;p=1", "/re/abc.txt", "/re/ABC.txt", "/%2e%2e/%2e/", "/a/b/..", "/.",
    "/%252F", "/api%3Bx", "/a;x/b;y", "/ad%6Din",
]
for i, p in enumerate(paths):
    flags = i % 16 | (8 if p.startswith("/re/") else 0)
    seed = hashlib.sha256(p.encode()).digest()[:8]
    name = "%02d-%s" % (i, "".join(c if c.isalnum() else "_" for c in p)[:24] or "empty")
    write("path_routing", name, bytes([flags]) + seed + (RULES + p).encode("utf-8"))
write("path_routing", "no-rules", bytes([1]) + bytes(8) + b"/a/../b")
write("path_routing", "rule-odd", bytes([3]) + bytes(8) + "Eno-slash\nP/x;p\nP\\y\n/x;p/z".encode())


# --- dns_response: [selector, DNS response] -------------------------------------------------------
# The selector's low bit asks A (0) or AAAA (1); selector >> 1 the name: 0 app.weir.test, 1 a,
# 2 WWW.Example.Test.
A, CNAME, AAAA = 1, 5, 28

def dns_header(id_, flags, qd, an, ns=0, ar=0):
    return struct.pack(">HHHHHH", id_, flags, qd, an, ns, ar)

def dns_name(n):
    return b"".join(bytes([len(l)]) + l.encode() for l in n.split(".") if l) + b"\0"

def ptr(at):
    return struct.pack(">H", 0xC000 | at)

def rr(owner, rtype, ttl, data):
    return owner + struct.pack(">HHIH", rtype, 1, ttl, len(data)) + data

dns = {}
q = dns_name("app.weir.test")
# Two A records, owners compressed to the question's name (offset 12).
m = dns_header(0x1234, 0x8180, 1, 2) + q + struct.pack(">HH", A, 1)
m += rr(ptr(12), A, 300, bytes([10, 0, 0, 1])) + rr(ptr(12), A, 60, bytes([10, 0, 0, 2]))
dns["two-a"] = bytes([0]) + m
# One AAAA record (2001:db8::1).
m = dns_header(0x2345, 0x8180, 1, 1) + q + struct.pack(">HH", AAAA, 1)
m += rr(ptr(12), AAAA, 120, bytes.fromhex("20010db8000000000000000000000001"))
dns["aaaa"] = bytes([1]) + m
# www.example.test (asked in other case) -> CNAME edge.example.test -> CNAME lb.edge.example.test
# -> A, every name after the question compressed.
m = dns_header(0x3456, 0x8180, 1, 3) + dns_name("www.example.test") + struct.pack(">HH", A, 1)
example = 12 + 4  # "example.test" inside the question's name
first = len(m)
edge_at = first + 2 + 10  # the first record's data: "edge" + pointer
m += rr(ptr(12), CNAME, 3600, b"\x04edge" + ptr(example))
lb_at = len(m) + 2 + 10
m += rr(ptr(edge_at), CNAME, 30, b"\x02lb" + ptr(edge_at))
m += rr(ptr(lb_at), A, 600, bytes([192, 0, 2, 7]))
dns["cname-chain"] = bytes([4]) + m
# NXDOMAIN for "a".
m = dns_header(0x4567, 0x8183, 1, 0) + dns_name("a") + struct.pack(">HH", A, 1)
dns["nxdomain"] = bytes([2]) + m
# REFUSED with the header alone (no question).
dns["refused-no-question"] = bytes([0]) + dns_header(0x789A, 0x8185, 0, 0)
# TC set, cut in the middle of its answer.
m = dns_header(0x5678, 0x8380, 1, 2) + q + struct.pack(">HH", AAAA, 1)
m += rr(ptr(12), AAAA, 120, bytes(16))[:9]
dns["truncated"] = bytes([1]) + m
# A TTL with its top bit set, read as 0 (RFC 2181 section 8).
m = dns_header(0x6789, 0x8180, 1, 1) + dns_name("a") + struct.pack(">HH", A, 1)
m += rr(ptr(12), A, 0x80000000, bytes([127, 0, 0, 1]))
dns["ttl-top-bit"] = bytes([2]) + m
# The message as text, a DNS name: the target's query round trip.
dns["query-text"] = bytes([0]) + b"app.weir.test"

for k, v in dns.items():
    write("dns_response", k, v)
