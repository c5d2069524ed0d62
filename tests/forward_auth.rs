//! `forward-auth` through the real binary in standalone mode: a small HTTP/1.1 auth service on
//! loopback decides by the request's `Authorization` (`Bearer good` → 200 with identity
//! headers, `bad` → 401, `forbidden` → 403, …) and records every subrequest; a recording
//! upstream shows what got through, with which headers and body, or that nothing did.

mod common;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use common::manifests::*;
use common::recorder::{response, Server};
use common::*;

const T: Duration = Duration::from_secs(30);

/// The auth service: decides by the bearer token.
fn auth_service() -> Server {
    Server::start(|req| {
        match req.header("authorization").as_deref() {
        Some("Bearer good") => response(
            200,
            "x-user: alice\r\nx-groups: admins\r\nx-groups: ops\r\nx-secret: not-listed\r\n\
             x-auth-request-user: alice\r\nx-auth-request-email: alice@example.com\r\n",
            "welcome",
        ),
        Some("Bearer nouser") => response(204, "", ""),
        Some("Bearer forbidden") => response(403, "", "auth service says no"),
        Some("Bearer teapot") => response(418, "", "short and stout"),
        Some("Bearer moved") => response(302, "location: /elsewhere\r\n", ""),
        Some("Bearer slow") => {
            std::thread::sleep(Duration::from_secs(3));
            response(200, "x-user: late\r\n", "")
        }
        _ => response(
            401,
            "www-authenticate: Bearer realm=\"weir-test\"\r\nwww-authenticate: Basic realm=\"b\"\r\n",
            "auth service body",
        ),
    }
    })
}

/// The upstream: answers `ok` to everything.
fn upstream() -> Server {
    Server::start(|_| response(200, "x-upstream: yes\r\n", "ok"))
}

/// A port nothing listens on.
fn dead_port() -> u16 {
    free_port()
}

fn table(up: &Server, plugins: &[(&str, &str, String)]) -> String {
    let mut parts = vec![service("demo", "up", up.port)];
    for (name, path, config) in plugins {
        parts.push(plugin(name, "forward-auth", config));
        parts.push(ingress(name, path, name, "up"));
    }
    docs(&parts)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forward_auth_from_the_documented_example() {
    let auth = auth_service();
    let up = upstream();
    let example = doc_example_at("forward-auth", up.port).replace(
        "http://oauth2-proxy.auth.svc.cluster.local:4180",
        &format!("http://127.0.0.1:{}", auth.port),
    );
    assert!(example.contains(&format!("127.0.0.1:{}", auth.port)));
    let m = Manifests::start(&[("10.yaml", &example)], &[]);
    let c = client();
    wait_for_status(&c, &m.url("/app"), 302, T).await;

    let r = get(&c, &m.url("/app/home?tab=1"), &[]).await;
    assert_eq!(r.status, 302, "{r:?}");
    let rd = format!(
        "http%3A%2F%2F127.0.0.1%3A{}%2Fapp%2Fhome%3Ftab%3D1",
        m.proc.port
    );
    assert_eq!(
        r.header("location"),
        Some(format!("https://sso.example.com/oauth2/start?rd={rd}").as_str())
    );
    let before = up.count();
    let r = get(
        &c,
        &m.url("/app/home"),
        &[
            ("authorization", "Bearer good"),
            ("x-auth-request-user", "mallory"),
        ],
    )
    .await;
    assert_eq!((r.status, &r.body[..]), (200, &b"ok"[..]), "{r:?}");
    assert_eq!(up.count(), before + 1);
    let seen = up.last();
    assert_eq!(seen.all("x-auth-request-user"), ["alice"]);
    assert_eq!(seen.all("x-auth-request-email"), ["alice@example.com"]);
    assert_eq!(auth.last().request_line(), "GET /oauth2/auth HTTP/1.1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allowed_requests_reach_the_upstream_with_the_identity_the_service_gave() {
    let auth = auth_service();
    let up = upstream();
    let url = format!("http://127.0.0.1:{}/verify?app=1", auth.port);
    let config = table(
        &up,
        &[
            (
                "fa",
                "/app",
                format!(r#"{{"url": "{url}", "response_headers": ["X-User", "x-groups"]}}"#),
            ),
            (
                "fa-get",
                "/get-app",
                format!(r#"{{"url": "{url}", "method": "GET", "response_headers": ["x-user"]}}"#),
            ),
        ],
    );
    let m = Manifests::start(&[("10.yaml", &config)], &[]);
    let c = client();
    wait_for_status(&c, &m.url("/app"), 401, T).await;
    let weir = format!("127.0.0.1:{}", m.proc.port);

    // Allowed: the service's X-User replaces the client's (in both spellings), the service's
    // unlisted headers stay behind, and the client's own headers go on.
    let r = get(
        &c,
        &m.url("/app/orders?id=7"),
        &[
            ("authorization", "Bearer good"),
            ("x-user", "mallory"),
            ("x_user", "mallory"),
            ("x-groups", "root"),
            ("cookie", "session=abc"),
            ("x-original-url", "http://evil.example/"),
            ("x-original-method", "DELETE"),
            ("x-forwarded-for", "6.6.6.6"),
            ("x-real-ip", "6.6.6.6"),
        ],
    )
    .await;
    assert_eq!((r.status, &r.body[..]), (200, &b"ok"[..]), "{r:?}");
    assert_eq!(r.header("x-upstream"), Some("yes"));
    let seen = up.last();
    assert_eq!(seen.request_line(), "GET /app/orders?id=7 HTTP/1.1");
    assert_eq!(seen.all("x-user"), ["alice"], "{}", seen.head);
    assert!(seen.all("x_user").is_empty(), "{}", seen.head);
    assert_eq!(seen.all("x-groups"), ["admins", "ops"]);
    assert!(seen.all("x-secret").is_empty());
    assert_eq!(seen.all("authorization"), ["Bearer good"]);
    assert_eq!(seen.all("cookie"), ["session=abc"]);

    // What the auth service was told.
    let sub = auth.last();
    assert_eq!(sub.request_line(), "GET /verify?app=1 HTTP/1.1");
    assert_eq!(sub.all("host"), [format!("127.0.0.1:{}", auth.port)]);
    assert_eq!(sub.all("authorization"), ["Bearer good"]);
    assert_eq!(sub.all("cookie"), ["session=abc"]);
    assert_eq!(
        sub.all("x-original-url"),
        [format!("http://{weir}/app/orders?id=7")]
    );
    assert_eq!(sub.all("x-original-method"), ["GET"]);
    assert_eq!(sub.all("x-forwarded-method"), ["GET"]);
    assert_eq!(sub.all("x-forwarded-proto"), ["http"]);
    assert_eq!(sub.all("x-forwarded-host"), [weir.as_str()]);
    assert_eq!(sub.all("x-forwarded-uri"), ["/app/orders?id=7"]);
    assert_eq!(sub.all("x-forwarded-for"), ["127.0.0.1"]);
    assert_eq!(sub.all("x-real-ip"), ["127.0.0.1"]);
    assert_eq!(sub.all("x-auth-request-redirect"), ["/app/orders?id=7"]);
    assert!(sub.body.is_empty());

    // Allowed without an X-User from the service: the client's is removed all the same.
    let r = get(
        &c,
        &m.url("/app/x"),
        &[("authorization", "Bearer nouser"), ("x-user", "mallory")],
    )
    .await;
    assert_eq!(r.status, 200, "{r:?}");
    let seen = up.last();
    assert!(seen.all("x-user").is_empty(), "{}", seen.head);

    // A POST: its body reaches the upstream whole; the subrequest has none.
    let body: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    let r = send(
        &c,
        "POST",
        &m.url("/app/upload"),
        &[
            ("authorization", "Bearer good"),
            ("content-type", "application/octet-stream"),
        ],
        body.clone(),
    )
    .await;
    assert_eq!(r.status, 200, "{r:?}");
    let seen = up.last();
    assert_eq!(seen.request_line(), "POST /app/upload HTTP/1.1");
    assert!(
        seen.body == body,
        "the upstream got {} bytes",
        seen.body.len()
    );
    let sub = auth.last();
    assert_eq!(sub.request_line(), "POST /verify?app=1 HTTP/1.1");
    assert!(sub.body.is_empty(), "{} bytes", sub.body.len());
    assert!(
        sub.header("content-length").is_none_or(|l| l == "0"),
        "{}",
        sub.head
    );
    assert!(sub.header("transfer-encoding").is_none());
    assert_eq!(sub.all("content-type"), ["application/octet-stream"]);
    assert_eq!(sub.all("x-original-method"), ["POST"]);

    // `method: GET`: the subrequest is a GET whatever the client sent.
    let r = send(
        &c,
        "POST",
        &m.url("/get-app/form"),
        &[("authorization", "Bearer good")],
        "a=1",
    )
    .await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(up.last().body, b"a=1");
    let sub = auth.last();
    assert_eq!(sub.request_line(), "GET /verify?app=1 HTTP/1.1");
    assert_eq!(sub.all("x-original-method"), ["POST"]);
    assert!(sub.body.is_empty());

    // Connections to the service are kept alive: one per worker at most.
    for _ in 0..10 {
        let r = get(&c, &m.url("/app/x"), &[("authorization", "Bearer good")]).await;
        assert_eq!(r.status, 200);
    }
    let accepted = auth.accepted.load(Ordering::SeqCst);
    assert!(
        accepted <= 2,
        "{accepted} connections for {} subrequests",
        auth.count()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_pass_through_and_401_can_send_the_client_to_sign_in() {
    let auth = auth_service();
    let up = upstream();
    let url = format!("http://127.0.0.1:{}/verify", auth.port);
    let config = table(
        &up,
        &[
            ("fa", "/app", format!(r#"{{"url": "{url}"}}"#)),
            (
                "fa-signin",
                "/signin",
                format!(
                    r#"{{"url": "{url}", "signin": "https://login.example/start?client=weir"}}"#
                ),
            ),
            (
                "fa-next",
                "/next",
                format!(
                    r#"{{"url": "{url}", "signin": "/login", "signin_redirect_param": "next"}}"#
                ),
            ),
        ],
    );
    let m = Manifests::start(&[("10.yaml", &config)], &[]);
    let c = client();
    wait_for_status(&c, &m.url("/app"), 401, T).await;
    let weir = format!("127.0.0.1:{}", m.proc.port);

    // 401: the service's challenges, Weir's body.
    let r = get(&c, &m.url("/app/x"), &[("authorization", "Bearer bad")]).await;
    assert_eq!(r.status, 401, "{r:?}");
    let challenges: Vec<_> = r.headers.get_all("www-authenticate").iter().collect();
    assert_eq!(
        challenges,
        ["Bearer realm=\"weir-test\"", "Basic realm=\"b\""]
    );
    assert_eq!(r.json()["message"], "Unauthorized");
    assert!(!String::from_utf8_lossy(&r.body).contains("auth service"));
    assert_eq!(auth.last().all("authorization"), ["Bearer bad"]);

    // 403.
    let r = get(
        &c,
        &m.url("/app/x"),
        &[("authorization", "Bearer forbidden")],
    )
    .await;
    assert_eq!(r.status, 403, "{r:?}");
    assert_eq!(r.json()["message"], "Forbidden");
    assert!(r.header("www-authenticate").is_none());

    // Sign-in: a 302 carrying the original URL; a 403 stays a 403.
    let r = get(&c, &m.url("/signin/x?a=1&b=%2F"), &[]).await;
    assert_eq!(r.status, 302, "{r:?}");
    let rd = format!(
        "http%3A%2F%2F{}%2Fsignin%2Fx%3Fa%3D1%26b%3D%252F",
        weir.replace(':', "%3A")
    );
    assert_eq!(
        r.header("location"),
        Some(format!("https://login.example/start?client=weir&rd={rd}").as_str())
    );
    assert!(r.header("www-authenticate").is_none());
    let r = get(
        &c,
        &m.url("/signin/x"),
        &[("authorization", "Bearer forbidden")],
    )
    .await;
    assert_eq!(r.status, 403, "{r:?}");
    let r = get(&c, &m.url("/next/y"), &[]).await;
    assert_eq!(r.status, 302, "{r:?}");
    let next = format!("http%3A%2F%2F{}%2Fnext%2Fy", weir.replace(':', "%3A"));
    assert_eq!(
        r.header("location"),
        Some(format!("/login?next={next}").as_str())
    );

    assert_eq!(up.count(), 0, "a refused request reached the upstream");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_service_failures_are_500s_and_nothing_reaches_the_upstream() {
    let auth = auth_service();
    let up = upstream();
    let url = format!("http://127.0.0.1:{}/verify", auth.port);
    let config = table(
        &up,
        &[
            (
                "fa",
                "/app",
                format!(r#"{{"url": "{url}", "timeout": 500}}"#),
            ),
            (
                "fa-down",
                "/down",
                format!(r#"{{"url": "http://127.0.0.1:{}/verify"}}"#, dead_port()),
            ),
        ],
    );
    let m = Manifests::start(&[("10.yaml", &config)], &[]);
    let c = client();
    wait_for_status(&c, &m.url("/app"), 401, T).await;

    let assert_500 = |r: &Resp| {
        assert_eq!(r.status, 500, "{r:?}");
        assert_eq!(r.json()["message"], "An unexpected error occurred");
    };
    // Nobody listening.
    let r = get(&c, &m.url("/down/x"), &[("authorization", "Bearer good")]).await;
    assert_500(&r);
    // Statuses other than 2xx, 401 and 403.
    for token in ["Bearer teapot", "Bearer moved"] {
        let r = get(&c, &m.url("/app/x"), &[("authorization", token)]).await;
        assert_500(&r);
    }
    // No answer within the timeout.
    let started = Instant::now();
    let r = get(&c, &m.url("/app/x"), &[("authorization", "Bearer slow")]).await;
    assert_500(&r);
    assert!(
        started.elapsed() < Duration::from_millis(2500),
        "answered after {:?}",
        started.elapsed()
    );
    assert_eq!(up.count(), 0, "the upstream was reached: {:?}", up.seen());

    // The service still serves the others.
    let r = get(&c, &m.url("/app/x"), &[("authorization", "Bearer good")]).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(up.count(), 1);
}
