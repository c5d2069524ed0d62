//! Config hot swap under load: 50 pushes alternating between two tables while 4 clients send
//! requests continuously; no request fails and every answer matches one of the two tables.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;

fn table(version: &str, echo_port: u16) -> String {
    // Both tables route /swap; `version` decides the upstream name via a service path and a
    // route that only exists in one of them.
    format!(
        "routes:\n\
         - {{id: swap, paths: [{{path: /swap}}], service: s-{version}}}\n\
         - {{id: only-{version}, paths: [{{path: /only-{version}}}], service: s-{version}}}\n\
         services:\n\
         - {{id: s-{version}, host: 127.0.0.1, port: {echo_port}, path: /{version}}}\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_pushes_under_load_lose_nothing() {
    let up = echo("up");
    let weir = Weir::start(&table("a", up.port), &[]);
    let url = weir.url("/swap");
    let stop = Arc::new(AtomicBool::new(false));
    let ok = Arc::new(AtomicU64::new(0));
    let seen_b = Arc::new(AtomicBool::new(false));

    let mut clients = Vec::new();
    for _ in 0..4 {
        let (url, stop, ok, seen_b) = (url.clone(), stop.clone(), ok.clone(), seen_b.clone());
        clients.push(tokio::spawn(async move {
            let c = client();
            let mut failures = Vec::new();
            let mut n = 0u64;
            // Bounded: stops when told, or after 200k requests at most.
            while !stop.load(Ordering::Relaxed) && n < 200_000 {
                n += 1;
                let r = get(&c, &url, &[]).await;
                if r.status != 200 {
                    failures.push(format!(
                        "status {}: {:?}",
                        r.status,
                        String::from_utf8_lossy(&r.body)
                    ));
                    continue;
                }
                match r.json()["path"].as_str() {
                    Some("/a/swap") => {}
                    Some("/b/swap") => seen_b.store(true, Ordering::Relaxed),
                    other => failures.push(format!("answer from neither table: {other:?}")),
                }
                ok.fetch_add(1, Ordering::Relaxed);
            }
            failures
        }));
    }

    let admin = client();
    for i in 0..50 {
        let version = if i % 2 == 0 { "b" } else { "a" };
        let r = push(&admin, &weir, &table(version, up.port)).await;
        assert_eq!(
            r.status,
            200,
            "push {i}: {:?}",
            String::from_utf8_lossy(&r.body)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.store(true, Ordering::Relaxed);
    let mut failures = Vec::new();
    for c in clients {
        failures.extend(c.await.unwrap());
    }
    assert!(
        failures.is_empty(),
        "{} failed requests, first: {:?}",
        failures.len(),
        &failures[..failures.len().min(5)]
    );
    assert!(
        ok.load(Ordering::Relaxed) > 100,
        "too few requests to mean anything: {}",
        ok.load(Ordering::Relaxed)
    );
    assert!(
        seen_b.load(Ordering::Relaxed),
        "the second table was never served"
    );

    // The last push (i = 49) was table "a": /only-b is gone, /only-a serves.
    let c = client();
    assert_eq!(get(&c, &weir.url("/only-b"), &[]).await.status, 404);
    assert_eq!(get(&c, &weir.url("/only-a"), &[]).await.status, 200);
    let metrics = metrics(&c, &weir).await;
    assert!(
        metrics.contains("weir_config_applies_total 51"),
        "{metrics}"
    );
}
