//! Consumers and the authentication plugins through the real binary in standalone mode, with
//! `Consumer` and credential `Secret` manifests: `key-auth`, `basic-auth`, `jwt` and `acl`, each
//! from its documented example (docs/plugins/*.md) plus manifests for the other cases. Every
//! check looks at what the upstream received (the identity headers, the credential hidden or
//! not) or that it received nothing.

mod common;

use std::time::Duration;

use base64::Engine as _;
use serde_json::Value;

use common::manifests::*;
use common::*;

const T: Duration = Duration::from_secs(10);

/// A credential Secret in namespace `demo`: `kind` is the `weir.dev/credential` label value,
/// `data` its `stringData` (a YAML flow mapping).
fn secret(name: &str, kind: &str, data: &str) -> String {
    format!(
        "apiVersion: v1
kind: Secret
metadata:
  name: {name}
  namespace: demo
  labels: {{weir.dev/credential: {kind}}}
stringData: {data}
"
    )
}

/// A Consumer in namespace `demo` with its credential Secrets, groups and plugins.
fn consumer(name: &str, credentials: &[&str], groups: &[&str], plugins: &str) -> String {
    let annotations = match plugins {
        "" => String::new(),
        p => format!("\n  annotations: {{weir.dev/plugins: \"{p}\"}}"),
    };
    format!(
        "apiVersion: weir.dev/v1alpha1
kind: Consumer
metadata:
  name: {name}
  namespace: demo{annotations}
spec:
  credentials: [{}]
  groups: [{}]
",
        credentials.join(", "),
        groups.join(", ")
    )
}

/// The request headers the echo upstream received, when the request reached it.
fn upstream_headers(r: &Resp) -> Option<Value> {
    r.echo_name()?;
    Some(r.json()["headers"].clone())
}

/// The one value of `name` the upstream received (none: `None`; several: a panic).
fn upstream_header(r: &Resp, name: &str) -> Option<String> {
    let headers = upstream_headers(r).expect("the request reached the upstream");
    // The echo sends one value as a string and several as a list.
    match &headers[name] {
        Value::Null => None,
        Value::String(v) => Some(v.clone()),
        several => panic!("{name} reached the upstream more than once: {several}"),
    }
}

/// Asserts a 401 with `message` that never reached the upstream.
fn assert_refused(r: &Resp, status: u16, message: &str) {
    assert_eq!(r.status, status, "{r:?}");
    assert_eq!(r.json()["message"], message, "{r:?}");
    assert_eq!(
        r.echo_name(),
        None,
        "a refused request never reaches the upstream"
    );
}

fn basic(user_pass: &str) -> String {
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(user_pass)
    )
}

// ---------------------------------------------------------------------------------------------
// key-auth

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_auth_from_the_documented_example() {
    let up = echo("up");
    let example = doc_example_at("key-auth", up.port);
    let w = Manifests::start(&[("10.yaml", &example)], &[]);
    let c = client();
    let url = w.url("/api/orders");
    wait_for_status(&c, &url, 401, T).await;

    let r = get(&c, &url, &[]).await;
    assert_refused(&r, 401, "No API key found in request");
    assert_eq!(r.header("www-authenticate"), Some("Key realm=\"weir\""));

    // A valid key in either header; the client's own identity headers never get through.
    for key_header in ["x-api-key", "apikey"] {
        let r = get(
            &c,
            &url,
            &[
                (key_header, "alice-0b1d5c2e"),
                ("x-consumer-username", "admin"),
                ("x-consumer-id", "demo/root"),
                ("x-anonymous-consumer", "false"),
            ],
        )
        .await;
        assert_eq!(r.status, 200, "{r:?}");
        assert_eq!(
            upstream_header(&r, "x-consumer-id").as_deref(),
            Some("demo/alice")
        );
        assert_eq!(
            upstream_header(&r, "x-consumer-username").as_deref(),
            Some("alice")
        );
        assert_eq!(
            upstream_header(&r, "x-consumer-custom-id").as_deref(),
            Some("cust-1001")
        );
        assert_eq!(
            upstream_header(&r, "x-credential-identifier").as_deref(),
            Some("demo/alice-key")
        );
        assert_eq!(upstream_header(&r, "x-anonymous-consumer"), None);
        // hide_credentials: the key stays at the gateway.
        assert_eq!(upstream_header(&r, key_header), None);
    }

    // In the query, percent-encoded; hidden from the query the upstream gets.
    let r = get(
        &c,
        &w.url("/api/orders?page=2&apikey=alice%2D0b1d5c2e&sort=asc"),
        &[],
    )
    .await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.json()["query"], "page=2&sort=asc");
    assert_eq!(
        upstream_header(&r, "x-consumer-username").as_deref(),
        Some("alice")
    );

    // Wrong, empty, duplicated and ambiguous keys.
    for (headers, message) in [
        (
            vec![("x-api-key", "alice-0b1d5c2f")],
            "Invalid authentication credentials",
        ),
        (
            vec![("x-api-key", "")],
            "Invalid authentication credentials",
        ),
        (
            vec![
                ("x-api-key", "alice-0b1d5c2e"),
                ("x-api-key", "alice-0b1d5c2e"),
            ],
            "Duplicate API key found",
        ),
    ] {
        let r = get(&c, &url, &headers).await;
        assert_refused(&r, 401, message);
    }
    let r = get(&c, &w.url("/api/x?apikey=alice-0b1d5c2e&apikey=other"), &[]).await;
    assert_refused(&r, 401, "Duplicate API key found");
    // A key that is not valid header text never gets further than the edge.
    let answer = raw(
        w.proc.port,
        b"GET /api/orders HTTP/1.1\r\nHost: t\r\nx-api-key: alice-\x010b1d5c2e\r\nConnection: close\r\n\r\n",
        T,
    );
    assert!(answer.starts_with("HTTP/1.1 4"), "{answer}");
    assert!(!answer.contains("x-echo-name"), "{answer}");

    // The routing table never shows the key, not even hashed.
    let config = w.config(&c).await.to_string();
    assert!(!config.contains("alice-0b1d5c2e"), "{config}");
    assert!(config.contains("\"key_sha256\":\"<redacted>\""), "{config}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn identity_headers_are_stripped_on_every_route_and_keys_stay_in_their_namespace() {
    let up = echo("up");
    let other_ns = "apiVersion: v1
kind: Secret
metadata:
  name: eve-key
  namespace: other
  labels: {weir.dev/credential: key-auth}
stringData: {key: eve-shared-key}
---
apiVersion: weir.dev/v1alpha1
kind: Consumer
metadata: {name: eve, namespace: other}
spec: {credentials: [eve-key]}
";
    let m = docs(&[
        service("demo", "up", up.port),
        secret("alice-key", "key-auth", "{key: alice-key-1}"),
        consumer("alice", &["alice-key"], &[], ""),
        plugin("auth", "key-auth", "{}"),
        ingress("secure", "/secure", "auth", "up"),
        ingress("open", "/open", "", "up"),
    ]);
    let w = Manifests::start(&[("10.yaml", &m), ("20.yaml", other_ns)], &[]);
    let c = client();
    wait_for_status(&c, &w.url("/secure"), 401, T).await;

    // A route without authentication in a table that authenticates: forged identity headers
    // are removed there too.
    let r = get(
        &c,
        &w.url("/open"),
        &[
            ("x-consumer-username", "admin"),
            ("x-consumer-groups", "admins"),
            ("x-credential-identifier", "x"),
            ("x-consumer-id", "demo/root"),
            ("x-consumer-custom-id", "1"),
            ("x-anonymous-consumer", "false"),
            // What CGI-style servers read as X-Consumer-ID.
            ("x_consumer_id", "demo/root"),
        ],
    )
    .await;
    assert_eq!(r.status, 200);
    let h = upstream_headers(&r).unwrap();
    for name in [
        "x-consumer-username",
        "x-consumer-groups",
        "x-credential-identifier",
        "x-consumer-id",
        "x-consumer-custom-id",
        "x-anonymous-consumer",
        "x_consumer_id",
    ] {
        assert!(h.get(name).is_none(), "{name} reached the upstream: {h}");
    }

    // A consumer of another namespace is invisible to this namespace's plugin.
    let r = get(&c, &w.url("/secure"), &[("apikey", "eve-shared-key")]).await;
    assert_refused(&r, 401, "Invalid authentication credentials");
    let r = get(&c, &w.url("/secure"), &[("apikey", "alice-key-1")]).await;
    assert_eq!(
        upstream_header(&r, "x-consumer-id").as_deref(),
        Some("demo/alice")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anonymous_consumers_and_keys_in_bodies() {
    let up = echo("up");
    let m = docs(&[
        service("demo", "up", up.port),
        secret("alice-key", "key-auth", "{key: alice-key-1}"),
        consumer("alice", &["alice-key"], &[], ""),
        consumer("guest", &[], &[], ""),
        plugin(
            "auth",
            "key-auth",
            r#"{"anonymous": "guest", "key_in_body": true, "hide_credentials": true}"#,
        ),
        ingress("api", "/api", "auth", "up"),
    ]);
    let w = Manifests::start(&[("10.yaml", &m)], &[]);
    let c = client();
    let url = w.url("/api");
    wait_for_status(&c, &url, 200, T).await;

    for headers in [vec![], vec![("apikey", "wrong")]] {
        let r = get(&c, &url, &headers).await;
        assert_eq!(r.status, 200, "{r:?}");
        assert_eq!(
            upstream_header(&r, "x-consumer-id").as_deref(),
            Some("demo/guest")
        );
        assert_eq!(
            upstream_header(&r, "x-anonymous-consumer").as_deref(),
            Some("true")
        );
        assert_eq!(upstream_header(&r, "x-credential-identifier"), None);
    }

    // A form body's key identifies the consumer and is removed from the body sent upstream,
    // which goes with its new exact length.
    let form = "note=hello&apikey=alice-key-1";
    let r = send(
        &c,
        "POST",
        &url,
        &[("content-type", "application/x-www-form-urlencoded")],
        form,
    )
    .await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(
        upstream_header(&r, "x-consumer-id").as_deref(),
        Some("demo/alice")
    );
    assert_eq!(r.json()["body_length"], "note=hello".len());
    assert_eq!(upstream_header(&r, "content-length").as_deref(), Some("10"));
    // And a JSON body's.
    let r = send(
        &c,
        "POST",
        &url,
        &[("content-type", "application/json")],
        r#"{"apikey": "alice-key-1", "n": 1}"#,
    )
    .await;
    assert_eq!(
        upstream_header(&r, "x-consumer-id").as_deref(),
        Some("demo/alice")
    );
    assert_eq!(r.json()["body_length"], r#"{"n":1}"#.len());
}

// ---------------------------------------------------------------------------------------------
// basic-auth

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn basic_auth_from_the_documented_example() {
    let up = echo("up");
    let example = doc_example_at("basic-auth", up.port);
    let w = Manifests::start(&[("10.yaml", &example)], &[]);
    let c = client();
    let url = w.url("/admin");
    wait_for_status(&c, &url, 401, T).await;

    let r = get(&c, &url, &[]).await;
    assert_refused(&r, 401, "Unauthorized");
    assert_eq!(r.header("www-authenticate"), Some("Basic realm=\"staff\""));

    let good = basic("bob:correct horse battery staple");
    let r = get(
        &c,
        &url,
        &[("authorization", &good), ("x-consumer-username", "root")],
    )
    .await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(
        upstream_header(&r, "x-consumer-id").as_deref(),
        Some("demo/bob")
    );
    assert_eq!(
        upstream_header(&r, "x-consumer-username").as_deref(),
        Some("bob")
    );
    assert_eq!(
        upstream_header(&r, "x-credential-identifier").as_deref(),
        Some("demo/bob-password")
    );
    assert_eq!(
        upstream_header(&r, "authorization"),
        None,
        "hide_credentials"
    );

    let wrong = [
        basic("bob:correct horse battery stapl"),
        basic("bob:"),
        basic("robert:correct horse battery staple"),
        basic("bob"),
        "Basic !!not-base64!!".to_string(),
        "Bearer abc".to_string(),
        "Basic".to_string(),
    ];
    for value in &wrong {
        let r = get(&c, &url, &[("authorization", value)]).await;
        assert_refused(&r, 401, "Invalid authentication credentials");
        assert_eq!(r.header("www-authenticate"), Some("Basic realm=\"staff\""));
    }

    let config = w.config(&c).await.to_string();
    assert!(!config.contains("correct horse"), "{config}");
}

// ---------------------------------------------------------------------------------------------
// acl

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acl_from_the_documented_example() {
    let up = echo("up");
    let example = doc_example_at("acl", up.port);
    let w = Manifests::start(&[("10.yaml", &example)], &[]);
    let c = client();
    let url = w.url("/ops");
    wait_for_status(&c, &url, 401, T).await;

    let r = get(
        &c,
        &url,
        &[("apikey", "carol-7f3a"), ("x-consumer-groups", "admins")],
    )
    .await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(
        upstream_header(&r, "x-consumer-groups").as_deref(),
        Some("ops, dev")
    );
    let r = get(&c, &url, &[("apikey", "dave-91c2")]).await;
    assert_refused(&r, 403, "You cannot consume this service");
    let r = get(&c, &url, &[]).await;
    assert_refused(&r, 401, "No API key found in request");
}

// ---------------------------------------------------------------------------------------------
// consumer-scoped plugins and bad credentials

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumer_scoped_plugins_apply_to_that_consumer_only() {
    let up = echo("up");
    let m = docs(&[
        service("demo", "up", up.port),
        secret("alice-key", "key-auth", "{key: alice-key-1}"),
        secret("bob-key", "key-auth", "{key: bob-key-1}"),
        consumer("alice", &["alice-key"], &[], "suspended"),
        consumer("bob", &["bob-key"], &[], ""),
        plugin("auth", "key-auth", "{}"),
        plugin(
            "suspended",
            "request-termination",
            r#"{"status_code": 429, "message": "alice is suspended"}"#,
        ),
        ingress("api", "/api", "auth", "up"),
    ]);
    let w = Manifests::start(&[("10.yaml", &m)], &[]);
    let c = client();
    wait_for_status(&c, &w.url("/api"), 401, T).await;
    // The translation lands as a whole: once Bob passes, Alice's plugin is in place.
    let url = w.url("/api");
    let r = get(&c, &url, &[("apikey", "bob-key-1")]).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(
        upstream_header(&r, "x-consumer-username").as_deref(),
        Some("bob")
    );
    let r = get(&c, &url, &[("apikey", "alice-key-1")]).await;
    assert_refused(&r, 429, "alice is suspended");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_credential_secrets_leave_everything_else_serving() {
    let up = echo("up");
    let m = docs(&[
        service("demo", "up", up.port),
        // Alice: one good key, one Secret without its key, one with an unknown label value.
        secret("alice-key", "key-auth", "{key: alice-key-1}"),
        secret("alice-empty", "key-auth", "{other: x}"),
        secret("alice-odd", "api-key", "{key: alice-key-2}"),
        consumer(
            "alice",
            &["alice-key", "alice-empty", "alice-odd", "alice-missing"],
            &[],
            "",
        ),
        // Bob: a JWT credential whose public key does not parse, and a good password.
        secret(
            "bob-jwt",
            "jwt",
            "{key: bob-issuer, algorithm: RS256, rsa_public_key: not-a-pem}",
        ),
        secret("bob-pw", "basic-auth", "{username: bob, password: pw-1}"),
        consumer("bob", &["bob-jwt", "bob-pw"], &[], ""),
        // Carol claims Alice's key: the first by name keeps it.
        secret("carol-key", "key-auth", "{key: alice-key-1}"),
        consumer("carol", &["carol-key"], &[], ""),
        plugin("keys", "key-auth", "{}"),
        plugin("passwords", "basic-auth", "{}"),
        ingress("keys", "/keys", "keys", "up"),
        ingress("passwords", "/passwords", "passwords", "up"),
    ]);
    let w = Manifests::start(&[("10.yaml", &m)], &[]);
    let c = client();
    wait_for_status(&c, &w.url("/keys"), 401, T).await;

    let r = get(&c, &w.url("/keys"), &[("apikey", "alice-key-1")]).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(
        upstream_header(&r, "x-consumer-id").as_deref(),
        Some("demo/alice")
    );
    let r = get(&c, &w.url("/keys"), &[("apikey", "alice-key-2")]).await;
    assert_refused(&r, 401, "Invalid authentication credentials");
    let r = get(
        &c,
        &w.url("/passwords"),
        &[("authorization", &basic("bob:pw-1"))],
    )
    .await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(
        upstream_header(&r, "x-consumer-id").as_deref(),
        Some("demo/bob")
    );
}

// ---------------------------------------------------------------------------------------------
// jwt

/// The HS256 secret of the documented example's credential.
const ACME_SECRET: &str = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

fn hs256(claims: Value, secret: &str) -> String {
    jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
        &claims,
        &jsonwebtoken::EncodingKey::from_secret(secret.as_bytes()),
    )
    .unwrap()
}

fn fixture(name: &str) -> String {
    let path = format!("{}/tests/fixtures/jwt/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jwt_from_the_documented_example() {
    let up = echo("up");
    let example = doc_example_at("jwt", up.port);
    let w = Manifests::start(&[("10.yaml", &example)], &[]);
    let c = client();
    let url = w.url("/orders");
    wait_for_status(&c, &url, 401, T).await;
    let bearer = |t: &str| format!("Bearer {t}");

    let valid = hs256(
        serde_json::json!({"iss": "acme-issuer", "exp": now() + 300, "nbf": now() - 10}),
        ACME_SECRET,
    );
    let r = get(
        &c,
        &url,
        &[
            ("authorization", &bearer(&valid)),
            ("x-consumer-id", "demo/root"),
        ],
    )
    .await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(
        upstream_header(&r, "x-consumer-id").as_deref(),
        Some("demo/acme")
    );
    assert_eq!(
        upstream_header(&r, "x-consumer-username").as_deref(),
        Some("acme")
    );
    assert_eq!(
        upstream_header(&r, "x-credential-identifier").as_deref(),
        Some("demo/acme-jwt")
    );
    // The token may come in the query too (`jwt`, Kong's default parameter).
    let r = get(&c, &format!("{url}?jwt={valid}"), &[]).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(
        upstream_header(&r, "x-consumer-id").as_deref(),
        Some("demo/acme")
    );
    // The example does not hide credentials: the token goes on in the query.
    assert_eq!(r.json()["query"], format!("jwt={valid}"));

    let r = get(&c, &url, &[]).await;
    assert_refused(&r, 401, "Unauthorized");
    assert!(
        r.header("www-authenticate").unwrap().starts_with("Bearer"),
        "{r:?}"
    );

    let claims =
        |exp: i64, nbf: i64| serde_json::json!({"iss": "acme-issuer", "exp": exp, "nbf": nbf});
    let n = now();
    for (token, message) in [
        // Expired beyond the 30 s leeway; not valid for another 10 minutes.
        (
            hs256(claims(n - 120, n - 600), ACME_SECRET),
            "token expired",
        ),
        (
            hs256(claims(n + 1200, n + 600), ACME_SECRET),
            "token not valid yet",
        ),
        // Signed with another secret; issued by someone unknown; exp missing.
        (
            hs256(claims(n + 300, n), "not-the-secret"),
            "Invalid signature",
        ),
        (
            hs256(
                serde_json::json!({"iss": "mallory", "exp": n + 300, "nbf": n}),
                ACME_SECRET,
            ),
            "No credentials found for given 'iss'",
        ),
        (
            hs256(
                serde_json::json!({"iss": "acme-issuer", "nbf": n}),
                ACME_SECRET,
            ),
            "exp must be a number",
        ),
        // Malformed.
        ("abc.def".to_string(), "Bad token; invalid JSON"),
        ("a.b.c".to_string(), "Bad token; invalid JSON"),
        (format!("{valid}x"), "Invalid signature"),
    ] {
        let r = get(&c, &url, &[("authorization", &bearer(&token))]).await;
        assert_eq!(r.status, 401, "{message}: {r:?}");
        assert!(
            r.json()["message"].as_str().unwrap().contains(message),
            "{message}: {:?}",
            r.json()
        );
        assert_eq!(
            r.echo_name(),
            None,
            "a refused token never reaches the upstream"
        );
    }
    // Two different tokens at once.
    let other = hs256(claims(n + 301, n), ACME_SECRET);
    let r = get(
        &c,
        &format!("{url}?jwt={other}"),
        &[("authorization", &bearer(&valid))],
    )
    .await;
    assert_refused(&r, 401, "Multiple tokens provided");

    let config = w.config(&c).await.to_string();
    assert!(
        !config.contains(ACME_SECRET),
        "the HMAC secret is redacted: {config}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jwt_with_public_keys_refuses_algorithm_confusion() {
    let up = echo("up");
    let indent = |pem: &str| {
        pem.lines()
            .map(|l| format!("    {l}\n"))
            .collect::<String>()
    };
    let rs_public = fixture("rs256-public.pem");
    let es_public = fixture("es256-public.pem");
    let m = docs(&[
        service("demo", "up", up.port),
        format!(
            "apiVersion: v1
kind: Secret
metadata:
  name: billing-jwt
  namespace: demo
  labels: {{weir.dev/credential: jwt}}
stringData:
  key: billing
  algorithm: RS256
  rsa_public_key: |
{}",
            indent(&rs_public)
        ),
        format!(
            "apiVersion: v1
kind: Secret
metadata:
  name: edge-jwt
  namespace: demo
  labels: {{weir.dev/credential: jwt}}
stringData:
  key: edge
  algorithm: ES256
  rsa_public_key: |
{}",
            indent(&es_public)
        ),
        consumer("billing", &["billing-jwt"], &[], ""),
        consumer("edge", &["edge-jwt"], &[], ""),
        plugin("tokens", "jwt", r#"{"claims_to_verify": ["exp"]}"#),
        ingress("api", "/api", "tokens", "up"),
    ]);
    let w = Manifests::start(&[("10.yaml", &m)], &[]);
    let c = client();
    let url = w.url("/api");
    wait_for_status(&c, &url, 401, T).await;

    let claims = |iss: &str| serde_json::json!({"iss": iss, "exp": now() + 300});
    let sign = |alg, key: jsonwebtoken::EncodingKey, iss: &str| {
        jsonwebtoken::encode(&jsonwebtoken::Header::new(alg), &claims(iss), &key).unwrap()
    };
    let rs = sign(
        jsonwebtoken::Algorithm::RS256,
        jsonwebtoken::EncodingKey::from_rsa_pem(fixture("rs256-private.pem").as_bytes()).unwrap(),
        "billing",
    );
    let es = sign(
        jsonwebtoken::Algorithm::ES256,
        jsonwebtoken::EncodingKey::from_ec_pem(fixture("es256-private.pem").as_bytes()).unwrap(),
        "edge",
    );
    for (token, who) in [(&rs, "demo/billing"), (&es, "demo/edge")] {
        let r = get(&c, &url, &[("authorization", &format!("Bearer {token}"))]).await;
        assert_eq!(r.status, 200, "{r:?}");
        assert_eq!(upstream_header(&r, "x-consumer-id").as_deref(), Some(who));
    }
    // The public key used as an HMAC secret: the classic confusion attack.
    let forged = sign(
        jsonwebtoken::Algorithm::HS256,
        jsonwebtoken::EncodingKey::from_secret(rs_public.as_bytes()),
        "billing",
    );
    let r = get(&c, &url, &[("authorization", &format!("Bearer {forged}"))]).await;
    assert_refused(&r, 401, "Invalid algorithm");
    // An RS256 token for the ES256 credential.
    let crossed = sign(
        jsonwebtoken::Algorithm::RS256,
        jsonwebtoken::EncodingKey::from_rsa_pem(fixture("rs256-private.pem").as_bytes()).unwrap(),
        "edge",
    );
    let r = get(&c, &url, &[("authorization", &format!("Bearer {crossed}"))]).await;
    assert_refused(&r, 401, "Invalid algorithm");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limits_count_per_consumer_and_a_consumer_can_have_its_own() {
    let up = echo("up");
    let m = docs(&[
        service("demo", "up", up.port),
        secret("alice-key", "key-auth", "{key: alice-key-1}"),
        secret("bob-key", "key-auth", "{key: bob-key-1}"),
        // Bob, a partner, gets five a minute instead of everyone's two.
        consumer("alice", &["alice-key"], &[], ""),
        consumer("bob", &["bob-key"], &[], "partner-limit"),
        plugin("auth", "key-auth", "{}"),
        plugin(
            "limit",
            "rate-limiting",
            r#"{"minute": 2, "limit_by": "consumer"}"#,
        ),
        plugin(
            "partner-limit",
            "rate-limiting",
            r#"{"minute": 5, "limit_by": "consumer"}"#,
        ),
        ingress("api", "/api", "auth,limit", "up"),
    ]);
    let w = Manifests::start(&[("10.yaml", &m)], &[]);
    let c = client();
    let url = w.url("/api");
    wait_for_status(&c, &url, 401, T).await;
    let statuses = |key: &'static str, n: usize| {
        let (c, url) = (c.clone(), url.clone());
        async move {
            let mut out = Vec::new();
            for _ in 0..n {
                out.push(get(&c, &url, &[("apikey", key)]).await.status);
            }
            out
        }
    };
    assert_eq!(statuses("alice-key-1", 3).await, [200, 200, 429]);
    // Alice's budget is hers alone, and Bob's consumer-scoped limit replaces the route's.
    assert_eq!(
        statuses("bob-key-1", 6).await,
        [200, 200, 200, 200, 200, 429]
    );
}

// ---------------------------------------------------------------------------------------------
// mtls-auth

/// `block` indented as a YAML literal block's lines (under a key at 2 spaces).
fn literal(text: &str) -> String {
    text.lines().map(|l| format!("    {l}\n")).collect()
}

/// `mtls-auth` from manifests: the Ingress's TLS host asks for client certificates, a
/// certificate of the plugin's CA is its CN's consumer (so a per-consumer rate limit counts
/// per certificate), and none, another CA's, a revoked one or an unknown CN get 401 without
/// reaching the upstream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mtls_auth_maps_client_certificates_to_consumers() {
    use rcgen::ExtendedKeyUsagePurpose::ServerAuth;
    const HOST: &str = "partners.example.test";
    let up = echo("up");
    let server_ca = common::ca::Ca::new("server CA");
    let server = server_ca.leaf(&[HOST], ServerAuth);
    let client_ca = common::ca::Ca::new("partner CA");
    let alice = client_ca.client("alice", 1, false);
    let bob = client_ca.client("bob", 2, false);
    let revoked = client_ca.client("alice", 3, false);
    let stranger = client_ca.client("stranger", 4, false);
    let foreign = common::ca::Ca::new("other CA").client("alice", 5, false);
    let m = docs(&[
        service("demo", "up", up.port),
        format!(
            "apiVersion: v1\nkind: Secret\nmetadata: {{name: site, namespace: demo}}\ntype: kubernetes.io/tls\nstringData:\n  tls.crt: |\n{}  tls.key: |\n{}",
            literal(&server.pem),
            literal(&server.key_pem)
        ),
        format!(
            "apiVersion: v1\nkind: Secret\nmetadata: {{name: partner-ca, namespace: demo, labels: {{weir.dev/credential: \"true\"}}}}\nstringData:\n  ca.crt: |\n{}  ca.crl: |\n{}",
            literal(&client_ca.pem()),
            literal(&client_ca.crl(&[3]))
        ),
        consumer("alice", &[], &[], ""),
        consumer("bob", &[], &[], ""),
        plugin("certs", "mtls-auth", "{ca_certificates: [partner-ca]}"),
        plugin("limit", "rate-limiting", r#"{"minute": 2, "limit_by": "consumer"}"#),
        format!(
            "apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: partners
  namespace: demo
  annotations: {{weir.dev/plugins: \"certs,limit\"}}
spec:
  ingressClassName: weir
  tls: [{{hosts: [{HOST}], secretName: site}}]
  rules:
  - host: {HOST}
    http:
      paths: [{{path: /, pathType: Prefix, backend: {{service: {{name: up, port: {{number: 80}}}}}}}}]
"
        ),
    ]);
    let tls_port = free_port();
    let tls_listen = format!("127.0.0.1:{tls_port}");
    let w = Manifests::start(&[("10.yaml", &m)], &["--tls-listen", &tls_listen]);
    wait_for_port(tls_port);
    let call = |cert: Option<&common::ca::Leaf>| {
        let (connector, asked) = common::tls::connector_presenting(
            server_ca.issuer.der().clone(),
            cert.map(|l| (l.pem.as_str(), l.key_pem.as_str())),
            true,
        );
        async move {
            let r = common::tls::exchange(&connector, tls_port, HOST, HOST, "/orders")
                .await
                .unwrap();
            (r.resp, asked.load(std::sync::atomic::Ordering::SeqCst))
        }
    };
    // The table lands after the listener opens: wait until the handshake asks.
    let started = std::time::Instant::now();
    while !call(None).await.1 {
        assert!(
            started.elapsed() < T,
            "never asked for a client certificate"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _ = &w;

    let (r, _) = call(Some(&alice)).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(
        upstream_header(&r, "x-consumer-username").as_deref(),
        Some("alice")
    );
    assert_eq!(
        upstream_header(&r, "x-consumer-id").as_deref(),
        Some("demo/alice")
    );
    assert_eq!(
        upstream_header(&r, "x-credential-identifier").as_deref(),
        Some("CN=alice")
    );
    // Alice's second request is her last this minute; Bob's certificate has its own budget.
    assert_eq!(call(Some(&alice)).await.0.status, 200);
    assert_eq!(call(Some(&alice)).await.0.status, 429);
    let (r, _) = call(Some(&bob)).await;
    assert_eq!(r.status, 200);
    assert_eq!(
        upstream_header(&r, "x-consumer-username").as_deref(),
        Some("bob")
    );

    assert_refused(
        &call(None).await.0,
        401,
        "No required TLS certificate was sent",
    );
    for (what, cert) in [
        ("another CA's", &foreign),
        ("revoked", &revoked),
        ("unknown CN", &stranger),
    ] {
        let (r, _) = call(Some(cert)).await;
        assert_eq!(r.status, 401, "{what}: {r:?}");
        assert_refused(&r, 401, "TLS certificate failed verification");
    }
}
