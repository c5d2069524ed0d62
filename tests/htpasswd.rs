//! ingress-nginx parity through the real binary in standalone mode: `basic-auth` with
//! `htpasswd` lines (`auth-type: basic` with an `auth-secret`) in bcrypt, Apache MD5 and SHA-1,
//! from its documented example; and `rate-limiting`'s `exempt` (`limit-whitelist`). The client
//! of every test is 127.0.0.1.

mod common;

use std::time::Duration;

use base64::Engine as _;
use serde_json::{json, Value};

use common::manifests::*;
use common::*;

const T: Duration = Duration::from_secs(30);

fn basic(user_pass: &str) -> String {
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(user_pass)
    )
}

/// The one value of `name` the echo upstream received (the request must have reached it).
fn upstream_header(r: &Resp, name: &str) -> Option<String> {
    assert!(r.echo_name().is_some(), "did not reach the upstream: {r:?}");
    match &r.json()["headers"][name] {
        Value::Null => None,
        Value::String(v) => Some(v.clone()),
        several => panic!("{name} reached the upstream more than once: {several}"),
    }
}

/// A 401 with `message` and the Basic challenge of `realm`, that never reached the upstream.
fn assert_challenged(r: &Resp, message: &str, realm: &str) {
    assert_eq!(r.status, 401, "{r:?}");
    assert_eq!(r.json()["message"], message, "{r:?}");
    assert_eq!(
        r.header("www-authenticate"),
        Some(format!("Basic realm=\"{realm}\"").as_str())
    );
    assert_eq!(
        r.echo_name(),
        None,
        "a refused request never reaches the upstream"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn htpasswd_lines_in_bcrypt_apr1_and_sha_from_the_documented_example() {
    let up = echo("up");
    // The second example of docs/plugins/basic-auth.md (the echo Service, a Secret, a Plugin
    // reading it, an Ingress for /staff), plus an Ingress for /open whose htpasswd keeps the
    // credentials.
    let example =
        doc_example("basic-auth", 1).replace("port: 9001", &format!("port: {}", up.port)) + "\n";
    let open = plugin(
        "open-htpasswd",
        "basic-auth",
        json!({"htpasswd": ["erin:{SHA}4/8EauNSRAt2M2wN8hy6sNnX6do="]}),
    );
    let files = docs(&[
        example,
        open,
        ingress("open", "/open", "open-htpasswd", "echo"),
    ]);
    let w = Manifests::start(&[("10.yaml", &files)], &[]);
    let c = client();
    let url = w.url("/staff");
    wait_for_status(&c, &url, 401, T).await;
    wait_for_status(&c, &w.url("/open"), 401, T).await;

    // Twice each: bcrypt's second success comes from the instance's memory.
    for user_pass in [
        "alice:wonderland",
        "carol:correct horse",
        "erin:battery staple",
        "alice:wonderland",
        "carol:correct horse",
        "erin:battery staple",
    ] {
        let r = get(
            &c,
            &url,
            &[
                ("authorization", &basic(user_pass)),
                ("x-consumer-username", "root"),
            ],
        )
        .await;
        assert_eq!(r.status, 200, "{user_pass}: {r:?}");
        assert_eq!(r.echo_name().as_deref(), Some("up"));
        assert_eq!(
            upstream_header(&r, "authorization"),
            None,
            "hide_credentials"
        );
        // An htpasswd user is no consumer, and the client's identity headers never pass.
        assert_eq!(upstream_header(&r, "x-consumer-username"), None);
        assert_eq!(upstream_header(&r, "x-consumer-id"), None);
        assert_eq!(upstream_header(&r, "x-credential-identifier"), None);
    }

    let r = get(&c, &url, &[]).await;
    assert_challenged(&r, "Unauthorized", "staff");
    for user_pass in [
        "alice:wonderlan",
        "alice:",
        "carol:correct horse ",
        "erin:Battery staple",
        "mallory:wonderland",
        // Another user's password.
        "alice:battery staple",
    ] {
        let r = get(&c, &url, &[("authorization", &basic(user_pass))]).await;
        assert_challenged(&r, "Invalid authentication credentials", "staff");
    }

    // Without hide_credentials the header goes upstream; the default realm is Kong's.
    let good = basic("erin:battery staple");
    let r = get(&c, &w.url("/open"), &[("authorization", &good)]).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(upstream_header(&r, "authorization"), Some(good));
    let r = get(&c, &w.url("/open"), &[]).await;
    assert_challenged(&r, "Unauthorized", "service");

    // The lines are a secret: GET /config shows none of them.
    let config = w.config(&c).await.to_string();
    for hash in ["$2y$05$", "$apr1$", "{SHA}"] {
        assert!(!config.contains(hash), "{config}");
    }
    assert!(config.contains("<redacted>"), "{config}");
}

/// A `rate-limiting` Plugin `name` allowing one request per route (a bucket that does not
/// refill within the test), with `exempt` when given, and its Ingress for `path`.
fn one_request(name: &str, path: &str, exempt: Option<Value>) -> String {
    let mut config = json!({
        "algorithm": "token-bucket", "rate": 0.0001, "burst": 1, "limit_by": "ip",
    });
    if let Some(e) = exempt {
        config["exempt"] = e;
    }
    docs(&[
        plugin(name, "rate-limiting", config),
        ingress(name, path, name, "echo"),
    ])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exempt_clients_are_never_rate_limited() {
    let up = echo("up");
    let files = docs(&[
        service("demo", "echo", up.port),
        one_request("exempt-local", "/exempt", Some(json!(["127.0.0.1"]))),
        one_request(
            "exempt-net",
            "/net",
            Some(json!(["10.0.0.0/8", "127.0.0.0/8", "::1"])),
        ),
        one_request("limited", "/limited", None),
        one_request(
            "elsewhere",
            "/elsewhere",
            Some(json!(["10.0.0.0/8", "fd00::/8"])),
        ),
    ]);
    let w = Manifests::start(&[("10.yaml", &files)], &[]);
    let c = client();
    wait_for_status(&c, &w.url("/exempt"), 200, T).await;

    for path in ["/exempt", "/net"] {
        for i in 0..10 {
            let r = get(&c, &w.url(path), &[]).await;
            assert_eq!(r.status, 200, "{path} request {i}: {r:?}");
            assert_eq!(r.echo_name().as_deref(), Some("up"));
            assert_eq!(r.header("ratelimit-limit"), None, "no headers when exempt");
            assert_eq!(r.header("ratelimit-remaining"), None);
        }
    }
    // Without an exemption that covers 127.0.0.1, the second request is refused.
    for path in ["/limited", "/elsewhere"] {
        let r = wait_for_status(&c, &w.url(path), 200, T).await;
        assert_eq!(r.header("ratelimit-limit"), Some("1"), "{path}");
        let r = get(&c, &w.url(path), &[]).await;
        assert_eq!(r.status, 429, "{path}: {r:?}");
        assert_eq!(r.json()["message"], "API rate limit exceeded");
        assert_eq!(r.echo_name(), None);
    }
}
