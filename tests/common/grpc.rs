//! gRPC's C core (Python `grpcio`, driven by tests/grpc/peer.py) as a server and a client for
//! the gRPC tests. Without `python3` and `grpcio` those tests fail, they never skip.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use serde_json::Value;

use super::*;

/// tests/grpc/peer.py.
pub const PEER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/grpc/peer.py");

/// A grpcio server for `weir.test.Echo` on a free port, killed when dropped.
pub fn grpc_server() -> Proc {
    grpc_server_with(&[])
}

/// A grpcio server serving over TLS with the fixtures' `a.example.test` certificate.
pub fn grpc_server_tls() -> Proc {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/tls");
    let cert = format!("{dir}/a.example.test.crt");
    let key = format!("{dir}/a.example.test.key");
    grpc_server_with(&["--tls", &cert, &key])
}

fn grpc_server_with(extra: &[&str]) -> Proc {
    let port = free_port();
    let mut child = Command::new("python3")
        .args([PEER, "serve", &port.to_string()])
        .args(extra)
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 is needed for the gRPC tests");
    let mut line = String::new();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    out.read_line(&mut line).unwrap();
    assert_eq!(
        line.trim(),
        "ready",
        "the gRPC server did not start (is grpcio installed? python3 -m pip install grpcio)"
    );
    wait_for_port(port);
    Proc { child, port }
}

/// Runs peer.py as a client with `args`; returns its JSON lines by call name.
pub fn grpc_client(args: &[&str]) -> BTreeMap<String, Value> {
    let out = Command::new("python3")
        .arg(PEER)
        .args(args)
        .output()
        .expect("python3 is needed for the gRPC tests");
    assert!(
        out.status.success(),
        "peer.py {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            (v["call"].as_str().unwrap().to_string(), v)
        })
        .collect()
}
