//! The routing matrix through the real binary: every host and path rule, precedence,
//! conditions, normalisation, strip_path, service paths and Host handling.

mod common;

use common::*;

/// Each route forwards to a service whose `path` is `/<route id>`, so the echo upstream's
/// `path` tells which route matched and what path was forwarded.
fn table(echo_port: u16) -> String {
    let routes = r#"
- {id: exact-host, hosts: [api.example.com]}
- {id: wild-host, hosts: ['*.example.com']}
- {id: prefix-foo, paths: [{path: /foo}]}
- {id: prefix-foo-bar, paths: [{path: /foo/bar/}]}
- {id: exact-foo-bar, paths: [{path: /foo/bar, kind: Exact}]}
- {id: exact-case, paths: [{path: /Case, kind: Exact}]}
- {id: regex-v, paths: [{path: '/v[0-9]+/items', kind: Regex}]}
- {id: regex-hi, priority: 10, paths: [{path: '/v1/items', kind: Regex}]}
- {id: method-post, methods: [POST], paths: [{path: /form}]}
- {id: header-v2, headers: {x-version: [v2]}, paths: [{path: /form}]}
- {id: plain-form, paths: [{path: /form}]}
- {id: fallback-host, hosts: [other.test], paths: [{path: /only}]}
- {id: stripped, strip_path: true, paths: [{path: /strip}]}
- {id: keep-host, preserve_host: true, paths: [{path: /keep}]}
- {id: rewrite-re, rewrite: '/api/$1/$2', paths: [{path: '/re/v([0-9]+)/(.*)', kind: Regex}]}
- {id: host-h, host_header: upstream.internal, preserve_host: true, paths: [{path: /hh}]}
"#;
    let ids: Vec<&str> = routes
        .lines()
        .filter_map(|l| l.split("id: ").nth(1))
        .map(|rest| rest.split(',').next().unwrap())
        .collect();
    let mut out = String::from("routes:\n");
    for line in routes.lines().filter(|l| !l.trim().is_empty()) {
        let id = line
            .split("id: ")
            .nth(1)
            .unwrap()
            .split(',')
            .next()
            .unwrap();
        out.push_str(&line.replacen('{', &format!("{{service: s-{id}, "), 1));
        out.push('\n');
    }
    out.push_str("services:\n");
    for id in ids {
        out.push_str(&format!(
            "- {{id: s-{id}, host: 127.0.0.1, port: {echo_port}, path: /{id}}}\n"
        ));
    }
    out
}

/// (host, method, path, extra header, expected route id or None for 404).
type Case = (
    &'static str,
    &'static str,
    &'static str,
    Option<(&'static str, &'static str)>,
    Option<&'static str>,
);

const MATRIX: &[Case] = &[
    // Hosts: exact (any case, port ignored) > one-label wildcard > host-less.
    (
        "api.example.com",
        "GET",
        "/anything",
        None,
        Some("exact-host"),
    ),
    (
        "API.Example.COM:1234",
        "GET",
        "/x",
        None,
        Some("exact-host"),
    ),
    ("www.example.com", "GET", "/x", None, Some("wild-host")),
    ("a.b.example.com", "GET", "/foo", None, Some("prefix-foo")),
    ("example.com", "GET", "/foo", None, Some("prefix-foo")),
    ("example.com", "GET", "/nothing", None, None),
    // Prefix by path element.
    ("h.test", "GET", "/foo", None, Some("prefix-foo")),
    ("h.test", "GET", "/foo/", None, Some("prefix-foo")),
    ("h.test", "GET", "/foo/baz", None, Some("prefix-foo")),
    ("h.test", "GET", "/foobar", None, None),
    // Exact beats Prefix; Exact is slash- and case-sensitive; longer Prefix wins.
    ("h.test", "GET", "/foo/bar", None, Some("exact-foo-bar")),
    ("h.test", "GET", "/foo/bar/", None, Some("prefix-foo-bar")),
    (
        "h.test",
        "GET",
        "/foo/bar/baz",
        None,
        Some("prefix-foo-bar"),
    ),
    ("h.test", "GET", "/Case", None, Some("exact-case")),
    ("h.test", "GET", "/case", None, None),
    // Regex: anchored at the start, by priority then declaration.
    ("h.test", "GET", "/v2/items", None, Some("regex-v")),
    ("h.test", "GET", "/v1/items", None, Some("regex-hi")),
    ("h.test", "GET", "/v1/items/9", None, Some("regex-hi")),
    ("h.test", "GET", "/x/v1/items", None, None),
    // Methods and headers as extra conditions.
    ("h.test", "POST", "/form", None, Some("method-post")),
    (
        "h.test",
        "GET",
        "/form",
        Some(("x-version", "v2")),
        Some("header-v2"),
    ),
    (
        "h.test",
        "GET",
        "/form",
        Some(("x-version", "v9")),
        Some("plain-form"),
    ),
    ("h.test", "GET", "/form", None, Some("plain-form")),
    // A host's table without a matching path falls through to host-less routes.
    ("other.test", "GET", "/only", None, Some("fallback-host")),
    ("other.test", "GET", "/foo", None, Some("prefix-foo")),
    // Normalisation: a route cannot be bypassed (or reached) by encoding.
    ("h.test", "GET", "/x/../Case", None, Some("exact-case")),
    ("h.test", "GET", "/x/%2e%2E/Case", None, Some("exact-case")),
    ("h.test", "GET", "/%66oo/bar", None, Some("exact-foo-bar")),
    ("h.test", "GET", "/foo//bar", None, Some("exact-foo-bar")),
    // An encoded slash is refused by default (tests/edge.rs has the escaped-slashes policy).
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routing_matrix() {
    let up = echo("up");
    let weir = Weir::start(&table(up.port), &[]);
    let c = client();
    let mut failures = Vec::new();
    for (host, method, path, header, want) in MATRIX {
        let mut headers = vec![("host", *host)];
        if let Some(h) = header {
            headers.push(*h);
        }
        let r = send(&c, method, &weir.url(path), &headers, "").await;
        let got = if r.status == 404 {
            assert_eq!(r.json()["message"], "no Route matched with those values");
            None
        } else {
            assert_eq!(r.status, 200, "{host} {method} {path}: {r:?}");
            let forwarded = r.json()["path"].as_str().unwrap().to_string();
            Some(forwarded.split('/').nth(1).unwrap().to_string())
        };
        if got.as_deref() != *want {
            failures.push(format!(
                "{method} {host}{path} {header:?}: want {want:?}, got {got:?}"
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "routing mismatches:\n{}",
        failures.join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwarding_paths_hosts_and_headers() {
    let up = echo("up");
    let weir = Weir::start(&table(up.port), &[]);
    let c = client();

    // The normalised path is forwarded, after the service prefix.
    let r = get(&c, &weir.url("/foo/./a/../b?x=1&y"), &[("host", "h.test")])
        .await
        .json();
    assert_eq!(r["path"], "/prefix-foo/foo/b");
    assert_eq!(r["query"], "x=1&y");

    // strip_path removes the matched prefix; X-Forwarded-Prefix names it.
    let r = get(&c, &weir.url("/strip/a/b?q=1"), &[("host", "h.test")])
        .await
        .json();
    assert_eq!(r["path"], "/stripped/a/b");
    assert_eq!(r["query"], "q=1");
    assert_eq!(r["headers"]["x-forwarded-prefix"], "/strip");

    // Host: the target's unless preserve_host.
    let r = get(&c, &weir.url("/foo"), &[("host", "h.test")])
        .await
        .json();
    assert_eq!(r["host"], format!("127.0.0.1:{}", up.port));
    let r = get(&c, &weir.url("/keep"), &[("host", "Client.Example:81")])
        .await
        .json();
    assert_eq!(r["host"], "Client.Example:81");

    // host_header wins over preserve_host; rewrite replaces the path with capture groups.
    let r = get(&c, &weir.url("/hh/x"), &[("host", "h.test")])
        .await
        .json();
    assert_eq!(r["host"], "upstream.internal");
    let r = get(&c, &weir.url("/re/v3/users/9?all=1"), &[("host", "h.test")])
        .await
        .json();
    assert_eq!(r["path"], "/api/3/users/9");
    assert_eq!(r["query"], "all=1");

    // X-Forwarded-*: spoofed values from an untrusted client are replaced.
    let r = get(
        &c,
        &weir.url("/foo"),
        &[
            ("host", "h.test"),
            ("x-forwarded-for", "6.6.6.6"),
            ("x-forwarded-proto", "https"),
            ("x-real-ip", "6.6.6.6"),
        ],
    )
    .await
    .json();
    let h = &r["headers"];
    assert_eq!(h["x-forwarded-for"], "127.0.0.1");
    assert_eq!(h["x-forwarded-proto"], "http");
    assert_eq!(h["x-forwarded-host"], "h.test");
    assert_eq!(h["x-forwarded-port"], weir.proc.port.to_string());
    assert_eq!(h["x-real-ip"], "127.0.0.1");
    assert_eq!(h["via"], "1.1 weir");

    // Hop-by-hop headers do not cross the proxy, including those named in Connection.
    let r = get(
        &c,
        &weir.url("/foo"),
        &[
            ("host", "h.test"),
            ("connection", "x-private"),
            ("x-private", "1"),
            ("te", "trailers"),
            ("x-kept", "1"),
        ],
    )
    .await
    .json();
    let h = &r["headers"];
    assert!(h.get("x-private").is_none(), "{h}");
    assert!(h.get("te").is_none(), "{h}");
    assert_eq!(h["x-kept"], "1");

    // Responses carry Via and the latency headers.
    let r = get(&c, &weir.url("/foo"), &[("host", "h.test")]).await;
    assert_eq!(r.header("via"), Some("1.1 weir"));
    assert!(r.header("x-weir-proxy-latency").is_some());
    assert!(r.header("x-weir-upstream-latency").is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trusted_proxies_keep_forwarding_headers() {
    let up = echo("up");
    let weir = Weir::start(&table(up.port), &["--trusted-proxies", "127.0.0.0/8"]);
    let c = client();
    let r = get(
        &c,
        &weir.url("/foo"),
        &[
            ("host", "h.test"),
            ("x-forwarded-for", "203.0.113.7"),
            ("x-forwarded-proto", "https"),
        ],
    )
    .await
    .json();
    let h = &r["headers"];
    assert_eq!(h["x-forwarded-for"], "203.0.113.7, 127.0.0.1");
    assert_eq!(h["x-forwarded-proto"], "https");
    assert_eq!(h["x-real-ip"], "203.0.113.7");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_paths_get_400() {
    let up = echo("up");
    let weir = Weir::start(&table(up.port), &[]);
    let c = client();
    let r = get(&c, &weir.url("/foo%zz"), &[("host", "h.test")]).await;
    assert_eq!(r.status, 400);
    assert!(r.json()["message"]
        .as_str()
        .unwrap()
        .contains("percent-encoding"));
    // The proxy keeps serving.
    assert_eq!(
        get(&c, &weir.url("/foo"), &[("host", "h.test")])
            .await
            .status,
        200
    );
}
