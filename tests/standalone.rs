//! Standalone mode through the real binary: the quick-start manifests serve traffic, edits
//! take effect within 2 s, and a malformed file keeps its previous good state.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

/// Copies examples/quickstart into a fresh folder, pointing the EndpointSlices at `ports`.
fn quickstart_copy(ports: [u16; 2]) -> std::path::PathBuf {
    let dir = temp_dir("standalone");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/quickstart");
    for entry in std::fs::read_dir(src).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("yaml") {
            continue;
        }
        let text = std::fs::read_to_string(&path)
            .unwrap()
            .replace("port: 9001", &format!("port: {}", ports[0]))
            .replace("port: 9002", &format!("port: {}", ports[1]));
        std::fs::write(dir.join(path.file_name().unwrap()), text).unwrap();
    }
    dir
}

struct Standalone {
    proc: Proc,
    admin: u16,
    dir: std::path::PathBuf,
}

impl Drop for Standalone {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn start(dir: std::path::PathBuf, extra: &[&str]) -> Standalone {
    let port = free_port();
    let admin = free_port();
    let child = Command::new(WEIR)
        .args([
            "standalone",
            dir.to_str().unwrap(),
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--admin-listen",
            &format!("127.0.0.1:{admin}"),
        ])
        .args(["--worker-threads", "2"])
        .args(extra)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    wait_for_port(port);
    Standalone {
        proc: Proc { child, port },
        admin,
        dir,
    }
}

async fn wait_status(c: &HttpClient, url: &str, want: u16, limit: Duration) -> Duration {
    let started = Instant::now();
    loop {
        let got = get(c, url, &[]).await.status;
        if got == want {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < limit,
            "{url}: still {got}, wanted {want} after {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_quickstart_serves_and_follows_edits() {
    let a = echo("echo-a");
    let b = echo("echo-b");
    let w = start(quickstart_copy([a.port, b.port]), &[]);
    let c = client();
    let url = |p: &str| format!("http://127.0.0.1:{}{p}", w.proc.port);

    // Both upstreams, prefix stripped, request id echoed.
    let mut names = std::collections::BTreeSet::new();
    for _ in 0..4 {
        let r = get(&c, &url("/echo/hello?x=1"), &[]).await;
        assert_eq!(r.status, 200);
        assert_eq!(r.json()["path"], "/hello");
        assert!(r.header("x-request-id").is_some());
        assert_eq!(
            r.json()["host"],
            format!("127.0.0.1:{}", w.proc.port),
            "Ingress routes preserve the Host"
        );
        names.insert(r.echo_name().unwrap());
    }
    assert_eq!(names.into_iter().collect::<Vec<_>>(), ["echo-a", "echo-b"]);
    let r = get(&c, &url("/closed"), &[]).await;
    assert_eq!(
        (r.status, r.json()["message"].as_str()),
        (503, Some("closed for maintenance"))
    );
    assert_eq!(get(&c, &url("/nothing"), &[]).await.status, 404);
    let ready = get(&c, &format!("http://127.0.0.1:{}/readyz", w.admin), &[]).await;
    assert_eq!(ready.status, 200);

    // An edit is served within 2 s.
    let ingress = w.dir.join("20-ingress.yaml");
    let original = std::fs::read_to_string(&ingress).unwrap();
    std::fs::write(&ingress, original.replace("path: /echo", "path: /moved")).unwrap();
    let took = wait_status(&c, &url("/moved/x"), 200, Duration::from_secs(2)).await;
    assert_eq!(get(&c, &url("/echo/x"), &[]).await.status, 404);
    eprintln!("edit applied in {took:?}");

    // A malformed file is reported and its previous good state kept.
    std::fs::write(
        &ingress,
        "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {name: [oops\n",
    )
    .unwrap();
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(get(&c, &url("/moved/x"), &[]).await.status, 200);

    // Fixing it applies again; removing the file removes its routes.
    std::fs::write(&ingress, &original).unwrap();
    wait_status(&c, &url("/echo/x"), 200, Duration::from_secs(2)).await;
    std::fs::remove_file(&ingress).unwrap();
    wait_status(&c, &url("/echo/x"), 404, Duration::from_secs(2)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_plugin_disables_only_its_ingress() {
    let a = echo("echo-a");
    let b = echo("echo-b");
    let dir = quickstart_copy([a.port, b.port]);
    // Break the maintenance plugin: only the Ingress that uses it goes away.
    let plugins = dir.join("30-plugins.yaml");
    let text = std::fs::read_to_string(&plugins)
        .unwrap()
        .replace("status_code: 503", "status_code: 1000");
    std::fs::write(&plugins, text).unwrap();
    let w = start(dir, &[]);
    let c = client();
    let url = |p: &str| format!("http://127.0.0.1:{}{p}", w.proc.port);
    assert_eq!(get(&c, &url("/echo/x"), &[]).await.status, 200);
    // Fail closed: the path still answers, with 503, instead of falling through unprotected.
    let r = get(&c, &url("/closed"), &[]).await;
    assert_eq!(r.status, 503);
    assert!(
        r.json()["message"]
            .as_str()
            .unwrap()
            .contains("This route is disabled"),
        "{r:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_listen_serves_the_ingress_certificates() {
    let a = echo("echo-a");
    let b = echo("echo-b");
    // The quick start's 40-tls.yaml: an Ingress for a.example.test with the test certificate.
    let dir = quickstart_copy([a.port, b.port]);
    let tls_port = free_port();
    let w = start(dir, &["--tls-listen", &format!("127.0.0.1:{tls_port}")]);
    wait_for_port(tls_port);

    // The listener opens before the first translation lands: retry for up to 2 s.
    let started = Instant::now();
    let r = loop {
        match common::tls::get(tls_port, "a.example.test", "/echo/x", &["h2", "http/1.1"]).await {
            Ok(r) => break r,
            Err(_) if started.elapsed() < Duration::from_secs(2) => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("no HTTPS after 2 s: {e}"),
        }
    };
    assert_eq!(r.peer_cert, common::tls::fixture_der("a.example.test.crt"));
    assert_eq!(r.alpn.as_deref(), Some(&b"h2"[..]));
    assert_eq!(r.resp.status, 200);
    let seen = r.resp.json();
    assert_eq!(seen["path"], "/x");
    assert!(r.resp.header("x-request-id").is_some());
    assert_eq!(seen["host"], "a.example.test");
    assert_eq!(seen["headers"]["x-forwarded-proto"], "https");

    // The tls section does not redirect plain HTTP.
    let c = client();
    let plain = get(
        &c,
        &format!("http://127.0.0.1:{}/echo/x", w.proc.port),
        &[("host", "a.example.test")],
    )
    .await;
    assert_eq!(plain.status, 200);
}

#[test]
fn crds_command_prints_the_committed_crds() {
    let out = Command::new(WEIR).arg("crds").output().unwrap();
    assert!(out.status.success());
    let committed =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("crds/weir.dev.yaml"))
            .unwrap();
    assert_eq!(String::from_utf8(out.stdout).unwrap(), committed);
}
