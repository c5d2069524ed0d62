#!/usr/bin/env python3
"""A gRPC server and client from gRPC's C core (Python `grpcio`), for Weir's end-to-end tests.

No generated code: messages are raw bytes (the identity serializer), methods are registered
by name under the service `weir.test.Echo`.

    peer.py serve PORT [--tls CERT KEY]      serve until killed; prints "ready" once listening
    peer.py call TARGET [--tls CA NAME] [--authority HOST] [--timeout S] [--metadata k=v]...
                                             runs every call kind, prints one JSON line each
    peer.py one TARGET METHOD [--timeout S]  one unary call of METHOD; prints its JSON line

Methods: Unary (echoes the request, reports the metadata it got), ServerStream (the request
as a count n: n messages "0".."n-1"), ClientStream (joins the requests with ","), Bidi (echoes
each request), Fail (status INVALID_ARGUMENT, message "bad thing", trailing metadata
x-reason: test), Slow (sleeps 2 s then answers).
"""

import json
import sys
import time
from concurrent import futures

import grpc

SERVICE = "weir.test.Echo"


def ident(b):
    return b


def serve(port: int, tls) -> None:
    def unary(req, ctx):
        md = {k: v for k, v in ctx.invocation_metadata()}
        ctx.set_trailing_metadata((("x-trailer", "unary"),))
        return json.dumps({"echo": req.decode(), "metadata": md}).encode()

    def server_stream(req, ctx):
        for i in range(int(req.decode())):
            yield str(i).encode()

    def client_stream(reqs, ctx):
        return b",".join(reqs)

    def bidi(reqs, ctx):
        for r in reqs:
            yield b"echo:" + r

    def fail(req, ctx):
        ctx.set_trailing_metadata((("x-reason", "test"),))
        ctx.abort(grpc.StatusCode.INVALID_ARGUMENT, "bad thing")

    def slow(req, ctx):
        time.sleep(2)
        return req

    handlers = {
        "Unary": grpc.unary_unary_rpc_method_handler(unary, ident, ident),
        "ServerStream": grpc.unary_stream_rpc_method_handler(server_stream, ident, ident),
        "ClientStream": grpc.stream_unary_rpc_method_handler(client_stream, ident, ident),
        "Bidi": grpc.stream_stream_rpc_method_handler(bidi, ident, ident),
        "Fail": grpc.unary_unary_rpc_method_handler(fail, ident, ident),
        "Slow": grpc.unary_unary_rpc_method_handler(slow, ident, ident),
    }
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=32))
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
    if tls:
        cert, key = (open(p, "rb").read() for p in tls)
        creds = grpc.ssl_server_credentials(((key, cert),))
        server.add_secure_port(f"127.0.0.1:{port}", creds)
    else:
        server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    print("ready", flush=True)
    server.wait_for_termination()


def channel(target: str, tls, authority):
    options = (("grpc.default_authority", authority),) if authority else ()
    if tls:
        ca, name = tls
        creds = grpc.ssl_channel_credentials(root_certificates=open(ca, "rb").read())
        return grpc.secure_channel(
            target, creds, options=options + (("grpc.ssl_target_name_override", name),))
    return grpc.insecure_channel(target, options=options)


def outcome(fn):
    """Runs one call; returns its result, code, details and trailing metadata."""
    try:
        value, call = fn()
        trailing = {k: v for k, v in (call.trailing_metadata() or ())}
        return {"ok": True, "value": value, "code": call.code().name, "trailers": trailing}
    except grpc.RpcError as e:
        trailing = {k: v for k, v in (e.trailing_metadata() or ())}
        return {"ok": False, "code": e.code().name, "details": e.details(), "trailers": trailing}


def calls(ch, timeout, metadata):
    m = lambda name: f"/{SERVICE}/{name}"
    kw = dict(request_serializer=ident, response_deserializer=ident)
    unary = ch.unary_unary(m("Unary"), **kw)
    yield "Unary", outcome(lambda: (lambda r: (json.loads(r[0]), r[1]))(
        unary.with_call(b"hello", timeout=timeout, metadata=metadata)))

    def server_stream():
        it = ch.unary_stream(m("ServerStream"), **kw)(b"5", timeout=timeout, metadata=metadata)
        return [x.decode() for x in it], it
    yield "ServerStream", outcome(server_stream)

    cs = ch.stream_unary(m("ClientStream"), **kw)
    yield "ClientStream", outcome(lambda: (lambda r: (r[0].decode(), r[1]))(
        cs.with_call(iter([b"a", b"b", b"c"]), timeout=timeout, metadata=metadata)))

    def bidi():
        it = ch.stream_stream(m("Bidi"), **kw)(iter([b"x", b"y"]), timeout=timeout, metadata=metadata)
        return [x.decode() for x in it], it
    yield "Bidi", outcome(bidi)

    fail = ch.unary_unary(m("Fail"), **kw)
    yield "Fail", outcome(lambda: fail.with_call(b"", timeout=timeout, metadata=metadata))


def main() -> int:
    args = sys.argv[1:]
    mode = args.pop(0)
    tls = None
    timeout = 10.0
    metadata = []
    authority = None
    if mode == "serve":
        port = int(args.pop(0))
        if args and args[0] == "--tls":
            tls = (args[1], args[2])
        serve(port, tls)
        return 0
    target = args.pop(0)
    method = args.pop(0) if mode == "one" else None
    while args:
        a = args.pop(0)
        if a == "--tls":
            tls = (args.pop(0), args.pop(0))
        elif a == "--authority":
            authority = args.pop(0)
        elif a == "--timeout":
            timeout = float(args.pop(0))
        elif a == "--metadata":
            k, v = args.pop(0).split("=", 1)
            metadata.append((k, v))
    with channel(target, tls, authority) as ch:
        if mode == "one":
            u = ch.unary_unary(f"/{SERVICE}/{method}", request_serializer=ident, response_deserializer=ident)
            r = outcome(lambda: (lambda r: (r[0].decode(errors="replace"), r[1]))(
                u.with_call(b"1", timeout=timeout, metadata=metadata)))
            print(json.dumps({"call": method, **r}), flush=True)
            return 0
        for name, r in calls(ch, timeout, metadata):
            print(json.dumps({"call": name, **r}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
