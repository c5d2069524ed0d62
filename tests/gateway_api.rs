//! The Gateway API through the real `weir standalone`: Weir's own equivalents of the upstream
//! conformance suite's GATEWAY-HTTP cases (the same namespaces, Gateways, backends and
//! requests, written here), checked as the suite checks them: the status, which backend
//! answered, the request the backend saw, response headers and redirect targets; and the
//! status each object gets, read from the admin API's `/controller-status`.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::manifests::*;
use common::*;
use serde_json::Value;

/// The GatewayClass, the three namespaces and the three Gateways of the conformance base.
const BASE: &str = "\
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: weir}
spec: {controllerName: weir.dev/gateway-controller}
---
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: someone-else}
spec: {controllerName: example.com/other-controller}
---
apiVersion: v1
kind: Namespace
metadata: {name: gateway-conformance-infra, labels: {gateway-conformance: infra}}
---
apiVersion: v1
kind: Namespace
metadata: {name: gateway-conformance-web-backend, labels: {gateway-conformance: backend}}
---
apiVersion: v1
kind: Namespace
metadata: {name: gateway-conformance-app-backend, labels: {gateway-conformance: backend}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: same-namespace, namespace: gateway-conformance-infra}
spec:
  gatewayClassName: weir
  listeners:
  - {name: http, port: 80, protocol: HTTP, allowedRoutes: {namespaces: {from: Same}}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: all-namespaces, namespace: gateway-conformance-infra}
spec:
  gatewayClassName: weir
  listeners:
  - {name: http, port: 80, protocol: HTTP, allowedRoutes: {namespaces: {from: All}}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: backend-namespaces, namespace: gateway-conformance-infra}
spec:
  gatewayClassName: weir
  listeners:
  - name: http
    port: 80
    protocol: HTTP
    allowedRoutes:
      namespaces:
        from: Selector
        selector: {matchLabels: {gateway-conformance: backend}}
";

/// The backends: (namespace, Service name), each a `weir echo` named after its Service.
const BACKENDS: [(&str, &str); 5] = [
    ("gateway-conformance-infra", "infra-backend-v1"),
    ("gateway-conformance-infra", "infra-backend-v2"),
    ("gateway-conformance-infra", "infra-backend-v3"),
    ("gateway-conformance-web-backend", "web-backend"),
    ("gateway-conformance-app-backend", "app-backend-v1"),
];

/// A running conformance bed: echo backends, and `weir standalone` on the base plus the
/// case's manifests.
struct Bed {
    weir: Manifests,
    _echoes: Vec<Proc>,
    tls_port: Option<u16>,
}

/// A Service named `name` whose endpoint is 127.0.0.1:`port`: port 8080, 8081 with
/// `appProtocol: kubernetes.io/h2c` and 8082 with `kubernetes.io/ws`, as the suite's base has
/// them.
fn backend_service(namespace: &str, name: &str, port: u16) -> String {
    format!(
        "apiVersion: v1
kind: Service
metadata: {{name: {name}, namespace: {namespace}}}
spec:
  ports:
  - {{name: http, port: 8080, targetPort: 3000}}
  - {{name: h2c, port: 8081, targetPort: 3001, appProtocol: kubernetes.io/h2c}}
  - {{name: ws, port: 8082, targetPort: 3000, appProtocol: kubernetes.io/ws}}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: {name}-1
  namespace: {namespace}
  labels: {{kubernetes.io/service-name: {name}}}
addressType: IPv4
ports: [{{name: http, port: {port}}}, {{name: h2c, port: {port}}}, {{name: ws, port: {port}}}]
endpoints:
- addresses: [127.0.0.1]
  conditions: {{ready: true}}
"
    )
}

/// A case's manifests with each `${name}` replaced by the port of backend `name` (for
/// Services and EndpointSlices a case declares).
fn with_ports(case: &str, echoes: &[Proc]) -> String {
    let mut case = case.to_string();
    for ((_, name), e) in BACKENDS.iter().zip(echoes) {
        case = case.replace(&format!("${{{name}}}"), &e.port.to_string());
    }
    case
}

impl Bed {
    fn start(case: &str) -> Bed {
        Bed::start_with(case, &[])
    }

    fn start_with(case: &str, extra: &[&str]) -> Bed {
        let echoes: Vec<Proc> = BACKENDS.iter().map(|(_, name)| echo(name)).collect();
        let services: Vec<String> = BACKENDS
            .iter()
            .zip(&echoes)
            .map(|((ns, name), e)| backend_service(ns, name, e.port))
            .collect();
        let mut args: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        let tls_port = args.iter().any(|a| a == "--tls-listen").then(free_port);
        if let Some(p) = tls_port {
            let i = args.iter().position(|a| a == "--tls-listen").unwrap();
            args[i + 1] = format!("127.0.0.1:{p}");
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let weir = Manifests::start(
            &[
                ("01-base.yaml", BASE),
                ("02-backends.yaml", &docs(&services)),
                ("03-case.yaml", &with_ports(case, &echoes)),
            ],
            &args,
        );
        Bed {
            weir,
            _echoes: echoes,
            tls_port,
        }
    }

    /// Replaces the case's manifests, as a change in the cluster would.
    fn rewrite(&self, case: &str) {
        self.weir
            .write("03-case.yaml", &with_ports(case, &self._echoes));
    }

    /// The Gateway API status, once `ready` holds of it (bounded wait).
    async fn status_when(&self, c: &HttpClient, ready: impl Fn(&Value) -> bool) -> Value {
        let mut last;
        let ok = {
            let started = std::time::Instant::now();
            loop {
                last = get(c, &self.weir.admin_url("/controller-status"), &[])
                    .await
                    .json()["gatewayApi"]
                    .clone();
                if ready(&last) {
                    break true;
                }
                if started.elapsed() > Duration::from_secs(30) {
                    break false;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        };
        assert!(ok, "status never became ready: {last:#}");
        last
    }

    /// The status once the route `ns/name` has one, and its table is in service.
    async fn route_status(&self, c: &HttpClient, route: &str) -> Value {
        let s = self
            .status_when(c, |s| s["httpRoutes"].get(route).is_some())
            .await;
        // The status is published just before the table it describes is applied.
        wait_ready(c, &self.weir).await;
        s
    }

    async fn request(
        &self,
        c: &HttpClient,
        host: &str,
        path: &str,
        headers: &[(&str, &str)],
    ) -> Resp {
        let mut h = vec![("host", host)];
        h.extend_from_slice(headers);
        get(c, &self.weir.url(path), &h).await
    }
}

async fn wait_ready(c: &HttpClient, m: &Manifests) {
    wait_for_status(c, &m.admin_url("/readyz"), 200, Duration::from_secs(30)).await;
    // One more scan period, so a table applied after the status is in service.
    tokio::time::sleep(Duration::from_millis(300)).await;
}

/// The condition `type_` of a conditions list.
fn cond<'a>(conds: &'a Value, type_: &str) -> &'a Value {
    conds
        .as_array()
        .and_then(|a| a.iter().find(|c| c["type"] == type_))
        .unwrap_or_else(|| panic!("no {type_} in {conds:#}"))
}

/// (status, reason) of condition `type_`.
fn cond_of(conds: &Value, type_: &str) -> (String, String) {
    let c = cond(conds, type_);
    (
        c["status"].as_str().unwrap().to_string(),
        c["reason"].as_str().unwrap().to_string(),
    )
}

fn yes(reason: &str) -> (String, String) {
    ("True".into(), reason.into())
}

fn no(reason: &str) -> (String, String) {
    ("False".into(), reason.into())
}

/// The parent status of route `route` for the Gateway named `gateway`.
fn parent<'a>(s: &'a Value, route: &str, gateway: &str) -> &'a Value {
    s["httpRoutes"][route]["parents"]
        .as_array()
        .and_then(|a| a.iter().find(|p| p["parentRef"]["name"] == gateway))
        .unwrap_or_else(|| panic!("{route} has no parent {gateway}: {s:#}"))
}

/// Asserts that `route` is accepted by `gateway` with every reference resolved.
fn route_ok(s: &Value, route: &str, gateway: &str) {
    let p = parent(s, route, gateway);
    assert_eq!(
        cond_of(&p["conditions"], "Accepted"),
        yes("Accepted"),
        "{route}"
    );
    assert_eq!(
        cond_of(&p["conditions"], "ResolvedRefs"),
        yes("ResolvedRefs"),
        "{route}"
    );
}

/// Asserts which backend answered (and that it answered 200).
fn served_by(r: &Resp, backend: &str) {
    assert_eq!(r.status, 200, "{:?}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.echo_name().as_deref(), Some(backend), "{}", r.json());
}

/// Asserts that `backend` answered, or with `None` that no route did (404); `what` names the
/// request in the message.
fn served_or_404(r: &Resp, backend: Option<&str>, what: &str) {
    match backend {
        Some(b) => {
            assert_eq!(r.status, 200, "{what}");
            assert_eq!(r.echo_name().as_deref(), Some(b), "{what}");
        }
        None => assert_eq!(r.status, 404, "{what}: {:?}", r.echo_name()),
    }
}

const SIMPLE: &str = "\
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: gateway-conformance-infra-test, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules:
  - backendRefs: [{name: infra-backend-v1, port: 8080}]
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn simple_same_namespace_route_is_served_and_reported() {
    let bed = Bed::start(SIMPLE);
    let c = client();
    let s = bed
        .route_status(
            &c,
            "gateway-conformance-infra/gateway-conformance-infra-test",
        )
        .await;
    let p = parent(
        &s,
        "gateway-conformance-infra/gateway-conformance-infra-test",
        "same-namespace",
    );
    assert_eq!(cond_of(&p["conditions"], "Accepted"), yes("Accepted"));
    assert_eq!(
        cond_of(&p["conditions"], "ResolvedRefs"),
        yes("ResolvedRefs")
    );
    assert_eq!(p["controllerName"], "weir.dev/gateway-controller");

    // The GatewayClass of another controller is not reported; Weir's is accepted.
    assert!(s["gatewayClasses"].get("someone-else").is_none());
    let class = &s["gatewayClasses"]["weir"];
    assert_eq!(cond_of(&class["conditions"], "Accepted"), yes("Accepted"));
    assert_eq!(
        cond_of(&class["conditions"], "SupportedVersion"),
        yes("SupportedVersion")
    );
    assert!(class["supportedFeatures"]
        .as_array()
        .unwrap()
        .contains(&"HTTPRoute".into()));

    let gw = &s["gateways"]["gateway-conformance-infra/same-namespace"];
    assert_eq!(cond_of(&gw["conditions"], "Accepted"), yes("Accepted"));
    assert_eq!(cond_of(&gw["conditions"], "Programmed"), yes("Programmed"));
    let l = &gw["listeners"][0];
    assert_eq!(l["name"], "http");
    assert_eq!(l["attachedRoutes"], 1);
    for (t, want) in [
        ("Accepted", yes("Accepted")),
        ("Programmed", yes("Programmed")),
        ("ResolvedRefs", yes("ResolvedRefs")),
        ("Conflicted", no("NoConflicts")),
    ] {
        assert_eq!(cond_of(&l["conditions"], t), want, "{t}");
    }
    let kinds: Vec<&str> = l["supportedKinds"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["HTTPRoute", "GRPCRoute"]);
    // The other Gateways have no routes.
    assert_eq!(
        s["gateways"]["gateway-conformance-infra/all-namespaces"]["listeners"][0]["attachedRoutes"],
        0
    );

    let r = bed.request(&c, "example.org", "/", &[]).await;
    served_by(&r, "infra-backend-v1");
    // The backend sees the client's Host and path.
    let seen = r.json();
    assert_eq!(seen["host"], "example.org");
    assert_eq!(seen["path"], "/");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paths_headers_queries_and_methods_match_with_the_specs_precedence() {
    let case = "\
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: matching, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules:
  - matches: [{path: {type: Exact, value: /match}}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches: [{path: {type: Exact, value: /match/exact}}]
    backendRefs: [{name: infra-backend-v2, port: 8080}]
  - matches: [{path: {type: PathPrefix, value: /match/}}]
    backendRefs: [{name: infra-backend-v3, port: 8080}]
  - matches: [{path: {type: PathPrefix, value: /match/prefix/one}}]
    backendRefs: [{name: infra-backend-v2, port: 8080}]
  - matches:
    - path: {type: PathPrefix, value: /hdr}
      headers: [{name: version, value: one}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches:
    - path: {type: PathPrefix, value: /hdr}
      headers: [{name: version, value: two}, {name: color, value: orange}]
    backendRefs: [{name: infra-backend-v2, port: 8080}]
  - matches:
    - path: {type: PathPrefix, value: /hdr}
      headers: [{name: version, value: two}]
    backendRefs: [{name: infra-backend-v3, port: 8080}]
  - matches:
    - path: {type: PathPrefix, value: /q}
      queryParams: [{name: animal, value: whale}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches:
    - path: {type: PathPrefix, value: /q}
      queryParams: [{type: RegularExpression, name: color, value: 'bl(ue|ack)'}]
    backendRefs: [{name: infra-backend-v2, port: 8080}]
  - matches:
    - {path: {type: PathPrefix, value: /m}, method: POST}
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches:
    - {path: {type: PathPrefix, value: /m}, headers: [{name: x, value: y}]}
    backendRefs: [{name: infra-backend-v2, port: 8080}]
  - matches:
    - path: {type: RegularExpression, value: '/re/[0-9]+'}
    backendRefs: [{name: infra-backend-v3, port: 8080}]
";
    let bed = Bed::start(case);
    let c = client();
    bed.route_status(&c, "gateway-conformance-infra/matching")
        .await;
    // (path, headers, the backend that serves it or none)
    type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], Option<&'a str>);
    let cases: &[Case] = &[
        ("/match", &[], Some("infra-backend-v1")),
        ("/match/exact", &[], Some("infra-backend-v2")),
        ("/match/exact/one", &[], Some("infra-backend-v3")),
        ("/match/prefix/one/x", &[], Some("infra-backend-v2")),
        ("/match/prefix", &[], Some("infra-backend-v3")),
        ("/matchx", &[], None),
        ("/hdr", &[("version", "one")], Some("infra-backend-v1")),
        ("/hdr", &[("Version", "two")], Some("infra-backend-v3")),
        (
            "/hdr",
            &[("version", "two"), ("color", "orange")],
            Some("infra-backend-v2"),
        ),
        // Values are case-sensitive.
        ("/hdr", &[("version", "ONE")], None),
        ("/hdr", &[], None),
        ("/q?animal=whale", &[], Some("infra-backend-v1")),
        (
            "/q?color=black&animal=dolphin",
            &[],
            Some("infra-backend-v2"),
        ),
        ("/q?color=blue2", &[], None),
        ("/q?animal=Whale", &[], None),
        ("/re/123", &[], Some("infra-backend-v3")),
        ("/re/12a", &[], None),
    ];
    for (path, headers, want) in cases {
        let r = bed.request(&c, "example.org", path, headers).await;
        served_or_404(&r, *want, &format!("{path} {headers:?}"));
    }
    // A method match outranks a header match.
    let r = send(
        &c,
        "POST",
        &bed.weir.url("/m"),
        &[("host", "example.org"), ("x", "y")],
        "",
    )
    .await;
    assert_eq!(r.echo_name().as_deref(), Some("infra-backend-v1"));
    let r = bed.request(&c, "example.org", "/m", &[("x", "y")]).await;
    assert_eq!(r.echo_name().as_deref(), Some("infra-backend-v2"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listener_and_route_host_names_intersect() {
    let route = |name: &str, gateway: &str, hosts: &str, path: &str, backend: &str| {
        format!(
            "---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: {name}, namespace: gateway-conformance-infra}}
spec:
  parentRefs: [{{name: {gateway}, namespace: gateway-conformance-infra}}]
  hostnames: [{hosts}]
  rules:
  - matches: [{{path: {{type: PathPrefix, value: {path}}}}}]
    backendRefs: [{{name: {backend}, port: 8080}}]
"
        )
    };
    let gw = "httproute-hostname-intersection";
    let all = "httproute-hostname-intersection-all";
    let mut case = format!(
        "\
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: {gw}, namespace: gateway-conformance-infra}}
spec:
  gatewayClassName: weir
  listeners:
  - {{name: listener-1, port: 80, protocol: HTTP, hostname: very.specific.com, allowedRoutes: {{namespaces: {{from: Same}}}}}}
  - {{name: listener-2, port: 80, protocol: HTTP, hostname: '*.wildcard.io', allowedRoutes: {{namespaces: {{from: Same}}}}}}
  - {{name: listener-3, port: 80, protocol: HTTP, hostname: '*.anotherwildcard.io', allowedRoutes: {{namespaces: {{from: Same}}}}}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: {all}, namespace: gateway-conformance-infra}}
spec:
  gatewayClassName: weir
  listeners:
  - {{name: listener-1, port: 80, protocol: HTTP, allowedRoutes: {{namespaces: {{from: Same}}}}}}
"
    );
    let routes = [
        (
            "specific-host-matches-listener-specific-host",
            "non.matching.com, '*.nonmatchingwildcard.io', very.specific.com",
            "/s1",
            "infra-backend-v1",
        ),
        (
            "specific-host-matches-listener-wildcard-host",
            "non.matching.com, wildcard.io, foo.wildcard.io, bar.wildcard.io, foo.bar.wildcard.io",
            "/s2",
            "infra-backend-v2",
        ),
        (
            "wildcard-host-matches-listener-specific-host",
            "non.matching.com, '*.specific.com'",
            "/s3",
            "infra-backend-v3",
        ),
        (
            "wildcard-host-matches-listener-wildcard-host",
            "'*.anotherwildcard.io'",
            "/s4",
            "infra-backend-v1",
        ),
        (
            "no-intersecting-hosts",
            "specific.but.wrong.com, wildcard.io",
            "/s5",
            "infra-backend-v2",
        ),
    ];
    for (name, hosts, path, backend) in routes {
        case += &route(name, gw, hosts, path, backend);
    }
    case += &route(
        all,
        all,
        "first.com, sub.first.com, second.com, sub.second.com",
        "/",
        "infra-backend-v2",
    );
    let bed = Bed::start(&case);
    let c = client();
    let key = |r: &str| format!("gateway-conformance-infra/{r}");
    let s = bed.route_status(&c, &key(all)).await;
    route_ok(&s, &key(all), all);
    for (name, ..) in &routes[..4] {
        route_ok(&s, &key(name), gw);
    }
    let refused = key("no-intersecting-hosts");
    assert_eq!(
        s["httpRoutes"][&refused]["parents"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    let p = parent(&s, &refused, gw);
    assert_eq!(
        cond_of(&p["conditions"], "Accepted"),
        no("NoMatchingListenerHostname")
    );
    for (listener, attached) in [("listener-1", 2), ("listener-2", 1), ("listener-3", 1)] {
        let l = listener_of(&s, &key(gw), 3, listener);
        assert!(kinds_of(l).contains(&"HTTPRoute"));
        for type_ in ["Accepted", "ResolvedRefs"] {
            assert_eq!(cond_of(&l["conditions"], type_).0, "True", "{l:#}");
        }
        assert_eq!(l["attachedRoutes"], attached, "{listener}: {l:#}");
    }
    let cases = [
        ("very.specific.com", "/s1", Some("infra-backend-v1")),
        ("very.specific.com:1234", "/s1", Some("infra-backend-v1")),
        ("non.matching.com", "/s1", None),
        ("foo.nonmatchingwildcard.io", "/s1", None),
        ("foo.wildcard.io", "/s1", None),
        ("very.specific.com", "/non-matching-prefix", None),
        ("foo.wildcard.io", "/s2", Some("infra-backend-v2")),
        ("bar.wildcard.io", "/s2", Some("infra-backend-v2")),
        ("foo.bar.wildcard.io", "/s2", Some("infra-backend-v2")),
        ("wildcard.io", "/s2", None),
        ("non.matching.com", "/s2", None),
        ("very.specific.com", "/s2", None),
        ("foo.wildcard.io", "/non-matching-prefix", None),
        ("very.specific.com", "/s3", Some("infra-backend-v3")),
        ("non.matching.com", "/s3", None),
        ("foo.specific.com", "/s3", None),
        ("foo.wildcard.io", "/s3", None),
        ("foo.anotherwildcard.io", "/s4", Some("infra-backend-v1")),
        ("bar.anotherwildcard.io", "/s4", Some("infra-backend-v1")),
        (
            "foo.bar.anotherwildcard.io",
            "/s4",
            Some("infra-backend-v1"),
        ),
        ("anotherwildcard.io", "/s4", None),
        ("foo.wildcard.io", "/s4", None),
        ("very.specific.com", "/s4", None),
        ("foo.anotherwildcard.io", "/non-matching-prefix", None),
        ("specific.but.wrong.com", "/s5", None),
        ("wildcard.io", "/s5", None),
        ("first.com", "/", Some("infra-backend-v2")),
        ("sub.first.com", "/", Some("infra-backend-v2")),
        ("second.com", "/", Some("infra-backend-v2")),
        ("sub.second.com", "/", Some("infra-backend-v2")),
        ("third.com", "/", None),
        ("sub.third.com", "/", None),
    ];
    for (host, path, want) in cases {
        let r = bed.request(&c, host, path, &[]).await;
        served_or_404(&r, want, &format!("{host}{path}"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn header_modifiers_edit_what_the_backend_and_the_client_see() {
    let case = "\
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: request-header-modifier, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /set}}]
    filters:
    - type: RequestHeaderModifier
      requestHeaderModifier: {set: [{name: X-Header-Set, value: set-overwrites-values}]}
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches: [{path: {type: PathPrefix, value: /add}}]
    filters:
    - type: RequestHeaderModifier
      requestHeaderModifier: {add: [{name: X-Header-Add, value: add-appends-values}]}
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches: [{path: {type: PathPrefix, value: /remove}}]
    filters:
    - type: RequestHeaderModifier
      requestHeaderModifier: {remove: [X-Header-Remove]}
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches: [{path: {type: PathPrefix, value: /response}}]
    filters:
    - type: ResponseHeaderModifier
      responseHeaderModifier:
        set: [{name: X-Header-Set, value: set-overwrites-values}]
        add: [{name: X-Header-Add, value: add-appends-values}]
        remove: [X-Echo-Connection]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
";
    let bed = Bed::start(case);
    let c = client();
    bed.route_status(&c, "gateway-conformance-infra/request-header-modifier")
        .await;
    let seen = |r: &Resp, name: &str| -> Value { r.json()["headers"][name].clone() };
    let r = bed
        .request(
            &c,
            "example.org",
            "/set",
            &[("X-Header-Set", "some-other-value")],
        )
        .await;
    assert_eq!(seen(&r, "x-header-set"), "set-overwrites-values");
    let r = bed.request(&c, "example.org", "/set", &[]).await;
    assert_eq!(seen(&r, "x-header-set"), "set-overwrites-values");
    let r = bed
        .request(
            &c,
            "example.org",
            "/add",
            &[("X-Header-Add", "some-other-value")],
        )
        .await;
    assert_eq!(
        seen(&r, "x-header-add"),
        serde_json::json!(["some-other-value", "add-appends-values"])
    );
    let r = bed.request(&c, "example.org", "/add", &[]).await;
    assert_eq!(seen(&r, "x-header-add"), "add-appends-values");
    let r = bed
        .request(
            &c,
            "example.org",
            "/remove",
            &[("X-Header-Remove", "val"), ("X-Keep", "k")],
        )
        .await;
    assert_eq!(seen(&r, "x-header-remove"), Value::Null);
    assert_eq!(seen(&r, "x-keep"), "k");

    let r = bed.request(&c, "example.org", "/response", &[]).await;
    served_by(&r, "infra-backend-v1");
    assert_eq!(r.header("x-header-set"), Some("set-overwrites-values"));
    assert_eq!(r.header("x-header-add"), Some("add-appends-values"));
    assert_eq!(r.header("x-echo-connection"), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redirects_are_answered_by_the_gateway() {
    let case = "\
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: redirect, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /hostname-redirect}}]
    filters:
    - {type: RequestRedirect, requestRedirect: {hostname: example.org}}
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches: [{path: {type: PathPrefix, value: /host-and-status}}]
    filters:
    - {type: RequestRedirect, requestRedirect: {hostname: example.org, statusCode: 301}}
  - matches: [{path: {type: PathPrefix, value: /s303}}]
    filters:
    - {type: RequestRedirect, requestRedirect: {statusCode: 303}}
  - matches: [{path: {type: PathPrefix, value: /scheme}}]
    filters:
    - {type: RequestRedirect, requestRedirect: {scheme: https}}
  - matches: [{path: {type: PathPrefix, value: /port}}]
    filters:
    - {type: RequestRedirect, requestRedirect: {port: 8083}}
  - matches: [{path: {type: PathPrefix, value: /full}}]
    filters:
    - type: RequestRedirect
      requestRedirect: {path: {type: ReplaceFullPath, replaceFullPath: /full-path-replacement}}
  - matches: [{path: {type: PathPrefix, value: /prefix/one}}]
    filters:
    - type: RequestRedirect
      requestRedirect: {path: {type: ReplacePrefixMatch, replacePrefixMatch: /two}}
";
    let bed = Bed::start(case);
    let c = client();
    let s = bed
        .route_status(&c, "gateway-conformance-infra/redirect")
        .await;
    route_ok(&s, "gateway-conformance-infra/redirect", "same-namespace");
    let cases = [
        (
            "/hostname-redirect",
            302,
            "http://example.org/hostname-redirect",
        ),
        (
            "/host-and-status",
            301,
            "http://example.org/host-and-status",
        ),
        ("/s303/x", 303, "http://redirect.example/s303/x"),
        ("/scheme?a=1", 302, "https://redirect.example/scheme?a=1"),
        ("/port", 302, "http://redirect.example:8083/port"),
        (
            "/full/x?q=1",
            302,
            "http://redirect.example/full-path-replacement?q=1",
        ),
        (
            "/prefix/one/three",
            302,
            "http://redirect.example/two/three",
        ),
        ("/prefix/one", 302, "http://redirect.example/two"),
    ];
    for (path, status, location) in cases {
        let r = bed.request(&c, "redirect.example", path, &[]).await;
        assert_eq!(r.status, status, "{path}");
        assert_eq!(r.header("location"), Some(location), "{path}");
        assert_eq!(r.echo_name(), None, "{path}: answered by the gateway");
    }
}

/// HTTPRouteRedirectPath, HTTPRouteRedirectPort and HTTPRouteRedirectScheme: each part
/// alone and with a host name or a status, the rest of the URL kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redirects_replace_path_port_and_scheme_as_upstream_asks() {
    let case = "\
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: redirect-path, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /original-prefix}}]
    filters: [{type: RequestRedirect, requestRedirect: {path: {type: ReplacePrefixMatch, replacePrefixMatch: /replacement-prefix}}}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches: [{path: {type: PathPrefix, value: /full}}]
    filters: [{type: RequestRedirect, requestRedirect: {path: {type: ReplaceFullPath, replaceFullPath: /full-path-replacement}}}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches: [{path: {type: PathPrefix, value: /path-and-host}}]
    filters: [{type: RequestRedirect, requestRedirect: {hostname: example.org, path: {type: ReplacePrefixMatch, replacePrefixMatch: /replacement-prefix}}}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches: [{path: {type: PathPrefix, value: /path-and-status}}]
    filters: [{type: RequestRedirect, requestRedirect: {path: {type: ReplacePrefixMatch, replacePrefixMatch: /replacement-prefix}, statusCode: 301}}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches: [{path: {type: PathPrefix, value: /full-path-and-host}}]
    filters: [{type: RequestRedirect, requestRedirect: {hostname: example.org, path: {type: ReplaceFullPath, replaceFullPath: /replacement-full}}}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches: [{path: {type: PathPrefix, value: /full-path-and-status}}]
    filters: [{type: RequestRedirect, requestRedirect: {path: {type: ReplaceFullPath, replaceFullPath: /replacement-full}, statusCode: 301}}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: redirect-port, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /port}}]
    filters: [{type: RequestRedirect, requestRedirect: {port: 8083}}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches: [{path: {type: PathPrefix, value: /port-and-host}}]
    filters: [{type: RequestRedirect, requestRedirect: {hostname: example.org, port: 8083}}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches: [{path: {type: PathPrefix, value: /port-and-status}}]
    filters: [{type: RequestRedirect, requestRedirect: {port: 8083, statusCode: 301}}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches: [{path: {type: PathPrefix, value: /port-and-host-and-status}}]
    filters: [{type: RequestRedirect, requestRedirect: {port: 8083, hostname: example.org, statusCode: 302}}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: redirect-scheme, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /scheme}}]
    filters: [{type: RequestRedirect, requestRedirect: {scheme: https}}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches: [{path: {type: PathPrefix, value: /scheme-and-host}}]
    filters: [{type: RequestRedirect, requestRedirect: {hostname: example.org, scheme: https}}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches: [{path: {type: PathPrefix, value: /scheme-and-status}}]
    filters: [{type: RequestRedirect, requestRedirect: {scheme: https, statusCode: 301}}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches: [{path: {type: PathPrefix, value: /scheme-and-host-and-status}}]
    filters: [{type: RequestRedirect, requestRedirect: {scheme: https, statusCode: 302, hostname: example.org}}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
---
";
    let bed = Bed::start(case);
    let c = client();
    let s = bed
        .route_status(&c, "gateway-conformance-infra/redirect-scheme")
        .await;
    for route in ["redirect-path", "redirect-port", "redirect-scheme"] {
        let route = format!("gateway-conformance-infra/{route}");
        route_ok(&s, &route, "same-namespace");
    }
    let h = "http://redirect.example";
    let cases = [
        (
            "/original-prefix/lemon",
            302,
            format!("{h}/replacement-prefix/lemon"),
        ),
        (
            "/full/path/original",
            302,
            format!("{h}/full-path-replacement"),
        ),
        (
            "/path-and-host",
            302,
            "http://example.org/replacement-prefix".into(),
        ),
        ("/path-and-status", 301, format!("{h}/replacement-prefix")),
        (
            "/full-path-and-host",
            302,
            "http://example.org/replacement-full".into(),
        ),
        (
            "/full-path-and-status",
            301,
            format!("{h}/replacement-full"),
        ),
        ("/port", 302, format!("{h}:8083/port")),
        (
            "/port-and-host",
            302,
            "http://example.org:8083/port-and-host".into(),
        ),
        ("/port-and-status", 301, format!("{h}:8083/port-and-status")),
        (
            "/port-and-host-and-status",
            302,
            "http://example.org:8083/port-and-host-and-status".into(),
        ),
        ("/scheme", 302, "https://redirect.example/scheme".into()),
        (
            "/scheme-and-host",
            302,
            "https://example.org/scheme-and-host".into(),
        ),
        (
            "/scheme-and-status",
            301,
            "https://redirect.example/scheme-and-status".into(),
        ),
        (
            "/scheme-and-host-and-status",
            302,
            "https://example.org/scheme-and-host-and-status".into(),
        ),
    ];
    for (path, status, location) in cases {
        let r = bed.request(&c, "redirect.example", path, &[]).await;
        assert_eq!(r.status, status, "{path}");
        assert_eq!(r.header("location"), Some(location.as_str()), "{path}");
        assert_eq!(r.echo_name(), None, "{path}: answered by the gateway");
    }
}

/// HTTPRoute303Redirect, HTTPRoute307Redirect and HTTPRoute308Redirect: the status asked for,
/// the request's own path kept (a `POST` answered 303, as a form's "see other" is).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redirects_answer_303_307_and_308_as_asked() {
    let case = "\
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: redirect-codes, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /see-other}}]
    filters: [{type: RequestRedirect, requestRedirect: {statusCode: 303}}]
  - matches: [{path: {type: PathPrefix, value: /temporary}}]
    filters: [{type: RequestRedirect, requestRedirect: {statusCode: 307}}]
  - matches: [{path: {type: PathPrefix, value: /permanent}}]
    filters: [{type: RequestRedirect, requestRedirect: {statusCode: 308}}]
";
    let bed = Bed::start(case);
    let c = client();
    let route = "gateway-conformance-infra/redirect-codes";
    let s = bed.route_status(&c, route).await;
    route_ok(&s, route, "same-namespace");
    for (method, path, status) in [
        ("POST", "/see-other", 303),
        ("GET", "/temporary", 307),
        ("GET", "/permanent", 308),
    ] {
        let url = bed.weir.url(path);
        let r = send(&c, method, &url, &[("host", "codes.example")], "").await;
        assert_eq!(r.status, status, "{method} {path}");
        let want = format!("http://codes.example{path}");
        assert_eq!(r.header("location"), Some(want.as_str()), "{path}");
        assert_eq!(r.echo_name(), None, "{path}: answered by the gateway");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn url_rewrites_change_what_the_backend_sees() {
    let case = "\
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: rewrite, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /prefix/one}}]
    filters:
    - {type: URLRewrite, urlRewrite: {path: {type: ReplacePrefixMatch, replacePrefixMatch: /one}}}
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches: [{path: {type: PathPrefix, value: /strip-prefix}}]
    filters:
    - {type: URLRewrite, urlRewrite: {path: {type: ReplacePrefixMatch, replacePrefixMatch: /}}}
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches: [{path: {type: PathPrefix, value: /full/one}}]
    filters:
    - {type: URLRewrite, urlRewrite: {path: {type: ReplaceFullPath, replaceFullPath: /one}}}
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches: [{path: {type: PathPrefix, value: /host}}]
    filters:
    - {type: URLRewrite, urlRewrite: {hostname: one.example.org}}
    backendRefs: [{name: infra-backend-v2, port: 8080}]
";
    let bed = Bed::start(case);
    let c = client();
    bed.route_status(&c, "gateway-conformance-infra/rewrite")
        .await;
    let cases = [
        ("/prefix/one/two", "/one/two", "rewrite.example"),
        ("/prefix/one", "/one", "rewrite.example"),
        ("/strip-prefix/three", "/three", "rewrite.example"),
        ("/strip-prefix", "/", "rewrite.example"),
        ("/full/one/two", "/one", "rewrite.example"),
        ("/host/x", "/host/x", "one.example.org"),
    ];
    for (path, want_path, want_host) in cases {
        let r = bed.request(&c, "rewrite.example", path, &[]).await;
        assert_eq!(r.status, 200, "{path}");
        let seen = r.json();
        assert_eq!(seen["path"], want_path, "{path}");
        assert_eq!(seen["host"], want_host, "{path}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backend_weights_split_requests_and_unusable_backends_answer_500() {
    let case = "\
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: weighted-backends, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /weights}}]
    backendRefs:
    - {name: infra-backend-v1, port: 8080, weight: 70}
    - {name: infra-backend-v2, port: 8080, weight: 30}
    - {name: infra-backend-v3, port: 8080, weight: 0}
  - matches: [{path: {type: PathPrefix, value: /half-missing}}]
    backendRefs:
    - {name: infra-backend-v1, port: 8080}
    - {name: does-not-exist, port: 8080}
  - matches: [{path: {type: PathPrefix, value: /missing}}]
    backendRefs: [{name: does-not-exist, port: 8080}]
  - matches: [{path: {type: PathPrefix, value: /unknown-kind}}]
    backendRefs: [{group: unknown.example.com, kind: Unknown, name: x}]
  - matches: [{path: {type: PathPrefix, value: /omitted}}]
";
    let bed = Bed::start(case);
    let c = client();
    let s = bed
        .route_status(&c, "gateway-conformance-infra/weighted-backends")
        .await;
    let p = parent(
        &s,
        "gateway-conformance-infra/weighted-backends",
        "same-namespace",
    );
    assert_eq!(cond_of(&p["conditions"], "Accepted"), yes("Accepted"));
    assert_eq!(
        cond_of(&p["conditions"], "ResolvedRefs"),
        no("BackendNotFound")
    );

    let mut counts: BTreeMap<String, u32> = BTreeMap::new();
    for _ in 0..500 {
        let r = bed.request(&c, "example.org", "/weights", &[]).await;
        assert_eq!(r.status, 200);
        *counts.entry(r.echo_name().unwrap()).or_default() += 1;
    }
    // The suite's tolerance is 5% of each share; Weir's spread is exact over a cycle.
    let v1 = counts.get("infra-backend-v1").copied().unwrap_or(0);
    let v2 = counts.get("infra-backend-v2").copied().unwrap_or(0);
    assert!((325..=375).contains(&v1), "{counts:?}");
    assert!((125..=175).contains(&v2), "{counts:?}");
    assert!(!counts.contains_key("infra-backend-v3"), "{counts:?}");

    let mut codes: BTreeMap<u16, u32> = BTreeMap::new();
    for _ in 0..100 {
        let r = bed.request(&c, "example.org", "/half-missing", &[]).await;
        *codes.entry(r.status).or_default() += 1;
    }
    assert_eq!(codes.len(), 2, "{codes:?}");
    assert!((40..=60).contains(&codes[&500]), "{codes:?}");
    for path in ["/missing", "/unknown-kind", "/omitted"] {
        let r = bed.request(&c, "example.org", path, &[]).await;
        assert_eq!(r.status, 500, "{path}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespaces_reference_grants_and_parent_refs_decide_attachment() {
    let case = "\
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: cross-namespace, namespace: gateway-conformance-web-backend}
spec:
  parentRefs: [{name: backend-namespaces, namespace: gateway-conformance-infra}]
  hostnames: [web.example]
  rules:
  - backendRefs: [{name: web-backend, port: 8080}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: infra-not-selected, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: backend-namespaces}]
  hostnames: [infra-not-selected.example]
  rules:
  - backendRefs: [{name: infra-backend-v1, port: 8080}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: by-namespace-name, namespace: gateway-conformance-infra}
spec:
  gatewayClassName: weir
  listeners:
  - name: http
    port: 80
    protocol: HTTP
    hostname: by-name.example
    allowedRoutes:
      namespaces:
        from: Selector
        selector: {matchLabels: {kubernetes.io/metadata.name: gateway-conformance-app-backend}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: by-name, namespace: gateway-conformance-app-backend}
spec:
  parentRefs: [{name: by-namespace-name, namespace: gateway-conformance-infra}]
  rules:
  - backendRefs: [{name: app-backend-v1, port: 8080}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: from-app, namespace: gateway-conformance-app-backend}
spec:
  parentRefs: [{name: backend-namespaces, namespace: gateway-conformance-infra}]
  hostnames: [app.example]
  rules:
  - backendRefs: [{name: app-backend-v1, port: 8080}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: not-same, namespace: gateway-conformance-web-backend}
spec:
  parentRefs: [{name: same-namespace, namespace: gateway-conformance-infra}]
  hostnames: [not-same.example]
  rules:
  - backendRefs: [{name: web-backend, port: 8080}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: wrong-section, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace, sectionName: nope}]
  hostnames: [wrong-section.example]
  rules:
  - backendRefs: [{name: infra-backend-v1, port: 8080}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: granted, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace, sectionName: http, port: 80}]
  hostnames: [granted.example]
  rules:
  - matches: [{path: {type: PathPrefix, value: /ok}}]
    backendRefs: [{name: app-backend-v1, namespace: gateway-conformance-app-backend, port: 8080}]
  - matches: [{path: {type: PathPrefix, value: /not-granted}}]
    backendRefs: [{name: web-backend, namespace: gateway-conformance-web-backend, port: 8080}]
---
apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata: {name: infra-to-app, namespace: gateway-conformance-app-backend}
spec:
  from: [{group: gateway.networking.k8s.io, kind: HTTPRoute, namespace: gateway-conformance-infra}]
  to: [{group: '', kind: Service, name: app-backend-v1}]
";
    let bed = Bed::start(case);
    let c = client();
    let s = bed
        .route_status(&c, "gateway-conformance-infra/granted")
        .await;
    let accepted =
        |route: &str, gw: &str| cond_of(&parent(&s, route, gw)["conditions"], "Accepted");
    // HTTPRouteCrossNamespace: the web-backend namespace is labelled for backend-namespaces'
    // selector; the infra namespace is not.
    let cross = parent(
        &s,
        "gateway-conformance-web-backend/cross-namespace",
        "backend-namespaces",
    );
    assert_eq!(cond_of(&cross["conditions"], "Accepted"), yes("Accepted"));
    assert_eq!(
        cond_of(&cross["conditions"], "ResolvedRefs"),
        yes("ResolvedRefs")
    );
    served_by(
        &bed.request(&c, "web.example", "/", &[]).await,
        "web-backend",
    );
    assert_eq!(
        accepted(
            "gateway-conformance-infra/infra-not-selected",
            "backend-namespaces"
        ),
        no("NotAllowedByListeners")
    );
    // Namespaces selected by name: the label the API server sets, present in standalone too.
    assert_eq!(
        accepted(
            "gateway-conformance-app-backend/by-name",
            "by-namespace-name"
        ),
        yes("Accepted")
    );
    served_by(
        &bed.request(&c, "by-name.example", "/", &[]).await,
        "app-backend-v1",
    );
    assert_eq!(
        accepted(
            "gateway-conformance-app-backend/from-app",
            "backend-namespaces"
        ),
        yes("Accepted")
    );
    assert_eq!(
        accepted("gateway-conformance-web-backend/not-same", "same-namespace"),
        no("NotAllowedByListeners")
    );
    assert_eq!(
        accepted("gateway-conformance-infra/wrong-section", "same-namespace"),
        no("NoMatchingParent")
    );
    let granted = parent(&s, "gateway-conformance-infra/granted", "same-namespace");
    assert_eq!(cond_of(&granted["conditions"], "Accepted"), yes("Accepted"));
    assert_eq!(
        cond_of(&granted["conditions"], "ResolvedRefs"),
        no("RefNotPermitted")
    );

    served_by(
        &bed.request(&c, "app.example", "/", &[]).await,
        "app-backend-v1",
    );
    assert_eq!(
        bed.request(&c, "not-same.example", "/", &[]).await.status,
        404
    );
    assert_eq!(
        bed.request(&c, "wrong-section.example", "/", &[])
            .await
            .status,
        404
    );
    served_by(
        &bed.request(&c, "granted.example", "/ok", &[]).await,
        "app-backend-v1",
    );
    assert_eq!(
        bed.request(&c, "granted.example", "/not-granted", &[])
            .await
            .status,
        500
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listeners_on_ports_weir_does_not_serve_say_so() {
    let case = "\
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: odd-ports, namespace: gateway-conformance-infra}
spec:
  gatewayClassName: weir
  listeners:
  - {name: http, port: 80, protocol: HTTP, hostname: served.example}
  - {name: other, port: 8081, protocol: HTTP, hostname: unserved.example}
  - {name: tcp, port: 9000, protocol: TCP}
  - {name: dup-a, port: 80, protocol: HTTP, hostname: dup.example}
  - {name: dup-b, port: 80, protocol: HTTP, hostname: dup.example}
  - name: bad-kinds
    port: 80
    protocol: HTTP
    hostname: kinds.example
    allowedRoutes: {kinds: [{kind: HTTPRoute}, {kind: FooRoute}]}
  - name: no-kinds
    port: 80
    protocol: HTTP
    hostname: nokinds.example
    allowedRoutes: {kinds: [{group: example.com, kind: FooRoute}]}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: on-8081, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: odd-ports, sectionName: other}]
  rules:
  - backendRefs: [{name: infra-backend-v1, port: 8080}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: not-ours, namespace: gateway-conformance-infra}
spec:
  gatewayClassName: someone-else
  listeners:
  - {name: http, port: 80, protocol: HTTP}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: on-not-ours, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: not-ours}]
  rules:
  - backendRefs: [{name: infra-backend-v1, port: 8080}]
";
    let bed = Bed::start_with(case, &["--gateway-http-port", "80"]);
    let c = client();
    let s = bed
        .route_status(&c, "gateway-conformance-infra/on-8081")
        .await;
    assert!(s["gateways"]
        .get("gateway-conformance-infra/not-ours")
        .is_none());
    assert!(s["httpRoutes"]
        .get("gateway-conformance-infra/on-not-ours")
        .is_none());
    let gw = &s["gateways"]["gateway-conformance-infra/odd-ports"];
    assert_eq!(
        cond_of(&gw["conditions"], "Accepted"),
        yes("ListenersNotValid")
    );
    let listener = |name: &str| {
        gw["listeners"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["name"] == name)
            .unwrap()
            .clone()
    };
    assert_eq!(
        cond_of(&listener("http")["conditions"], "Programmed"),
        yes("Programmed")
    );
    assert_eq!(
        cond_of(&listener("other")["conditions"], "Accepted"),
        no("PortUnavailable")
    );
    assert_eq!(
        cond_of(&listener("tcp")["conditions"], "Accepted"),
        no("UnsupportedProtocol")
    );
    assert_eq!(
        cond_of(&listener("dup-a")["conditions"], "Conflicted"),
        yes("HostnameConflict")
    );
    // Route kinds Weir does not serve: named, and left out of supportedKinds.
    for (name, kinds) in [("bad-kinds", 1), ("no-kinds", 0)] {
        let l = listener(name);
        assert_eq!(
            cond_of(&l["conditions"], "ResolvedRefs"),
            no("InvalidRouteKinds"),
            "{name}"
        );
        assert_eq!(
            l["supportedKinds"].as_array().unwrap().len(),
            kinds,
            "{l:#}"
        );
    }
    assert_eq!(
        cond_of(
            &parent(&s, "gateway-conformance-infra/on-8081", "odd-ports")["conditions"],
            "Accepted"
        ),
        no("NotAllowedByListeners")
    );
    assert_eq!(
        bed.request(&c, "unserved.example", "/", &[]).await.status,
        404
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_listeners_serve_their_certificate_and_weir_plugins_attach_by_extension_ref() {
    let case = format!(
        "\
{secret_a_cert}---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: secure, namespace: gateway-conformance-infra}}
spec:
  gatewayClassName: weir
  listeners:
  - name: https
    port: 443
    protocol: HTTPS
    hostname: a.example.test
    tls: {{certificateRefs: [{{name: a-cert}}]}}
  - name: https-missing
    port: 443
    protocol: HTTPS
    hostname: b.example.test
    tls: {{certificateRefs: [{{name: nope}}]}}
---
apiVersion: weir.dev/v1alpha1
kind: Plugin
metadata: {{name: closed, namespace: gateway-conformance-infra}}
spec:
  plugin: request-termination
  config: {{status_code: 418, message: closed by a Weir plugin}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: secure, namespace: gateway-conformance-infra}}
spec:
  parentRefs: [{{name: secure}}]
  rules:
  - matches: [{{path: {{type: PathPrefix, value: /closed}}}}]
    filters:
    - {{type: ExtensionRef, extensionRef: {{group: weir.dev, kind: Plugin, name: closed}}}}
    backendRefs: [{{name: infra-backend-v1, port: 8080}}]
  - backendRefs: [{{name: infra-backend-v1, port: 8080}}]
",
        secret_a_cert = tls_secret("gateway-conformance-infra", "a-cert", "a.example.test"),
    );
    let bed = Bed::start_with(&case, &["--tls-listen", "x"]);
    let port = bed.tls_port.unwrap();
    wait_for_port(port);
    let c = client();
    let s = bed
        .route_status(&c, "gateway-conformance-infra/secure")
        .await;
    let gw = &s["gateways"]["gateway-conformance-infra/secure"];
    assert_eq!(
        cond_of(&gw["listeners"][0]["conditions"], "ResolvedRefs"),
        yes("ResolvedRefs")
    );
    assert_eq!(
        cond_of(&gw["listeners"][1]["conditions"], "ResolvedRefs"),
        no("InvalidCertificateRef")
    );
    let r = common::tls::get(port, "a.example.test", "/hello", &[])
        .await
        .expect("TLS with the listener's certificate");
    assert_eq!(r.resp.status, 200);
    assert_eq!(r.peer_cert, common::tls::fixture_der("a.example.test.crt"));
    let r = common::tls::get(port, "a.example.test", "/closed", &[])
        .await
        .unwrap();
    assert_eq!(r.resp.status, 418);
    // The route is attached to HTTPS listeners only: plain HTTP does not reach it.
    let plain = bed.request(&c, "a.example.test", "/hello", &[]).await;
    assert_ne!(plain.status, 200);
}

/// A `kubernetes.io/tls` Secret `namespace/name` holding a fixture certificate and key
/// (`a.example.test` or `wild.example.test`, from tests/fixtures/tls/).
fn tls_secret(namespace: &str, name: &str, fixture: &str) -> String {
    tls_secret_of(
        namespace,
        name,
        &common::tls::fixture(&format!("{fixture}.crt")),
        &common::tls::fixture(&format!("{fixture}.key")),
    )
}

/// A `kubernetes.io/tls` Secret of a PEM certificate and key.
fn tls_secret_of(namespace: &str, name: &str, cert: &str, key: &str) -> String {
    format!(
        "apiVersion: v1
kind: Secret
metadata: {{name: {name}, namespace: {namespace}}}
type: kubernetes.io/tls
stringData:
  tls.crt: |
{crt}
  tls.key: |
{key}
",
        crt = indent(cert),
        key = indent(key),
    )
}

fn indent(pem: &str) -> String {
    pem.lines()
        .map(|l| format!("    {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The first ```yaml block of docs/gateway-api.md.
fn doc_example() -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/gateway-api.md");
    let text = std::fs::read_to_string(path).unwrap();
    let start = text.find("```yaml\n").expect("a yaml block") + "```yaml\n".len();
    let end = text[start..].find("\n```").unwrap();
    text[start..start + end].to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_quick_start_works_as_documented() {
    let up = echo("docs-echo");
    let example = doc_example();
    assert!(example.contains("port: 9001"));
    let weir = Manifests::start(
        &[(
            "gw.yaml",
            &example.replace("port: 9001", &format!("port: {}", up.port)),
        )],
        &[],
    );
    let c = client();
    let r = wait_for_status(
        &c,
        &weir.url("/healthz-not-routed"),
        404,
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(r.status, 404);
    let started = std::time::Instant::now();
    let served = loop {
        let r = get(
            &c,
            &weir.url("/api/items"),
            &[("host", "shop.example"), ("x-version", "2")],
        )
        .await;
        if r.status == 200 || started.elapsed() > Duration::from_secs(30) {
            break r;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(served.status, 200);
    let seen = served.json();
    assert_eq!(seen["path"], "/v2/items");
    assert_eq!(seen["headers"]["x-gateway"], "weir");
    assert_eq!(seen["host"], "shop.example");
    // Without the header the rule does not match.
    let r = get(&c, &weir.url("/api/items"), &[("host", "shop.example")]).await;
    assert_eq!(r.status, 404);
    let r = get(&c, &weir.url("/old/page"), &[("host", "shop.example")]).await;
    assert_eq!(r.status, 301);
    assert_eq!(r.header("location"), Some("https://shop.example/old/page"));
    let status = get(&c, &weir.admin_url("/controller-status"), &[])
        .await
        .json();
    let route = &status["gatewayApi"]["httpRoutes"]["demo/shop"]["parents"][0];
    assert_eq!(cond_of(&route["conditions"], "Accepted"), yes("Accepted"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeouts_answer_504_and_app_protocol_h2c_speaks_http2_to_the_backend() {
    let case = "\
apiVersion: v1
kind: Service
metadata: {name: h2c-backend, namespace: gateway-conformance-infra}
spec:
  ports: [{name: h2c, port: 8080, appProtocol: kubernetes.io/h2c}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: h2c-backend-1
  namespace: gateway-conformance-infra
  labels: {kubernetes.io/service-name: h2c-backend}
addressType: IPv4
ports: [{name: h2c, port: ${infra-backend-v2}}]
endpoints:
- addresses: [127.0.0.1]
  conditions: {ready: true}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: timeouts, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules:
  - name: slow-is-cut
    matches: [{path: {type: PathPrefix, value: /request-timeout}}]
    timeouts: {request: 300ms}
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches: [{path: {type: PathPrefix, value: /backend-timeout}}]
    timeouts: {request: 10s, backendRequest: 300ms}
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches: [{path: {type: PathPrefix, value: /no-timeout}}]
    timeouts: {request: 0s}
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches: [{path: {type: PathPrefix, value: /h2c}}]
    backendRefs: [{name: h2c-backend, port: 8080}]
  - matches: [{path: {type: PathPrefix, value: /ws}}]
    backendRefs: [{name: ws-backend, port: 8080}]
---
apiVersion: v1
kind: Service
metadata: {name: ws-backend, namespace: gateway-conformance-infra}
spec:
  ports: [{name: ws, port: 8080, appProtocol: kubernetes.io/ws}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: ws-backend-1
  namespace: gateway-conformance-infra
  labels: {kubernetes.io/service-name: ws-backend}
addressType: IPv4
ports: [{name: ws, port: ${infra-backend-v3}}]
endpoints:
- addresses: [127.0.0.1]
  conditions: {ready: true}
";
    let bed = Bed::start(case);
    let c = client();
    let s = bed
        .route_status(&c, "gateway-conformance-infra/timeouts")
        .await;
    let p = parent(&s, "gateway-conformance-infra/timeouts", "same-namespace");
    assert_eq!(cond_of(&p["conditions"], "Accepted"), yes("Accepted"));
    for path in ["/request-timeout", "/backend-timeout"] {
        let slow = bed
            .request(
                &c,
                "timeouts.example",
                &format!("{path}?delay_ms=1500"),
                &[],
            )
            .await;
        assert_eq!(slow.status, 504, "{path}");
        let fast = bed.request(&c, "timeouts.example", path, &[]).await;
        served_by(&fast, "infra-backend-v1");
    }
    let r = bed
        .request(&c, "timeouts.example", "/no-timeout?delay_ms=700", &[])
        .await;
    served_by(&r, "infra-backend-v1");
    let r = bed.request(&c, "timeouts.example", "/h2c", &[]).await;
    served_by(&r, "infra-backend-v2");
    assert_eq!(r.json()["protocol"], "HTTP/2.0", "{}", r.json());
    let r = bed
        .request(&c, "timeouts.example", "/request-timeout", &[])
        .await;
    assert_eq!(r.json()["protocol"], "HTTP/1.1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_follow_the_rules_codes_and_attempts() {
    let case = "\
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: retries, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /retry/code-500-attempts-3}}]
    retry: {codes: [500], attempts: 3}
    backendRefs: [{name: infra-backend-v3, port: 8080}]
  - matches: [{path: {type: PathPrefix, value: /retry/code-all-attempts-2}}]
    retry: {codes: [500, 502, 503, 504], attempts: 2}
    backendRefs: [{name: infra-backend-v3, port: 8080}]
";
    let bed = Bed::start(case);
    let c = client();
    let s = bed
        .route_status(&c, "gateway-conformance-infra/retries")
        .await;
    route_ok(&s, "gateway-conformance-infra/retries", "same-namespace");
    // (path, status the backend fails with, failures before it recovers, status expected)
    let cases = [
        ("/retry/code-500-attempts-3", 500, 2, 200),
        ("/retry/code-500-attempts-3", 500, 4, 500),
        ("/retry/code-500-attempts-3", 503, 2, 503),
        ("/retry/code-all-attempts-2", 500, 1, 200),
        ("/retry/code-all-attempts-2", 500, 3, 500),
        ("/retry/code-all-attempts-2", 502, 1, 200),
        ("/retry/code-all-attempts-2", 502, 3, 502),
        ("/retry/code-all-attempts-2", 503, 1, 200),
        ("/retry/code-all-attempts-2", 503, 3, 503),
        ("/retry/code-all-attempts-2", 504, 1, 200),
        ("/retry/code-all-attempts-2", 504, 3, 504),
    ];
    for (i, (path, code, fail, want)) in cases.into_iter().enumerate() {
        let uri = format!("{path}?status={code}&fail={fail}&key=case-{i}");
        let r = bed.request(&c, "retry.example", &uri, &[]).await;
        assert_eq!(r.status, want, "{uri}");
    }
}

/// HTTPRouteRetryConnectionError: a backend that closes the connection without answering is
/// retried like a failing status, and once the attempts are spent the client gets 500 or 503.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_errors_are_retried_up_to_the_attempts() {
    let case = "\
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: retries-connection-error, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /retry/no-status-code-attempts-3}}]
    retry: {attempts: 3}
    backendRefs: [{name: infra-backend-v3, port: 8080}]
";
    let bed = Bed::start(case);
    let c = client();
    let route = "gateway-conformance-infra/retries-connection-error";
    let s = bed.route_status(&c, route).await;
    route_ok(&s, route, "same-namespace");
    let path = "/retry/no-status-code-attempts-3";
    let r = bed
        .request(
            &c,
            "retry.example",
            &format!("{path}?fail=2&reset=1&key=a"),
            &[],
        )
        .await;
    assert_eq!(r.status, 200);
    served_by(&r, "infra-backend-v3");
    let r = bed
        .request(
            &c,
            "retry.example",
            &format!("{path}?fail=4&reset=1&key=b"),
            &[],
        )
        .await;
    assert!([500, 503].contains(&r.status), "{}", r.status);
    // The fifth request of key b is the first the backend answers: Weir tried four times.
    let r = bed
        .request(
            &c,
            "retry.example",
            &format!("{path}?fail=4&reset=1&key=b"),
            &[],
        )
        .await;
    assert_eq!(r.status, 200);
}

/// Request headers of a case.
type Headers<'a> = &'a [(&'a str, &'a str)];

/// One unary gRPC call through Weir over h2c: the HTTP status, the backend that answered
/// (`x-echo-name`), the `grpc-status` (from the trailers, or a trailers-only head) and the
/// headers the backend received.
async fn grpc_call(
    bed: &Bed,
    path: &str,
    headers: &[(&str, &str)],
) -> (u16, Option<String>, Option<String>, Value) {
    use http_body_util::BodyExt;
    let resp = common::grpc::bare_h2_send(bed.weir.proc.port, path, headers).await;
    let status = resp.status().as_u16();
    let head = resp.headers().clone();
    let text =
        |h: &http::HeaderMap, n: &str| h.get(n).and_then(|v| v.to_str().ok()).map(str::to_string);
    let collected = resp.into_body().collect().await.expect("the answer's body");
    let grpc_status = collected
        .trailers()
        .and_then(|t| text(t, "grpc-status"))
        .or_else(|| text(&head, "grpc-status"));
    let seen = text(&head, "x-echo-request-headers")
        .and_then(|j| serde_json::from_str(&j).ok())
        .unwrap_or_default();
    (status, text(&head, "x-echo-name"), grpc_status, seen)
}

/// GRPCRouteWeight: unary calls shared 70/30/0 by weight.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_weights_share_calls() {
    let case = "\
apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: {name: weighted-backends, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules:
  - backendRefs:
    - {name: infra-backend-v1, port: 8080, weight: 70}
    - {name: infra-backend-v2, port: 8080, weight: 30}
    - {name: infra-backend-v3, port: 8080, weight: 0}
";
    let bed = Bed::start(case);
    let c = client();
    let route = "gateway-conformance-infra/weighted-backends";
    let s = bed
        .status_when(&c, |s| s["grpcRoutes"].get(route).is_some())
        .await;
    let p = &s["grpcRoutes"][route]["parents"][0];
    assert_eq!(cond_of(&p["conditions"], "Accepted"), yes("Accepted"));
    assert_eq!(
        cond_of(&p["conditions"], "ResolvedRefs"),
        yes("ResolvedRefs")
    );
    wait_ready(&c, &bed.weir).await;
    let echo = "/gateway_api_conformance.echo_basic.grpcecho.GrpcEcho/Echo";
    let mut seen = BTreeMap::new();
    for _ in 0..500 {
        let (_, name, grpc_status, _) = grpc_call(&bed, echo, &[]).await;
        assert_eq!(grpc_status.as_deref(), Some("0"));
        *seen.entry(name.unwrap()).or_insert(0) += 1;
    }
    assert_shares(
        &seen,
        500,
        &[("infra-backend-v1", 70.0), ("infra-backend-v2", 30.0)],
    );
}

/// GRPCRouteNamedRule: a rule's `name` is accepted and changes nothing about serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_named_rules_are_served() {
    let case = "\
apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: {name: grpc-named-rules, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules:
  - name: named-rule
    matches: [{method: {service: gateway_api_conformance.echo_basic.grpcecho.GrpcEcho, method: Echo}}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches: [{method: {service: gateway_api_conformance.echo_basic.grpcecho.GrpcEcho, method: EchoTwo}}]
    backendRefs: [{name: infra-backend-v2, port: 8080}]
";
    let bed = Bed::start(case);
    let c = client();
    let route = "gateway-conformance-infra/grpc-named-rules";
    let s = bed
        .status_when(&c, |s| s["grpcRoutes"].get(route).is_some())
        .await;
    let p = &s["grpcRoutes"][route]["parents"][0];
    assert_eq!(cond_of(&p["conditions"], "Accepted"), yes("Accepted"));
    wait_ready(&c, &bed.weir).await;
    let svc = "/gateway_api_conformance.echo_basic.grpcecho.GrpcEcho";
    for (method, backend) in [
        ("Echo", "infra-backend-v1"),
        ("EchoTwo", "infra-backend-v2"),
    ] {
        let (_, name, grpc_status, _) = grpc_call(&bed, &format!("{svc}/{method}"), &[]).await;
        assert_eq!(name.as_deref(), Some(backend), "{method}");
        assert_eq!(grpc_status.as_deref(), Some("0"), "{method}");
    }
}

/// The rules of the upstream header-matching cases (HTTPRoute and GRPCRoute alike).
const HEADER_MATCHING_RULES: &str = "  rules:
  - matches: [{headers: [{name: version, value: one}]}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches: [{headers: [{name: version, value: two}]}]
    backendRefs: [{name: infra-backend-v2, port: 8080}]
  - matches: [{headers: [{name: version, value: two}, {name: color, value: orange}]}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches: [{headers: [{name: color, value: blue}]}, {headers: [{name: color, value: green}]}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches: [{headers: [{name: color, value: red}]}, {headers: [{name: color, value: yellow}]}]
    backendRefs: [{name: infra-backend-v2, port: 8080}]
";

/// The upstream header-matching cases' requests: headers sent, backend expected (`None`: no
/// route).
fn header_matching_cases() -> [(Headers<'static>, Option<&'static str>); 11] {
    let (v1, v2) = (Some("infra-backend-v1"), Some("infra-backend-v2"));
    [
        (&[("Version", "one")], v1),
        (&[("Version", "two")], v2),
        (&[("Version", "two"), ("Color", "orange")], v1),
        (&[("Version", "two"), ("Color", "blue")], v2),
        (&[("Color", "orange")], None),
        (&[("Some-Other-Header", "one")], None),
        (&[("Color", "blue")], v1),
        (&[("Color", "green")], v1),
        (&[("Color", "red")], v2),
        (&[("Color", "yellow")], v2),
        (&[("Color", "purple")], None),
    ]
}

/// GRPCRouteHeaderMatching: rules by metadata only; more headers outrank fewer; several
/// matches of one rule are ORed; what matches nothing is `UNIMPLEMENTED`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_routes_match_metadata_as_upstream_sends_it() {
    let case = format!(
        "apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: {{name: grpc-header-matching, namespace: gateway-conformance-infra}}
spec:
  parentRefs: [{{name: same-namespace}}]
{HEADER_MATCHING_RULES}"
    );
    let bed = Bed::start(&case);
    let c = client();
    let route = "gateway-conformance-infra/grpc-header-matching";
    let s = bed
        .status_when(&c, |s| s["grpcRoutes"].get(route).is_some())
        .await;
    let p = &s["grpcRoutes"][route]["parents"][0];
    assert_eq!(cond_of(&p["conditions"], "Accepted"), yes("Accepted"));
    assert_eq!(
        cond_of(&p["conditions"], "ResolvedRefs"),
        yes("ResolvedRefs")
    );
    wait_ready(&c, &bed.weir).await;
    let echo = "/gateway_api_conformance.echo_basic.grpcecho.GrpcEcho/Echo";
    for (headers, backend) in header_matching_cases() {
        // gRPC metadata names are lower case on the wire (HTTP/2).
        let lower: Vec<(String, &str)> = headers
            .iter()
            .map(|(n, v)| (n.to_ascii_lowercase(), *v))
            .collect();
        let headers: Vec<(&str, &str)> = lower.iter().map(|(n, v)| (n.as_str(), *v)).collect();
        let (_, name, grpc_status, _) = grpc_call(&bed, echo, &headers).await;
        assert_eq!(name.as_deref(), backend, "{headers:?}");
        let want = if backend.is_some() { "0" } else { "12" };
        assert_eq!(grpc_status.as_deref(), Some(want), "{headers:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_routes_match_services_methods_and_headers() {
    let case = "\
apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: {name: grpc, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules:
  - matches:
    - method: {service: gateway_api_conformance.echo_basic.grpcecho.GrpcEcho, method: Echo}
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches:
    - method: {service: gateway_api_conformance.echo_basic.grpcecho.GrpcEcho, method: EchoTwo}
    backendRefs: [{name: infra-backend-v2, port: 8080}]
  - matches:
    - method: {service: gateway_api_conformance.echo_basic.grpcecho.GrpcEcho}
      headers: [{name: version, value: three}]
    filters:
    - {type: RequestHeaderModifier, requestHeaderModifier: {set: [{name: x-grpc-route, value: seen}]}}
    backendRefs: [{name: infra-backend-v3, port: 8080}]
  - matches:
    - method: {type: RegularExpression, service: 'other\\..*', method: 'Get.*'}
    backendRefs: [{name: infra-backend-v2, port: 8080}]
";
    let bed = Bed::start(case);
    let c = client();
    let s = bed
        .status_when(&c, |s| {
            s["grpcRoutes"]
                .get("gateway-conformance-infra/grpc")
                .is_some()
        })
        .await;
    let p = &s["grpcRoutes"]["gateway-conformance-infra/grpc"]["parents"][0];
    assert_eq!(
        cond_of(&p["conditions"], "Accepted"),
        yes("Accepted"),
        "{s:#}"
    );
    assert_eq!(
        cond_of(&p["conditions"], "ResolvedRefs"),
        yes("ResolvedRefs")
    );
    wait_ready(&c, &bed.weir).await;
    let svc = "/gateway_api_conformance.echo_basic.grpcecho.GrpcEcho";
    let cases: [(String, Headers, Option<&str>); 6] = [
        (format!("{svc}/Echo"), &[], Some("infra-backend-v1")),
        (format!("{svc}/EchoTwo"), &[], Some("infra-backend-v2")),
        // An exact service and method outrank the header rule.
        (
            format!("{svc}/Echo"),
            &[("version", "three")],
            Some("infra-backend-v1"),
        ),
        (
            format!("{svc}/EchoThree"),
            &[("version", "three")],
            Some("infra-backend-v3"),
        ),
        (
            "/other.Catalog/GetItem".to_string(),
            &[],
            Some("infra-backend-v2"),
        ),
        (format!("{svc}/EchoThree"), &[], None),
    ];
    for (path, headers, backend) in cases {
        let (status, name, grpc_status, seen) = grpc_call(&bed, &path, headers).await;
        match backend {
            Some(b) => {
                assert_eq!(
                    (status, name.as_deref()),
                    (200, Some(b)),
                    "{path} {headers:?}"
                );
                assert_eq!(grpc_status.as_deref(), Some("0"), "{path}");
                // The header filter edits what the backend of its rule received, only there.
                let set = (b == "infra-backend-v3").then_some("seen");
                assert_eq!(seen["x-grpc-route"].as_str(), set, "{path}: {seen}");
                assert_eq!(seen["content-type"], "application/grpc", "{seen}");
            }
            None => {
                assert_eq!(name, None, "{path}: no backend");
                // No route: UNIMPLEMENTED, as a gRPC server without the method answers.
                assert_eq!(grpc_status.as_deref(), Some("12"), "{path}: {status}");
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mirrors_get_copies_whose_answers_are_thrown_away() {
    use common::recorder::{response, Server};
    // Two mirrors: one answers slowly with an error, the other records; neither shows.
    let mirror = Server::start(|_| response(500, "", "mirror answer"));
    let slow = Server::start(|_| {
        std::thread::sleep(Duration::from_millis(1500));
        response(503, "", "slow")
    });
    let case = format!(
        "\
apiVersion: v1
kind: Service
metadata: {{name: mirror, namespace: gateway-conformance-infra}}
spec: {{ports: [{{name: http, port: 8080}}]}}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {{name: mirror-1, namespace: gateway-conformance-infra, labels: {{kubernetes.io/service-name: mirror}}}}
addressType: IPv4
ports: [{{name: http, port: {mirror}}}]
endpoints: [{{addresses: [127.0.0.1], conditions: {{ready: true}}}}]
---
apiVersion: v1
kind: Service
metadata: {{name: slow, namespace: gateway-conformance-infra}}
spec: {{ports: [{{name: http, port: 8080}}]}}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {{name: slow-1, namespace: gateway-conformance-infra, labels: {{kubernetes.io/service-name: slow}}}}
addressType: IPv4
ports: [{{name: http, port: {slow}}}]
endpoints: [{{addresses: [127.0.0.1], conditions: {{ready: true}}}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: mirror, namespace: gateway-conformance-infra}}
spec:
  parentRefs: [{{name: same-namespace}}]
  rules:
  - matches: [{{path: {{type: PathPrefix, value: /mirror}}}}]
    filters:
    - {{type: RequestHeaderModifier, requestHeaderModifier: {{set: [{{name: x-edited, value: 'yes'}}]}}}}
    - {{type: RequestMirror, requestMirror: {{backendRef: {{name: mirror, port: 8080}}}}}}
    - {{type: RequestMirror, requestMirror: {{backendRef: {{name: slow, port: 8080}}}}}}
    backendRefs: [{{name: infra-backend-v1, port: 8080}}]
  - matches: [{{path: {{type: PathPrefix, value: /half}}}}]
    filters:
    - {{type: RequestMirror, requestMirror: {{backendRef: {{name: mirror, port: 8080}}, fraction: {{numerator: 1, denominator: 2}}}}}}
    backendRefs: [{{name: infra-backend-v1, port: 8080}}]
  - matches: [{{path: {{type: PathPrefix, value: /nowhere}}}}]
    filters:
    - {{type: RequestMirror, requestMirror: {{backendRef: {{name: missing, port: 8080}}}}}}
    backendRefs: [{{name: infra-backend-v1, port: 8080}}]
",
        mirror = mirror.port,
        slow = slow.port
    );
    let bed = Bed::start(&case);
    let c = client();
    let s = bed
        .route_status(&c, "gateway-conformance-infra/mirror")
        .await;
    let p = parent(&s, "gateway-conformance-infra/mirror", "same-namespace");
    // The missing mirror Service is reported; the rule is served without it.
    assert_eq!(
        cond_of(&p["conditions"], "ResolvedRefs"),
        no("BackendNotFound")
    );
    let started = std::time::Instant::now();
    let r = bed
        .request(&c, "mirror.example", "/mirror/a?q=1", &[])
        .await;
    served_by(&r, "infra-backend-v1");
    assert!(
        started.elapsed() < Duration::from_millis(1200),
        "the slow mirror does not hold the answer up: {:?}",
        started.elapsed()
    );
    let seen = (0..100)
        .find_map(|_| {
            std::thread::sleep(Duration::from_millis(20));
            mirror.seen().pop()
        })
        .expect("the mirror got its copy");
    assert_eq!(seen.request_line(), "GET /mirror/a?q=1 HTTP/1.1");
    assert_eq!(seen.header("host").as_deref(), Some("mirror.example"));
    assert_eq!(
        seen.header("x-edited").as_deref(),
        Some("yes"),
        "after the filters"
    );
    // A body the proxy holds whole is copied too.
    let r = send(
        &c,
        "POST",
        &bed.weir.url("/mirror/post"),
        &[("host", "mirror.example")],
        &b"payload"[..],
    )
    .await;
    assert_eq!(r.status, 200);
    let post = (0..100)
        .find_map(|_| {
            std::thread::sleep(Duration::from_millis(20));
            mirror
                .seen()
                .into_iter()
                .find(|s| s.request_line().starts_with("POST"))
        })
        .expect("the POST copy");
    assert_eq!(post.body, b"payload");
    // A body of undeclared length is copied as it streams through (HTTP/2 and gRPC bodies
    // are of that kind).
    let port = bed.weir.proc.port;
    let answer = tokio::task::spawn_blocking(move || {
        raw(
            port,
            b"POST /mirror/chunked HTTP/1.1\r\nHost: mirror.example\r\nTransfer-Encoding: chunked\r\n\
              Connection: close\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n",
            Duration::from_secs(5),
        )
    })
    .await
    .unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let chunked = (0..100)
        .find_map(|_| {
            std::thread::sleep(Duration::from_millis(20));
            mirror
                .seen()
                .into_iter()
                .find(|s| s.request_line().starts_with("POST /mirror/chunked"))
        })
        .expect("the streamed POST's copy");
    assert_eq!(chunked.body, b"hello world");
    // Half the requests: within the binomial's bounds for 400 tries (p < 1e-6 outside).
    let before = mirror.count();
    for i in 0..400 {
        let r = bed
            .request(&c, "mirror.example", &format!("/half/{i}"), &[])
            .await;
        assert_eq!(r.status, 200);
    }
    std::thread::sleep(Duration::from_millis(300));
    let copies = mirror.count() - before;
    assert!((150..=250).contains(&copies), "{copies} of 400 mirrored");
    let r = bed.request(&c, "mirror.example", "/nowhere", &[]).await;
    served_by(&r, "infra-backend-v1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cors_filters_answer_preflights_and_mark_responses() {
    let case = "\
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: cors, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /cors-1}}]
    filters:
    - type: CORS
      cors:
        allowOrigins: ['https://www.foo.com', 'https://*.bar.com']
        allowMethods: [GET, OPTIONS]
        allowHeaders: [x-header-1, x-header-2]
        exposeHeaders: [x-header-3, x-header-4]
        allowCredentials: true
        maxAge: 3600
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches: [{path: {type: PathPrefix, value: /cors-2}}]
    filters:
    - {type: CORS, cors: {allowOrigins: ['https://www.foo.com'], allowMethods: ['*']}}
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches: [{path: {type: PathPrefix, value: /cors-wildcard-origin}}]
    filters:
    - {type: CORS, cors: {allowOrigins: ['*'], allowMethods: [PUT], allowCredentials: false}}
    backendRefs: [{name: infra-backend-v1, port: 8080}]
";
    let bed = Bed::start(case);
    let c = client();
    bed.route_status(&c, "gateway-conformance-infra/cors").await;
    let preflight = |path: &'static str, origin: &'static str, method: &'static str| {
        let c = c.clone();
        let url = bed.weir.url(path);
        async move {
            send(
                &c,
                "OPTIONS",
                &url,
                &[
                    ("host", "cors.example"),
                    ("origin", origin),
                    ("access-control-request-method", method),
                    ("access-control-request-headers", "x-header-1, x-header-2"),
                ],
                &b""[..],
            )
            .await
        }
    };
    let words = |v: Option<&str>| -> BTreeMap<String, ()> {
        v.unwrap_or_default()
            .split(',')
            .map(|s| (s.trim().to_string(), ()))
            .collect()
    };
    for origin in [
        "https://www.foo.com",
        "https://api.bar.com",
        "https://a.b.bar.com",
    ] {
        let r = preflight("/cors-1", origin, "GET").await;
        assert!(matches!(r.status, 200 | 204), "{origin}: {}", r.status);
        assert_eq!(r.header("access-control-allow-origin"), Some(origin));
        assert_eq!(
            words(r.header("access-control-allow-methods")),
            words(Some("GET, OPTIONS"))
        );
        assert_eq!(
            words(r.header("access-control-allow-headers")),
            words(Some("x-header-1, x-header-2"))
        );
        assert_eq!(r.header("access-control-max-age"), Some("3600"));
        assert_eq!(r.header("access-control-allow-credentials"), Some("true"));
        assert_eq!(
            r.echo_name(),
            None,
            "a preflight is answered by the gateway"
        );
    }
    // Not an allowed origin: no CORS headers.
    for origin in [
        "https://foobar.com",
        "https://bar.com",
        "https://x.bar.com.evil.org",
    ] {
        let r = preflight("/cors-1", origin, "GET").await;
        assert_eq!(r.header("access-control-allow-origin"), None, "{origin}");
        assert_eq!(
            r.header("access-control-allow-credentials"),
            None,
            "{origin}"
        );
    }
    // A simple request: served, marked for the browser.
    let r = bed
        .request(
            &c,
            "cors.example",
            "/cors-1",
            &[("origin", "https://www.foo.com")],
        )
        .await;
    served_by(&r, "infra-backend-v1");
    assert_eq!(
        r.header("access-control-allow-origin"),
        Some("https://www.foo.com")
    );
    assert_eq!(
        words(r.header("access-control-expose-headers")),
        words(Some("x-header-3, x-header-4"))
    );
    // `*` methods: the asked one comes back; no credentials.
    let r = preflight("/cors-2", "https://www.foo.com", "POST").await;
    assert_eq!(r.header("access-control-allow-methods"), Some("POST"));
    assert_eq!(r.header("access-control-allow-credentials"), None);
    // Any origin without credentials: `*`.
    let r = preflight("/cors-wildcard-origin", "https://foobar.com:12345", "PUT").await;
    assert_eq!(r.header("access-control-allow-origin"), Some("*"));
    assert_eq!(r.header("access-control-allow-methods"), Some("PUT"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backends_own_header_filters_apply_to_its_share_only() {
    let case = "\
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: backend-filters, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /both}}]
    filters:
    - {type: RequestHeaderModifier, requestHeaderModifier: {set: [{name: x-rule, value: r}, {name: x-which, value: rule}]}}
    backendRefs:
    - name: infra-backend-v1
      port: 8080
      filters:
      - {type: RequestHeaderModifier, requestHeaderModifier: {set: [{name: x-which, value: one}], add: [{name: x-rule, value: more}]}}
      - {type: ResponseHeaderModifier, responseHeaderModifier: {set: [{name: x-answered-by, value: v1}]}}
    - name: infra-backend-v2
      port: 8080
      filters:
      - {type: RequestHeaderModifier, requestHeaderModifier: {set: [{name: x-which, value: two}]}}
  - matches: [{path: {type: PathPrefix, value: /cors-backend}}]
    backendRefs:
    - name: infra-backend-v3
      port: 8080
      filters:
      - {type: CORS, cors: {allowOrigins: [https://a.example]}}
";
    let bed = Bed::start(case);
    let c = client();
    bed.route_status(&c, "gateway-conformance-infra/backend-filters")
        .await;
    let mut seen = BTreeMap::new();
    for _ in 0..40 {
        let r = bed.request(&c, "filters.example", "/both", &[]).await;
        assert_eq!(r.status, 200);
        let j = r.json();
        let name = r.echo_name().unwrap();
        let which = j["headers"]["x-which"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let rule = j["headers"]["x-rule"].clone();
        match name.as_str() {
            "infra-backend-v1" => {
                assert_eq!(which, "one");
                assert_eq!(rule, serde_json::json!(["r", "more"]), "{j}");
                assert_eq!(r.header("x-answered-by"), Some("v1"));
            }
            "infra-backend-v2" => {
                assert_eq!(which, "two");
                assert_eq!(rule, "r", "{j}");
                assert_eq!(r.header("x-answered-by"), None);
            }
            other => panic!("{other}"),
        }
        seen.insert(name, ());
    }
    assert_eq!(seen.len(), 2, "both backends served");
    // A filter served on rules only: that backend's share answers 500, and it is reported.
    let r = bed
        .request(&c, "filters.example", "/cors-backend", &[])
        .await;
    assert_eq!(r.status, 500);
}

/// The conformance cases HTTPRouteBackendURLRewrite and HTTPRouteBackendRequestRedirect, and
/// the same filters on one of two weighted backends: only that backend's share is rewritten or
/// redirected, and the rule's own filters still apply to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backends_own_rewrites_and_redirects_apply_to_its_share_only() {
    let case = "\
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: backend-url-rewrite, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /full}}]
    backendRefs:
    - name: infra-backend-v1
      port: 8080
      filters:
      - {type: URLRewrite, urlRewrite: {path: {type: ReplaceFullPath, replaceFullPath: /rewritten-full}}}
  - matches: [{path: {type: PathPrefix, value: /prefix}}]
    backendRefs:
    - name: infra-backend-v1
      port: 8080
      filters:
      - {type: URLRewrite, urlRewrite: {path: {type: ReplacePrefixMatch, replacePrefixMatch: /rewritten-prefix}}}
  - matches: [{path: {type: PathPrefix, value: /split}}]
    filters:
    - {type: RequestHeaderModifier, requestHeaderModifier: {set: [{name: x-rule, value: r}]}}
    backendRefs:
    - name: infra-backend-v1
      port: 8080
      filters:
      - {type: URLRewrite, urlRewrite: {hostname: one.example.org, path: {type: ReplacePrefixMatch, replacePrefixMatch: /}}}
    - {name: infra-backend-v2, port: 8080}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: backend-request-redirect, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  hostnames: [redirect.example]
  rules:
  - matches: [{path: {type: PathPrefix, value: /full}}]
    backendRefs:
    - name: infra-backend-v1
      port: 8080
      filters:
      - {type: RequestRedirect, requestRedirect: {path: {type: ReplaceFullPath, replaceFullPath: /redirected-full}}}
  - matches: [{path: {type: PathPrefix, value: /prefix}}]
    backendRefs:
    - name: infra-backend-v1
      port: 8080
      filters:
      - {type: RequestRedirect, requestRedirect: {path: {type: ReplacePrefixMatch, replacePrefixMatch: /redirected-prefix}}}
  - matches: [{path: {type: PathPrefix, value: /split}}]
    backendRefs:
    - name: infra-backend-v1
      port: 8080
      filters:
      - {type: RequestRedirect, requestRedirect: {hostname: example.org, statusCode: 301}}
    - {name: infra-backend-v2, port: 8080}
";
    let bed = Bed::start(case);
    let c = client();
    for route in ["backend-url-rewrite", "backend-request-redirect"] {
        let name = format!("gateway-conformance-infra/{route}");
        let s = bed.route_status(&c, &name).await;
        let p = parent(&s, &name, "same-namespace");
        assert_eq!(cond_of(&p["conditions"], "Accepted"), yes("Accepted"));
        assert_eq!(
            cond_of(&p["conditions"], "ResolvedRefs"),
            yes("ResolvedRefs")
        );
    }
    // HTTPRouteBackendURLRewrite: the backend sees the rewritten path, query kept.
    for (path, want) in [
        ("/full/original", "/rewritten-full"),
        ("/prefix/original", "/rewritten-prefix/original"),
        ("/prefix", "/rewritten-prefix"),
    ] {
        let r = bed.request(&c, "rewrite.example", path, &[]).await;
        assert_eq!(r.status, 200, "{path}");
        served_by(&r, "infra-backend-v1");
        assert_eq!(r.json()["path"], want, "{path}");
    }
    let r = bed
        .request(&c, "rewrite.example", "/full/original?a=1", &[])
        .await;
    assert_eq!(r.json()["query"], "a=1", "{}", r.json());
    // HTTPRouteBackendRequestRedirect: answered by the gateway, the backend never called.
    for (path, location) in [
        ("/full/original", "http://redirect.example/redirected-full"),
        (
            "/prefix/original",
            "http://redirect.example/redirected-prefix/original",
        ),
    ] {
        let r = bed.request(&c, "redirect.example", path, &[]).await;
        assert_eq!(r.status, 302, "{path}");
        assert_eq!(r.header("location"), Some(location), "{path}");
        assert_eq!(r.echo_name(), None, "{path}");
    }
    // One of two backends: its share only.
    let mut seen = BTreeMap::new();
    for _ in 0..40 {
        let r = bed.request(&c, "rewrite.example", "/split/x", &[]).await;
        assert_eq!(r.status, 200);
        let j = r.json();
        let name = r.echo_name().unwrap();
        assert_eq!(j["headers"]["x-rule"], "r", "{j}");
        match name.as_str() {
            "infra-backend-v1" => {
                assert_eq!(j["path"], "/x", "{j}");
                assert_eq!(j["host"], "one.example.org", "{j}");
            }
            "infra-backend-v2" => {
                assert_eq!(j["path"], "/split/x", "{j}");
                assert_eq!(j["host"], "rewrite.example", "{j}");
            }
            other => panic!("{other}"),
        }
        *seen.entry(name).or_insert(0) += 1;
    }
    assert_eq!(seen.len(), 2, "both backends served: {seen:?}");
    let mut redirected = 0;
    for _ in 0..40 {
        let r = bed.request(&c, "redirect.example", "/split/y", &[]).await;
        match r.status {
            301 => {
                assert_eq!(r.header("location"), Some("http://example.org/split/y"));
                assert_eq!(r.echo_name(), None);
                redirected += 1;
            }
            200 => served_by(&r, "infra-backend-v2"),
            other => panic!("{other}"),
        }
    }
    assert!(
        (1..40).contains(&redirected),
        "{redirected} of 40 redirected"
    );
}

/// A TLS backend for passthrough: a certificate for `names` from `ca`, answering every
/// connection's first request with `HTTP/1.1 200` and body `name`.
fn tls_backend(ca: &common::ca::Ca, names: &[&str], name: &'static str) -> u16 {
    tls_backend_for(ca, names, name, None)
}

/// The same, requiring a client certificate signed by `clients` when given.
fn tls_backend_for(
    ca: &common::ca::Ca,
    names: &[&str],
    name: &'static str,
    clients: Option<&common::ca::Ca>,
) -> u16 {
    let leaf = ca.leaf(names, rcgen::ExtendedKeyUsagePurpose::ServerAuth);
    tls_backend_serving(&leaf, name, clients)
}

/// A TLS backend serving `leaf`, requiring a client certificate signed by `clients` when given.
fn tls_backend_serving(
    leaf: &common::ca::Leaf,
    name: &'static str,
    clients: Option<&common::ca::Ca>,
) -> u16 {
    tls_backend_answering(leaf, clients, move |_, _| name.to_string())
}

/// A TLS backend serving `leaf` whose answer's body says which server name (SNI) the client
/// sent and the path it asked for: `sni=NAME path=PATH`.
fn tls_backend_reporting(leaf: &common::ca::Leaf) -> u16 {
    tls_backend_answering(leaf, None, |sni, path| {
        format!("sni={} path={path}", sni.unwrap_or("-"))
    })
}

/// A TLS backend serving `leaf` (asking for a client certificate signed by `clients`) whose
/// answer's body `answer` makes of the server name and the request's path.
fn tls_backend_answering(
    leaf: &common::ca::Leaf,
    clients: Option<&common::ca::Ca>,
    answer: impl Fn(Option<&str>, &str) -> String + Send + Sync + Copy + 'static,
) -> u16 {
    let config = leaf.server_config_for(&[], clients);
    common::tls::tls_backend(config, move |saw| answer(saw.sni, saw.path))
}

/// A TLS connection to Weir's TLS socket naming `sni`, trusting only `ca`: the backend's
/// answer, or the handshake error.
async fn tls_call(port: u16, ca: &common::ca::Ca, sni: &str) -> Result<String, String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(rustls::pki_types::CertificateDer::from(
            ca.issuer.der().to_vec(),
        ))
        .unwrap();
    let config = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .map_err(|e| e.to_string())?;
    let name = rustls::pki_types::ServerName::try_from(sni.to_string()).unwrap();
    let mut tls = tokio::time::timeout(Duration::from_secs(10), connector.connect(name, tcp))
        .await
        .map_err(|_| "handshake timed out".to_string())?
        .map_err(|e| e.to_string())?;
    tls.write_all(format!("GET / HTTP/1.1\r\nhost: {sni}\r\n\r\n").as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), tls.read_to_end(&mut out)).await;
    let text = String::from_utf8_lossy(&out).to_string();
    Ok(text
        .split("\r\n\r\n")
        .nth(1)
        .unwrap_or_default()
        .to_string())
}

/// TLSRouteInvalidNoMatchingListener and TLSRouteInvalidNoMatchingListenerHostname: a
/// TLSRoute on a Gateway without a TLS listener is not allowed there, one naming a listener
/// that does not exist has no parent, one whose names no listener covers is refused for that;
/// none of them is accepted anywhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_routes_without_a_listener_for_them_as_upstream_reads_them() {
    let case = format!(
        "\
{secret}---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: gateway-tlsroute-tls-passthrough-only, namespace: gateway-conformance-infra}}
spec:
  gatewayClassName: weir
  listeners: [{{name: tls-passthrough, port: 443, protocol: TLS, tls: {{mode: Passthrough}}}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: gateway-tlsroute-http-only, namespace: gateway-conformance-infra}}
spec:
  gatewayClassName: weir
  listeners: [{{name: http, port: 80, protocol: HTTP}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: gateway-tlsroute-https-only, namespace: gateway-conformance-infra}}
spec:
  gatewayClassName: weir
  listeners:
  - {{name: https, port: 443, protocol: HTTPS, tls: {{mode: Terminate, certificateRefs: [{{name: tls-validity-checks-certificate}}]}}}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: gateway-tls-exact-hostname, namespace: gateway-conformance-infra}}
spec:
  gatewayClassName: weir
  listeners:
  - {{name: tls, port: 443, protocol: TLS, hostname: www.example.com, allowedRoutes: {{kinds: [{{kind: TLSRoute}}]}}, tls: {{mode: Passthrough}}}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: gateway-tls-wildcard-hostname, namespace: gateway-conformance-infra}}
spec:
  gatewayClassName: weir
  listeners:
  - {{name: tls, port: 443, protocol: TLS, hostname: '*.example.com', allowedRoutes: {{kinds: [{{kind: TLSRoute}}]}}, tls: {{mode: Passthrough}}}}
---
{r1}{r2}{r3}{r4}{r5}",
        secret = tls_secret(
            "gateway-conformance-infra",
            "tls-validity-checks-certificate",
            "a.example.test"
        ),
        r1 = tls_route("tlsroute-not-allowed-protocol-http", "{name: gateway-tlsroute-http-only}", "[tls.example.com]"),
        r2 = tls_route("tlsroute-not-allowed-protocol-https", "{name: gateway-tlsroute-https-only}", "[tls.example.com]"),
        r3 = tls_route(
            "tlsroute-no-matching-section-name",
            "{name: gateway-tlsroute-tls-passthrough-only, sectionName: nonexistent-listener}",
            "[tls.example.com]"
        ),
        r4 = tls_route("tlsroute-hostname-mismatch-1", "{name: gateway-tls-exact-hostname}", "[www.nomatch.com, '*.nomatch.com']"),
        r5 = tls_route(
            "tlsroute-hostname-mismatch-2",
            "{name: gateway-tls-wildcard-hostname}",
            "[www.different.com, '*.different.com']"
        ),
    );
    let bed = Bed::start_with(&case, &["--tls-listen", "x"]);
    let c = client();
    let name = |r: &str| format!("gateway-conformance-infra/{r}");
    let last = name("tlsroute-hostname-mismatch-2");
    let s = bed
        .status_when(&c, |s| s["tlsRoutes"].get(&last).is_some())
        .await;
    for (route, gateway, reason) in [
        (
            "tlsroute-not-allowed-protocol-http",
            "gateway-tlsroute-http-only",
            "NotAllowedByListeners",
        ),
        (
            "tlsroute-not-allowed-protocol-https",
            "gateway-tlsroute-https-only",
            "NotAllowedByListeners",
        ),
        (
            "tlsroute-no-matching-section-name",
            "gateway-tlsroute-tls-passthrough-only",
            "NoMatchingParent",
        ),
        (
            "tlsroute-hostname-mismatch-1",
            "gateway-tls-exact-hostname",
            "NoMatchingListenerHostname",
        ),
        (
            "tlsroute-hostname-mismatch-2",
            "gateway-tls-wildcard-hostname",
            "NoMatchingListenerHostname",
        ),
    ] {
        let parents = s["tlsRoutes"][name(route)]["parents"].as_array().unwrap();
        let p = parents
            .iter()
            .find(|p| p["parentRef"]["name"] == gateway)
            .unwrap_or_else(|| panic!("{route}: no parent {gateway}: {parents:?}"));
        assert_eq!(cond_of(&p["conditions"], "Accepted"), no(reason), "{route}");
        assert!(
            parents
                .iter()
                .all(|p| cond_of(&p["conditions"], "Accepted").0 == "False"),
            "{route}: accepted somewhere: {parents:?}"
        );
    }
}

/// A TLSRoute named `name` with parentRef `parent` and `hostnames`, to Service `tls-backend`.
fn tls_route(name: &str, parent: &str, hostnames: &str) -> String {
    format!(
        "apiVersion: gateway.networking.k8s.io/v1alpha2
kind: TLSRoute
metadata: {{name: {name}, namespace: gateway-conformance-infra}}
spec:
  parentRefs: [{parent}]
  hostnames: {hostnames}
  rules: [{{backendRefs: [{{name: tls-backend, port: 443}}]}}]
---
"
    )
}

/// TLSRouteSimpleSameNamespace, TLSRouteInvalidBackendRefNonexistent and
/// TLSRouteInvalidBackendRefUnknownKind: a connection for the route's name reaches the TLS
/// backend untouched; a route whose only backend is missing or of an unknown kind is reported
/// so, and its connections are refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_routes_as_upstream_connects_them() {
    let ca = common::ca::Ca::new("TLS routes CA");
    let backend = tls_backend(&ca, &["abc.example.com"], "tcp-backend");
    let passthrough = |name: &str, host: &str| {
        format!(
            "apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: {name}, namespace: gateway-conformance-infra}}
spec:
  gatewayClassName: weir
  listeners:
  - {{name: tls, port: 443, protocol: TLS, {host}tls: {{mode: Passthrough}}, allowedRoutes: {{kinds: [{{kind: TLSRoute}}]}}}}
---
"
        )
    };
    let route = |name: &str, gateway: &str, host: &str, backend: &str| {
        format!(
            "apiVersion: gateway.networking.k8s.io/v1alpha2
kind: TLSRoute
metadata: {{name: {name}, namespace: gateway-conformance-infra}}
spec:
  parentRefs: [{{name: {gateway}}}]
  hostnames: [{host}]
  rules: [{{backendRefs: [{backend}]}}]
---
"
        )
    };
    let mut case = passthrough("gateway-tlsroute", "hostname: '*.example.com', ");
    case += &passthrough("gateway-tlsroute-invalid-backend-ref-nonexistent", "");
    case += &passthrough("gateway-tlsroute-invalid-backend-ref-unknown-kind", "");
    case += &route(
        "gateway-conformance-infra-test",
        "gateway-tlsroute",
        "abc.example.com",
        "{name: tcp-backend, port: 8443}",
    );
    case += &route(
        "invalid-backend-ref-nonexistent",
        "gateway-tlsroute-invalid-backend-ref-nonexistent",
        "example.com",
        "{name: nonexistent, port: 443}",
    );
    case += &route(
        "invalid-backend-ref-unknown-kind",
        "gateway-tlsroute-invalid-backend-ref-unknown-kind",
        "example.com",
        "{group: unknownkind.example.com, kind: NonExistent, name: tls-backend, port: 443}",
    );
    case += &format!(
        "apiVersion: v1
kind: Service
metadata: {{name: tcp-backend, namespace: gateway-conformance-infra}}
spec:
  ports: [{{name: tls, port: 8443, targetPort: 8443}}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: tcp-backend-1
  namespace: gateway-conformance-infra
  labels: {{kubernetes.io/service-name: tcp-backend}}
addressType: IPv4
ports: [{{name: tls, port: {backend}}}]
endpoints:
- addresses: [127.0.0.1]
  conditions: {{ready: true}}
"
    );
    let bed = Bed::start_with(&case, &["--tls-listen", "x"]);
    let c = client();
    let name = |r: &str| format!("gateway-conformance-infra/{r}");
    let last = name("invalid-backend-ref-unknown-kind");
    let s = bed
        .status_when(&c, |s| s["tlsRoutes"].get(&last).is_some())
        .await;
    wait_ready(&c, &bed.weir).await;
    let parent_of = |r: &str| s["tlsRoutes"][name(r)]["parents"][0]["conditions"].clone();
    let ok = parent_of("gateway-conformance-infra-test");
    assert_eq!(cond_of(&ok, "Accepted"), yes("Accepted"), "{s:#}");
    assert_eq!(cond_of(&ok, "ResolvedRefs"), yes("ResolvedRefs"));
    for (r, reason) in [
        ("invalid-backend-ref-nonexistent", "BackendNotFound"),
        ("invalid-backend-ref-unknown-kind", "InvalidKind"),
    ] {
        let conds = parent_of(r);
        assert_eq!(cond_of(&conds, "Accepted"), yes("Accepted"), "{r}");
        assert_eq!(cond_of(&conds, "ResolvedRefs"), no(reason), "{r}");
    }
    let port = bed.tls_port.unwrap();
    let body = tls_call(port, &ca, "abc.example.com").await.unwrap();
    assert_eq!(body, "tcp-backend");
    let refused = tls_call(port, &ca, "example.com").await;
    assert!(refused.is_err(), "{refused:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_routes_pass_connections_through_by_server_name() {
    let ca = common::ca::Ca::new("passthrough test CA");
    let one = tls_backend(&ca, &["abc.example.com"], "tls-backend-one");
    let two = tls_backend(&ca, &["deep.x.wild.example.com"], "tls-backend-two");
    let case = format!(
        "\
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: tls-passthrough, namespace: gateway-conformance-infra}}
spec:
  gatewayClassName: weir
  listeners:
  - {{name: tls, port: 443, protocol: TLS, tls: {{mode: Passthrough}}, allowedRoutes: {{namespaces: {{from: Same}}}}}}
  - {{name: tls-terminate, port: 443, protocol: TLS, hostname: term.example.com}}
  - name: https
    port: 443
    protocol: HTTPS
    hostname: a.example.test
    tls: {{certificateRefs: [{{name: a-cert}}]}}
---
{secret_a_cert}---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: terminated, namespace: gateway-conformance-infra}}
spec:
  parentRefs: [{{name: tls-passthrough, sectionName: https}}]
  rules: [{{backendRefs: [{{name: infra-backend-v2, port: 8080}}]}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: TLSRoute
metadata: {{name: one, namespace: gateway-conformance-infra}}
spec:
  parentRefs: [{{name: tls-passthrough}}]
  hostnames: [abc.example.com]
  rules: [{{backendRefs: [{{name: tls-one, port: 8080}}]}}]
---
apiVersion: gateway.networking.k8s.io/v1alpha2
kind: TLSRoute
metadata: {{name: two, namespace: gateway-conformance-infra}}
spec:
  parentRefs: [{{name: tls-passthrough}}]
  hostnames: ['*.wild.example.com']
  rules: [{{backendRefs: [{{name: tls-two, port: 8080}}]}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: not-on-tls, namespace: gateway-conformance-infra}}
spec:
  parentRefs: [{{name: tls-passthrough, sectionName: tls}}]
  rules: [{{backendRefs: [{{name: infra-backend-v1, port: 8080}}]}}]
---
{}---
{}",
        backend_service("gateway-conformance-infra", "tls-one", one),
        backend_service("gateway-conformance-infra", "tls-two", two),
        secret_a_cert = tls_secret("gateway-conformance-infra", "a-cert", "a.example.test"),
    );
    let bed = Bed::start_with(&case, &["--tls-listen", "x"]);
    let c = client();
    let s = bed
        .status_when(&c, |s| {
            s["tlsRoutes"]
                .get("gateway-conformance-infra/two")
                .is_some()
        })
        .await;
    let p = &s["tlsRoutes"]["gateway-conformance-infra/one"]["parents"][0];
    assert_eq!(
        cond_of(&p["conditions"], "Accepted"),
        yes("Accepted"),
        "{s:#}"
    );
    let gw = &s["gateways"]["gateway-conformance-infra/tls-passthrough"];
    assert_eq!(gw["listeners"][0]["supportedKinds"][0]["kind"], "TLSRoute");
    assert_eq!(gw["listeners"][0]["attachedRoutes"], 2);
    assert_eq!(
        cond_of(&gw["listeners"][1]["conditions"], "ResolvedRefs"),
        no("InvalidCertificateRef"),
        "a terminating TLS listener needs a certificate"
    );
    let http = parent(
        &s,
        "gateway-conformance-infra/not-on-tls",
        "tls-passthrough",
    );
    assert_eq!(
        cond_of(&http["conditions"], "Accepted"),
        no("NotAllowedByListeners")
    );
    wait_ready(&c, &bed.weir).await;
    let port = bed.tls_port.unwrap();
    // The backends' own certificates, verified by the client: Weir did not terminate.
    assert_eq!(
        tls_call(port, &ca, "abc.example.com").await.as_deref(),
        Ok("tls-backend-one")
    );
    assert_eq!(
        tls_call(port, &ca, "deep.x.wild.example.com")
            .await
            .as_deref(),
        Ok("tls-backend-two")
    );
    // Other names are Weir's to terminate: an HTTPS listener's are served on the same socket,
    // for names without a certificate the handshake fails.
    let r = common::tls::get(port, "a.example.test", "/x", &[])
        .await
        .unwrap();
    served_by(&r.resp, "infra-backend-v2");
    assert!(tls_call(port, &ca, "other.example.com").await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backend_tls_policies_make_weir_speak_verified_tls_to_backends() {
    let ca = common::ca::Ca::new("backend TLS test CA");
    let good = tls_backend(&ca, &["backend.example"], "verified-backend");
    let case = format!(
        "\
apiVersion: v1
kind: ConfigMap
metadata: {{name: backend-ca, namespace: gateway-conformance-infra}}
data:
  ca.crt: |
{ca}
---
apiVersion: gateway.networking.k8s.io/v1
kind: BackendTLSPolicy
metadata: {{name: tls-b, namespace: gateway-conformance-infra}}
spec:
  targetRefs: [{{group: '', kind: Service, name: tls-b}}]
  validation: {{caCertificateRefs: [{{group: '', kind: ConfigMap, name: backend-ca}}], hostname: backend.example}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: BackendTLSPolicy
metadata: {{name: wrong-name, namespace: gateway-conformance-infra}}
spec:
  targetRefs: [{{group: '', kind: Service, name: tls-mismatch}}]
  validation: {{caCertificateRefs: [{{group: '', kind: ConfigMap, name: backend-ca}}], hostname: other.example}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: BackendTLSPolicy
metadata: {{name: by-san, namespace: gateway-conformance-infra}}
spec:
  targetRefs: [{{group: '', kind: Service, name: tls-san}}]
  validation:
    caCertificateRefs: [{{group: '', kind: ConfigMap, name: backend-ca}}]
    hostname: sni-only.example
    subjectAltNames: [{{type: Hostname, hostname: nope.example}}, {{type: Hostname, hostname: backend.example}}]
---
apiVersion: v1
kind: ConfigMap
metadata: {{name: garbled-ca, namespace: gateway-conformance-infra}}
data:
  ca.crt: |
    -----BEGIN CERTIFICATE-----
    bm90IGEgY2VydGlmaWNhdGU=
    -----END CERTIFICATE-----
---
apiVersion: gateway.networking.k8s.io/v1
kind: BackendTLSPolicy
metadata: {{name: garbled, namespace: gateway-conformance-infra}}
spec:
  targetRefs: [{{group: '', kind: Service, name: tls-garbled}}]
  validation: {{caCertificateRefs: [{{group: '', kind: ConfigMap, name: garbled-ca}}], hostname: backend.example}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: BackendTLSPolicy
metadata: {{name: no-ca, namespace: gateway-conformance-infra}}
spec:
  targetRefs: [{{group: '', kind: Service, name: tls-no-ca}}]
  validation: {{caCertificateRefs: [{{group: '', kind: ConfigMap, name: missing}}], hostname: backend.example}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: backend-tls, namespace: gateway-conformance-infra}}
spec:
  parentRefs: [{{name: same-namespace}}]
  rules:
  - matches: [{{path: {{type: Exact, value: /backendtlspolicy}}}}]
    backendRefs: [{{name: tls-b, port: 8080}}]
  - matches: [{{path: {{type: Exact, value: /host-mismatch}}}}]
    backendRefs: [{{name: tls-mismatch, port: 8080}}]
  - matches: [{{path: {{type: Exact, value: /no-ca}}}}]
    backendRefs: [{{name: tls-no-ca, port: 8080}}]
  - matches: [{{path: {{type: Exact, value: /plain}}}}]
    backendRefs: [{{name: tls-plain, port: 8080}}]
  - matches: [{{path: {{type: Exact, value: /san}}}}]
    backendRefs: [{{name: tls-san, port: 8080}}]
  - matches: [{{path: {{type: Exact, value: /garbled}}}}]
    backendRefs: [{{name: tls-garbled, port: 8080}}]
---
{}---
{}---
{}---
{}---
{}---
{}",
        backend_service("gateway-conformance-infra", "tls-b", good),
        backend_service("gateway-conformance-infra", "tls-mismatch", good),
        backend_service("gateway-conformance-infra", "tls-no-ca", good),
        backend_service("gateway-conformance-infra", "tls-plain", good),
        backend_service("gateway-conformance-infra", "tls-san", good),
        backend_service("gateway-conformance-infra", "tls-garbled", good),
        ca = indent(&ca.pem()),
    );
    let bed = Bed::start(&case);
    let c = client();
    let s = bed
        .route_status(&c, "gateway-conformance-infra/backend-tls")
        .await;
    let r = bed
        .request(&c, "tls.example", "/backendtlspolicy", &[])
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(&r.body[..], b"verified-backend");
    // A certificate naming one of the subjectAltNames (not the SNI) is accepted.
    let r = bed.request(&c, "tls.example", "/san", &[]).await;
    assert_eq!(r.status, 200);
    assert_eq!(&r.body[..], b"verified-backend");
    // The certificate does not name the policy's host name: Weir refuses the backend (503, a
    // Gateway API route's answer for a backend it cannot reach).
    let r = bed.request(&c, "tls.example", "/host-mismatch", &[]).await;
    assert_eq!(r.status, 503);
    // Without a policy the backend is spoken to in plain HTTP, which it does not understand.
    let r = bed.request(&c, "tls.example", "/plain", &[]).await;
    assert_ne!(r.status, 200);
    // A policy that cannot be applied: 500, never plain text; the policy says why.
    let r = bed.request(&c, "tls.example", "/no-ca", &[]).await;
    assert_eq!(r.status, 500);
    let policies = &s["backendTLSPolicies"];
    let ok = &policies["gateway-conformance-infra/tls-b"]["ancestors"][0];
    assert_eq!(ok["ancestorRef"]["name"], "same-namespace", "{policies:#}");
    assert_eq!(cond_of(&ok["conditions"], "Accepted"), yes("Accepted"));
    // A CA that does not parse is the policy's problem: 500, and the policy says so.
    let r = bed.request(&c, "tls.example", "/garbled", &[]).await;
    assert_eq!(r.status, 500);
    let garbled = &policies["gateway-conformance-infra/garbled"]["ancestors"][0];
    assert_eq!(
        cond_of(&garbled["conditions"], "ResolvedRefs"),
        no("InvalidCACertificateRef")
    );
    let bad = &policies["gateway-conformance-infra/no-ca"]["ancestors"][0];
    assert_eq!(
        cond_of(&bad["conditions"], "ResolvedRefs"),
        no("InvalidCACertificateRef")
    );
    let route = parent(
        &s,
        "gateway-conformance-infra/backend-tls",
        "same-namespace",
    );
    assert_eq!(cond_of(&route["conditions"], "ResolvedRefs").0, "False");
}

/// BackendTLSPolicyInvalidCACertificateRef and BackendTLSPolicyInvalidKind: a CA reference
/// to a missing ConfigMap, to one without `ca.crt`, or to another kind leaves the policy not
/// accepted, with the spec's reasons, and its Services' shares answered 5xx.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backend_tls_policies_with_unusable_ca_references_as_upstream_reads_them() {
    let port = free_port();
    let case = format!(
        "\
apiVersion: gateway.networking.k8s.io/v1
kind: BackendTLSPolicy
metadata: {{name: nonexistent-ca-certificate-ref, namespace: gateway-conformance-infra}}
spec:
  targetRefs: [{{group: '', kind: Service, name: backendtlspolicy-nonexistent-ca-certificate-ref-test}}]
  validation: {{caCertificateRefs: [{{group: '', kind: ConfigMap, name: nonexistent-ca-certificate}}], hostname: abc.example.com}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: BackendTLSPolicy
metadata: {{name: malformed-ca-certificate-ref, namespace: gateway-conformance-infra}}
spec:
  targetRefs: [{{group: '', kind: Service, name: backendtlspolicy-malformed-ca-certificate-ref-test}}]
  validation: {{caCertificateRefs: [{{group: '', kind: ConfigMap, name: malformed-ca-certificate}}], hostname: abc.example.com}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: BackendTLSPolicy
metadata: {{name: invalid-kind, namespace: gateway-conformance-infra}}
spec:
  targetRefs: [{{group: '', kind: Service, name: backendtlspolicy-invalid-kind-test}}]
  validation: {{caCertificateRefs: [{{group: invalid.io, kind: InvalidKind, name: invalid-kind}}], hostname: abc.example.com}}
---
apiVersion: v1
kind: ConfigMap
metadata: {{name: malformed-ca-certificate, namespace: gateway-conformance-infra}}
data: {{}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: backendtlspolicy-invalid, namespace: gateway-conformance-infra}}
spec:
  parentRefs: [{{name: same-namespace}}]
  hostnames: [abc.example.com]
  rules:
  - matches: [{{path: {{type: Exact, value: /backendtlspolicy-nonexistent-ca-certificate-ref}}}}]
    backendRefs: [{{name: backendtlspolicy-nonexistent-ca-certificate-ref-test, port: 8080}}]
  - matches: [{{path: {{type: Exact, value: /backendtlspolicy-malformed-ca-certificate-ref}}}}]
    backendRefs: [{{name: backendtlspolicy-malformed-ca-certificate-ref-test, port: 8080}}]
  - matches: [{{path: {{type: Exact, value: /backendtlspolicy-invalid-kind}}}}]
    backendRefs: [{{name: backendtlspolicy-invalid-kind-test, port: 8080}}]
---
{}---
{}---
{}",
        backend_service("gateway-conformance-infra", "backendtlspolicy-nonexistent-ca-certificate-ref-test", port),
        backend_service("gateway-conformance-infra", "backendtlspolicy-malformed-ca-certificate-ref-test", port),
        backend_service("gateway-conformance-infra", "backendtlspolicy-invalid-kind-test", port),
    );
    let bed = Bed::start(&case);
    let c = client();
    let policies = [
        ("nonexistent-ca-certificate-ref", "InvalidCACertificateRef"),
        ("malformed-ca-certificate-ref", "InvalidCACertificateRef"),
        ("invalid-kind", "InvalidKind"),
    ];
    // Every policy's status, not only the route's: a status may be published while the
    // policies are still being listed.
    let s = bed
        .status_when(&c, |s| {
            s["httpRoutes"]
                .get("gateway-conformance-infra/backendtlspolicy-invalid")
                .is_some()
                && policies.iter().all(|(p, _)| {
                    let key = format!("gateway-conformance-infra/{p}");
                    s["backendTLSPolicies"][key]["ancestors"][0]["conditions"].is_array()
                })
        })
        .await;
    wait_ready(&c, &bed.weir).await;
    for (policy, reason) in policies {
        let p =
            &s["backendTLSPolicies"][format!("gateway-conformance-infra/{policy}")]["ancestors"][0];
        assert_eq!(
            p["ancestorRef"]["name"], "same-namespace",
            "{policy}: {p:#}"
        );
        assert_eq!(
            cond_of(&p["conditions"], "Accepted"),
            no("NoValidCACertificate"),
            "{policy}"
        );
        assert_eq!(
            cond_of(&p["conditions"], "ResolvedRefs"),
            no(reason),
            "{policy}"
        );
        let r = bed
            .request(
                &c,
                "abc.example.com",
                &format!("/backendtlspolicy-{policy}"),
                &[],
            )
            .await;
        assert!(
            [500, 502, 503].contains(&r.status),
            "{policy}: {}",
            r.status
        );
    }
}

/// BackendTLSPolicySANValidation's cases: `subjectAltNames` of type `Hostname` and `URI`
/// (a SPIFFE identity), alone and together; any one listed name the certificate carries will
/// do, and a certificate carrying none of them is refused (503).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backend_tls_policies_match_hostname_and_uri_subject_alt_names() {
    let ca = common::ca::Ca::new("SAN validation CA");
    let leaf = ca.leaf_with_uris(
        &["abc.example.com"],
        &["spiffe://abc.example.com/test-identity"],
        rcgen::ExtendedKeyUsagePurpose::ServerAuth,
    );
    let port = tls_backend_serving(&leaf, "san-backend", None);
    // (policy and Service name, subjectAltNames, answered)
    let policies = [
        ("san-host", "[{type: Hostname, hostname: abc.example.com}]", 200),
        ("san-host-mismatch", "[{type: Hostname, hostname: dce.example.com}]", 503),
        ("san-uri", "[{type: URI, uri: 'spiffe://abc.example.com/test-identity'}]", 200),
        ("san-uri-mismatch", "[{type: URI, uri: 'spiffe://def.example.com/test-identity'}]", 503),
        (
            "san-both",
            "[{type: Hostname, hostname: dce.example.com}, {type: URI, uri: 'spiffe://abc.example.com/test-identity'}]",
            200,
        ),
        (
            "san-neither",
            "[{type: Hostname, hostname: dce.example.com}, {type: URI, uri: 'spiffe://def.example.com/test-identity'}]",
            503,
        ),
    ];
    let ns = "gateway-conformance-infra";
    let mut case = format!(
        "apiVersion: v1
kind: ConfigMap
metadata: {{name: backend-ca, namespace: {ns}}}
data:
  ca.crt: {}
---
",
        common::ca::block(&ca.pem(), 4)
    );
    let mut rules = String::new();
    for (name, sans, _) in policies {
        case += &format!(
            "apiVersion: gateway.networking.k8s.io/v1
kind: BackendTLSPolicy
metadata: {{name: {name}, namespace: {ns}}}
spec:
  targetRefs: [{{group: '', kind: Service, name: {name}}}]
  validation:
    caCertificateRefs: [{{group: '', kind: ConfigMap, name: backend-ca}}]
    hostname: abc.example.com
    subjectAltNames: {sans}
---
{}---
",
            backend_service(ns, name, port)
        );
        rules += &format!(
            "  - matches: [{{path: {{type: Exact, value: /{name}}}}}]
    backendRefs: [{{name: {name}, port: 8080}}]
"
        );
    }
    case += &format!(
        "apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: san-validation, namespace: {ns}}}
spec:
  parentRefs: [{{name: same-namespace}}]
  rules:
{rules}"
    );
    let bed = Bed::start(&case);
    let c = client();
    let s = bed
        .route_status(&c, "gateway-conformance-infra/san-validation")
        .await;
    route_ok(
        &s,
        "gateway-conformance-infra/san-validation",
        "same-namespace",
    );
    for (name, _, want) in policies {
        let r = bed
            .request(&c, "san.example", &format!("/{name}"), &[])
            .await;
        assert_eq!(r.status, want, "{name}");
        if want == 200 {
            assert_eq!(&r.body[..], b"san-backend", "{name}");
        }
        let policy = &s["backendTLSPolicies"][format!("{ns}/{name}")]["ancestors"][0];
        assert_eq!(
            cond_of(&policy["conditions"], "Accepted"),
            yes("Accepted"),
            "{name}"
        );
    }
}

/// GatewayBackendClientCertificate: a Gateway's `spec.tls.backend.clientCertificateRef` is
/// presented to the backends its routes reach over TLS (GatewayTLSBackendClientCertificate),
/// and a reference that cannot be used leaves the Gateway accepted with `ResolvedRefs: False`
/// and the spec's reason (GatewayInvalidTLSBackendConfiguration).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateways_present_their_client_certificate_to_tls_backends() {
    let ca = common::ca::Ca::new("backend TLS test CA");
    let clients = common::ca::Ca::new("client certificates CA");
    let leaf = clients.leaf(
        &["gateway.example"],
        rcgen::ExtendedKeyUsagePurpose::ClientAuth,
    );
    let strict = tls_backend_for(&ca, &["abc.example.com"], "mtls-backend", Some(&clients));
    let gateway = |name: &str, reference: &str| {
        format!(
            "apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: {name}, namespace: gateway-conformance-infra}}
spec:
  gatewayClassName: weir
  listeners: [{{name: http, port: 80, protocol: HTTP, hostname: {name}.example, allowedRoutes: {{namespaces: {{from: Same}}}}}}]
  tls: {{backend: {{clientCertificateRef: {reference}}}}}
---
"
        )
    };
    let mut case = String::new();
    case += &gateway("with-cert", "{group: '', kind: Secret, name: client-cert}");
    case += &gateway(
        "nonexistent",
        "{group: '', kind: Secret, name: nonexistent-certificate}",
    );
    case += &gateway(
        "wrong-group",
        "{group: wrong.group.company.io, kind: Secret, name: client-cert}",
    );
    case += &gateway(
        "wrong-kind",
        "{group: '', kind: WrongKind, name: client-cert}",
    );
    case += &gateway(
        "malformed",
        "{group: '', kind: Secret, name: malformed-client-certificate}",
    );
    case += &gateway(
        "no-grant",
        "{group: '', kind: Secret, name: client-cert, namespace: gateway-conformance-web-backend}",
    );
    case += &format!(
        "apiVersion: v1
kind: Secret
metadata: {{name: client-cert, namespace: {ns}}}
type: kubernetes.io/tls
stringData:
  tls.crt: {crt}
  tls.key: {key}
---
apiVersion: v1
kind: Secret
metadata: {{name: client-cert, namespace: gateway-conformance-web-backend}}
type: kubernetes.io/tls
stringData:
  tls.crt: {crt}
  tls.key: {key}
---
apiVersion: v1
kind: Secret
metadata: {{name: malformed-client-certificate, namespace: {ns}}}
type: Opaque
data: {{}}
---
apiVersion: v1
kind: ConfigMap
metadata: {{name: backend-ca, namespace: {ns}}}
data:
  ca.crt: {ca}
---
apiVersion: gateway.networking.k8s.io/v1
kind: BackendTLSPolicy
metadata: {{name: mtls, namespace: {ns}}}
spec:
  targetRefs: [{{group: '', kind: Service, name: tls-backend-with-client-cert-validation}}]
  validation: {{caCertificateRefs: [{{group: '', kind: ConfigMap, name: backend-ca}}], hostname: abc.example.com}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: with-cert, namespace: {ns}}}
spec:
  parentRefs: [{{name: with-cert}}]
  rules: [{{backendRefs: [{{name: tls-backend-with-client-cert-validation, port: 8080}}]}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: without-cert, namespace: {ns}}}
spec:
  parentRefs: [{{name: nonexistent}}]
  rules: [{{backendRefs: [{{name: tls-backend-with-client-cert-validation, port: 8080}}]}}]
---
{service}",
        ns = "gateway-conformance-infra",
        crt = common::ca::block(&leaf.pem, 4),
        key = common::ca::block(&leaf.key_pem, 4),
        ca = common::ca::block(&ca.pem(), 4),
        service = backend_service(
            "gateway-conformance-infra",
            "tls-backend-with-client-cert-validation",
            strict
        ),
    );
    let bed = Bed::start(&case);
    let c = client();
    bed.route_status(&c, "gateway-conformance-infra/with-cert")
        .await;
    let s = bed
        .route_status(&c, "gateway-conformance-infra/without-cert")
        .await;
    route_ok(&s, "gateway-conformance-infra/with-cert", "with-cert");
    let policy = &s["backendTLSPolicies"]["gateway-conformance-infra/mtls"]["ancestors"][0];
    assert_eq!(cond_of(&policy["conditions"], "Accepted"), yes("Accepted"));
    let r = bed.request(&c, "with-cert.example", "/", &[]).await;
    assert_eq!(r.status, 200);
    assert_eq!(&r.body[..], b"mtls-backend");
    // The same backend through a Gateway without a usable client certificate: the backend
    // refuses the handshake.
    let r = bed.request(&c, "nonexistent.example", "/", &[]).await;
    assert_eq!(r.status, 503);
    let gateways = &s["gateways"];
    let good = &gateways["gateway-conformance-infra/with-cert"]["conditions"];
    assert_eq!(cond_of(good, "ResolvedRefs"), yes("ResolvedRefs"));
    assert_eq!(cond_of(good, "Accepted"), yes("Accepted"));
    for (name, reason) in [
        ("nonexistent", "InvalidClientCertificateRef"),
        ("wrong-group", "InvalidClientCertificateRef"),
        ("wrong-kind", "InvalidClientCertificateRef"),
        ("malformed", "InvalidClientCertificateRef"),
        ("no-grant", "RefNotPermitted"),
    ] {
        let conds = &gateways[format!("gateway-conformance-infra/{name}")]["conditions"];
        assert_eq!(
            cond_of(conds, "ResolvedRefs"),
            no(reason),
            "{name}: {conds:#}"
        );
        assert_eq!(cond_of(conds, "Accepted"), yes("Accepted"), "{name}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_stop_at_the_rules_request_timeout() {
    let case = "\
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: retries-with-timeouts, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /retry/backend-request-timeout-200ms}}]
    retry: {attempts: 2}
    timeouts: {backendRequest: 200ms}
    backendRefs: [{name: infra-backend-v3, port: 8080}]
  - matches: [{path: {type: PathPrefix, value: /retry/request-timeout-200ms}}]
    retry: {codes: [500], attempts: 5}
    timeouts: {backendRequest: 200ms, request: 400ms}
    backendRefs: [{name: infra-backend-v3, port: 8080}]
";
    let bed = Bed::start(case);
    let c = client();
    let route = "gateway-conformance-infra/retries-with-timeouts";
    let s = bed.route_status(&c, route).await;
    route_ok(&s, route, "same-namespace");
    // (path, the backend's failing answers: status, how many, delay; what the client gets)
    let cases = [
        ("/retry/backend-request-timeout-200ms", 500, 2, 300, 200),
        ("/retry/backend-request-timeout-200ms", 500, 3, 300, 504),
        ("/retry/request-timeout-200ms", 500, 1, 0, 200),
        ("/retry/request-timeout-200ms", 500, 4, 100, 504),
    ];
    for (i, (path, code, fail, delay, want)) in cases.into_iter().enumerate() {
        let uri = format!("{path}?status={code}&fail={fail}&delay_ms={delay}&key=t{i}");
        let started = std::time::Instant::now();
        let r = bed.request(&c, "retry.example", &uri, &[]).await;
        assert_eq!(r.status, want, "{uri} after {:?}", started.elapsed());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_routes_of_terminating_listeners_get_the_decrypted_bytes() {
    let case = format!(
        "\
{secret_a_cert}---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: tls-terminate, namespace: gateway-conformance-infra}}
spec:
  gatewayClassName: weir
  listeners:
  - name: tls
    port: 443
    protocol: TLS
    hostname: a.example.test
    tls: {{mode: Terminate, certificateRefs: [{{name: a-cert}}]}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: TLSRoute
metadata: {{name: terminated, namespace: gateway-conformance-infra}}
spec:
  parentRefs: [{{name: tls-terminate}}]
  rules: [{{backendRefs: [{{name: infra-backend-v1, port: 8080}}]}}]
",
        secret_a_cert = tls_secret("gateway-conformance-infra", "a-cert", "a.example.test"),
    );
    let bed = Bed::start_with(&case, &["--tls-listen", "x"]);
    let c = client();
    let s = bed
        .status_when(&c, |s| {
            s["tlsRoutes"]
                .get("gateway-conformance-infra/terminated")
                .is_some()
        })
        .await;
    let gw = &s["gateways"]["gateway-conformance-infra/tls-terminate"];
    assert_eq!(
        cond_of(&gw["listeners"][0]["conditions"], "Accepted"),
        yes("Accepted"),
        "{gw:#}"
    );
    wait_ready(&c, &bed.weir).await;
    // Weir's certificate for the name, then the bytes inside reach the backend as they are:
    // the HTTP request the client wrote is answered by the echo, not routed by Weir.
    let r = common::tls::get(bed.tls_port.unwrap(), "a.example.test", "/inside", &[])
        .await
        .unwrap();
    served_by(&r.resp, "infra-backend-v1");
    assert_eq!(r.resp.json()["path"], "/inside");
    assert_eq!(r.resp.header("x-echo-name"), Some("infra-backend-v1"));
    assert_eq!(
        r.resp.json()["headers"]["x-forwarded-for"],
        Value::Null,
        "nothing added"
    );
}

/// HTTPRouteHTTPSListenerDetectMisdirectedRequests: four HTTPS listeners sharing one Secret
/// (one without a host name); a request whose Host belongs to another listener than its SNI
/// gets 421, over HTTP/2 as the suite sends it. Also HTTPRouteHTTPSListener, on the same
/// Gateway.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_of_another_listener_is_misdirected_even_with_one_certificate() {
    let ca = common::ca::Ca::new("misdirected requests CA");
    let names = [
        "example.org",
        "second-example.org",
        "*.wildcard.org",
        "unknown-example.org",
    ];
    let leaf = ca.leaf(&names, rcgen::ExtendedKeyUsagePurpose::ServerAuth);
    let listener = |name: &str, host: Option<&str>| {
        let host = host.map_or(String::new(), |h| format!("hostname: '{h}', "));
        format!(
            "  - {{name: {name}, port: 443, protocol: HTTPS, {host}tls: {{certificateRefs: [{{name: tls-validity-checks-certificate}}]}}}}\n"
        )
    };
    let route = |n: usize, section: &str, hosts: &str, backend: &str| {
        format!(
            "apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: misdirected-{n}, namespace: gateway-conformance-infra}}
spec:
  parentRefs: [{{name: same-namespace-with-https-listener, sectionName: {section}}}]
  {hosts}
  rules:
  - matches: [{{path: {{type: PathPrefix, value: /detect-misdirected-requests}}}}]
    backendRefs: [{{name: {backend}, port: 8080}}]
---
"
        )
    };
    let mut case = format!(
        "apiVersion: v1
kind: Secret
metadata: {{name: tls-validity-checks-certificate, namespace: gateway-conformance-infra}}
type: kubernetes.io/tls
stringData:
  tls.crt: {crt}
  tls.key: {key}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: same-namespace-with-https-listener, namespace: gateway-conformance-infra}}
spec:
  gatewayClassName: weir
  listeners:
{l1}{l2}{l3}{l4}---
",
        crt = common::ca::block(&leaf.pem, 4),
        key = common::ca::block(&leaf.key_pem, 4),
        l1 = listener("https", None),
        l2 = listener("https-with-hostname", Some("second-example.org")),
        l3 = listener("https-with-wildcard-hostname", Some("*.wildcard.org")),
        l4 = listener(
            "https-with-specific-hostname",
            Some("fourth-example.wildcard.org")
        ),
    );
    case += &route(1, "https", "hostnames: [example.org]", "infra-backend-v1");
    case += &route(2, "https-with-hostname", "", "infra-backend-v2");
    case += &route(3, "https-with-wildcard-hostname", "", "infra-backend-v3");
    case += &route(4, "https-with-specific-hostname", "", "infra-backend-v1");
    // HTTPRouteHTTPSListener's routes, on the same Gateway.
    case += "apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: httproute-https-test, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace-with-https-listener}]
  hostnames: [example.org]
  rules: [{backendRefs: [{name: infra-backend-v1, port: 8080}]}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: httproute-https-test-no-hostname, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace-with-https-listener, sectionName: https-with-hostname}]
  rules: [{backendRefs: [{name: infra-backend-v2, port: 8080}]}]
";
    let bed = Bed::start_with(&case, &["--tls-listen", "x"]);
    let c = client();
    let s = bed
        .route_status(&c, "gateway-conformance-infra/misdirected-4")
        .await;
    for n in 1..=4 {
        let route = format!("gateway-conformance-infra/misdirected-{n}");
        route_ok(&s, &route, "same-namespace-with-https-listener");
    }
    for route in ["httproute-https-test", "httproute-https-test-no-hostname"] {
        let route = format!("gateway-conformance-infra/{route}");
        route_ok(&s, &route, "same-namespace-with-https-listener");
    }
    let port = bed.tls_port.unwrap();
    let v1 = Some("infra-backend-v1");
    let (v2, v3) = (Some("infra-backend-v2"), Some("infra-backend-v3"));
    // (SNI, Host, status, backend) as the upstream case has them.
    let cases = [
        ("example.org", "example.org", 200, v1),
        ("example.org", "second-example.org", 421, None),
        ("example.org", "unknown-example.org", 404, None),
        ("second-example.org", "second-example.org", 200, v2),
        ("second-example.org", "example.org", 421, None),
        ("second-example.org", "unknown-example.org", 421, None),
        (
            "third-example.wildcard.org",
            "third-example.wildcard.org",
            200,
            v3,
        ),
        (
            "third-example.wildcard.org",
            "fith-example.wildcard.org",
            200,
            v3,
        ),
        (
            "third-example.wildcard.org",
            "fourth-example.wildcard.org",
            421,
            None,
        ),
        (
            "third-example.wildcard.org",
            "second-example.org",
            421,
            None,
        ),
        (
            "third-example.wildcard.org",
            "unknown-example.org",
            421,
            None,
        ),
        (
            "fourth-example.wildcard.org",
            "fourth-example.wildcard.org",
            200,
            v1,
        ),
        (
            "fourth-example.wildcard.org",
            "fith-example.wildcard.org",
            421,
            None,
        ),
        ("unknown-example.org", "example.org", 200, v1),
        ("unknown-example.org", "unknown-example.org", 404, None),
    ];
    let connector = common::tls::connector_trusting(ca.issuer.der().clone(), &["h2"]);
    for (sni, host, status, backend) in cases {
        let got =
            common::tls::exchange(&connector, port, sni, host, "/detect-misdirected-requests")
                .await
                .unwrap_or_else(|e| panic!("{sni} / {host}: {e}"));
        assert_eq!(got.resp.status, status, "SNI {sni}, Host {host}");
        if let Some(b) = backend {
            served_by(&got.resp, b);
        }
    }
    // HTTPRouteHTTPSListener: SNI and Host alike, path `/`.
    for (host, status, backend) in [
        ("example.org", 200, v1),
        ("unknown-example.org", 404, None),
        ("second-example.org", 200, v2),
    ] {
        let got = common::tls::exchange(&connector, port, host, host, "/")
            .await
            .unwrap_or_else(|e| panic!("{host}: {e}"));
        assert_eq!(got.resp.status, status, "{host}");
        if let Some(b) = backend {
            served_by(&got.resp, b);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_for_another_certificates_host_is_misdirected() {
    let case = format!(
        "\
{secret_a_cert}---
{secret_wild_cert}---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: two-certs, namespace: gateway-conformance-infra}}
spec:
  gatewayClassName: weir
  listeners:
  - {{name: a, port: 443, protocol: HTTPS, hostname: a.example.test, tls: {{certificateRefs: [{{name: a-cert}}]}}}}
  - {{name: wild, port: 443, protocol: HTTPS, hostname: '*.example.test', tls: {{certificateRefs: [{{name: wild-cert}}]}}}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: both, namespace: gateway-conformance-infra}}
spec:
  parentRefs: [{{name: two-certs}}]
  rules: [{{backendRefs: [{{name: infra-backend-v1, port: 8080}}]}}]
",
        secret_a_cert = tls_secret("gateway-conformance-infra", "a-cert", "a.example.test"),
        secret_wild_cert = tls_secret("gateway-conformance-infra", "wild-cert", "wild.example.test"),
    );
    let bed = Bed::start_with(&case, &["--tls-listen", "x"]);
    let c = client();
    bed.route_status(&c, "gateway-conformance-infra/both").await;
    let port = bed.tls_port.unwrap();
    for alpn in [&["http/1.1"][..], &["h2"][..]] {
        let same = common::tls::get(port, "a.example.test", "/", alpn)
            .await
            .unwrap();
        served_by(&same.resp, "infra-backend-v1");
        let other = common::tls::get_with_host(port, "a.example.test", "x.example.test", "/", alpn)
            .await
            .unwrap();
        assert_eq!(other.resp.status, 421, "{alpn:?}");
        // Its own connection: served.
        let own = common::tls::get(port, "x.example.test", "/", alpn)
            .await
            .unwrap();
        served_by(&own.resp, "infra-backend-v1");
        // A host without a certificate of its own is not refused.
        let plain = common::tls::get_with_host(port, "a.example.test", "other.test", "/", alpn)
            .await
            .unwrap();
        assert_ne!(plain.resp.status, 421, "{alpn:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_wait_their_backoff() {
    let case = "\
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: backoff, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /backoff}}]
    retry: {codes: [503], attempts: 3, backoff: 300ms}
    backendRefs: [{name: infra-backend-v3, port: 8080}]
";
    let bed = Bed::start(case);
    let c = client();
    bed.route_status(&c, "gateway-conformance-infra/backoff")
        .await;
    let started = std::time::Instant::now();
    let r = bed
        .request(&c, "retry.example", "/backoff?status=503&fail=2&key=b", &[])
        .await;
    assert_eq!(r.status, 200, "the third try answers");
    // Two retries, each after its backoff: a lower bound only (no upper bound in a test).
    assert!(
        started.elapsed() >= Duration::from_millis(600),
        "{:?}",
        started.elapsed()
    );
}

/// The values of request header `name` (lower case) the echo backend saw, in order: one per
/// header line, or per comma-separated element of one line.
fn seen_values(j: &Value, name: &str) -> Vec<String> {
    let split = |s: &str| {
        s.split(',')
            .map(|v| v.trim().to_string())
            .collect::<Vec<_>>()
    };
    match &j["headers"][name] {
        Value::String(s) => split(s),
        Value::Array(a) => a
            .iter()
            .filter_map(|v| v.as_str())
            .flat_map(split)
            .collect(),
        _ => Vec::new(),
    }
}

/// HTTPRouteRequestHeaderModifier's route: header modifiers on each rule.
const REQUEST_HEADER_MODIFIERS: &str = "\
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: request-header-modifier, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /set}}]
    filters:
    - {type: RequestHeaderModifier, requestHeaderModifier: {set: [{name: X-Header-Set, value: set-overwrites-values}]}}
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches: [{path: {type: PathPrefix, value: /add}}]
    filters:
    - {type: RequestHeaderModifier, requestHeaderModifier: {add: [{name: X-Header-Add, value: add-appends-values}]}}
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches: [{path: {type: PathPrefix, value: /remove}}]
    filters:
    - {type: RequestHeaderModifier, requestHeaderModifier: {remove: [X-Header-Remove]}}
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches: [{path: {type: PathPrefix, value: /multiple}}]
    filters:
    - type: RequestHeaderModifier
      requestHeaderModifier:
        set: [{name: X-Header-Set-1, value: header-set-1}, {name: X-Header-Set-2, value: header-set-2}]
        add:
        - {name: X-Header-Add-1, value: header-add-1}
        - {name: X-Header-Add-2, value: header-add-2}
        - {name: X-Header-Add-3, value: header-add-3}
        remove: [X-Header-Remove-1, X-Header-Remove-2]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches: [{path: {type: PathPrefix, value: /case-insensitivity}}]
    filters:
    - type: RequestHeaderModifier
      requestHeaderModifier:
        set: [{name: X-Header-Set, value: header-set}]
        add: [{name: X-Header-Add, value: header-add}]
        remove: [X-Header-Remove]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches: [{path: {type: PathPrefix, value: /set-host}}]
    filters:
    - {type: RequestHeaderModifier, requestHeaderModifier: {set: [{name: Host, value: internal.example}]}}
    backendRefs: [{name: infra-backend-v1, port: 8080}]
";

/// HTTPRouteBackendRequestHeaderModifier's route: the same modifiers on each rule's backendRef.
const BACKEND_REQUEST_HEADER_MODIFIERS: &str = "\
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: request-header-modifier, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /set}}]
    backendRefs:
    - name: infra-backend-v1
      port: 8080
      filters:
        - {type: RequestHeaderModifier, requestHeaderModifier: {set: [{name: X-Header-Set, value: set-overwrites-values}]}}
  - matches: [{path: {type: PathPrefix, value: /add}}]
    backendRefs:
    - name: infra-backend-v1
      port: 8080
      filters:
        - {type: RequestHeaderModifier, requestHeaderModifier: {add: [{name: X-Header-Add, value: add-appends-values}]}}
  - matches: [{path: {type: PathPrefix, value: /remove}}]
    backendRefs:
    - name: infra-backend-v1
      port: 8080
      filters:
        - {type: RequestHeaderModifier, requestHeaderModifier: {remove: [X-Header-Remove]}}
  - matches: [{path: {type: PathPrefix, value: /multiple}}]
    backendRefs:
    - name: infra-backend-v1
      port: 8080
      filters:
        - type: RequestHeaderModifier
          requestHeaderModifier:
            set: [{name: X-Header-Set-1, value: header-set-1}, {name: X-Header-Set-2, value: header-set-2}]
            add:
            - {name: X-Header-Add-1, value: header-add-1}
            - {name: X-Header-Add-2, value: header-add-2}
            - {name: X-Header-Add-3, value: header-add-3}
            remove: [X-Header-Remove-1, X-Header-Remove-2]
  - matches: [{path: {type: PathPrefix, value: /case-insensitivity}}]
    backendRefs:
    - name: infra-backend-v1
      port: 8080
      filters:
        - type: RequestHeaderModifier
          requestHeaderModifier:
            set: [{name: X-Header-Set, value: header-set}]
            add: [{name: X-Header-Add, value: header-add}]
            remove: [X-Header-Remove]
  - matches: [{path: {type: PathPrefix, value: /set-host}}]
    backendRefs:
    - name: infra-backend-v1
      port: 8080
      filters:
        - {type: RequestHeaderModifier, requestHeaderModifier: {set: [{name: Host, value: internal.example}]}}
";

/// HTTPRouteRequestHeaderModifier: `set` replaces, `add` appends to what the client sent,
/// `remove` drops; several of each in one filter; names in any case.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_header_modifiers_set_add_and_remove_as_upstream_sends_them() {
    header_modifier_requests(REQUEST_HEADER_MODIFIERS).await;
}

/// HTTPRouteBackendRequestHeaderModifier: the same requests and answers, the modifiers on the
/// backendRefs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backend_request_header_modifiers_as_upstream_sends_them() {
    header_modifier_requests(BACKEND_REQUEST_HEADER_MODIFIERS).await;
}

/// The suite's requests to route `request-header-modifier` (`case`), and what the backend
/// must see of each.
async fn header_modifier_requests(case: &str) {
    let bed = Bed::start(case);
    let c = client();
    let route = "gateway-conformance-infra/request-header-modifier";
    let s = bed.route_status(&c, route).await;
    route_ok(&s, route, "same-namespace");
    // (path, headers sent, headers the backend must see, headers it must not)
    type Case<'a> = (&'a str, Headers<'a>, Headers<'a>, &'a [&'a str]);
    let cases: &[Case] = &[
        (
            "/set",
            &[("Some-Other-Header", "val")],
            &[
                ("some-other-header", "val"),
                ("x-header-set", "set-overwrites-values"),
            ],
            &[],
        ),
        (
            "/set",
            &[
                ("Some-Other-Header", "val"),
                ("X-Header-Set", "some-other-value"),
            ],
            &[
                ("some-other-header", "val"),
                ("x-header-set", "set-overwrites-values"),
            ],
            &[],
        ),
        (
            "/add",
            &[("Some-Other-Header", "val")],
            &[
                ("some-other-header", "val"),
                ("x-header-add", "add-appends-values"),
            ],
            &[],
        ),
        (
            "/add",
            &[
                ("Some-Other-Header", "val"),
                ("X-Header-Add", "some-other-value"),
            ],
            &[
                ("some-other-header", "val"),
                ("x-header-add", "some-other-value,add-appends-values"),
            ],
            &[],
        ),
        (
            "/remove",
            &[("X-Header-Remove", "val")],
            &[],
            &["x-header-remove"],
        ),
        (
            "/multiple",
            &[
                ("X-Header-Set-2", "set-val-2"),
                ("X-Header-Add-2", "add-val-2"),
                ("X-Header-Remove-2", "remove-val-2"),
                ("Another-Header", "another-header-val"),
            ],
            &[
                ("x-header-set-1", "header-set-1"),
                ("x-header-set-2", "header-set-2"),
                ("x-header-add-1", "header-add-1"),
                ("x-header-add-2", "add-val-2,header-add-2"),
                ("x-header-add-3", "header-add-3"),
                ("another-header", "another-header-val"),
            ],
            &["x-header-remove-1", "x-header-remove-2"],
        ),
        (
            "/case-insensitivity",
            &[
                ("x-header-set", "original-val-set"),
                ("x-header-add", "original-val-add"),
                ("x-header-remove", "original-val-remove"),
                ("Another-Header", "another-header-val"),
            ],
            &[
                ("x-header-set", "header-set"),
                ("x-header-add", "original-val-add,header-add"),
                ("another-header", "another-header-val"),
            ],
            &["x-header-remove"],
        ),
    ];
    for (path, sent, want, absent) in cases {
        let r = bed.request(&c, "headers.example", path, sent).await;
        served_by(&r, "infra-backend-v1");
        let j = r.json();
        for (name, value) in *want {
            let want: Vec<String> = value.split(',').map(str::to_string).collect();
            assert_eq!(seen_values(&j, name), want, "{path}: {name} in {j}");
        }
        for name in *absent {
            assert!(j["headers"].get(name).is_none(), "{path}: {name} in {j}");
        }
    }
    // Not an upstream case: a `set` of Host replaces the one the backend gets (Host cannot be
    // removed, so it is never a remove and an add).
    let r = bed.request(&c, "headers.example", "/set-host", &[]).await;
    served_by(&r, "infra-backend-v1");
    assert_eq!(r.json()["host"], "internal.example", "{}", r.json());
}

/// HTTPRouteHeaderMatching: rules by headers only; more headers outrank fewer; several
/// matches of one rule are ORed; header names in any case.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn header_matches_as_upstream_sends_them() {
    let case = format!(
        "apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: header-matching, namespace: gateway-conformance-infra}}
spec:
  parentRefs: [{{name: same-namespace}}]
{HEADER_MATCHING_RULES}"
    );
    let bed = Bed::start(&case);
    let c = client();
    let route = "gateway-conformance-infra/header-matching";
    let s = bed.route_status(&c, route).await;
    route_ok(&s, route, "same-namespace");
    for (headers, backend) in header_matching_cases() {
        let r = bed.request(&c, "any.example", "/", headers).await;
        served_or_404(&r, backend, &format!("{headers:?}"));
    }
}

/// HTTPRouteQueryParamMatching: query parameters alone and with paths and headers, in the
/// spec's precedence (path, then headers, then query parameters); names and values case
/// sensitive; several matches of one rule ORed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn query_param_matches_as_upstream_sends_them() {
    let case = "\
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: query-param-matching, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules:
  - matches: [{queryParams: [{name: animal, value: whale}]}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches: [{queryParams: [{name: animal, value: dolphin}]}]
    backendRefs: [{name: infra-backend-v2, port: 8080}]
  - matches:
    - queryParams: [{name: animal, value: dolphin}, {name: color, value: blue}]
    - queryParams: [{name: ANIMAL, value: Whale}]
    backendRefs: [{name: infra-backend-v3, port: 8080}]
  - matches: [{path: {type: PathPrefix, value: /path1}, queryParams: [{name: animal, value: whale}]}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches: [{headers: [{name: version, value: one}], queryParams: [{name: animal, value: whale}]}]
    backendRefs: [{name: infra-backend-v2, port: 8080}]
  - matches:
    - path: {type: PathPrefix, value: /path2}
      headers: [{name: version, value: two}]
      queryParams: [{name: animal, value: whale}]
    backendRefs: [{name: infra-backend-v3, port: 8080}]
  - matches:
    - path: {type: PathPrefix, value: /path3}
      queryParams: [{name: animal, value: shark}]
    - path: {type: PathPrefix, value: /path4}
      headers: [{name: version, value: three}]
      queryParams: [{name: animal, value: kraken}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches: [{path: {type: PathPrefix, value: /path5}}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches: [{queryParams: [{name: animal, value: hydra}]}]
    backendRefs: [{name: infra-backend-v2, port: 8080}]
  - matches: [{headers: [{name: version, value: four}]}]
    backendRefs: [{name: infra-backend-v3, port: 8080}]
";
    let bed = Bed::start(case);
    let c = client();
    let route = "gateway-conformance-infra/query-param-matching";
    let s = bed.route_status(&c, route).await;
    route_ok(&s, route, "same-namespace");
    let (v1, v2, v3) = (
        Some("infra-backend-v1"),
        Some("infra-backend-v2"),
        Some("infra-backend-v3"),
    );
    let cases: &[(&str, Headers, Option<&str>)] = &[
        ("/?animal=whale", &[], v1),
        ("/?animal=dolphin", &[], v2),
        ("/?animal=dolphin&color=blue", &[], v3),
        ("/?ANIMAL=Whale", &[], v3),
        ("/?animal=whale&otherparam=irrelevant", &[], v1),
        ("/?animal=dolphin&color=yellow", &[], v2),
        ("/?color=blue", &[], None),
        ("/?animal=dog", &[], None),
        ("/?animal=whaledolphin", &[], None),
        ("/", &[], None),
        ("/path1?animal=whale", &[], v1),
        ("/?animal=whale", &[("version", "one")], v2),
        ("/path2?animal=whale", &[("version", "two")], v3),
        ("/path3?animal=shark", &[], v1),
        ("/path4?animal=kraken", &[("version", "three")], v1),
        ("/?animal=shark", &[], None),
        ("/path4?animal=kraken", &[], None),
        ("/path5?animal=hydra", &[], v1),
        ("/?animal=hydra", &[("version", "four")], v3),
    ];
    for (path, headers, backend) in cases {
        let r = bed.request(&c, "any.example", path, headers).await;
        served_or_404(&r, *backend, &format!("{path} {headers:?}"));
    }
}

/// HTTPRouteMethodMatching: methods alone and with paths and headers, in the spec's
/// precedence (path, then method, then headers).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn method_matches_as_upstream_sends_them() {
    let case = "\
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: method-matching, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules:
  - matches: [{method: POST}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches: [{method: GET}]
    backendRefs: [{name: infra-backend-v2, port: 8080}]
  - matches: [{path: {type: PathPrefix, value: /path1}, method: GET}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches: [{headers: [{name: version, value: one}], method: PUT}]
    backendRefs: [{name: infra-backend-v2, port: 8080}]
  - matches: [{path: {type: PathPrefix, value: /path2}, headers: [{name: version, value: two}], method: POST}]
    backendRefs: [{name: infra-backend-v3, port: 8080}]
  - matches:
    - {path: {type: PathPrefix, value: /path3}, method: PATCH}
    - {path: {type: PathPrefix, value: /path4}, headers: [{name: version, value: three}], method: DELETE}
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches: [{path: {type: PathPrefix, value: /path5}}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches: [{method: PATCH}]
    backendRefs: [{name: infra-backend-v2, port: 8080}]
  - matches: [{headers: [{name: version, value: four}]}]
    backendRefs: [{name: infra-backend-v3, port: 8080}]
";
    let bed = Bed::start(case);
    let c = client();
    let route = "gateway-conformance-infra/method-matching";
    let s = bed.route_status(&c, route).await;
    route_ok(&s, route, "same-namespace");
    let (v1, v2, v3) = (
        Some("infra-backend-v1"),
        Some("infra-backend-v2"),
        Some("infra-backend-v3"),
    );
    let cases: &[(&str, &str, Option<&str>, Option<&str>)] = &[
        ("POST", "/", None, v1),
        ("GET", "/", None, v2),
        ("HEAD", "/", None, None),
        ("GET", "/path1", None, v1),
        ("PUT", "/", Some("one"), v2),
        ("POST", "/path2", Some("two"), v3),
        ("PATCH", "/path3", None, v1),
        ("DELETE", "/path4", Some("three"), v1),
        ("PUT", "/", None, None),
        ("DELETE", "/path4", None, None),
        ("PATCH", "/path5", None, v1),
        ("PATCH", "/", Some("four"), v2),
    ];
    for (method, path, version, backend) in cases {
        let mut headers = vec![("host", "any.example")];
        if let Some(v) = version {
            headers.push(("version", v));
        }
        let r = send(&c, method, &bed.weir.url(path), &headers, "").await;
        served_or_404(&r, *backend, &format!("{method} {path} {version:?}"));
    }
}

/// Counts which backend answered each of `n` answers, and checks the shares against `want`
/// (backend, percent) within the suite's tolerance (5 points of 500 requests).
fn assert_shares(seen: &BTreeMap<String, usize>, n: usize, want: &[(&str, f64)]) {
    for (backend, percent) in want {
        let got = *seen.get(*backend).unwrap_or(&0) as f64 * 100.0 / n as f64;
        assert!(
            (got - percent).abs() <= 5.0,
            "{backend}: {got}% of {n}, want {percent}%: {seen:?}"
        );
    }
    let known: Vec<&str> = want.iter().map(|(b, _)| *b).collect();
    assert!(seen.keys().all(|b| known.contains(&b.as_str())), "{seen:?}");
}

/// HTTPRouteWeight and HTTPRouteNamedRule: 500 requests shared 70/30/0 by weight; a named
/// rule and an unnamed one both served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weights_share_requests_and_named_rules_are_served() {
    let case = "\
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: weighted-backends, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  hostnames: [weights.example]
  rules:
  - backendRefs:
    - {name: infra-backend-v1, port: 8080, weight: 70}
    - {name: infra-backend-v2, port: 8080, weight: 30}
    - {name: infra-backend-v3, port: 8080, weight: 0}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: http-named-rules, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  hostnames: [named.example]
  rules:
  - name: named-rule
    matches: [{path: {type: PathPrefix, value: /named}}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches: [{path: {type: PathPrefix, value: /unnamed}}]
    backendRefs: [{name: infra-backend-v2, port: 8080}]
";
    let bed = Bed::start(case);
    let c = client();
    let s = bed
        .route_status(&c, "gateway-conformance-infra/http-named-rules")
        .await;
    for route in ["weighted-backends", "http-named-rules"] {
        let route = format!("gateway-conformance-infra/{route}");
        route_ok(&s, &route, "same-namespace");
    }
    let mut seen = BTreeMap::new();
    for _ in 0..500 {
        let r = bed.request(&c, "weights.example", "/", &[]).await;
        assert_eq!(r.status, 200);
        *seen.entry(r.echo_name().unwrap()).or_insert(0) += 1;
    }
    assert_shares(
        &seen,
        500,
        &[("infra-backend-v1", 70.0), ("infra-backend-v2", 30.0)],
    );
    for (path, backend) in [
        ("/named", "infra-backend-v1"),
        ("/unnamed", "infra-backend-v2"),
    ] {
        served_by(&bed.request(&c, "named.example", path, &[]).await, backend);
    }
}

/// HTTPRouteTimeoutRequest and HTTPRouteTimeoutBackendRequest: a 500 ms budget answers a
/// backend that takes a second with 504; `0s` turns either off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_and_backend_timeouts_as_upstream_sends_them() {
    let case = "\
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: request-timeout, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /request-timeout}}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
    timeouts: {request: 500ms}
  - matches: [{path: {type: PathPrefix, value: /disable-request-timeout}}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
    timeouts: {request: 0s}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: backend-request-timeout, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /backend-timeout}}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
    timeouts: {backendRequest: 500ms}
  - matches: [{path: {type: PathPrefix, value: /disable-backend-timeout}}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
    timeouts: {backendRequest: 0s}
";
    let bed = Bed::start(case);
    let c = client();
    let s = bed
        .route_status(&c, "gateway-conformance-infra/backend-request-timeout")
        .await;
    for route in ["request-timeout", "backend-request-timeout"] {
        let route = format!("gateway-conformance-infra/{route}");
        route_ok(&s, &route, "same-namespace");
    }
    for (path, status) in [
        ("/request-timeout", 200),
        ("/request-timeout?delay_ms=1000", 504),
        ("/disable-request-timeout?delay_ms=1000", 200),
        ("/backend-timeout", 200),
        ("/backend-timeout?delay_ms=1000", 504),
        ("/disable-backend-timeout?delay_ms=1000", 200),
    ] {
        let r = bed.request(&c, "timeouts.example", path, &[]).await;
        assert_eq!(r.status, status, "{path}");
    }
}

/// HTTPRouteRewritePath and HTTPRouteRewriteHost: prefix, full-path and host rewrites, alone
/// and with a header modifier in the same rule.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rewrites_as_upstream_sends_them() {
    let case = "\
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: rewrite-path, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  hostnames: [path.example]
  rules:
  - matches: [{path: {type: PathPrefix, value: /prefix/one}}]
    filters:
    - {type: URLRewrite, urlRewrite: {path: {type: ReplacePrefixMatch, replacePrefixMatch: /one}}}
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches: [{path: {type: PathPrefix, value: /strip-prefix}}]
    filters:
    - {type: URLRewrite, urlRewrite: {path: {type: ReplacePrefixMatch, replacePrefixMatch: /}}}
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches: [{path: {type: PathPrefix, value: /full/one}}]
    filters:
    - {type: URLRewrite, urlRewrite: {path: {type: ReplaceFullPath, replaceFullPath: /one}}}
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches: [{path: {type: PathPrefix, value: /full/rewrite-path-and-modify-headers}}]
    filters:
    - {type: URLRewrite, urlRewrite: {path: {type: ReplaceFullPath, replaceFullPath: /test}}}
    - type: RequestHeaderModifier
      requestHeaderModifier:
        set: [{name: X-Header-Set, value: set-overwrites-values}]
        add: [{name: X-Header-Add, value: header-val-1}, {name: X-Header-Add-Append, value: header-val-2}]
        remove: [X-Header-Remove]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches: [{path: {type: PathPrefix, value: /prefix/rewrite-path-and-modify-headers}}]
    filters:
    - {type: URLRewrite, urlRewrite: {path: {type: ReplacePrefixMatch, replacePrefixMatch: /prefix}}}
    - type: RequestHeaderModifier
      requestHeaderModifier:
        set: [{name: X-Header-Set, value: set-overwrites-values}]
        add: [{name: X-Header-Add, value: header-val-1}, {name: X-Header-Add-Append, value: header-val-2}]
        remove: [X-Header-Remove]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: rewrite-host, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  hostnames: [rewrite.example]
  rules:
  - matches: [{path: {type: PathPrefix, value: /one}}]
    filters: [{type: URLRewrite, urlRewrite: {hostname: one.example.org}}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - filters: [{type: URLRewrite, urlRewrite: {hostname: example.org}}]
    backendRefs: [{name: infra-backend-v2, port: 8080}]
  - matches: [{path: {type: PathPrefix, value: /rewrite-host-and-modify-headers}}]
    filters:
    - {type: URLRewrite, urlRewrite: {hostname: test.example.org}}
    - type: RequestHeaderModifier
      requestHeaderModifier:
        set: [{name: X-Header-Set, value: set-overwrites-values}]
        add: [{name: X-Header-Add, value: header-val-1}, {name: X-Header-Add-Append, value: header-val-2}]
        remove: [X-Header-Remove]
    backendRefs: [{name: infra-backend-v2, port: 8080}]
";
    let bed = Bed::start(case);
    let c = client();
    let s = bed
        .route_status(&c, "gateway-conformance-infra/rewrite-host")
        .await;
    for route in ["rewrite-path", "rewrite-host"] {
        let route = format!("gateway-conformance-infra/{route}");
        route_ok(&s, &route, "same-namespace");
    }
    let (v1, v2) = ("infra-backend-v1", "infra-backend-v2");
    let sent: Headers = &[
        ("X-Header-Remove", "remove-val"),
        ("X-Header-Add-Append", "append-val-1"),
        ("X-Header-Set", "set-val"),
    ];
    // (Host, path, headers sent, backend, path and Host it sees, whether the modifier ran)
    let cases: &[(&str, &str, Headers, &str, &str, &str, bool)] = &[
        (
            "path.example",
            "/prefix/one/two",
            &[],
            v1,
            "/one/two",
            "path.example",
            false,
        ),
        (
            "path.example",
            "/strip-prefix/three",
            &[],
            v1,
            "/three",
            "path.example",
            false,
        ),
        (
            "path.example",
            "/strip-prefix",
            &[],
            v1,
            "/",
            "path.example",
            false,
        ),
        (
            "path.example",
            "/full/one/two",
            &[],
            v1,
            "/one",
            "path.example",
            false,
        ),
        (
            "path.example",
            "/full/rewrite-path-and-modify-headers/test",
            sent,
            v1,
            "/test",
            "path.example",
            true,
        ),
        (
            "path.example",
            "/prefix/rewrite-path-and-modify-headers/one",
            sent,
            v1,
            "/prefix/one",
            "path.example",
            true,
        ),
        (
            "rewrite.example",
            "/one",
            &[],
            v1,
            "/one",
            "one.example.org",
            false,
        ),
        (
            "rewrite.example",
            "/two",
            &[],
            v2,
            "/two",
            "example.org",
            false,
        ),
        (
            "rewrite.example",
            "/rewrite-host-and-modify-headers",
            sent,
            v2,
            "/rewrite-host-and-modify-headers",
            "test.example.org",
            true,
        ),
    ];
    for (host, path, headers, backend, want_path, want_host, modified) in cases {
        let r = bed.request(&c, host, path, headers).await;
        served_by(&r, backend);
        let j = r.json();
        assert_eq!(j["path"], *want_path, "{path}");
        assert_eq!(j["host"], *want_host, "{path}");
        if *modified {
            assert_eq!(seen_values(&j, "x-header-add"), ["header-val-1"], "{j}");
            assert_eq!(
                seen_values(&j, "x-header-add-append"),
                ["append-val-1", "header-val-2"],
                "{j}"
            );
            assert_eq!(
                seen_values(&j, "x-header-set"),
                ["set-overwrites-values"],
                "{j}"
            );
            assert!(j["headers"].get("x-header-remove").is_none(), "{j}");
        }
    }
}

/// GatewaySecretReferenceGrantAllInNamespace, GatewaySecretReferenceGrantSpecific and
/// GatewaySecretMissingReferenceGrant: a certificate in another namespace is read with a
/// ReferenceGrant for all its Secrets or for that one, and refused without one. Each case
/// on its own Weir, as the suite applies each alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificates_of_other_namespaces_as_upstream_grants_them() {
    let grant = |name: &str, to: &str| {
        format!(
            "apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata: {{name: {name}, namespace: gateway-conformance-web-backend}}
spec:
  from: [{{group: gateway.networking.k8s.io, kind: Gateway, namespace: gateway-conformance-infra}}]
  to: [{to}]
---
"
        )
    };
    for (gateway, grant, resolved) in [
        (
            "gateway-secret-reference-grant-all-in-namespace",
            grant(
                "reference-grant-all-in-namespace",
                "{group: '', kind: Secret}",
            ),
            None,
        ),
        (
            "gateway-secret-reference-grant-specific",
            grant(
                "reference-grant-specific",
                "{group: '', kind: Secret, name: certificate}",
            ),
            None,
        ),
        (
            "gateway-secret-missing-reference-grant",
            String::new(),
            Some("RefNotPermitted"),
        ),
    ] {
        let case = format!(
            "{secret}---
{grant}apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: {gateway}, namespace: gateway-conformance-infra}}
spec:
  gatewayClassName: weir
  listeners:
  - name: https
    port: 443
    protocol: HTTPS
    allowedRoutes: {{namespaces: {{from: All}}}}
    tls: {{certificateRefs: [{{group: '', kind: Secret, name: certificate, namespace: gateway-conformance-web-backend}}]}}
",
            secret = tls_secret("gateway-conformance-web-backend", "certificate", "a.example.test"),
        );
        let bed = Bed::start_with(&case, &["--tls-listen", "x"]);
        let c = client();
        let key = format!("gateway-conformance-infra/{gateway}");
        let s = bed
            .status_when(&c, |s| s["gateways"].get(&key).is_some())
            .await;
        let l = &s["gateways"][&key]["listeners"][0];
        match resolved {
            None => {
                assert_eq!(
                    cond_of(&l["conditions"], "ResolvedRefs").0,
                    "True",
                    "{gateway}: {l:#}"
                );
                assert_eq!(
                    cond_of(&l["conditions"], "Programmed"),
                    yes("Programmed"),
                    "{gateway}"
                );
            }
            Some(reason) => {
                assert_eq!(
                    cond_of(&l["conditions"], "ResolvedRefs"),
                    no(reason),
                    "{gateway}"
                );
            }
        }
        let kinds = l["supportedKinds"].as_array().unwrap();
        assert!(
            kinds.iter().any(|k| k["kind"] == "HTTPRoute"),
            "{gateway}: {kinds:?}"
        );
        assert_eq!(l["attachedRoutes"], 0, "{gateway}");
    }
}

/// GatewayInvalidTLSConfiguration and GatewayInvalidRouteKind: a listener whose certificate
/// reference cannot be used (missing, another group or kind, a malformed Secret) or whose
/// route kinds are unknown says so in `ResolvedRefs`, with the kinds it supports and no routes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listener_references_that_cannot_be_used_as_upstream_reports_them() {
    let case = "\
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gateway-certificate-nonexistent-secret, namespace: gateway-conformance-infra}
spec:
  gatewayClassName: weir
  listeners:
  - {name: https, port: 443, protocol: HTTPS, tls: {certificateRefs: [{group: '', kind: Secret, name: nonexistent-certificate}]}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gateway-certificate-unsupported-group, namespace: gateway-conformance-infra}
spec:
  gatewayClassName: weir
  listeners:
  - {name: https, port: 443, protocol: HTTPS, tls: {certificateRefs: [{group: wrong.group.company.io, kind: Secret, name: tls-validity-checks-certificate}]}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gateway-certificate-unsupported-kind, namespace: gateway-conformance-infra}
spec:
  gatewayClassName: weir
  listeners:
  - {name: https, port: 443, protocol: HTTPS, tls: {certificateRefs: [{group: '', kind: WrongKind, name: tls-validity-checks-certificate}]}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gateway-certificate-malformed-secret, namespace: gateway-conformance-infra}
spec:
  gatewayClassName: weir
  listeners:
  - {name: https, port: 443, protocol: HTTPS, tls: {certificateRefs: [{group: '', kind: Secret, name: malformed-certificate}]}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gateway-only-invalid-route-kind, namespace: gateway-conformance-infra}
spec:
  gatewayClassName: weir
  listeners:
  - {name: http, port: 80, protocol: HTTP, allowedRoutes: {kinds: [{kind: InvalidRoute}]}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gateway-supported-and-invalid-route-kind, namespace: gateway-conformance-infra}
spec:
  gatewayClassName: weir
  listeners:
  - {name: http, port: 80, protocol: HTTP, allowedRoutes: {kinds: [{kind: InvalidRoute}, {kind: HTTPRoute}]}}
---
apiVersion: v1
kind: Secret
metadata: {name: malformed-certificate, namespace: gateway-conformance-infra}
type: kubernetes.io/tls
data: {tls.crt: SGVsbG8gd29ybGQK, tls.key: SGVsbG8gd29ybGQK}
";
    let bed = Bed::start_with(case, &["--tls-listen", "x"]);
    let c = client();
    let name = |g: &str| format!("gateway-conformance-infra/{g}");
    let last = name("gateway-supported-and-invalid-route-kind");
    let s = bed
        .status_when(&c, |s| s["gateways"].get(&last).is_some())
        .await;
    let http_route =
        serde_json::json!([{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute"}]);
    for (gateway, reason, kinds) in [
        (
            "gateway-certificate-nonexistent-secret",
            "InvalidCertificateRef",
            &http_route,
        ),
        (
            "gateway-certificate-unsupported-group",
            "InvalidCertificateRef",
            &http_route,
        ),
        (
            "gateway-certificate-unsupported-kind",
            "InvalidCertificateRef",
            &http_route,
        ),
        (
            "gateway-certificate-malformed-secret",
            "InvalidCertificateRef",
            &http_route,
        ),
        (
            "gateway-only-invalid-route-kind",
            "InvalidRouteKinds",
            &serde_json::json!([]),
        ),
        (
            "gateway-supported-and-invalid-route-kind",
            "InvalidRouteKinds",
            &http_route,
        ),
    ] {
        let l = &s["gateways"][name(gateway)]["listeners"][0];
        assert_eq!(
            cond_of(&l["conditions"], "ResolvedRefs"),
            no(reason),
            "{gateway}: {l:#}"
        );
        let kinds_seen: Vec<Value> = l["supportedKinds"]
            .as_array()
            .unwrap()
            .iter()
            .map(|k| serde_json::json!({"group": k["group"], "kind": k["kind"]}))
            .collect();
        // As the suite compares them: the kinds expected are among those listed, and none
        // is listed where none is expected.
        let kinds = kinds.as_array().unwrap();
        assert!(
            kinds.iter().all(|k| kinds_seen.contains(k)),
            "{gateway}: {kinds_seen:?}"
        );
        assert_eq!(
            kinds.is_empty(),
            kinds_seen.is_empty(),
            "{gateway}: {kinds_seen:?}"
        );
        assert_eq!(l["attachedRoutes"], 0, "{gateway}");
    }
}

/// HTTPRouteNoBackendRefs and HTTPRouteInvalidBackendRefUnknownKind: rules without backends
/// (omitted or empty) answer 500 while the route's refs all resolve; a backendRef of an
/// unknown kind answers 500 and is reported `InvalidKind`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rules_without_usable_backends_as_upstream_sends_them() {
    let case = "\
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: omitted-backendrefs, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  hostnames: [omitted.example]
  rules:
  - matches: [{path: {type: PathPrefix, value: /omitted-no-forward}}]
  - matches: [{path: {type: PathPrefix, value: /empty-no-forward}}]
    backendRefs: []
  - matches: [{path: {type: PathPrefix, value: /}}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: invalid-backend-ref-unknown-kind, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  hostnames: [unknown.example]
  rules:
  - backendRefs: [{group: unknownkind.example.com, kind: NonExistent, name: infra-backend-v1, port: 8080}]
";
    let bed = Bed::start(case);
    let c = client();
    let s = bed
        .route_status(
            &c,
            "gateway-conformance-infra/invalid-backend-ref-unknown-kind",
        )
        .await;
    route_ok(
        &s,
        "gateway-conformance-infra/omitted-backendrefs",
        "same-namespace",
    );
    let p = parent(
        &s,
        "gateway-conformance-infra/invalid-backend-ref-unknown-kind",
        "same-namespace",
    );
    assert_eq!(cond_of(&p["conditions"], "Accepted"), yes("Accepted"));
    assert_eq!(cond_of(&p["conditions"], "ResolvedRefs"), no("InvalidKind"));
    served_by(
        &bed.request(&c, "omitted.example", "/forward", &[]).await,
        "infra-backend-v1",
    );
    for (host, path) in [
        ("omitted.example", "/omitted-no-forward"),
        ("omitted.example", "/empty-no-forward"),
        ("unknown.example", "/v2"),
    ] {
        assert_eq!(
            bed.request(&c, host, path, &[]).await.status,
            500,
            "{host}{path}"
        );
    }
}

/// HTTPRouteExactPathMatching and HTTPRoutePathMatchOrder: an `Exact` path is neither a
/// prefix nor case-insensitive nor trailing-slash tolerant; Exact beats PathPrefix, and the
/// longest prefix wins.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exact_paths_and_the_order_of_path_matches() {
    let case = "\
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: exact-matching, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules:
  - matches: [{path: {type: Exact, value: /one}}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches: [{path: {type: Exact, value: /two}}]
    backendRefs: [{name: infra-backend-v2, port: 8080}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: path-matching-order, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules:
  - matches: [{path: {type: Exact, value: /match}}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches: [{path: {type: Exact, value: /match/exact}}]
    backendRefs: [{name: infra-backend-v2, port: 8080}]
  - matches: [{path: {type: Exact, value: /match/exact/one}}]
    backendRefs: [{name: infra-backend-v3, port: 8080}]
  - matches: [{path: {type: PathPrefix, value: /match/}}]
    backendRefs: [{name: infra-backend-v3, port: 8080}]
  - matches: [{path: {type: PathPrefix, value: /match/prefix/}}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches: [{path: {type: PathPrefix, value: /match/prefix/one}}]
    backendRefs: [{name: infra-backend-v2, port: 8080}]
";
    let bed = Bed::start(case);
    let c = client();
    let s = bed
        .route_status(&c, "gateway-conformance-infra/path-matching-order")
        .await;
    for route in ["exact-matching", "path-matching-order"] {
        let route = format!("gateway-conformance-infra/{route}");
        route_ok(&s, &route, "same-namespace");
    }
    let (v1, v2, v3) = ("infra-backend-v1", "infra-backend-v2", "infra-backend-v3");
    for (path, backend) in [
        ("/one", v1),
        ("/two", v2),
        ("/match/exact/one", v3),
        ("/match/exact", v2),
        ("/match", v1),
        ("/match/prefix/one/any", v2),
        ("/match/prefix/any", v1),
        ("/match/any", v3),
    ] {
        served_by(&bed.request(&c, "any.example", path, &[]).await, backend);
    }
    for path in ["/", "/one/example", "/two/", "/Two"] {
        let r = bed.request(&c, "any.example", path, &[]).await;
        assert_eq!(r.status, 404, "{path}");
    }
}

/// HTTPRouteMatching: one route, a path-or-header rule per backend; a prefix matches whole
/// path elements only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_route_matches_paths_or_headers_per_rule() {
    let case = "\
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: matching, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules:
  - matches:
    - path: {type: PathPrefix, value: /}
    - headers: [{name: version, value: one}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches:
    - path: {type: PathPrefix, value: /v2}
    - headers: [{name: version, value: two}]
    backendRefs: [{name: infra-backend-v2, port: 8080}]
";
    let bed = Bed::start(case);
    let c = client();
    let route = "gateway-conformance-infra/matching";
    let s = bed.route_status(&c, route).await;
    route_ok(&s, route, "same-namespace");
    let (v1, v2) = ("infra-backend-v1", "infra-backend-v2");
    let cases: &[(&str, Headers, &str)] = &[
        ("/", &[], v1),
        ("/example", &[], v1),
        ("/", &[("Version", "one")], v1),
        ("/v2", &[], v2),
        ("/v2/example", &[], v2),
        ("/", &[("Version", "two")], v2),
        ("/v2/", &[], v2),
        ("/v2example", &[], v1),
        ("/foo/v2/example", &[], v1),
    ];
    for (path, headers, backend) in cases {
        served_by(
            &bed.request(&c, "any.example", path, headers).await,
            backend,
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn matches_compete_across_routes_of_one_host() {
    let case = "\
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: matching-part1, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  hostnames: [example.com, example.net]
  rules:
  - matches:
    - path: {type: PathPrefix, value: /}
    - headers: [{name: version, value: one}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: matching-part2, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  hostnames: [example.com]
  rules:
  - matches:
    - path: {type: PathPrefix, value: /v2}
    - headers: [{name: version, value: two}]
    backendRefs: [{name: infra-backend-v2, port: 8080}]
";
    let bed = Bed::start(case);
    let c = client();
    let s = bed
        .route_status(&c, "gateway-conformance-infra/matching-part2")
        .await;
    for route in ["matching-part1", "matching-part2"] {
        let route = format!("gateway-conformance-infra/{route}");
        route_ok(&s, &route, "same-namespace");
    }
    let cases: &[(&str, &str, Headers, &str)] = &[
        ("example.com", "/", &[], "infra-backend-v1"),
        ("example.com", "/example", &[], "infra-backend-v1"),
        ("example.net", "/example", &[], "infra-backend-v1"),
        (
            "example.com",
            "/example",
            &[("Version", "one")],
            "infra-backend-v1",
        ),
        ("example.com", "/v2", &[], "infra-backend-v2"),
        ("example.net", "/v2", &[], "infra-backend-v1"),
        ("example.com", "/v2/example", &[], "infra-backend-v2"),
        // A header match outranks a bare prefix of the same length, across routes.
        (
            "example.com",
            "/",
            &[("Version", "two")],
            "infra-backend-v2",
        ),
    ];
    for (host, path, headers, backend) in cases {
        let r = bed.request(&c, host, path, headers).await;
        served_by(&r, backend);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificates_of_other_namespaces_need_a_reference_grant() {
    let case = format!(
        "\
{secret_a_cert}---
{secret_wild_cert}---
apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata: {{name: a-cert-only, namespace: gateway-conformance-web-backend}}
spec:
  from: [{{group: gateway.networking.k8s.io, kind: Gateway, namespace: gateway-conformance-infra}}]
  to: [{{group: '', kind: Secret, name: a-cert}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: secrets-elsewhere, namespace: gateway-conformance-infra}}
spec:
  gatewayClassName: weir
  listeners:
  - name: granted
    port: 443
    protocol: HTTPS
    hostname: a.example.test
    tls: {{certificateRefs: [{{name: a-cert, namespace: gateway-conformance-web-backend}}]}}
  - name: not-granted
    port: 443
    protocol: HTTPS
    hostname: x.example.test
    tls: {{certificateRefs: [{{name: wild-cert, namespace: gateway-conformance-web-backend}}]}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: secure, namespace: gateway-conformance-infra}}
spec:
  parentRefs: [{{name: secrets-elsewhere}}]
  rules: [{{backendRefs: [{{name: infra-backend-v1, port: 8080}}]}}]
",
        secret_a_cert = tls_secret(
            "gateway-conformance-web-backend",
            "a-cert",
            "a.example.test"
        ),
        secret_wild_cert = tls_secret(
            "gateway-conformance-web-backend",
            "wild-cert",
            "wild.example.test"
        ),
    );
    let bed = Bed::start_with(&case, &["--tls-listen", "x"]);
    let c = client();
    let s = bed
        .route_status(&c, "gateway-conformance-infra/secure")
        .await;
    let gw = &s["gateways"]["gateway-conformance-infra/secrets-elsewhere"];
    let listener = |name: &str| {
        gw["listeners"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["name"] == name)
            .unwrap()
            .clone()
    };
    assert_eq!(
        cond_of(&listener("granted")["conditions"], "ResolvedRefs"),
        yes("ResolvedRefs")
    );
    assert_eq!(
        cond_of(&listener("not-granted")["conditions"], "ResolvedRefs"),
        no("RefNotPermitted")
    );
    assert_eq!(
        cond_of(&listener("not-granted")["conditions"], "Programmed").0,
        "False"
    );
    let port = bed.tls_port.unwrap();
    let r = common::tls::get(port, "a.example.test", "/", &[])
        .await
        .unwrap();
    served_by(&r.resp, "infra-backend-v1");
    assert!(
        common::tls::get(port, "x.example.test", "/", &[])
            .await
            .is_err(),
        "the Secret not granted is not served"
    );
}

/// TLSRouteInvalidReferenceGrant: seven ReferenceGrants, each wrong in one way (its
/// namespace, from group, kind or namespace, to group, kind or name), let no TLSRoute reach
/// another namespace's Service: the route is accepted with `ResolvedRefs: False`
/// (`RefNotPermitted`), and its connections are not passed through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_routes_across_namespaces_need_a_matching_reference_grant() {
    let ca = common::ca::Ca::new("TLS routes CA");
    let backend = tls_backend(&ca, &["abc.example.com"], "tls-backend");
    let app = "gateway-conformance-app-backend";
    let mut case = near_miss_grants(
        ("TLSRoute", "Gateway"),
        "gateway-conformance-infra",
        (app, "Service", "tls-backend"),
        "Secret",
    );
    case += &format!(
        "apiVersion: gateway.networking.k8s.io/v1
kind: TLSRoute
metadata: {{name: gateway-conformance-infra-test, namespace: gateway-conformance-infra}}
spec:
  parentRefs: [{{name: gateway-tlsroute-referencegrant}}]
  hostnames: [abc.example.com]
  rules: [{{backendRefs: [{{name: tls-backend, namespace: {app}, port: 443}}]}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: gateway-tlsroute-referencegrant, namespace: gateway-conformance-infra}}
spec:
  gatewayClassName: weir
  listeners:
  - name: https
    port: 443
    protocol: TLS
    hostname: '*.example.com'
    allowedRoutes: {{namespaces: {{from: Same}}, kinds: [{{kind: TLSRoute}}]}}
    tls: {{mode: Passthrough}}
---
apiVersion: v1
kind: Service
metadata: {{name: tls-backend, namespace: {app}}}
spec:
  ports: [{{name: tls, port: 443, targetPort: 8443}}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: tls-backend-1
  namespace: {app}
  labels: {{kubernetes.io/service-name: tls-backend}}
addressType: IPv4
ports: [{{name: tls, port: {backend}}}]
endpoints:
- addresses: [127.0.0.1]
  conditions: {{ready: true}}
"
    );
    let bed = Bed::start_with(&case, &["--tls-listen", "x"]);
    let c = client();
    let route = "gateway-conformance-infra/gateway-conformance-infra-test";
    let s = bed
        .status_when(&c, |s| s["tlsRoutes"].get(route).is_some())
        .await;
    wait_ready(&c, &bed.weir).await;
    let parent = &s["tlsRoutes"][route]["parents"][0];
    assert_eq!(
        parent["parentRef"]["name"], "gateway-tlsroute-referencegrant",
        "{s:#}"
    );
    assert_eq!(cond_of(&parent["conditions"], "Accepted"), yes("Accepted"));
    assert_eq!(
        cond_of(&parent["conditions"], "ResolvedRefs"),
        no("RefNotPermitted")
    );
    let r = tls_call(bed.tls_port.unwrap(), &ca, "abc.example.com").await;
    assert!(r.is_err(), "passed through: {r:?}");
}

/// The suite's seven ReferenceGrants that each miss in one way, for a `from.0` of
/// gateway-conformance-infra referring to `to` (namespace, kind, name): one in `wrong_ns`
/// instead of the target's namespace, then a wrong from group, from kind (`from.1`), from
/// namespace, to group, to kind (`to_kind`) and to name.
fn near_miss_grants(
    from: (&str, &str),
    wrong_ns: &str,
    to: (&str, &str, &str),
    to_kind: &str,
) -> String {
    const GW: &str = "gateway.networking.k8s.io";
    const NOT: &str = "not-the-group-youre-looking-for";
    let infra = "gateway-conformance-infra";
    let (to_ns, kind, name) = to;
    let not_name = format!("not-the-{}-youre-looking-for", kind.to_ascii_lowercase());
    let grants = [
        (
            "wrong-namespace",
            wrong_ns,
            (GW, from.0, infra),
            ("", kind, name),
        ),
        (
            "wrong-from-group",
            to_ns,
            (NOT, from.0, infra),
            ("", kind, name),
        ),
        (
            "wrong-from-kind",
            to_ns,
            (GW, from.1, infra),
            ("", kind, name),
        ),
        (
            "wrong-from-namespace",
            to_ns,
            (GW, from.0, "not-the-namespace-youre-looking-for"),
            ("", kind, name),
        ),
        (
            "wrong-to-group",
            to_ns,
            (GW, from.0, infra),
            (NOT, kind, name),
        ),
        (
            "wrong-to-kind",
            to_ns,
            (GW, from.0, infra),
            ("", to_kind, name),
        ),
        (
            "wrong-to-name",
            to_ns,
            (GW, from.0, infra),
            ("", kind, not_name.as_str()),
        ),
    ];
    grants
        .iter()
        .map(|(n, ns, f, t)| {
            format!(
                "apiVersion: gateway.networking.k8s.io/v1
kind: ReferenceGrant
metadata: {{name: reference-grant-{n}, namespace: {ns}}}
spec:
  from: [{{group: {}, kind: {}, namespace: {}}}]
  to: [{{group: '{}', kind: {}, name: {}}}]
---
",
                f.0, f.1, f.2, t.0, t.1, t.2
            )
        })
        .collect()
}

/// The status of listener `name` of Gateway `gw` (`namespace/name`), which must have exactly
/// `count` listeners.
fn listener_of<'a>(s: &'a Value, gw: &str, count: usize, name: &str) -> &'a Value {
    let list = s["gateways"][gw]["listeners"].as_array();
    let list = list.unwrap_or_else(|| panic!("{gw} has no listeners: {s:#}"));
    assert_eq!(list.len(), count, "{gw}: {list:#?}");
    list.iter()
        .find(|l| l["name"] == name)
        .unwrap_or_else(|| panic!("{gw} has no listener {name}: {list:#?}"))
}

/// The route kinds a listener's status lists.
fn kinds_of(listener: &Value) -> Vec<&str> {
    listener["supportedKinds"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["kind"].as_str().unwrap())
        .collect()
}

/// TLSRouteListenerPassthroughSupportedKinds, GatewayListenerUnsupportedProtocol,
/// HTTPRouteDisallowedKind and GatewaySecretInvalidReferenceGrant: what listeners and routes
/// report about kinds, protocols and certificates they cannot use, as upstream reads it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kinds_protocols_and_secret_grants_listeners_cannot_use_as_upstream_reads_them() {
    let mut case = near_miss_grants(
        ("Gateway", "HTTPRoute"),
        "gateway-conformance-app-backend",
        ("gateway-conformance-web-backend", "Secret", "certificate"),
        "Service",
    );
    case += &tls_secret(
        "gateway-conformance-web-backend",
        "certificate",
        "a.example.test",
    );
    case += "---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gateway-secret-invalid-reference-grant, namespace: gateway-conformance-infra}
spec:
  gatewayClassName: weir
  listeners:
  - name: https
    port: 443
    protocol: HTTPS
    allowedRoutes: {namespaces: {from: All}}
    tls: {certificateRefs: [{group: '', kind: Secret, name: certificate, namespace: gateway-conformance-web-backend}]}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gateway-tlsroute-passthrough-supported-kind, namespace: gateway-conformance-infra}
spec:
  gatewayClassName: weir
  listeners:
  - name: tls-passthrough
    port: 443
    protocol: TLS
    tls: {mode: Passthrough}
    allowedRoutes: {namespaces: {from: Same}, kinds: [{kind: TCPRoute}, {kind: TLSRoute}]}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gateway-only-unsupported-protocols, namespace: gateway-conformance-infra}
spec:
  gatewayClassName: weir
  listeners: [{name: invalid, port: 1111, protocol: INVALID}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gateway-supported-and-unsupported-protocols, namespace: gateway-conformance-infra}
spec:
  gatewayClassName: weir
  listeners:
  - {name: http, port: 80, protocol: HTTP}
  - {name: invalid, port: 1111, protocol: INVALID}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: tlsroutes-only, namespace: gateway-conformance-infra}
spec:
  gatewayClassName: weir
  listeners:
  - name: tls
    port: 443
    protocol: TLS
    tls: {mode: Passthrough}
    allowedRoutes: {namespaces: {from: Same}, kinds: [{kind: TLSRoute}]}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: disallowed-kind, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: tlsroutes-only, namespace: gateway-conformance-infra}]
  rules: [{backendRefs: [{name: infra-backend-v1, port: 8080}]}]
";
    let bed = Bed::start_with(&case, &["--tls-listen", "x"]);
    let c = client();
    let route = "gateway-conformance-infra/disallowed-kind";
    let s = bed.route_status(&c, route).await;
    let gw = |n: &str| format!("gateway-conformance-infra/{n}");

    // GatewaySecretInvalidReferenceGrant: none of the seven grants lets the Secret in.
    let https = listener_of(
        &s,
        &gw("gateway-secret-invalid-reference-grant"),
        1,
        "https",
    );
    assert!(kinds_of(https).contains(&"HTTPRoute"));
    assert_eq!(
        cond_of(&https["conditions"], "ResolvedRefs"),
        no("RefNotPermitted")
    );
    assert_eq!(https["attachedRoutes"], 0);

    // TLSRouteListenerPassthroughSupportedKinds: TCPRoute is not served.
    let tls = listener_of(
        &s,
        &gw("gateway-tlsroute-passthrough-supported-kind"),
        1,
        "tls-passthrough",
    );
    assert_eq!(kinds_of(tls), ["TLSRoute"]);
    assert_eq!(
        cond_of(&tls["conditions"], "ResolvedRefs"),
        no("InvalidRouteKinds")
    );
    assert_eq!(tls["attachedRoutes"], 0);

    // GatewayListenerUnsupportedProtocol.
    let only = &s["gateways"][gw("gateway-only-unsupported-protocols")];
    assert_eq!(
        cond_of(&only["conditions"], "Accepted"),
        no("ListenersNotValid")
    );
    let invalid = listener_of(&s, &gw("gateway-only-unsupported-protocols"), 1, "invalid");
    assert!(kinds_of(invalid).is_empty(), "{invalid:#}");
    assert_eq!(
        cond_of(&invalid["conditions"], "Accepted"),
        no("UnsupportedProtocol")
    );
    assert_eq!(invalid["attachedRoutes"], 0);
    let mixed = gw("gateway-supported-and-unsupported-protocols");
    assert_eq!(
        cond_of(&s["gateways"][&mixed]["conditions"], "Accepted"),
        yes("ListenersNotValid")
    );
    let http = listener_of(&s, &mixed, 2, "http");
    assert!(kinds_of(http).contains(&"HTTPRoute"));
    assert_eq!(cond_of(&http["conditions"], "Accepted"), yes("Accepted"));
    assert_eq!(http["attachedRoutes"], 0);
    let invalid = listener_of(&s, &mixed, 2, "invalid");
    assert!(kinds_of(invalid).is_empty(), "{invalid:#}");
    assert_eq!(
        cond_of(&invalid["conditions"], "Accepted"),
        no("UnsupportedProtocol")
    );

    // HTTPRouteDisallowedKind: its only parent refuses it, its references resolved.
    let parents = s["httpRoutes"][route]["parents"].as_array().unwrap();
    assert_eq!(parents.len(), 1, "{s:#}");
    let p = parent(&s, route, "tlsroutes-only");
    assert_eq!(
        cond_of(&p["conditions"], "Accepted"),
        no("NotAllowedByListeners")
    );
    assert_eq!(
        cond_of(&p["conditions"], "ResolvedRefs"),
        yes("ResolvedRefs")
    );
    assert_eq!(
        listener_of(&s, &gw("tlsroutes-only"), 1, "tls")["attachedRoutes"],
        0
    );
}

/// HTTPRouteInvalidParentRefNotMatchingSectionName and HTTPRouteInvalidCrossNamespaceParentRef:
/// a parentRef naming a listener the Gateway does not have, and one from a namespace the
/// listener does not allow: each route's only parent refuses it (`NoMatchingParent`,
/// `NotAllowedByListeners`), and the Gateway counts no route.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parent_refs_that_attach_nowhere_as_upstream_reads_them() {
    let case = "\
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: httproute-listener-not-matching-section-name, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace, namespace: gateway-conformance-infra, port: 80, sectionName: http1}]
  rules: [{backendRefs: [{name: infra-backend-v1, kind: Service, port: 8080}]}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: invalid-cross-namespace-parent-ref, namespace: gateway-conformance-web-backend}
spec:
  parentRefs: [{name: same-namespace, namespace: gateway-conformance-infra}]
  rules: [{backendRefs: [{name: web-backend, port: 8080}]}]
";
    let bed = Bed::start(case);
    let c = client();
    let cross = "gateway-conformance-web-backend/invalid-cross-namespace-parent-ref";
    let s = bed.route_status(&c, cross).await;
    for (route, reason) in [
        (
            "gateway-conformance-infra/httproute-listener-not-matching-section-name",
            "NoMatchingParent",
        ),
        (cross, "NotAllowedByListeners"),
    ] {
        let parents = s["httpRoutes"][route]["parents"].as_array().unwrap();
        assert_eq!(parents.len(), 1, "{route}: {s:#}");
        let p = parent(&s, route, "same-namespace");
        assert_eq!(cond_of(&p["conditions"], "Accepted"), no(reason), "{route}");
        assert_eq!(
            cond_of(&p["conditions"], "ResolvedRefs"),
            yes("ResolvedRefs"),
            "{route}"
        );
    }
    let gw = "gateway-conformance-infra/same-namespace";
    assert_eq!(listener_of(&s, gw, 1, "http")["attachedRoutes"], 0);
}

/// GatewayWithAttachedRoutes: a listener counts the routes attached to it, those whose host
/// names it does not serve excepted; a listener whose certificate cannot be read still counts
/// its route, while it is neither programmed nor resolved.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listeners_count_their_attached_routes_as_upstream_reads_them() {
    let allowed = "allowedRoutes: {kinds: [{kind: HTTPRoute}], namespaces: {from: Selector, \
                   selector: {matchLabels: {kubernetes.io/metadata.name: gateway-conformance-infra}}}}";
    let route = |name: &str, gateway: &str, extra: &str, backend: &str| {
        format!(
            "apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: {name}, namespace: gateway-conformance-infra}}
spec:
  parentRefs: [{{kind: Gateway, name: {gateway}, namespace: gateway-conformance-infra{extra}}}]
  rules: [{{backendRefs: [{{name: {backend}, port: 8080}}]}}]
---
"
        )
    };
    let mut case = format!(
        "apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: gateway-with-one-attached-route, namespace: gateway-conformance-infra}}
spec:
  gatewayClassName: weir
  listeners: [{{name: http, port: 80, protocol: HTTP, {allowed}}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: gateway-with-two-attached-routes, namespace: gateway-conformance-infra}}
spec:
  gatewayClassName: weir
  listeners: [{{name: http, port: 80, protocol: HTTP, hostname: foo.example.com, {allowed}}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: unresolved-gateway-with-one-attached-unresolved-route, namespace: gateway-conformance-infra}}
spec:
  gatewayClassName: weir
  listeners:
  - {{name: tls, port: 443, protocol: HTTPS, {allowed}, tls: {{mode: Terminate, certificateRefs: [{{group: '', kind: Secret, name: does-not-exist}}]}}}}
---
"
    );
    case += &route(
        "http-route-1",
        "gateway-with-one-attached-route",
        "",
        "infra-backend-v1",
    );
    case += &route(
        "http-route-2",
        "gateway-with-two-attached-routes",
        "",
        "infra-backend-v1",
    );
    case += &route(
        "http-route-3",
        "gateway-with-two-attached-routes",
        "",
        "infra-backend-v1",
    );
    case += "\
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: http-route-not-accepted, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{kind: Gateway, name: gateway-with-two-attached-routes, namespace: gateway-conformance-infra}]
  hostnames: [not-accepted.test.com]
  rules: [{backendRefs: [{name: infra-backend-v1, port: 8080}]}]
---
";
    case += &route(
        "http-route-4",
        "unresolved-gateway-with-one-attached-unresolved-route",
        ", sectionName: tls",
        "does-not-exist",
    );
    let bed = Bed::start_with(&case, &["--tls-listen", "x"]);
    let c = client();
    let s = bed
        .route_status(&c, "gateway-conformance-infra/http-route-4")
        .await;
    let gw = |n: &str| format!("gateway-conformance-infra/{n}");
    for (g, routes) in [
        ("gateway-with-one-attached-route", 1),
        ("gateway-with-two-attached-routes", 2),
    ] {
        let l = listener_of(&s, &gw(g), 1, "http");
        assert!(kinds_of(l).contains(&"HTTPRoute"));
        for type_ in ["Accepted", "ResolvedRefs"] {
            assert_eq!(cond_of(&l["conditions"], type_).0, "True", "{g}: {l:#}");
        }
        assert_eq!(l["attachedRoutes"], routes, "{g}: {l:#}");
    }
    let p = parent(
        &s,
        &gw("http-route-not-accepted"),
        "gateway-with-two-attached-routes",
    );
    assert_eq!(
        cond_of(&p["conditions"], "Accepted"),
        no("NoMatchingListenerHostname")
    );
    let unresolved = gw("unresolved-gateway-with-one-attached-unresolved-route");
    let l = listener_of(&s, &unresolved, 1, "tls");
    assert!(kinds_of(l).contains(&"HTTPRoute"));
    assert_eq!(cond_of(&l["conditions"], "Programmed").0, "False", "{l:#}");
    assert_eq!(
        cond_of(&l["conditions"], "ResolvedRefs").0,
        "False",
        "{l:#}"
    );
    assert_eq!(l["attachedRoutes"], 1, "{l:#}");
    let p = parent(
        &s,
        &gw("http-route-4"),
        "unresolved-gateway-with-one-attached-unresolved-route",
    );
    assert_eq!(cond_of(&p["conditions"], "ResolvedRefs").0, "False");
}

/// TLSRouteListenerTerminateSupportedKinds: a terminating TLS listener (on the suite's 8443,
/// served with `--gateway-https-port 8443`) takes TLSRoutes, and is accepted with none yet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminating_tls_listeners_take_tls_routes_as_upstream_reads_them() {
    let case = format!(
        "{}---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: gateway-tlsroute-terminate-supported, namespace: gateway-conformance-infra}}
spec:
  gatewayClassName: weir
  listeners:
  - name: tls-terminate
    port: 8443
    protocol: TLS
    hostname: terminate.example.com
    allowedRoutes: {{namespaces: {{from: Same}}, kinds: [{{kind: TLSRoute}}]}}
    tls: {{mode: Terminate, certificateRefs: [{{name: tls-terminate-checks-certificate}}]}}
",
        tls_secret(
            "gateway-conformance-infra",
            "tls-terminate-checks-certificate",
            "a.example.test"
        )
    );
    let bed = Bed::start_with(
        &case,
        &["--tls-listen", "x", "--gateway-https-port", "8443"],
    );
    let c = client();
    let gw = "gateway-conformance-infra/gateway-tlsroute-terminate-supported";
    let s = bed
        .status_when(&c, |s| s["gateways"].get(gw).is_some())
        .await;
    let l = listener_of(&s, gw, 1, "tls-terminate");
    assert_eq!(kinds_of(l), ["TLSRoute"]);
    assert_eq!(cond_of(&l["conditions"], "Accepted"), yes("Accepted"));
    assert_eq!(l["attachedRoutes"], 0);
}

/// HTTPRouteListenerHostnameMatching: HTTPRoutes without host names of their own, each on
/// listeners by `sectionName`, serve the hosts their listeners' names cover, an exact name
/// before a wildcard one (which covers several labels); other hosts get 404.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_routes_serve_the_names_of_their_listeners() {
    let case = listener_hostname_matching_case("HTTPRoute", "httproute-listener-hostname-matching");
    let bed = Bed::start(&case);
    let c = client();
    let name = |r: &str| format!("gateway-conformance-infra/{r}");
    let s = bed.route_status(&c, &name("backend-v3")).await;
    for r in ["backend-v1", "backend-v2", "backend-v3"] {
        for p in s["httpRoutes"][name(r)]["parents"].as_array().unwrap() {
            assert_eq!(
                cond_of(&p["conditions"], "Accepted"),
                yes("Accepted"),
                "{r}"
            );
            assert_eq!(
                cond_of(&p["conditions"], "ResolvedRefs"),
                yes("ResolvedRefs"),
                "{r}"
            );
        }
    }
    let gw = name("httproute-listener-hostname-matching");
    for l in ["listener-1", "listener-2", "listener-3", "listener-4"] {
        let l = listener_of(&s, &gw, 4, l);
        for type_ in ["Accepted", "ResolvedRefs", "Programmed"] {
            assert_eq!(cond_of(&l["conditions"], type_).0, "True", "{l:#}");
        }
    }
    for (host, backend) in LISTENER_HOSTNAME_MATCHES {
        let r = bed.request(&c, host, "/", &[]).await;
        served_or_404(&r, backend, host);
    }
}

/// HTTPRouteRequestHeaderModifierBackendWeights: each of two equally weighted backends sets a
/// header naming itself; every request reaches a backend carrying that backend's value only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backend_header_filters_follow_their_backends_share_as_upstream_sends_them() {
    let case = "\
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: request-header-modifier-backend-weights, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules:
  - backendRefs:
    - name: infra-backend-v1
      port: 8080
      weight: 10
      filters: [{type: RequestHeaderModifier, requestHeaderModifier: {set: [{name: Backend, value: infra-backend-v1}]}}]
    - name: infra-backend-v2
      port: 8080
      weight: 10
      filters: [{type: RequestHeaderModifier, requestHeaderModifier: {set: [{name: Backend, value: infra-backend-v2}]}}]
";
    let bed = Bed::start(case);
    let c = client();
    let route = "gateway-conformance-infra/request-header-modifier-backend-weights";
    let s = bed.route_status(&c, route).await;
    route_ok(&s, route, "same-namespace");
    let mut seen = BTreeMap::new();
    for _ in 0..101 {
        let r = bed.request(&c, "example.com", "/", &[]).await;
        let by = r.echo_name().expect("an echo answered");
        assert_eq!(
            seen_values(&r.json(), "backend"),
            std::slice::from_ref(&by),
            "{by}"
        );
        *seen.entry(by).or_insert(0usize) += 1;
    }
    assert_eq!(seen.len(), 2, "{seen:?}");
}

/// HTTPRouteReferenceGrant, HTTPRouteInvalidReferenceGrant and
/// HTTPRoutePartiallyInvalidViaInvalidReferenceGrant: a Service of another namespace is used
/// while a ReferenceGrant there allows it, and its share answers 500 once the grant is gone;
/// none of the seven near-miss grants allows it; a grant for another Service of that
/// namespace leaves the rule of the ungranted one answering 500 and the other rules served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backends_of_other_namespaces_follow_their_reference_grants_as_upstream_sends_them() {
    let granted = "\
apiVersion: gateway.networking.k8s.io/v1
kind: ReferenceGrant
metadata: {name: reference-grant, namespace: gateway-conformance-web-backend}
spec:
  from: [{group: gateway.networking.k8s.io, kind: HTTPRoute, namespace: gateway-conformance-infra}]
  to: [{group: '', kind: Service, name: web-backend}]
---
";
    let route = "\
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: reference-grant, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules: [{backendRefs: [{name: web-backend, namespace: gateway-conformance-web-backend, port: 8080}]}]
";
    let c = client();
    let key = "gateway-conformance-infra/reference-grant";

    // HTTPRouteReferenceGrant: served while granted, 500 once the grant is deleted.
    let bed = Bed::start(&format!("{granted}{route}"));
    let s = bed.route_status(&c, key).await;
    route_ok(&s, key, "same-namespace");
    let r = bed.request(&c, "example.com", "/", &[]).await;
    served_by(&r, "web-backend");
    bed.rewrite(route);
    let mut r = bed.request(&c, "example.com", "/", &[]).await;
    for _ in 0..100 {
        if r.status == 500 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        r = bed.request(&c, "example.com", "/", &[]).await;
    }
    assert_eq!(r.status, 500, "the grant is gone");
    drop(bed);

    // HTTPRouteInvalidReferenceGrant: seven grants, each wrong in one way.
    let grants = near_miss_grants(
        ("HTTPRoute", "Gateway"),
        "gateway-conformance-infra",
        ("gateway-conformance-web-backend", "Service", "web-backend"),
        "Secret",
    );
    let bed = Bed::start(&format!("{grants}{route}"));
    let s = bed.route_status(&c, key).await;
    let p = parent(&s, key, "same-namespace");
    assert_eq!(cond_of(&p["conditions"], "Accepted"), yes("Accepted"));
    assert_eq!(
        cond_of(&p["conditions"], "ResolvedRefs"),
        no("RefNotPermitted")
    );
    let r = bed.request(&c, "example.com", "/", &[]).await;
    assert_eq!(r.status, 500);
    assert_eq!(r.echo_name(), None);
    drop(bed);

    // HTTPRoutePartiallyInvalidViaInvalidReferenceGrant.
    let case = "\
apiVersion: v1
kind: Service
metadata: {name: app-backend-v2, namespace: gateway-conformance-app-backend}
spec: {ports: [{name: http, port: 8080}]}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: app-backend-v2-1
  namespace: gateway-conformance-app-backend
  labels: {kubernetes.io/service-name: app-backend-v2}
addressType: IPv4
ports: [{name: http, port: ${app-backend-v1}}]
endpoints:
- addresses: [127.0.0.1]
  conditions: {ready: true}
---
apiVersion: gateway.networking.k8s.io/v1
kind: ReferenceGrant
metadata: {name: invalid-reference-grant, namespace: gateway-conformance-app-backend}
spec:
  from: [{group: gateway.networking.k8s.io, kind: HTTPRoute, namespace: gateway-conformance-infra}]
  to: [{group: '', kind: Service, name: app-backend-v1}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: invalid-reference-grant, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /v2}}]
    backendRefs: [{name: app-backend-v2, namespace: gateway-conformance-app-backend, port: 8080}]
  - backendRefs: [{name: app-backend-v1, namespace: gateway-conformance-app-backend, port: 8080}]
";
    let bed = Bed::start(case);
    let key = "gateway-conformance-infra/invalid-reference-grant";
    let s = bed.route_status(&c, key).await;
    let p = parent(&s, key, "same-namespace");
    assert_eq!(cond_of(&p["conditions"], "Accepted"), yes("Accepted"));
    assert_eq!(
        cond_of(&p["conditions"], "ResolvedRefs"),
        no("RefNotPermitted")
    );
    let r = bed.request(&c, "example.com", "/v2", &[]).await;
    assert_eq!(r.status, 500);
    assert_eq!(r.echo_name(), None);
    served_by(
        &bed.request(&c, "example.com", "/", &[]).await,
        "app-backend-v1",
    );
}

/// GatewayHTTPListenerIsolation, both of its Gateways (each on a Weir of its own): a request
/// belongs to the most specific listener whose host name covers it, whether the routes have
/// no host names or every listener's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listener_isolation_as_upstream_sends_it() {
    let listeners = [
        ("empty-hostname", ""),
        ("wildcard-example-com", "hostname: '*.example.com', "),
        (
            "wildcard-foo-example-com",
            "hostname: '*.foo.example.com', ",
        ),
        ("abc-foo-example-com", "hostname: abc.foo.example.com, "),
    ];
    let c = client();
    for (gateway, suffix, hostnames) in [
        ("http-listener-isolation", "", ""),
        (
            "http-listener-isolation-with-hostname-intersection",
            "-with-hostname-intersection",
            "\n  hostnames: [bar.com, '*.example.com', '*.foo.example.com', abc.foo.example.com]",
        ),
    ] {
        let mut case = format!(
            "apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: {gateway}, namespace: gateway-conformance-infra}}
spec:
  gatewayClassName: weir
  listeners:
"
        );
        for (name, host) in listeners {
            case += &format!(
                "  - {{name: {name}, port: 80, protocol: HTTP, {host}allowedRoutes: {{namespaces: {{from: All}}}}}}\n"
            );
        }
        for (name, _) in listeners {
            case += &format!(
                "---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: attaches-to-{name}{suffix}, namespace: gateway-conformance-infra}}
spec:
  parentRefs: [{{name: {gateway}, namespace: gateway-conformance-infra, sectionName: {name}}}]{hostnames}
  rules:
  - matches: [{{path: {{type: PathPrefix, value: /{name}}}}}]
    backendRefs: [{{name: infra-backend-v1, port: 8080}}]
"
            );
        }
        let bed = Bed::start(&case);
        let key = |r: &str| format!("gateway-conformance-infra/{r}");
        let last = key(&format!("attaches-to-abc-foo-example-com{suffix}"));
        let s = bed.route_status(&c, &last).await;
        for (name, _) in listeners {
            route_ok(&s, &key(&format!("attaches-to-{name}{suffix}")), gateway);
            let l = listener_of(&s, &key(gateway), 4, name);
            for type_ in ["Accepted", "ResolvedRefs", "Programmed"] {
                assert_eq!(cond_of(&l["conditions"], type_).0, "True", "{l:#}");
            }
        }
        for (host, served) in [
            ("bar.com", "/empty-hostname"),
            ("bar.example.com", "/wildcard-example-com"),
            // `*.example.com` covers names several labels deep.
            ("bar.baz.example.com", "/wildcard-example-com"),
            ("bar.foo.example.com", "/wildcard-foo-example-com"),
            ("x.y.foo.example.com", "/wildcard-foo-example-com"),
            ("abc.foo.example.com", "/abc-foo-example-com"),
            ("ABC.foo.example.com", "/abc-foo-example-com"),
        ] {
            for (name, _) in listeners {
                let path = format!("/{name}");
                let r = bed.request(&c, host, &path, &[]).await;
                let backend = (path == served).then_some("infra-backend-v1");
                served_or_404(&r, backend, &format!("{gateway}: {host}{path}"));
            }
        }
    }
}

/// HTTPRouteBackendProtocolH2C: a client speaking HTTP/2 with prior knowledge reaches a
/// backendRef to a Service port with `appProtocol: kubernetes.io/h2c`, spoken to in HTTP/2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2c_clients_reach_an_h2c_backend_as_upstream_sends_them() {
    let case = "\
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: backend-protocol-h2c, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules: [{backendRefs: [{name: infra-backend-v1, port: 8081}]}]
";
    let bed = Bed::start(case);
    let c = client();
    let route = "gateway-conformance-infra/backend-protocol-h2c";
    let s = bed.route_status(&c, route).await;
    route_ok(&s, route, "same-namespace");
    let h2c: hyper_util::client::legacy::Client<_, http_body_util::Empty<bytes::Bytes>> =
        hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .http2_only(true)
            .build_http();
    let uri = format!("http://127.0.0.1:{}/", bed.weir.proc.port);
    let resp = tokio::time::timeout(Duration::from_secs(10), h2c.get(uri.parse().unwrap()))
        .await
        .expect("an answer within 10 s")
        .expect("the request");
    assert_eq!(resp.version(), http::Version::HTTP_2);
    let name = resp.headers().get("x-echo-name").cloned();
    assert_eq!(resp.status(), 200);
    assert_eq!(
        name.as_ref().and_then(|v| v.to_str().ok()),
        Some("infra-backend-v1")
    );
    use http_body_util::BodyExt;
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    let seen: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        seen["protocol"], "HTTP/2.0",
        "the backend was spoken to in HTTP/2: {seen:#}"
    );
}

/// GRPCRouteRequestHeaderModifier: header modifiers on GRPCRoute rules edit the metadata the
/// backend receives (`set`, `add`, `remove`, several at once); of rules with the same match,
/// the first serves, as the spec's precedence says.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_header_modifiers_as_upstream_sends_them() {
    let svc = "gateway_api_conformance.echo_basic.grpcecho.GrpcEcho";
    let case = format!(
        "\
apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: {{name: grpc-request-header-modifier, namespace: gateway-conformance-infra}}
spec:
  parentRefs: [{{name: same-namespace}}]
  rules:
  - matches: [{{method: {{service: {svc}, method: Echo}}}}]
    filters: [{{type: RequestHeaderModifier, requestHeaderModifier: {{set: [{{name: X-Header-Set, value: set-overwrites-values}}]}}}}]
    backendRefs: [{{name: infra-backend-v1, port: 8080}}]
  - matches: [{{method: {{service: {svc}, method: Echo}}}}]
    filters: [{{type: RequestHeaderModifier, requestHeaderModifier: {{add: [{{name: X-Header-Add, value: add-appends-values}}]}}}}]
    backendRefs: [{{name: infra-backend-v1, port: 8080}}]
  - matches: [{{method: {{service: {svc}, method: Echo}}}}]
    filters: [{{type: RequestHeaderModifier, requestHeaderModifier: {{remove: [X-Header-Remove]}}}}]
    backendRefs: [{{name: infra-backend-v1, port: 8080}}]
  - matches: [{{method: {{service: {svc}, method: EchoTwo}}}}]
    filters:
    - type: RequestHeaderModifier
      requestHeaderModifier:
        set: [{{name: X-Header-Set-1, value: header-set-1}}, {{name: X-Header-Set-2, value: header-set-2}}]
        add: [{{name: X-Header-Add-1, value: header-add-1}}, {{name: X-Header-Add-2, value: header-add-2}}]
        remove: [X-Header-Remove-1, X-Header-Remove-2]
    backendRefs: [{{name: infra-backend-v2, port: 8080}}]
"
    );
    let bed = Bed::start(&case);
    let c = client();
    let route = "gateway-conformance-infra/grpc-request-header-modifier";
    let s = bed
        .status_when(&c, |s| s["grpcRoutes"].get(route).is_some())
        .await;
    let p = &s["grpcRoutes"][route]["parents"][0];
    assert_eq!(cond_of(&p["conditions"], "Accepted"), yes("Accepted"));
    wait_ready(&c, &bed.weir).await;
    let echo = format!("/{svc}/Echo");
    let two = format!("/{svc}/EchoTwo");
    // (method, metadata sent, backend, header → values it must arrive with, or none).
    type Want<'a> = &'a [(&'a str, &'a [&'a str])];
    let calls: [(&str, Headers, &str, Want); 7] = [
        (
            &echo,
            &[("some-other-header", "this-header-should-be-set")],
            "infra-backend-v1",
            &[
                ("x-header-set", &["set-overwrites-values"]),
                ("some-other-header", &["this-header-should-be-set"]),
            ],
        ),
        (
            &echo,
            &[
                ("some-other-header", "x"),
                ("x-header-set", "this-value-should-be-overwritten"),
            ],
            "infra-backend-v1",
            &[("x-header-set", &["set-overwrites-values"])],
        ),
        (
            &echo,
            &[("some-other-header", "x")],
            "infra-backend-v1",
            &[("x-header-add", &[])],
        ),
        (
            &echo,
            &[
                ("some-other-header", "x"),
                ("x-header-add", "this-value-should-be-appended"),
            ],
            "infra-backend-v1",
            &[("x-header-add", &["this-value-should-be-appended"])],
        ),
        (
            &echo,
            &[("x-header-remove", "this-should-be-removed")],
            "infra-backend-v1",
            &[("x-header-remove", &["this-should-be-removed"])],
        ),
        (
            &two,
            &[
                ("x-header-set-2", "set-header-2"),
                ("x-header-add-2", "add-header-2"),
                ("x-header-remove-2", "should-be-removed-2"),
                ("some-other-header", "another-header-val"),
            ],
            "infra-backend-v2",
            &[
                ("x-header-set-1", &["header-set-1"]),
                ("x-header-set-2", &["header-set-2"]),
                ("x-header-add-1", &["header-add-1"]),
                ("x-header-add-2", &["add-header-2", "header-add-2"]),
                ("x-header-remove-2", &[]),
                ("some-other-header", &["another-header-val"]),
            ],
        ),
        (
            &two,
            &[
                ("x-header-set-1", "original-set-1"),
                ("x-header-add-1", "existing-add-1"),
                ("x-header-remove-1", "should-be-removed-1"),
            ],
            "infra-backend-v2",
            &[
                ("x-header-set-1", &["header-set-1"]),
                ("x-header-add-1", &["existing-add-1", "header-add-1"]),
                ("x-header-remove-1", &[]),
            ],
        ),
    ];
    for (path, headers, backend, want) in calls {
        let (name, grpc_status, seen) = grpc_call_to(&bed, svc, path, headers).await;
        assert_eq!(name.as_deref(), Some(backend), "{path} {headers:?}");
        assert_eq!(grpc_status.as_deref(), Some("0"), "{path} {headers:?}");
        let seen = serde_json::json!({ "headers": seen });
        for (header, values) in want {
            assert_eq!(
                seen_values(&seen, header),
                *values,
                "{path} {headers:?}: {header}"
            );
        }
    }
}

/// HTTPRouteCORS with the suite's four routes, preflights and requests: allowed origins get
/// their CORS headers on preflights (expose-headers included) and on requests, which reach the
/// backend as sent; `*` methods and headers with credentials answer what was asked, without
/// credentials `*` will do; others get no CORS headers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cors_as_upstream_sends_it() {
    let route = |name: &str, rules: &str| {
        format!(
            "---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: {name}, namespace: gateway-conformance-infra}}
spec:
  parentRefs: [{{name: same-namespace}}]
  rules:
{rules}"
        )
    };
    let rule = |path: &str, cors: &str| {
        format!(
            "  - matches: [{{path: {{type: PathPrefix, value: {path}}}}}]
    filters: [{{type: CORS, cors: {cors}}}]
    backendRefs: [{{name: infra-backend-v1, port: 8080}}]
"
        )
    };
    let mut case = route(
        "cors-multiple-origins-methods-headers",
        &rule(
            "/cors-1",
            "{allowOrigins: ['https://www.foo.com', 'https://*.bar.com'], allowMethods: [GET, \
             OPTIONS], allowHeaders: [x-header-1, x-header-2], exposeHeaders: [x-header-3, \
             x-header-4], allowCredentials: true, maxAge: 3600}",
        ),
    );
    case += &route(
        "cors-wildcard-methods",
        &rule(
            "/cors-2",
            "{allowOrigins: ['https://www.foo.com'], allowMethods: ['*']}",
        ),
    );
    case += &route(
        "cors-wildcard-origin",
        &rule(
            "/cors-wildcard-origin",
            "{allowOrigins: ['*'], allowMethods: [PUT], allowCredentials: false}",
        ),
    );
    let any = "allowOrigins: ['*'], allowMethods: ['*'], allowHeaders: ['*']";
    case += &route(
        "cors-wildcard-methods-headers",
        &(rule(
            "/cors-wildcard-methods-headers",
            &format!("{{{any}, allowCredentials: true}}"),
        ) + &rule(
            "/cors-wildcard-methods-headers-unauth",
            &format!("{{{any}, allowCredentials: false}}"),
        )),
    );
    let bed = Bed::start(&case);
    let c = client();
    let key = |r: &str| format!("gateway-conformance-infra/{r}");
    let s = bed
        .route_status(&c, &key("cors-wildcard-methods-headers"))
        .await;
    for r in [
        "cors-multiple-origins-methods-headers",
        "cors-wildcard-methods",
        "cors-wildcard-origin",
        "cors-wildcard-methods-headers",
    ] {
        route_ok(&s, &key(r), "same-namespace");
    }
    let call =
        |method: &'static str, path: &'static str, headers: Vec<(&'static str, &'static str)>| {
            let c = c.clone();
            let url = bed.weir.url(path);
            async move {
                let mut h = vec![("host", "cors.example")];
                h.extend(headers);
                send(&c, method, &url, &h, &b""[..]).await
            }
        };
    let words = |v: Option<&str>| -> Vec<String> {
        let mut w: Vec<String> = v
            .unwrap_or_default()
            .split(',')
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect();
        w.sort();
        w
    };
    let asked = |origin, method| {
        vec![
            ("origin", origin),
            ("access-control-request-method", method),
            ("access-control-request-headers", "x-header-1, x-header-2"),
        ]
    };

    // /cors-1: three allowed origins, one refused; preflights, then requests.
    for origin in [
        "https://www.foo.com",
        "https://www.bar.com",
        "https://xpto.www.bar.com",
    ] {
        let r = call("OPTIONS", "/cors-1", asked(origin, "GET")).await;
        assert!(matches!(r.status, 200 | 204), "{origin}: {}", r.status);
        assert_eq!(r.header("access-control-allow-origin"), Some(origin));
        assert_eq!(
            words(r.header("access-control-allow-methods")),
            ["GET", "OPTIONS"]
        );
        assert_eq!(
            words(r.header("access-control-allow-headers")),
            ["x-header-1", "x-header-2"]
        );
        assert_eq!(
            words(r.header("access-control-expose-headers")),
            ["x-header-3", "x-header-4"],
            "{origin}"
        );
        assert_eq!(r.header("access-control-max-age"), Some("3600"));
        assert_eq!(r.header("access-control-allow-credentials"), Some("true"));
    }
    let r = call(
        "OPTIONS",
        "/cors-1",
        vec![
            ("origin", "https://foobar.com"),
            ("access-control-request-method", "GET"),
        ],
    )
    .await;
    assert!(matches!(r.status, 200 | 204 | 403), "{}", r.status);
    assert_eq!(r.header("access-control-allow-origin"), None);
    for (origin, allowed) in [
        ("https://www.foo.com", true),
        ("https://www.bar.com", true),
        ("https://foobar.com", false),
    ] {
        let r = call("GET", "/cors-1", asked(origin, "GET")).await;
        served_by(&r, "infra-backend-v1");
        let seen = r.json();
        assert_eq!(seen["headers"]["origin"], origin);
        assert_eq!(seen["headers"]["access-control-request-method"], "GET");
        assert_eq!(
            seen["headers"]["access-control-request-headers"],
            "x-header-1, x-header-2"
        );
        let want = allowed.then_some(origin);
        assert_eq!(r.header("access-control-allow-origin"), want, "{origin}");
    }

    // /cors-2: any method.
    let r = call(
        "OPTIONS",
        "/cors-2",
        vec![
            ("origin", "https://www.foo.com"),
            ("access-control-request-method", "POST"),
        ],
    )
    .await;
    assert_eq!(
        r.header("access-control-allow-origin"),
        Some("https://www.foo.com")
    );
    assert!(matches!(
        r.header("access-control-allow-methods"),
        Some("POST" | "*")
    ));
    assert_eq!(r.header("access-control-allow-credentials"), None);

    // /cors-wildcard-origin: any origin, without credentials.
    for origin in ["https://foobar.com", "https://foobar.com:12345"] {
        let r = call(
            "OPTIONS",
            "/cors-wildcard-origin",
            vec![("origin", origin), ("access-control-request-method", "PUT")],
        )
        .await;
        let allow = r.header("access-control-allow-origin");
        assert!(allow == Some(origin) || allow == Some("*"), "{allow:?}");
        assert_eq!(r.header("access-control-allow-methods"), Some("PUT"));
        assert_eq!(r.header("access-control-allow-credentials"), None);
        let r = call("PUT", "/cors-wildcard-origin", vec![("origin", origin)]).await;
        served_by(&r, "infra-backend-v1");
        assert_eq!(r.json()["method"], "PUT");
        let allow = r.header("access-control-allow-origin");
        assert!(allow == Some(origin) || allow == Some("*"), "{allow:?}");
        assert_eq!(r.header("access-control-allow-credentials"), None);
    }

    // `*` everywhere: with credentials, what was asked; without, `*` will do.
    let other = "https://other.foo.com";
    let r = call(
        "OPTIONS",
        "/cors-wildcard-methods-headers",
        asked(other, "PUT"),
    )
    .await;
    assert_eq!(r.header("access-control-allow-origin"), Some(other));
    assert_eq!(r.header("access-control-allow-methods"), Some("PUT"));
    assert_eq!(
        words(r.header("access-control-allow-headers")),
        ["x-header-1", "x-header-2"]
    );
    assert_eq!(r.header("access-control-allow-credentials"), Some("true"));
    let r = call(
        "OPTIONS",
        "/cors-wildcard-methods-headers-unauth",
        asked(other, "PUT"),
    )
    .await;
    let allow = r.header("access-control-allow-origin");
    assert!(allow == Some(other) || allow == Some("*"), "{allow:?}");
    assert!(matches!(
        r.header("access-control-allow-methods"),
        Some("PUT" | "*")
    ));
    let headers = words(r.header("access-control-allow-headers"));
    assert!(
        headers == ["x-header-1", "x-header-2"] || headers == ["*"],
        "{headers:?}"
    );
    assert_eq!(r.header("access-control-allow-credentials"), None);
    let r = call(
        "GET",
        "/cors-wildcard-methods-headers",
        vec![("origin", other)],
    )
    .await;
    served_by(&r, "infra-backend-v1");
    assert_eq!(r.header("access-control-allow-origin"), Some(other));
    assert_eq!(r.header("access-control-allow-credentials"), Some("true"));
    let r = call(
        "GET",
        "/cors-wildcard-methods-headers-unauth",
        vec![("origin", other)],
    )
    .await;
    served_by(&r, "infra-backend-v1");
    let allow = r.header("access-control-allow-origin");
    assert!(allow == Some(other) || allow == Some("*"), "{allow:?}");
    assert_eq!(r.header("access-control-allow-credentials"), None);
}

/// HTTPRouteRequestMirror, HTTPRouteRequestMultipleMirrors and
/// HTTPRouteRequestPercentageMirror with the suite's routes and requests: the backend answers,
/// each mirror gets a copy of the request (after the rule's header edits), and a share of
/// them when asked (within ±3σ of 500 requests, as upstream counts).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mirrors_as_upstream_sends_them() {
    use common::recorder::{response, Server};
    let v2 = Server::start(|_| response(200, "", "mirror v2"));
    let v3 = Server::start(|_| response(200, "", "mirror v3"));
    let service = |name: &str, port: u16| {
        format!(
            "apiVersion: v1
kind: Service
metadata: {{name: {name}, namespace: gateway-conformance-infra}}
spec: {{ports: [{{name: http, port: 8080}}]}}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {{name: {name}-1, namespace: gateway-conformance-infra, labels: {{kubernetes.io/service-name: {name}}}}}
addressType: IPv4
ports: [{{name: http, port: {port}}}]
endpoints: [{{addresses: [127.0.0.1], conditions: {{ready: true}}}}]
---
"
        )
    };
    let mirror = |to: &str, share: &str| {
        format!(
            "{{type: RequestMirror, requestMirror: {{backendRef: {{name: {to}, namespace: \
             gateway-conformance-infra, port: 8080}}{share}}}}}"
        )
    };
    let modify = "{type: RequestHeaderModifier, requestHeaderModifier: {set: [{name: \
                  X-Header-Set, value: set-overwrites-values}], add: [{name: X-Header-Add, \
                  value: header-val-1}, {name: X-Header-Add-Append, value: header-val-2}], \
                  remove: [X-Header-Remove]}}";
    let rule = |path: &str, filters: &[String]| {
        format!(
            "  - matches: [{{path: {{type: PathPrefix, value: {path}}}}}]
    filters: [{}]
    backendRefs: [{{name: infra-backend-v1, namespace: gateway-conformance-infra, port: 8080}}]
",
            filters.join(", ")
        )
    };
    let route = |name: &str, rules: &[String]| {
        format!(
            "apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: {name}, namespace: gateway-conformance-infra}}
spec:
  parentRefs: [{{name: same-namespace}}]
  rules:
{}---
",
            rules.concat()
        )
    };
    let (m2, m3) = (mirror("mirror-v2", ""), mirror("mirror-v3", ""));
    let mut case = service("mirror-v2", v2.port) + &service("mirror-v3", v3.port);
    case += &route(
        "request-mirror",
        &[
            rule("/mirror", std::slice::from_ref(&m2)),
            rule("/mirror-and-modify-headers", &[modify.into(), m2.clone()]),
        ],
    );
    case += &route(
        "request-multiple-mirrors",
        &[
            rule("/multi-mirror", &[m2.clone(), m3.clone()]),
            rule(
                "/multi-mirror-and-modify-request-headers",
                &[modify.into(), m2.clone(), m3.clone()],
            ),
        ],
    );
    case += &route(
        "request-percentage-mirror",
        &[
            rule("/percent-mirror", &[mirror("mirror-v2", ", percent: 20")]),
            rule(
                "/percent-mirror-fraction",
                &[mirror(
                    "mirror-v2",
                    ", fraction: {numerator: 25, denominator: 50}",
                )],
            ),
            rule(
                "/percent-mirror-and-modify-headers",
                &[modify.into(), mirror("mirror-v2", ", percent: 35")],
            ),
        ],
    );
    let bed = Bed::start(&case);
    let c = client();
    let key = |r: &str| format!("gateway-conformance-infra/{r}");
    let s = bed
        .route_status(&c, &key("request-percentage-mirror"))
        .await;
    for r in [
        "request-mirror",
        "request-multiple-mirrors",
        "request-percentage-mirror",
    ] {
        route_ok(&s, &key(r), "same-namespace");
    }
    // How many copies of `target` a mirror received (they go out on their own tasks).
    let copies = |m: &Server, target: &str| {
        let line = format!("GET {target} HTTP/1.1");
        m.seen().iter().filter(|r| r.request_line() == line).count()
    };
    let settled = |m: &Server, target: &str, want: usize| {
        let started = std::time::Instant::now();
        while copies(m, target) < want && started.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(20));
        }
        copies(m, target)
    };
    let edited = [
        ("x-header-remove", "remove-val"),
        ("x-header-add-append", "append-val-1"),
    ];
    let check_edits = |r: &Resp, what: &str| {
        let seen = r.json();
        assert_eq!(
            seen_values(&seen, "x-header-add"),
            ["header-val-1"],
            "{what}"
        );
        assert_eq!(
            seen_values(&seen, "x-header-add-append"),
            ["append-val-1", "header-val-2"],
            "{what}"
        );
        assert_eq!(
            seen_values(&seen, "x-header-set"),
            ["set-overwrites-values"],
            "{what}"
        );
        assert!(seen_values(&seen, "x-header-remove").is_empty(), "{what}");
    };

    // Every request mirrored, to one mirror or to both.
    for (path, edits, mirrors) in [
        ("/mirror", false, &[&v2][..]),
        ("/mirror-and-modify-headers", true, &[&v2][..]),
        ("/multi-mirror", false, &[&v2, &v3][..]),
        (
            "/multi-mirror-and-modify-request-headers",
            true,
            &[&v2, &v3][..],
        ),
    ] {
        let target = format!(
            "{path}?gateway-api-conformance-request-id=one-{}",
            path.len()
        );
        let headers: &[(&str, &str)] = if edits { &edited } else { &[] };
        let r = bed.request(&c, "example.com", &target, headers).await;
        served_by(&r, "infra-backend-v1");
        assert_eq!(r.json()["path"], path);
        assert_eq!(r.json()["query"], target.split_once('?').unwrap().1);
        if edits {
            check_edits(&r, path);
        }
        for m in mirrors {
            assert_eq!(settled(m, &target, 1), 1, "{target} mirrored once");
            if edits {
                let copy = m
                    .seen()
                    .into_iter()
                    .rev()
                    .find(|x| x.request_line().contains(&target));
                let copy = copy.unwrap();
                assert_eq!(
                    copy.header("x-header-set").as_deref(),
                    Some("set-overwrites-values")
                );
                assert_eq!(copy.header("x-header-remove"), None);
            }
        }
    }

    // A share of 500 requests, within ±3σ of the binomial's mean; a batch outside it is sent
    // again, up to five times, as upstream does (each batch misses with p ≈ 0.003).
    for (path, p, edits) in [
        ("/percent-mirror", 0.20, false),
        ("/percent-mirror-fraction", 0.50, false),
        ("/percent-mirror-and-modify-headers", 0.35, true),
    ] {
        let n = 500.0_f64;
        let (mean, sigma) = (n * p, (n * p * (1.0 - p)).sqrt());
        let band = mean - 3.0 * sigma..=mean + 3.0 * sigma;
        let headers: &[(&str, &str)] = if edits { &edited } else { &[] };
        let mut tries = Vec::new();
        for batch in 0..5 {
            let target = format!("{path}?gateway-api-conformance-request-id=share-{batch}");
            for i in 0..500 {
                let r = bed.request(&c, "example.com", &target, headers).await;
                served_by(&r, "infra-backend-v1");
                if edits && i == 0 {
                    check_edits(&r, path);
                }
            }
            // Copies still on their way: counted once the count stops moving.
            let mut got = copies(&v2, &target);
            for _ in 0..50 {
                std::thread::sleep(Duration::from_millis(200));
                let now = copies(&v2, &target);
                if now == got {
                    break;
                }
                got = now;
            }
            tries.push(got);
            if band.contains(&(got as f64)) {
                break;
            }
        }
        let last = *tries.last().unwrap() as f64;
        assert!(
            band.contains(&last),
            "{path}: {tries:?} of 500 mirrored, expected {mean} ± {}",
            3.0 * sigma
        );
    }
}

/// HTTPRouteResponseHeaderModifier with the suite's route: the backend sets headers (the
/// echo's `X-Echo-Set-Header`), and the client sees them set, appended to and removed as the
/// rule says, whatever case either side wrote them in; a rule with both modifiers edits the
/// request and the response.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn response_header_modifiers_as_upstream_sends_them() {
    let rule = |path: &str, filters: &str| {
        format!(
            "  - matches: [{{path: {{type: PathPrefix, value: {path}}}}}]
    filters: [{filters}]
    backendRefs: [{{name: infra-backend-v1, port: 8080}}]
"
        )
    };
    let response =
        |m: &str| format!("{{type: ResponseHeaderModifier, responseHeaderModifier: {m}}}");
    let mut case = "\
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: response-header-modifier, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules:
"
    .to_string();
    let multiple = "{set: [{name: X-Header-Set-1, value: header-set-1}, {name: X-Header-Set-2, \
                    value: header-set-2}], add: [{name: X-Header-Add-1, value: header-add-1}, \
                    {name: X-Header-Add-2, value: header-add-2}, {name: X-Header-Add-3, value: \
                    header-add-3}], remove: [X-Header-Remove-1, X-Header-Remove-2]}";
    case += &rule(
        "/set",
        &response("{set: [{name: X-Header-Set, value: set-overwrites-values}]}"),
    );
    case += &rule(
        "/add",
        &response("{add: [{name: X-Header-Add, value: add-appends-values}]}"),
    );
    case += &rule("/remove", &response("{remove: [X-Header-Remove]}"));
    case += &rule("/multiple", &response(multiple));
    case += &rule(
        "/case-insensitivity",
        &response(
            "{set: [{name: X-Header-Set, value: header-set}], add: [{name: X-Header-Add, value: \
             header-add}, {name: x-lowercase-add, value: lowercase-add}, {name: \
             x-Mixedcase-ADD-1, value: mixedcase-add-1}, {name: X-mixeDcase-add-2, value: \
             mixedcase-add-2}, {name: X-UPPERCASE-ADD, value: uppercase-add}], remove: \
             [X-Header-Remove]}",
        ),
    );
    case += &rule(
        "/response-and-request-header-modifiers",
        &format!(
            "{}, {{type: RequestHeaderModifier, requestHeaderModifier: {{set: [{{name: \
             X-Header-Set, value: set-overwrites-values}}], add: [{{name: X-Header-Add, value: \
             header-val-1}}, {{name: X-Header-Add-Append, value: header-val-2}}], remove: \
             [X-Header-Remove]}}}}",
            response(
                "{set: [{name: X-Header-Set-1, value: header-set-1}, {name: X-Header-Set-2, \
                 value: header-set-2}], add: [{name: X-Header-Add-1, value: header-add-1}, \
                 {name: X-Header-Add-2, value: header-add-2}], remove: [X-Header-Remove-1, \
                 X-Header-Remove-2]}"
            )
        ),
    );
    let bed = Bed::start(&case);
    let c = client();
    let route = "gateway-conformance-infra/response-header-modifier";
    let s = bed.route_status(&c, route).await;
    route_ok(&s, route, "same-namespace");
    // (path, request headers, what the backend sets, what the client must see (values joined
    // with `,`), headers it must not see).
    type Case<'a> = (&'a str, Headers<'a>, &'a str, Headers<'a>, &'a [&'a str]);
    let cases: [Case; 8] = [
        (
            "/set",
            &[],
            "Some-Other-Header:val",
            &[
                ("some-other-header", "val"),
                ("x-header-set", "set-overwrites-values"),
            ],
            &[],
        ),
        (
            "/set",
            &[],
            "Some-Other-Header:val,X-Header-Set:some-other-value",
            &[
                ("some-other-header", "val"),
                ("x-header-set", "set-overwrites-values"),
            ],
            &[],
        ),
        (
            "/add",
            &[],
            "Some-Other-Header:val",
            &[
                ("some-other-header", "val"),
                ("x-header-add", "add-appends-values"),
            ],
            &[],
        ),
        (
            "/add",
            &[],
            "X-Header-Add:some-other-value",
            &[("x-header-add", "some-other-value,add-appends-values")],
            &[],
        ),
        (
            "/remove",
            &[],
            "X-Header-Remove:val",
            &[],
            &["x-header-remove"],
        ),
        (
            "/multiple",
            &[],
            "X-Header-Set-2:set-val-2,X-Header-Add-2:add-val-2,X-Header-Remove-2:remove-val-2,\
             Another-Header:another-header-val,X-Header-Remove-1:val",
            &[
                ("x-header-set-1", "header-set-1"),
                ("x-header-set-2", "header-set-2"),
                ("x-header-add-1", "header-add-1"),
                ("x-header-add-2", "add-val-2,header-add-2"),
                ("x-header-add-3", "header-add-3"),
                ("another-header", "another-header-val"),
            ],
            &["x-header-remove-1", "x-header-remove-2"],
        ),
        (
            "/case-insensitivity",
            &[],
            "x-header-set:original-val-set,x-header-add:original-val-add,\
             x-header-remove:original-val-remove,Another-Header:another-header-val",
            &[
                ("x-header-set", "header-set"),
                ("x-header-add", "original-val-add,header-add"),
                ("x-lowercase-add", "lowercase-add"),
                ("x-mixedcase-add-1", "mixedcase-add-1"),
                ("x-mixedcase-add-2", "mixedcase-add-2"),
                ("x-uppercase-add", "uppercase-add"),
                ("another-header", "another-header-val"),
            ],
            &["x-header-remove"],
        ),
        (
            "/response-and-request-header-modifiers",
            &[
                ("x-header-remove", "remove-val"),
                ("x-header-add-append", "append-val-1"),
                ("x-header-echo", "echo"),
            ],
            "X-Header-Set-2:set-val-2,X-Header-Add-2:add-val-2,X-Header-Remove-2:remove-val-2,\
             Another-Header:another-header-val,X-Header-Remove-1:remove-val-1,X-Header-Echo:echo",
            &[
                ("x-header-set-1", "header-set-1"),
                ("x-header-set-2", "header-set-2"),
                ("x-header-add-1", "header-add-1"),
                ("x-header-add-2", "add-val-2,header-add-2"),
                ("another-header", "another-header-val"),
                ("x-header-echo", "echo"),
            ],
            &["x-header-remove-1", "x-header-remove-2"],
        ),
    ];
    for (path, sent, set, want, absent) in cases {
        let mut headers = vec![("x-echo-set-header", set)];
        headers.extend_from_slice(sent);
        let r = bed.request(&c, "example.com", path, &headers).await;
        served_by(&r, "infra-backend-v1");
        for (name, value) in want {
            let all: Vec<&str> = r
                .headers
                .get_all(*name)
                .iter()
                .map(|v| v.to_str().unwrap())
                .collect();
            assert_eq!(all.join(","), *value, "{path}: {name}");
        }
        for name in absent {
            assert!(r.headers.get(*name).is_none(), "{path}: {name} still there");
        }
        if path == "/response-and-request-header-modifiers" {
            let seen = r.json();
            assert_eq!(seen_values(&seen, "x-header-add"), ["header-val-1"]);
            assert_eq!(
                seen_values(&seen, "x-header-set"),
                ["set-overwrites-values"]
            );
            assert_eq!(
                seen_values(&seen, "x-header-add-append"),
                ["append-val-1", "header-val-2"]
            );
            assert_eq!(seen_values(&seen, "x-header-echo"), ["echo"]);
            assert!(seen_values(&seen, "x-header-remove").is_empty());
        }
    }
}

/// A Service `name` of gateway-conformance-infra with ports `(name, port, appProtocol)`, each
/// reaching 127.0.0.1:`target`.
fn tls_service(name: &str, ports: &[(&str, u16, &str)], target: u16) -> String {
    let spec: Vec<String> = ports
        .iter()
        .map(|(n, p, proto)| {
            let proto = if proto.is_empty() {
                String::new()
            } else {
                format!(", appProtocol: {proto}")
            };
            format!("{{name: {n}, port: {p}, targetPort: 8443{proto}}}")
        })
        .collect();
    let slice: Vec<String> = ports
        .iter()
        .map(|(n, ..)| format!("{{name: {n}, port: {target}}}"))
        .collect();
    format!(
        "apiVersion: v1
kind: Service
metadata: {{name: {name}, namespace: gateway-conformance-infra}}
spec: {{ports: [{}]}}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {{name: {name}-1, namespace: gateway-conformance-infra, labels: {{kubernetes.io/service-name: {name}}}}}
addressType: IPv4
ports: [{}]
endpoints: [{{addresses: [127.0.0.1], conditions: {{ready: true}}}}]
---
",
        spec.join(", "),
        slice.join(", ")
    )
}

/// A BackendTLSPolicy of gateway-conformance-infra for Service `service` (port `section`, or
/// the whole Service), trusting ConfigMap `ca`, verifying `hostname`.
fn backend_tls_policy(
    name: &str,
    service: &str,
    section: Option<&str>,
    ca: &str,
    hostname: &str,
) -> String {
    let section = section
        .map(|s| format!(", sectionName: {s}"))
        .unwrap_or_default();
    format!(
        "apiVersion: gateway.networking.k8s.io/v1
kind: BackendTLSPolicy
metadata: {{name: {name}, namespace: gateway-conformance-infra}}
spec:
  targetRefs: [{{group: '', kind: Service, name: {service}{section}}}]
  validation:
    caCertificateRefs: [{{group: '', kind: ConfigMap, name: {ca}}}]
    hostname: {hostname}
---
"
    )
}

/// A ConfigMap `name` of gateway-conformance-infra holding `pem` as `ca.crt`.
fn ca_config_map(name: &str, pem: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\n\
         metadata: {{name: {name}, namespace: gateway-conformance-infra}}\n\
         data:\n  ca.crt: |\n{}\n---\n",
        indent(pem)
    )
}

/// BackendTLSPolicyConflictResolution: of two policies for the same Service (or the same
/// port of it), the first by name applies and the other is `Accepted: False` (`Conflicted`);
/// one naming a port comes before one naming the whole Service. The backend tells which host
/// name Weir sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conflicting_backend_tls_policies_as_upstream_sends_them() {
    use rcgen::ExtendedKeyUsagePurpose::ServerAuth;
    let ca = common::ca::Ca::new("tls-checks CA");
    let leaf = ca.leaf(&["abc.example.com", "other.example.com"], ServerAuth);
    let backend = tls_backend_reporting(&leaf);
    let (without, with, not) = (
        "backendtlspolicy-conflicted-without-section-name-test",
        "backendtlspolicy-conflicted-with-section-name-test",
        "backendtlspolicy-not-conflicted-test",
    );
    let cm = "tls-checks-ca-certificate";
    let mut case = ca_config_map(cm, &ca.pem());
    case += &tls_service(without, &[("https", 443, "")], backend);
    case += &tls_service(
        with,
        &[("https-1", 443, ""), ("https-2", 8443, "")],
        backend,
    );
    case += &tls_service(not, &[("https-1", 443, ""), ("https-2", 8443, "")], backend);
    case += &backend_tls_policy(
        "conflicted-without-section-name-1",
        without,
        None,
        cm,
        "other.example.com",
    );
    case += &backend_tls_policy(
        "conflicted-without-section-name-2",
        without,
        None,
        cm,
        "abc.example.com",
    );
    case += &backend_tls_policy(
        "conflicted-with-section-name-1",
        with,
        Some("https-1"),
        cm,
        "other.example.com",
    );
    case += &backend_tls_policy(
        "conflicted-with-section-name-2",
        with,
        Some("https-1"),
        cm,
        "abc.example.com",
    );
    case += &backend_tls_policy(
        "not-conflicted-with-section-name",
        not,
        Some("https-1"),
        cm,
        "other.example.com",
    );
    case += &backend_tls_policy(
        "not-conflicted-without-section-name",
        not,
        None,
        cm,
        "abc.example.com",
    );
    case += &format!(
        "apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: backendtlspolicy-conflict-resolution, namespace: gateway-conformance-infra}}
spec:
  parentRefs: [{{name: same-namespace}}]
  hostnames: [abc.example.com]
  rules:
  - matches: [{{path: {{type: Exact, value: /backendtlspolicy-conflicted-without-section-name}}}}]
    backendRefs: [{{name: {without}, port: 443}}]
  - matches: [{{path: {{type: Exact, value: /backendtlspolicy-conflicted-with-section-name}}}}]
    backendRefs: [{{name: {with}, port: 443}}]
  - matches: [{{path: {{type: Exact, value: /backendtlspolicy-not-conflicted-with-section-name}}}}]
    backendRefs: [{{name: {not}, port: 443}}]
  - matches: [{{path: {{type: Exact, value: /backendtlspolicy-not-conflicted-without-section-name}}}}]
    backendRefs: [{{name: {not}, port: 8443}}]
"
    );
    let bed = Bed::start(&case);
    let c = client();
    let route = "gateway-conformance-infra/backendtlspolicy-conflict-resolution";
    let s = bed.route_status(&c, route).await;
    route_ok(&s, route, "same-namespace");
    let policies = &s["backendTLSPolicies"];
    for (policy, accepted) in [
        ("conflicted-without-section-name-1", true),
        ("conflicted-without-section-name-2", false),
        ("conflicted-with-section-name-1", true),
        ("conflicted-with-section-name-2", false),
        ("not-conflicted-with-section-name", true),
        ("not-conflicted-without-section-name", true),
    ] {
        let a = &policies[format!("gateway-conformance-infra/{policy}")]["ancestors"][0];
        assert_eq!(
            a["ancestorRef"]["name"], "same-namespace",
            "{policy}: {policies:#}"
        );
        let want = if accepted {
            yes("Accepted")
        } else {
            no("Conflicted")
        };
        assert_eq!(cond_of(&a["conditions"], "Accepted"), want, "{policy}");
    }
    for (path, sni) in [
        (
            "/backendtlspolicy-conflicted-without-section-name",
            "other.example.com",
        ),
        (
            "/backendtlspolicy-conflicted-with-section-name",
            "other.example.com",
        ),
        (
            "/backendtlspolicy-not-conflicted-with-section-name",
            "other.example.com",
        ),
        (
            "/backendtlspolicy-not-conflicted-without-section-name",
            "abc.example.com",
        ),
    ] {
        let r = bed.request(&c, "abc.example.com", path, &[]).await;
        assert_eq!(r.status, 200, "{path}");
        let body = String::from_utf8_lossy(&r.body).to_string();
        assert_eq!(body, format!("sni={sni} path={path}"));
    }
}

/// BackendTLSPolicy with the suite's objects: a verified backend gets the policy's host name
/// as SNI, from an HTTP and from an HTTPS listener (re-encrypted); a policy whose host name the
/// certificate lacks, or whose CA did not sign it, fails the requests; a policy's CA
/// reference that goes missing, comes back, empties and is restored is reported each time
/// (`NoValidCACertificate`, `InvalidCACertificateRef`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backend_tls_policies_as_upstream_sends_them() {
    use rcgen::ExtendedKeyUsagePurpose::ServerAuth;
    let ca = common::ca::Ca::new("tls-checks CA");
    let mismatch = common::ca::Ca::new("mismatch CA");
    let leaf = ca.leaf(&["abc.example.com", "other.example.com"], ServerAuth);
    let backend = tls_backend_reporting(&leaf);
    let front_ca = common::ca::Ca::new("front CA");
    let front = front_ca.leaf(&["https-listener.org"], ServerAuth);
    let cm = "tls-checks-ca-certificate";
    let reconcile_cm = "tls-checks-ca-certificate-reconcile-test";
    let objects = |reconcile_ca: Option<&str>| {
        let mut case = ca_config_map(cm, &ca.pem());
        case += &ca_config_map("mismatch-ca-certificate", &mismatch.pem());
        if let Some(pem) = reconcile_ca {
            case += &ca_config_map(reconcile_cm, pem);
        }
        case += &tls_secret_of(
            "gateway-conformance-infra",
            "tls-validity-checks-certificate",
            &front.pem,
            &front.key_pem,
        );
        case += "---\n";
        for (svc, proto) in [
            ("backendtlspolicy-test", ""),
            ("backendtlspolicy-host-mismatch-test", "HTTPS"),
            ("backendtlspolicy-cert-mismatch-test", "HTTPS"),
            ("backendtlspolicy-reconcile-test", ""),
        ] {
            case += &tls_service(svc, &[("btls", 443, proto)], backend);
        }
        let btls = Some("btls");
        case += &backend_tls_policy(
            "normative-test",
            "backendtlspolicy-test",
            btls,
            cm,
            "abc.example.com",
        );
        case += &backend_tls_policy(
            "host-mismatch",
            "backendtlspolicy-host-mismatch-test",
            btls,
            cm,
            "mismatch.example.com",
        );
        case += &backend_tls_policy(
            "cert-mismatch",
            "backendtlspolicy-cert-mismatch-test",
            btls,
            "mismatch-ca-certificate",
            "abc.example.com",
        );
        case += &backend_tls_policy(
            "reconcile-test",
            "backendtlspolicy-reconcile-test",
            btls,
            reconcile_cm,
            "abc.example.com",
        );
        case += "\
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: same-namespace-with-https-listener, namespace: gateway-conformance-infra}
spec:
  gatewayClassName: weir
  listeners:
  - {name: https, port: 443, protocol: HTTPS, allowedRoutes: {namespaces: {from: Same}}, tls: {certificateRefs: [{name: tls-validity-checks-certificate}]}}
  - {name: https-with-hostname, port: 443, protocol: HTTPS, hostname: second-example.org, allowedRoutes: {namespaces: {from: Same}}, tls: {certificateRefs: [{name: tls-validity-checks-certificate}]}}
  - {name: https-with-wildcard-hostname, port: 443, protocol: HTTPS, hostname: '*.wildcard.org', allowedRoutes: {namespaces: {from: Same}}, tls: {certificateRefs: [{name: tls-validity-checks-certificate}]}}
  - {name: https-with-hostname-matching-wildcard, port: 443, protocol: HTTPS, hostname: fourth-example.wildcard.org, allowedRoutes: {namespaces: {from: Same}}, tls: {certificateRefs: [{name: tls-validity-checks-certificate}]}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: backendtlspolicy, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace, namespace: gateway-conformance-infra}]
  hostnames: [abc.example.com]
  rules:
  - matches: [{path: {type: Exact, value: /backendtlspolicy}}]
    backendRefs: [{name: backendtlspolicy-test, port: 443}]
  - matches: [{path: {type: Exact, value: /backendtlspolicy-host-mismatch}}]
    backendRefs: [{name: backendtlspolicy-host-mismatch-test, port: 443}]
  - matches: [{path: {type: Exact, value: /backendtlspolicy-cert-mismatch}}]
    backendRefs: [{name: backendtlspolicy-cert-mismatch-test, port: 443}]
  - matches: [{path: {type: Exact, value: /backendtlspolicy-reconcile-test}}]
    backendRefs: [{name: backendtlspolicy-reconcile-test, port: 443}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: backendtlspolicy-reencrypt, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace-with-https-listener, namespace: gateway-conformance-infra}]
  hostnames: [https-listener.org]
  rules:
  - matches: [{path: {type: Exact, value: /backendtlspolicy}}]
    backendRefs: [{name: backendtlspolicy-test, port: 443}]
";
        case
    };
    let bed = Bed::start_with(&objects(Some(&ca.pem())), &["--tls-listen", "x"]);
    let c = client();
    let key = |o: &str| format!("gateway-conformance-infra/{o}");
    let s = bed
        .route_status(&c, &key("backendtlspolicy-reencrypt"))
        .await;
    route_ok(&s, &key("backendtlspolicy"), "same-namespace");
    route_ok(
        &s,
        &key("backendtlspolicy-reencrypt"),
        "same-namespace-with-https-listener",
    );
    let https_gw = key("same-namespace-with-https-listener");
    for l in s["gateways"][&https_gw]["listeners"].as_array().unwrap() {
        for type_ in ["Accepted", "ResolvedRefs", "Programmed"] {
            assert_eq!(cond_of(&l["conditions"], type_).0, "True", "{l:#}");
        }
    }
    let ancestor = |s: &Value, policy: &str, gateway: &str| -> Value {
        s["backendTLSPolicies"][key(policy)]["ancestors"]
            .as_array()
            .and_then(|a| a.iter().find(|a| a["ancestorRef"]["name"] == gateway))
            .cloned()
            .unwrap_or_else(|| panic!("{policy} has no ancestor {gateway}: {s:#}"))
    };
    for policy in [
        "normative-test",
        "host-mismatch",
        "cert-mismatch",
        "reconcile-test",
    ] {
        let a = ancestor(&s, policy, "same-namespace");
        assert_eq!(
            cond_of(&a["conditions"], "Accepted"),
            yes("Accepted"),
            "{policy}"
        );
        assert_eq!(
            cond_of(&a["conditions"], "ResolvedRefs"),
            yes("ResolvedRefs"),
            "{policy}"
        );
    }
    let a = ancestor(&s, "normative-test", "same-namespace-with-https-listener");
    assert_eq!(cond_of(&a["conditions"], "Accepted"), yes("Accepted"));
    assert_eq!(
        cond_of(&a["conditions"], "ResolvedRefs"),
        yes("ResolvedRefs")
    );

    let body = |r: &Resp| String::from_utf8_lossy(&r.body).to_string();
    let r = bed
        .request(&c, "abc.example.com", "/backendtlspolicy", &[])
        .await;
    assert_eq!(
        (r.status, body(&r)),
        (200, "sni=abc.example.com path=/backendtlspolicy".into())
    );
    // Re-encrypted from the HTTPS listener.
    let (connector, _) =
        common::tls::connector_presenting(front_ca.issuer.der().clone(), None, true);
    let port = bed.tls_port.unwrap();
    let r = common::tls::exchange(
        &connector,
        port,
        "https-listener.org",
        "https-listener.org",
        "/backendtlspolicy",
    )
    .await
    .unwrap();
    assert_eq!(r.resp.status, 200);
    assert_eq!(body(&r.resp), "sni=abc.example.com path=/backendtlspolicy");
    for host in ["abc.example.org", "abc.example.com"] {
        let r = bed
            .request(&c, host, "/backendtlspolicy-host-mismatch", &[])
            .await;
        assert_ne!(
            r.status, 200,
            "{host}: the certificate does not name mismatch.example.com"
        );
    }
    let r = bed
        .request(
            &c,
            "abc.example.com",
            "/backendtlspolicy-cert-mismatch",
            &[],
        )
        .await;
    assert_ne!(r.status, 200, "another CA signed the certificate");

    // The reconcile policy's CA: missing, back, empty, back.
    let reconcile = |want: bool| {
        let c = c.clone();
        let bed = &bed;
        async move {
            let s = bed
                .status_when(&c, |s| {
                    let a = &s["backendTLSPolicies"][key("reconcile-test")]["ancestors"][0];
                    cond_of(&a["conditions"], "Accepted").0 == if want { "True" } else { "False" }
                })
                .await;
            let a = ancestor(&s, "reconcile-test", "same-namespace");
            if want {
                assert_eq!(cond_of(&a["conditions"], "Accepted"), yes("Accepted"));
                assert_eq!(
                    cond_of(&a["conditions"], "ResolvedRefs"),
                    yes("ResolvedRefs")
                );
            } else {
                assert_eq!(
                    cond_of(&a["conditions"], "Accepted"),
                    no("NoValidCACertificate")
                );
                assert_eq!(
                    cond_of(&a["conditions"], "ResolvedRefs"),
                    no("InvalidCACertificateRef")
                );
            }
        }
    };
    bed.rewrite(&objects(None));
    reconcile(false).await;
    bed.rewrite(&objects(Some(&ca.pem())));
    reconcile(true).await;
    bed.rewrite(&objects(Some("")));
    reconcile(false).await;
    bed.rewrite(&objects(Some(&ca.pem())));
    reconcile(true).await;
}

/// HTTPRouteInvalidParentRefNotMatchingListenerPort and
/// HTTPRouteInvalidParentRefSectionNameNotMatchingPort: a parentRef whose `port` no listener
/// has, or whose `sectionName` names a listener on another port, attaches nowhere:
/// `Accepted: False` (`NoMatchingParent`), its references still resolved, and no route
/// counted on the Gateway's listener.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parent_refs_whose_port_matches_no_listener_as_upstream_sends_them() {
    let case = "\
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: httproute-listener-not-matching-route-port, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace, namespace: gateway-conformance-infra, port: 81}]
  rules: [{backendRefs: [{name: infra-backend-v1, kind: Service, port: 8080}]}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gateway-with-one-not-matching-port-and-section-name-route, namespace: gateway-conformance-infra}
spec:
  gatewayClassName: weir
  listeners:
  - {name: http, port: 80, protocol: HTTP, allowedRoutes: {kinds: [{kind: HTTPRoute}], namespaces: {from: All}}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: httproute-listener-section-name-not-matching-port, namespace: gateway-conformance-infra}
spec:
  parentRefs:
  - {name: gateway-with-one-not-matching-port-and-section-name-route, namespace: gateway-conformance-infra, sectionName: http, port: 81}
  rules: [{backendRefs: [{name: infra-backend-v1, kind: Service, port: 8080}]}]
";
    let bed = Bed::start(case);
    let c = client();
    let name = |r: &str| format!("gateway-conformance-infra/{r}");
    let last = name("httproute-listener-section-name-not-matching-port");
    let s = bed.route_status(&c, &last).await;
    for (route, gateway, resolved) in [
        (
            "httproute-listener-not-matching-route-port",
            "same-namespace",
            true,
        ),
        (
            "httproute-listener-section-name-not-matching-port",
            "gateway-with-one-not-matching-port-and-section-name-route",
            false,
        ),
    ] {
        let parents = s["httpRoutes"][name(route)]["parents"].as_array().unwrap();
        assert_eq!(parents.len(), 1, "{route}: {s:#}");
        let p = parent(&s, &name(route), gateway);
        assert_eq!(
            cond_of(&p["conditions"], "Accepted"),
            no("NoMatchingParent"),
            "{route}"
        );
        if resolved {
            assert_eq!(
                cond_of(&p["conditions"], "ResolvedRefs"),
                yes("ResolvedRefs"),
                "{route}"
            );
        }
        let gw = &s["gateways"][name(gateway)];
        let listeners = gw["listeners"].as_array().unwrap();
        assert_eq!(listeners.len(), 1, "{gw:#}");
        assert_eq!(listeners[0]["attachedRoutes"], 0, "{gw:#}");
    }
    let r = bed.request(&c, "example.com", "/", &[]).await;
    assert_eq!(r.status, 404, "attached nowhere, served nowhere");
}

/// The suite's listener host name matching cases (HTTPRoute and GRPCRoute alike): a Gateway
/// `gateway` with listeners for `bar.com`, `foo.bar.com`, `*.bar.com` and `*.foo.com`, and
/// routes of `kind` without host names on them by `sectionName`.
fn listener_hostname_matching_case(kind: &str, gateway: &str) -> String {
    let mut case = format!(
        "apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: {gateway}, namespace: gateway-conformance-infra}}
spec:
  gatewayClassName: weir
  listeners:
"
    );
    for (i, host) in ["bar.com", "foo.bar.com", "'*.bar.com'", "'*.foo.com'"]
        .iter()
        .enumerate()
    {
        case += &format!(
            "  - {{name: listener-{}, port: 80, protocol: HTTP, hostname: {host}, allowedRoutes: {{namespaces: {{from: Same}}}}}}\n",
            i + 1
        );
    }
    for (route, listeners) in [
        ("backend-v1", &["listener-1"][..]),
        ("backend-v2", &["listener-2"][..]),
        ("backend-v3", &["listener-3", "listener-4"][..]),
    ] {
        let parents: Vec<String> = listeners
            .iter()
            .map(|l| {
                format!("  - {{name: {gateway}, namespace: gateway-conformance-infra, sectionName: {l}}}\n")
            })
            .collect();
        case += &format!(
            "---
apiVersion: gateway.networking.k8s.io/v1
kind: {kind}
metadata: {{name: {route}, namespace: gateway-conformance-infra}}
spec:
  parentRefs:
{}  rules: [{{backendRefs: [{{name: infra-{route}, port: 8080}}]}}]
",
            parents.concat()
        );
    }
    case
}

/// What [`listener_hostname_matching_case`] serves: (host, the backend), `None` for none.
const LISTENER_HOSTNAME_MATCHES: [(&str, Option<&str>); 8] = [
    ("bar.com", Some("infra-backend-v1")),
    // The exact listener before `*.bar.com`.
    ("foo.bar.com", Some("infra-backend-v2")),
    ("baz.bar.com", Some("infra-backend-v3")),
    ("boo.bar.com", Some("infra-backend-v3")),
    // A wildcard covers several labels.
    ("multiple.prefixes.bar.com", Some("infra-backend-v3")),
    ("multiple.prefixes.foo.com", Some("infra-backend-v3")),
    ("foo.com", None),
    ("no.matching.host", None),
];

/// One unary gRPC call over h2c to Weir with `:authority` `authority` and metadata
/// `headers`: the backend that answered (`x-echo-name`), the `grpc-status` (from the trailers
/// or a trailers-only head) and the headers the backend received.
async fn grpc_call_to(
    bed: &Bed,
    authority: &str,
    path: &str,
    headers: Headers<'_>,
) -> (Option<String>, Option<String>, Value) {
    use http_body_util::{BodyExt, Full};
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", bed.weir.proc.port))
        .await
        .unwrap();
    let (mut send, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(tcp),
    )
    .await
    .unwrap();
    tokio::spawn(conn);
    let mut req = http::Request::post(format!("http://{authority}{path}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers");
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let req = req
        .body(Full::new(bytes::Bytes::from_static(b"\0\0\0\0\0")))
        .unwrap();
    let resp = tokio::time::timeout(Duration::from_secs(10), send.send_request(req))
        .await
        .expect("no answer in 10 s")
        .expect("the call");
    let head = resp.headers().clone();
    let text =
        |h: &http::HeaderMap, n: &str| h.get(n).and_then(|v| v.to_str().ok()).map(str::to_string);
    let collected = resp.into_body().collect().await.expect("the answer's body");
    let grpc_status = collected
        .trailers()
        .and_then(|t| text(t, "grpc-status"))
        .or_else(|| text(&head, "grpc-status"));
    let seen = text(&head, "x-echo-request-headers")
        .and_then(|j| serde_json::from_str(&j).ok())
        .unwrap_or_default();
    (text(&head, "x-echo-name"), grpc_status, seen)
}

/// GRPCRouteListenerHostnameMatching: GRPCRoutes without host names of their own, each on
/// listeners by `sectionName`, serve the `:authority`s their listeners' names cover, an exact
/// name before a wildcard one (which covers several labels); the others are `UNIMPLEMENTED`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_routes_serve_the_names_of_their_listeners() {
    let case = listener_hostname_matching_case("GRPCRoute", "grpcroute-listener-hostname-matching");
    let bed = Bed::start(&case);
    let c = client();
    let route = |r: &str| format!("gateway-conformance-infra/{r}");
    let s = bed
        .status_when(&c, |s| s["grpcRoutes"].get(route("backend-v3")).is_some())
        .await;
    for r in ["backend-v1", "backend-v2", "backend-v3"] {
        for p in s["grpcRoutes"][route(r)]["parents"].as_array().unwrap() {
            assert_eq!(
                cond_of(&p["conditions"], "Accepted"),
                yes("Accepted"),
                "{r}"
            );
        }
    }
    let gw = &s["gateways"][route("grpcroute-listener-hostname-matching")];
    for l in gw["listeners"].as_array().unwrap() {
        for type_ in ["Accepted", "ResolvedRefs", "Programmed"] {
            assert_eq!(cond_of(&l["conditions"], type_), yes(type_), "{gw:#}");
        }
    }
    wait_ready(&c, &bed.weir).await;
    let echo = "/gateway_api_conformance.echo_basic.grpcecho.GrpcEcho/Echo";
    for (authority, backend) in LISTENER_HOSTNAME_MATCHES {
        let (name, grpc_status, _) = grpc_call_to(&bed, authority, echo, &[]).await;
        assert_eq!(name.as_deref(), backend, "{authority}");
        let want = if backend.is_some() { "0" } else { "12" };
        assert_eq!(grpc_status.as_deref(), Some(want), "{authority}");
    }
}

/// HTTPRouteServiceTypes: Services without a selector (their EndpointSlices written by hand,
/// empty at first) and headless ones are backends like any other: resolved while they have no
/// endpoints, and served from their EndpointSlices once those list some.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn services_without_selectors_and_headless_ones_are_served_from_their_slices() {
    let slice = |service: &str, family: &str, endpoints: &str| {
        format!(
            "apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: {service}-{family}
  namespace: gateway-conformance-infra
  labels: {{kubernetes.io/service-name: {service}}}
addressType: {}
ports: [{{name: first-port, port: ${{infra-backend-v1}}, protocol: TCP}}]
{endpoints}
---
",
            if family == "ip4" { "IPv4" } else { "IPv6" }
        )
    };
    let service = |name: &str, spec: &str| {
        format!(
            "apiVersion: v1
kind: Service
metadata: {{name: {name}, namespace: gateway-conformance-infra}}
spec:
  {spec}ports: [{{name: first-port, protocol: TCP, port: 8080, targetPort: 3000}}]
---
"
        )
    };
    let ready = "endpoints:
- addresses: [127.0.0.1]
  conditions: {ready: true, serving: true, terminating: false}";
    let case = |filled: &str| {
        let mut case = "\
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: service-types, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules:
  - matches: [{path: {type: Exact, value: /manual-endpointslices}}]
    backendRefs: [{name: manual-endpointslices, port: 8080}]
  - matches: [{path: {type: Exact, value: /headless}}]
    backendRefs: [{name: headless, port: 8080}]
  - matches: [{path: {type: Exact, value: /headless-manual-endpointslices}}]
    backendRefs: [{name: headless-manual-endpointslices, port: 8080}]
---
"
        .to_string();
        case += &service("manual-endpointslices", "");
        case += &service(
            "headless",
            "clusterIP: None\n  selector: {app: infra-backend-v1}\n  ",
        );
        case += &service("headless-manual-endpointslices", "clusterIP: None\n  ");
        // The headless Service's own slice, as Kubernetes keeps it for its selector.
        case += &slice("headless", "ip4", ready);
        for s in ["manual-endpointslices", "headless-manual-endpointslices"] {
            case += &slice(s, "ip4", filled);
            case += &slice(s, "ip6", "");
        }
        case
    };
    let bed = Bed::start(&case(""));
    let c = client();
    let route = "gateway-conformance-infra/service-types";
    let s = bed.route_status(&c, route).await;
    route_ok(&s, route, "same-namespace");

    bed.rewrite(&case(ready));
    for path in [
        "/manual-endpointslices",
        "/headless-manual-endpointslices",
        "/headless",
    ] {
        let mut r = bed.request(&c, "example.com", path, &[]).await;
        for _ in 0..100 {
            if r.status == 200 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
            r = bed.request(&c, "example.com", path, &[]).await;
        }
        served_by(&r, "infra-backend-v1");
        assert_eq!(r.json()["path"], path);
    }
}

/// HTTPRouteBackendProtocolWebSocket: a backendRef to a Service port with `appProtocol:
/// kubernetes.io/ws` carries WebSockets; the suite's client sends `Host: IP:80`, and text and
/// binary messages come back as sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websockets_reach_a_ws_backend_as_upstream_sends_them() {
    use common::ws::{Ws, BINARY, TEXT};
    let case = "\
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: backend-protocol-ws, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules: [{backendRefs: [{name: infra-backend-v1, port: 8082}]}]
";
    let bed = Bed::start(case);
    let c = client();
    let route = "gateway-conformance-infra/backend-protocol-ws";
    let s = bed.route_status(&c, route).await;
    route_ok(&s, route, "same-namespace");
    for _ in 0..3 {
        let tcp = tokio::net::TcpStream::connect(("127.0.0.1", bed.weir.proc.port))
            .await
            .unwrap();
        let mut ws = Ws::connect(Box::new(tcp), "127.0.0.1:80", "/ws").await;
        ws.send(TEXT, b"Websocket Support!").await;
        let f = ws.recv().await;
        assert_eq!(
            (f.opcode, f.payload.as_slice()),
            (TEXT, &b"Websocket Support!"[..])
        );
        ws.send(BINARY, &[1, 2, 3, 4, 5, 6, 7]).await;
        let f = ws.recv().await;
        assert_eq!(
            (f.opcode, f.payload.as_slice()),
            (BINARY, &[1u8, 2, 3, 4, 5, 6, 7][..])
        );
    }
}

/// A gRPC backend over TLS (ALPN `h2` only, as grpc-go's TLS servers insist) serving `leaf`:
/// every call succeeds, answered trailers-only with `x-echo-name: name`.
fn tls_grpc_backend(leaf: &common::ca::Leaf, name: &'static str) -> u16 {
    let config = leaf.server_config(&[b"h2"]);
    let acceptor = tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config));
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        let listener = tokio::net::TcpListener::from_std(listener).unwrap();
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let answer = hyper::service::service_fn(move |_req| async move {
                    http::Response::builder()
                        .header("content-type", "application/grpc")
                        .header("x-echo-name", name)
                        .header("grpc-status", "0")
                        .body(http_body_util::Empty::<bytes::Bytes>::new())
                });
                let _ =
                    hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
                        .serve_connection(hyper_util::rt::TokioIo::new(tls), answer)
                        .await;
            });
        }
    });
    port
}

/// BackendTLSPolicyGRPCRoute: a GRPCRoute's backend with a BackendTLSPolicy is called over
/// TLS in HTTP/2, verified against the policy's CA and host name; a policy whose host name
/// the certificate does not carry, or whose CA did not sign it, fails the calls (both
/// policies themselves accepted, their references resolved).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backend_tls_policies_make_grpc_calls_verified_tls_ones() {
    use rcgen::ExtendedKeyUsagePurpose::ServerAuth;
    let ca = common::ca::Ca::new("tls-checks CA");
    let mismatch_ca = common::ca::Ca::new("mismatch CA");
    let leaf = ca.leaf(&["abc.example.com", "other.example.com"], ServerAuth);
    let backend = tls_grpc_backend(&leaf, "grpc-infra-backend-v1");
    let config_map = |name: &str, ca: &common::ca::Ca| {
        format!(
            "apiVersion: v1\nkind: ConfigMap\n\
             metadata: {{name: {name}, namespace: gateway-conformance-infra}}\n\
             data:\n  ca.crt: |\n{}\n---\n",
            indent(&ca.pem())
        )
    };
    let mut case = config_map("tls-checks-ca-certificate", &ca);
    case += &config_map("mismatch-ca-certificate", &mismatch_ca);
    for (svc, policy, ca, host) in [
        (
            "backendtlspolicy-grpc-test",
            "grpc-normative-test",
            "tls-checks-ca-certificate",
            "abc.example.com",
        ),
        (
            "backendtlspolicy-grpc-host-mismatch-test",
            "grpc-host-mismatch",
            "tls-checks-ca-certificate",
            "mismatch.example.com",
        ),
        (
            "backendtlspolicy-grpc-cert-mismatch-test",
            "grpc-cert-mismatch",
            "mismatch-ca-certificate",
            "abc.example.com",
        ),
    ] {
        case += &format!(
            "apiVersion: v1
kind: Service
metadata: {{name: {svc}, namespace: gateway-conformance-infra}}
spec:
  selector: {{app: grpc-infra-backend-v1}}
  ports: [{{name: btls, protocol: TCP, port: 443, targetPort: 8443}}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: {svc}-1
  namespace: gateway-conformance-infra
  labels: {{kubernetes.io/service-name: {svc}}}
addressType: IPv4
ports: [{{name: btls, port: {backend}}}]
endpoints:
- addresses: [127.0.0.1]
  conditions: {{ready: true}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: BackendTLSPolicy
metadata: {{name: {policy}, namespace: gateway-conformance-infra}}
spec:
  targetRefs: [{{group: '', kind: Service, name: {svc}, sectionName: btls}}]
  validation:
    caCertificateRefs: [{{group: '', kind: ConfigMap, name: {ca}}}]
    hostname: {host}
---
"
        );
    }
    case += "\
apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: {name: backendtlspolicy-grpcroute, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace, namespace: gateway-conformance-infra}]
  hostnames: [abc.example.com]
  rules:
  - matches: [{method: {service: gateway_api_conformance.echo_basic.grpcecho.GrpcEcho, method: Echo}}]
    backendRefs: [{group: '', kind: Service, name: backendtlspolicy-grpc-test, port: 443}]
  - matches: [{method: {service: gateway_api_conformance.echo_basic.grpcecho.GrpcEcho, method: EchoTwo}}]
    backendRefs: [{group: '', kind: Service, name: backendtlspolicy-grpc-host-mismatch-test, port: 443}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: {name: backendtlspolicy-grpcroute-cert-mismatch, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace, namespace: gateway-conformance-infra}]
  hostnames: [cert-mismatch.example.com]
  rules:
  - matches: [{method: {service: gateway_api_conformance.echo_basic.grpcecho.GrpcEcho, method: Echo}}]
    backendRefs: [{group: '', kind: Service, name: backendtlspolicy-grpc-cert-mismatch-test, port: 443}]
";
    let bed = Bed::start(&case);
    let c = client();
    let name = |o: &str| format!("gateway-conformance-infra/{o}");
    let s = bed
        .status_when(&c, |s| {
            s["grpcRoutes"]
                .get(name("backendtlspolicy-grpcroute-cert-mismatch"))
                .is_some()
        })
        .await;
    for r in [
        "backendtlspolicy-grpcroute",
        "backendtlspolicy-grpcroute-cert-mismatch",
    ] {
        let p = &s["grpcRoutes"][name(r)]["parents"][0];
        assert_eq!(
            cond_of(&p["conditions"], "Accepted"),
            yes("Accepted"),
            "{r}"
        );
    }
    for policy in [
        "grpc-normative-test",
        "grpc-host-mismatch",
        "grpc-cert-mismatch",
    ] {
        let a = &s["backendTLSPolicies"][name(policy)]["ancestors"][0];
        assert_eq!(a["ancestorRef"]["name"], "same-namespace", "{s:#}");
        for type_ in ["Accepted", "ResolvedRefs"] {
            assert_eq!(cond_of(&a["conditions"], type_), yes(type_), "{policy}");
        }
    }
    wait_ready(&c, &bed.weir).await;
    let svc = "/gateway_api_conformance.echo_basic.grpcecho.GrpcEcho";
    for (authority, method, ok) in [
        ("abc.example.com", "Echo", true),
        ("abc.example.com", "EchoTwo", false),
        ("cert-mismatch.example.com", "Echo", false),
    ] {
        for _ in 0..3 {
            let (backend, grpc_status, _) =
                grpc_call_to(&bed, authority, &format!("{svc}/{method}"), &[]).await;
            if ok {
                assert_eq!(backend.as_deref(), Some("grpc-infra-backend-v1"));
                assert_eq!(grpc_status.as_deref(), Some("0"));
            } else {
                assert_eq!(backend, None, "{authority} {method}");
                assert_ne!(grpc_status.as_deref(), Some("0"), "{authority} {method}");
            }
        }
    }
}

/// BackendTLSPolicyTLSRouteTerminate: a TLSRoute of a terminating listener whose backend
/// has a BackendTLSPolicy: the decrypted bytes are encrypted again towards the backend,
/// verified against the policy's CA and host name. The suite's listener is on 8443, served
/// here with `--gateway-https-port 8443`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminated_tls_routes_encrypt_again_for_a_backend_tls_policy() {
    use rcgen::ExtendedKeyUsagePurpose::ServerAuth;
    let ca = common::ca::Ca::new("tls-checks CA");
    let listener_cert = ca.leaf(&["tls.example.com"], ServerAuth);
    let backend = tls_backend(&ca, &["abc.example.com"], "tcp-backend");
    let case = format!(
        "{secret}---
apiVersion: v1
kind: ConfigMap
metadata: {{name: tls-checks-ca-certificate, namespace: gateway-conformance-infra}}
data:
  ca.crt: |
{ca_pem}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: gateway-btls-tlsroute-terminate, namespace: gateway-conformance-infra}}
spec:
  gatewayClassName: weir
  listeners:
  - name: tls-terminate
    port: 8443
    protocol: TLS
    hostname: tls.example.com
    allowedRoutes: {{namespaces: {{from: Same}}, kinds: [{{kind: TLSRoute}}]}}
    tls: {{mode: Terminate, certificateRefs: [{{name: tls-terminate-checks-certificate}}]}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: TLSRoute
metadata: {{name: backendtlspolicy-tlsroute-terminate, namespace: gateway-conformance-infra}}
spec:
  parentRefs: [{{name: gateway-btls-tlsroute-terminate, namespace: gateway-conformance-infra}}]
  hostnames: [tls.example.com]
  rules: [{{backendRefs: [{{name: btls-terminate-tls-backend, port: 8443}}]}}]
---
apiVersion: v1
kind: Service
metadata: {{name: btls-terminate-tls-backend, namespace: gateway-conformance-infra}}
spec:
  selector: {{app: tcp-backend}}
  ports: [{{name: btls, protocol: TCP, port: 8443, targetPort: 8443}}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: btls-terminate-tls-backend-1
  namespace: gateway-conformance-infra
  labels: {{kubernetes.io/service-name: btls-terminate-tls-backend}}
addressType: IPv4
ports: [{{name: btls, port: {backend}}}]
endpoints:
- addresses: [127.0.0.1]
  conditions: {{ready: true}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: BackendTLSPolicy
metadata: {{name: btls-tlsroute-terminate-test, namespace: gateway-conformance-infra}}
spec:
  targetRefs: [{{group: '', kind: Service, name: btls-terminate-tls-backend, sectionName: btls}}]
  validation:
    caCertificateRefs: [{{group: '', kind: ConfigMap, name: tls-checks-ca-certificate}}]
    hostname: abc.example.com
",
        secret = tls_secret_of(
            "gateway-conformance-infra",
            "tls-terminate-checks-certificate",
            &listener_cert.pem,
            &listener_cert.key_pem
        ),
        ca_pem = indent(&ca.pem()),
    );
    let bed = Bed::start_with(
        &case,
        &["--tls-listen", "x", "--gateway-https-port", "8443"],
    );
    let c = client();
    let name = |o: &str| format!("gateway-conformance-infra/{o}");
    let s = bed
        .status_when(&c, |s| {
            s["tlsRoutes"]
                .get(name("backendtlspolicy-tlsroute-terminate"))
                .is_some()
        })
        .await;
    let p = &s["tlsRoutes"][name("backendtlspolicy-tlsroute-terminate")]["parents"][0];
    assert_eq!(
        cond_of(&p["conditions"], "Accepted"),
        yes("Accepted"),
        "{s:#}"
    );
    let a = &s["backendTLSPolicies"][name("btls-tlsroute-terminate-test")]["ancestors"][0];
    assert_eq!(
        a["ancestorRef"]["name"], "gateway-btls-tlsroute-terminate",
        "{s:#}"
    );
    for type_ in ["Accepted", "ResolvedRefs"] {
        assert_eq!(cond_of(&a["conditions"], type_), yes(type_), "{s:#}");
    }
    wait_ready(&c, &bed.weir).await;
    for _ in 0..3 {
        let body = tls_call(bed.tls_port.unwrap(), &ca, "tls.example.com").await;
        assert_eq!(body.as_deref(), Ok("tcp-backend"));
    }
}

/// HTTPRouteMultipleGateways, as far as one socket for every Gateway allows: a route with
/// two Gateways as parents is accepted by both and serves `/shared` on both; each Gateway's
/// own route for `/` is accepted too, but requests cannot tell the Gateways apart (the suite
/// tells them apart by address), so one of the two serves `/`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_route_of_two_gateways_is_accepted_and_served_by_both() {
    let case = "\
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: multiple-gateways-shared-route, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}, {name: all-namespaces}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /shared}}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: same-namespace-dedicated-route, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules: [{matches: [{path: {type: PathPrefix, value: /}}], backendRefs: [{name: infra-backend-v2, port: 8080}]}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: all-namespaces-dedicated-route, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: all-namespaces}]
  rules: [{matches: [{path: {type: PathPrefix, value: /}}], backendRefs: [{name: infra-backend-v3, port: 8080}]}]
";
    let bed = Bed::start(case);
    let c = client();
    let name = |r: &str| format!("gateway-conformance-infra/{r}");
    let s = bed
        .route_status(&c, &name("all-namespaces-dedicated-route"))
        .await;
    let shared = name("multiple-gateways-shared-route");
    route_ok(&s, &shared, "same-namespace");
    route_ok(&s, &shared, "all-namespaces");
    route_ok(
        &s,
        &name("same-namespace-dedicated-route"),
        "same-namespace",
    );
    route_ok(
        &s,
        &name("all-namespaces-dedicated-route"),
        "all-namespaces",
    );
    for gw in ["same-namespace", "all-namespaces"] {
        let l = &s["gateways"][name(gw)]["listeners"][0];
        assert_eq!(l["attachedRoutes"], 2, "{gw}: {l:#}");
    }
    let r = bed.request(&c, "127.0.0.1", "/shared", &[]).await;
    served_by(&r, "infra-backend-v1");
    assert_eq!(r.json()["path"], "/shared");
    let r = bed.request(&c, "127.0.0.1", "/", &[]).await;
    let by = r.echo_name();
    assert!(
        matches!(by.as_deref(), Some("infra-backend-v2" | "infra-backend-v3")),
        "{by:?}"
    );
}

/// Whether a TLS connection's error is the suite's "rejected": the connection closed or reset
/// during the handshake, without a TLS alert.
fn closed_without_alert(e: &str) -> bool {
    let e = e.to_ascii_lowercase();
    !e.contains("alert") && (e.contains("eof") || e.contains("reset"))
}

/// TLSRouteHostnameIntersection: the server names a passthrough TLSRoute serves are its host
/// names intersected with its listener's, the most specific route first; a name none serves
/// is refused by closing the connection. The suite's four Gateways on port 443 tell apart by
/// address, so each gets a Weir of its own here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_route_host_names_intersect_as_upstream_connects_them() {
    let ca = common::ca::Ca::new("tls-checks CA");
    let names = ["abc.example.com", "other.example.com"];
    let one = tls_backend(&ca, &names, "tls-backend");
    let two = tls_backend(&ca, &names, "tls-backend-2");
    let service = |name: &str, port: u16| {
        format!(
            "apiVersion: v1
kind: Service
metadata: {{name: {name}, namespace: gateway-conformance-infra}}
spec: {{ports: [{{name: tls, port: 443, targetPort: 8443}}]}}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: {name}-1
  namespace: gateway-conformance-infra
  labels: {{kubernetes.io/service-name: {name}}}
addressType: IPv4
ports: [{{name: tls, port: {port}}}]
endpoints:
- addresses: [127.0.0.1]
  conditions: {{ready: true}}
---
"
        )
    };
    let route = |name: &str, gateway: &str, host: &str, backend: &str| {
        format!(
            "apiVersion: gateway.networking.k8s.io/v1
kind: TLSRoute
metadata: {{name: {name}, namespace: gateway-conformance-infra}}
spec:
  parentRefs: [{{name: {gateway}}}]
  hostnames: ['{host}']
  rules: [{{backendRefs: [{{name: {backend}, port: 443}}]}}]
---
"
        )
    };
    // (Gateway, listener, its host name, routes (name, host name, backend), the names
    // served (name, backend), the name refused).
    type Routes<'a> = [(&'a str, &'a str, &'a str)];
    type Case<'a> = (
        &'a str,
        &'a str,
        Option<&'a str>,
        &'a Routes<'a>,
        &'a [(&'a str, &'a str)],
        &'a str,
    );
    let cases: [Case; 4] = [
        (
            "gw-tlsroute-exact-hostname-x-1",
            "listener-exact-hostname",
            Some("abc.example.com"),
            &[(
                "tlsroute-more-specific-wc-hostname-x-1",
                "*.example.com",
                "tls-backend",
            )],
            &[("abc.example.com", "tls-backend")],
            "non.matching.com",
        ),
        (
            "gw-tlsroute-more-specific-wc-hostname-x-2",
            "listener-more-specific-wc-hostname",
            Some("*.example.com"),
            &[
                (
                    "tlsroute-exact-hostname-x-2",
                    "abc.example.com",
                    "tls-backend",
                ),
                (
                    "tlsroute-less-specific-wc-hostname-x-2",
                    "*.com",
                    "tls-backend-2",
                ),
            ],
            &[
                ("abc.example.com", "tls-backend"),
                ("other.example.com", "tls-backend-2"),
            ],
            "non.matching.com",
        ),
        (
            "gw-tlsroute-less-specific-wc-hostname-x-3",
            "listener-less-specific-wc-hostname",
            Some("*.com"),
            &[
                (
                    "tlsroute-exact-hostname-x-3",
                    "abc.example.com",
                    "tls-backend",
                ),
                (
                    "tlsroute-more-specific-wc-hostname-x-3",
                    "*.example.com",
                    "tls-backend-2",
                ),
            ],
            &[
                ("abc.example.com", "tls-backend"),
                ("other.example.com", "tls-backend-2"),
            ],
            "non.matching.com",
        ),
        (
            "gw-tlsroute-empty-hostname-x-4",
            "listener-empty-hostname",
            None,
            &[
                (
                    "tlsroute-exact-hostname-x-4",
                    "abc.example.com",
                    "tls-backend",
                ),
                (
                    "tlsroute-less-specific-wc-hostname-x-4",
                    "*.com",
                    "tls-backend-2",
                ),
            ],
            &[
                ("abc.example.com", "tls-backend"),
                ("other.example.com", "tls-backend-2"),
            ],
            "non.matching.org",
        ),
    ];
    let c = client();
    for (gateway, listener, host, routes, served, refused) in cases {
        let host = host
            .map(|h| format!("hostname: '{h}', "))
            .unwrap_or_default();
        let mut case = format!(
            "apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: {gateway}, namespace: gateway-conformance-infra}}
spec:
  gatewayClassName: weir
  listeners:
  - {{name: {listener}, port: 443, protocol: TLS, {host}tls: {{mode: Passthrough}}, allowedRoutes: {{namespaces: {{from: Same}}, kinds: [{{kind: TLSRoute}}]}}}}
---
"
        );
        case += &service("tls-backend", one);
        case += &service("tls-backend-2", two);
        for (name, h, backend) in routes {
            case += &route(name, gateway, h, backend);
        }
        let bed = Bed::start_with(&case, &["--tls-listen", "x"]);
        let key = |r: &str| format!("gateway-conformance-infra/{r}");
        let last = key(routes[routes.len() - 1].0);
        let s = bed
            .status_when(&c, |s| s["tlsRoutes"].get(&last).is_some())
            .await;
        for (name, _, _) in routes {
            let p = &s["tlsRoutes"][key(name)]["parents"][0];
            assert_eq!(p["parentRef"]["name"], gateway, "{s:#}");
            assert_eq!(
                cond_of(&p["conditions"], "Accepted"),
                yes("Accepted"),
                "{name}"
            );
            assert_eq!(
                cond_of(&p["conditions"], "ResolvedRefs"),
                yes("ResolvedRefs"),
                "{name}"
            );
        }
        wait_ready(&c, &bed.weir).await;
        let port = bed.tls_port.unwrap();
        for (name, backend) in served.iter() {
            let body = tls_call(port, &ca, name).await;
            assert_eq!(body.as_deref(), Ok(*backend), "{gateway}: {name}");
        }
        let e = tls_call(port, &ca, refused).await.unwrap_err();
        assert!(closed_without_alert(&e), "{gateway}: {refused}: {e}");
    }
}

/// The suite's `tls-validity-checks-*` objects for client certificate validation: a server
/// certificate for `example.org` and `second-example.org`, two client CAs (the default's and
/// the per-port one's) as ConfigMaps, and a client certificate from each.
struct ClientCas {
    server_ca: common::ca::Ca,
    server: common::ca::Leaf,
    default_ca: common::ca::Ca,
    per_port_ca: common::ca::Ca,
    default_client: common::ca::Leaf,
    per_port_client: common::ca::Leaf,
}

impl ClientCas {
    fn new() -> ClientCas {
        use rcgen::ExtendedKeyUsagePurpose::{ClientAuth, ServerAuth};
        let server_ca = common::ca::Ca::new("server CA");
        let server = server_ca.leaf(
            &[
                "example.org",
                "second-example.org",
                "open.example.org",
                "*.example.org",
            ],
            ServerAuth,
        );
        let default_ca = common::ca::Ca::new("client CA");
        let per_port_ca = common::ca::Ca::new("per-port client CA");
        ClientCas {
            default_client: default_ca.leaf(&["client"], ClientAuth),
            per_port_client: per_port_ca.leaf(&["client"], ClientAuth),
            server_ca,
            server,
            default_ca,
            per_port_ca,
        }
    }

    /// The Secret and ConfigMaps, and a ConfigMap with a CA in the web backends' namespace.
    fn manifests(&self) -> String {
        let config_map = |ns: &str, name: &str, ca: &common::ca::Ca| {
            format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}, namespace: {ns}}}\n\
                 data:\n  ca.crt: |\n{}\n---\n",
                indent(&ca.pem())
            )
        };
        let infra = "gateway-conformance-infra";
        format!(
            "{}---\n{}{}{}",
            tls_secret_of(
                infra,
                "tls-validity-checks-certificate",
                &self.server.pem,
                &self.server.key_pem
            ),
            config_map(
                infra,
                "tls-validity-checks-ca-certificate",
                &self.default_ca
            ),
            config_map(
                infra,
                "tls-validity-checks-per-port-ca-certificate",
                &self.per_port_ca
            ),
            config_map(
                "gateway-conformance-web-backend",
                "web-backend-cm",
                &self.default_ca
            ),
        )
    }

    /// `GET /` over TLS to Weir's TLS socket with SNI and Host `host`, presenting `client`:
    /// the answer or the connection's error, and whether Weir asked for a certificate.
    async fn call(
        &self,
        port: u16,
        host: &str,
        client: Option<&common::ca::Leaf>,
    ) -> (Result<Resp, String>, bool) {
        self.call_sni(port, host, client, true).await
    }

    /// [`ClientCas::call`], sending the server name in the handshake only when `sni`.
    async fn call_sni(
        &self,
        port: u16,
        host: &str,
        client: Option<&common::ca::Leaf>,
        sni: bool,
    ) -> (Result<Resp, String>, bool) {
        let (connector, asked) = common::tls::connector_presenting(
            self.server_ca.issuer.der().clone(),
            client.map(|c| (c.pem.as_str(), c.key_pem.as_str())),
            sni,
        );
        let r = common::tls::exchange(&connector, port, host, host, "/").await;
        (
            r.map(|r| r.resp),
            asked.load(std::sync::atomic::Ordering::SeqCst),
        )
    }

    /// `GET path HTTP/1.0` without a Host over TLS with SNI `sni`, presenting `client`: the
    /// answer's head.
    async fn raw_http10(
        &self,
        port: u16,
        sni: &str,
        client: Option<&common::ca::Leaf>,
        path: &str,
    ) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (connector, _) = common::tls::connector_presenting(
            self.server_ca.issuer.der().clone(),
            client.map(|c| (c.pem.as_str(), c.key_pem.as_str())),
            true,
        );
        let mut tls = common::tls::handshake(&connector, port, sni).await.unwrap();
        tls.write_all(format!("GET {path} HTTP/1.0\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let mut out = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(10), tls.read_to_end(&mut out)).await;
        String::from_utf8_lossy(&out).to_string()
    }

    /// A kept-alive HTTP/1.1 connection over TLS with server name `sni`, presenting
    /// `client`, and whether Weir asked for a certificate.
    async fn connection(
        &self,
        port: u16,
        sni: &str,
        client: Option<&common::ca::Leaf>,
    ) -> (
        hyper::client::conn::http1::SendRequest<http_body_util::Empty<bytes::Bytes>>,
        bool,
    ) {
        let (connector, asked) = common::tls::connector_presenting(
            self.server_ca.issuer.der().clone(),
            client.map(|c| (c.pem.as_str(), c.key_pem.as_str())),
            true,
        );
        let tls = common::tls::handshake(&connector, port, sni).await.unwrap();
        let io = hyper_util::rt::TokioIo::new(tls);
        let (send, conn) = hyper::client::conn::http1::handshake(io).await.unwrap();
        tokio::spawn(conn);
        (send, asked.load(std::sync::atomic::Ordering::SeqCst))
    }

    /// Three connections presenting `client` fail, each after Weir asked for a certificate.
    async fn refused(&self, port: u16, host: &str, client: Option<&common::ca::Leaf>) {
        for _ in 0..3 {
            let (r, asked) = self.call(port, host, client).await;
            assert!(r.is_err(), "{host}: served: {:?}", r.map(|r| r.status));
            assert!(asked, "{host}: no client certificate asked for");
        }
    }
}

/// The suite's Gateway with client certificate validation, `mode` (a `mode:` line or none)
/// in both its default and its port 8443 validation, and its two routes.
fn client_validation_case(gateway: &str, mode: &str) -> String {
    format!(
        "\
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: {gateway}, namespace: gateway-conformance-infra}}
spec:
  gatewayClassName: weir
  tls:
    frontend:
      default:
        validation:
          {mode}
          caCertificateRefs: [{{kind: ConfigMap, group: '', name: tls-validity-checks-ca-certificate}}]
      perPort:
      - port: 8443
        tls:
          validation:
            {mode}
            caCertificateRefs: [{{kind: ConfigMap, group: '', name: tls-validity-checks-per-port-ca-certificate}}]
  listeners:
  - name: https
    port: 443
    protocol: HTTPS
    allowedRoutes: {{namespaces: {{from: Same}}}}
    tls: {{certificateRefs: [{{group: '', kind: Secret, name: tls-validity-checks-certificate, namespace: gateway-conformance-infra}}]}}
  - name: https-with-hostname
    port: 8443
    hostname: second-example.org
    protocol: HTTPS
    allowedRoutes: {{namespaces: {{from: Same}}}}
    tls: {{certificateRefs: [{{group: '', kind: Secret, name: tls-validity-checks-certificate, namespace: gateway-conformance-infra}}]}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: {gateway}-test, namespace: gateway-conformance-infra}}
spec:
  parentRefs: [{{name: {gateway}}}]
  hostnames: [example.org]
  rules: [{{backendRefs: [{{name: infra-backend-v1, port: 8080}}]}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: {gateway}-test-no-hostname, namespace: gateway-conformance-infra}}
spec:
  parentRefs: [{{name: {gateway}, sectionName: https-with-hostname}}]
  rules: [{{backendRefs: [{{name: infra-backend-v2, port: 8080}}]}}]
"
    )
}

/// A bed for a client validation case with the Gateway's HTTPS listeners of `port` served,
/// once `route` is accepted there and its listener programmed.
async fn client_validation_bed(
    c: &HttpClient,
    cas: &ClientCas,
    case: &str,
    port: &str,
    route: &str,
) -> Bed {
    let case = format!("{}{case}", cas.manifests());
    let bed = Bed::start_with(&case, &["--tls-listen", "x", "--gateway-https-port", port]);
    let s = bed.route_status(c, route).await;
    let gateway = route
        .trim_end_matches("-no-hostname")
        .trim_end_matches("-test");
    route_ok(&s, route, gateway.split('/').nth(1).unwrap());
    bed
}

/// GatewayFrontendClientCertificateValidation: an HTTPS listener asks for a client
/// certificate and serves only one its port's CAs signed (the port's `perPort` entry, else
/// the default); any other ends the TLS connection, with no HTTP answer. Weir serves the
/// suite's two ports one run at a time (`--gateway-https-port`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frontend_client_certificates_as_upstream_validates_them() {
    let cas = ClientCas::new();
    let case = client_validation_case("client-validation-default", "");
    let c = client();

    // Beside the suite's objects: a route without host names on the listener that asks for
    // client certificates, and another Gateway's listener that asks for none.
    let with_open = format!(
        "{case}---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: any-host, namespace: gateway-conformance-infra}}
spec:
  parentRefs: [{{name: client-validation-default, sectionName: https}}]
  rules: [{{matches: [{{path: {{type: PathPrefix, value: /any}}}}], backendRefs: [{{name: infra-backend-v3, port: 8080}}]}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: open, namespace: gateway-conformance-infra}}
spec:
  gatewayClassName: weir
  listeners:
  - {{name: https, port: 443, protocol: HTTPS, hostname: open.example.org, tls: {{certificateRefs: [{{name: tls-validity-checks-certificate}}]}}}}
"
    );
    let route = "gateway-conformance-infra/client-validation-default-test";
    let bed = client_validation_bed(&c, &cas, &with_open, "443", route).await;
    let s = bed.status_when(&c, |_| true).await;
    let gw = &s["gateways"]["gateway-conformance-infra/client-validation-default"];
    for type_ in ["Accepted", "ResolvedRefs", "Programmed"] {
        assert_eq!(
            cond_of(&gw["listeners"][0]["conditions"], type_),
            yes(type_),
            "{gw:#}"
        );
    }
    let port = bed.tls_port.unwrap();
    let (r, asked) = cas
        .call(port, "example.org", Some(&cas.default_client))
        .await;
    let r = r.unwrap();
    served_by(&r, "infra-backend-v1");
    assert_eq!(r.json()["headers"]["host"], "example.org");
    assert!(asked);
    cas.refused(port, "example.org", Some(&cas.per_port_client))
        .await;
    cas.refused(port, "example.org", None).await;
    // A request without a host goes to host-less routes, the default certificate's: over a
    // connection made for another name, without a client certificate, it is misdirected.
    let with_cert = cas
        .raw_http10(port, "example.org", Some(&cas.default_client), "/any")
        .await;
    assert!(with_cert.starts_with("HTTP/1.0 200"), "{with_cert}");
    let without = cas.raw_http10(port, "open.example.org", None, "/any").await;
    assert!(without.starts_with("HTTP/1.0 421"), "{without}");
    drop(bed);

    // Beside it, another Gateway's listener on the port asks for no client certificate and
    // serves handshakes without a server name: those cannot reach the protected host.
    let case = format!(
        "{case}---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: no-client-validation, namespace: gateway-conformance-infra}}
spec:
  gatewayClassName: weir
  listeners:
  - name: https
    port: 8443
    protocol: HTTPS
    tls: {{certificateRefs: [{{name: tls-validity-checks-certificate}}]}}
"
    );
    let route = "gateway-conformance-infra/client-validation-default-test-no-hostname";
    let bed = client_validation_bed(&c, &cas, &case, "8443", route).await;
    let port = bed.tls_port.unwrap();
    let (r, asked) = cas
        .call(port, "second-example.org", Some(&cas.per_port_client))
        .await;
    let r = r.unwrap();
    served_by(&r, "infra-backend-v2");
    assert_eq!(r.json()["headers"]["host"], "second-example.org");
    assert!(asked);
    cas.refused(port, "second-example.org", Some(&cas.default_client))
        .await;
    let (r, asked) = cas.call_sni(port, "second-example.org", None, false).await;
    assert!(!asked, "the default certificate asks for none");
    assert_eq!(
        r.unwrap().status,
        421,
        "no SNI, no way around the validation"
    );
}

/// `GET path` with Host `host` on a kept-alive connection: the status and the backend that
/// answered (empty when Weir answered).
async fn get_on(
    send: &mut hyper::client::conn::http1::SendRequest<http_body_util::Empty<bytes::Bytes>>,
    host: &str,
    path: &str,
) -> (u16, String) {
    use http_body_util::BodyExt;
    let req = http::Request::get(path)
        .header("host", host)
        .body(http_body_util::Empty::new())
        .unwrap();
    // The connection takes the next request once it has finished with the last.
    send.ready().await.unwrap();
    let resp = send.send_request(req).await.unwrap();
    let status = resp.status().as_u16();
    let name = resp.headers().get("x-echo-name").cloned();
    resp.into_body().collect().await.unwrap();
    let name = name.map(|n| n.to_str().unwrap().to_string());
    (status, name.unwrap_or_default())
}

/// Client certificates bind the routes of the listener that asks for them, wherever the
/// request comes in: another Gateway's more specific host name on the same socket, with no
/// client certificate asked for, does not lead to the protected listener's wildcard route
/// (421, the route's backend never sees it); and a connection opened before the Gateway asked
/// for client certificates is not served the protected route after it does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_certificates_bind_the_routes_of_their_listener() {
    let cas = ClientCas::new();
    let c = client();
    let objects = |frontend: &str| {
        format!(
            "\
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: protected, namespace: gateway-conformance-infra}}
spec:
  gatewayClassName: weir
  {frontend}
  listeners:
  - name: https
    port: 443
    protocol: HTTPS
    hostname: '*.example.org'
    tls: {{certificateRefs: [{{name: tls-validity-checks-certificate}}]}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: protected-test, namespace: gateway-conformance-infra}}
spec:
  parentRefs: [{{name: protected}}]
  rules: [{{matches: [{{path: {{type: PathPrefix, value: /secret}}}}], backendRefs: [{{name: infra-backend-v1, port: 8080}}]}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: open, namespace: gateway-conformance-infra}}
spec:
  gatewayClassName: weir
  listeners:
  - {{name: https, port: 443, protocol: HTTPS, hostname: open.example.org, tls: {{certificateRefs: [{{name: tls-validity-checks-certificate}}]}}}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: open-route, namespace: gateway-conformance-infra}}
spec:
  parentRefs: [{{name: open}}]
  rules: [{{matches: [{{path: {{type: PathPrefix, value: /open}}}}], backendRefs: [{{name: infra-backend-v2, port: 8080}}]}}]
"
        )
    };
    let asks = "tls: {frontend: {default: {validation: {caCertificateRefs: \
                [{kind: ConfigMap, group: '', name: tls-validity-checks-ca-certificate}]}}}}";
    let route = "gateway-conformance-infra/protected-test";
    let bed = client_validation_bed(&c, &cas, &objects(""), "443", route).await;
    let port = bed.tls_port.unwrap();

    // Before the Gateway asks for client certificates: a connection without one.
    let (mut early, asked) = cas.connection(port, "a.example.org", None).await;
    assert!(!asked);
    assert_eq!(
        get_on(&mut early, "a.example.org", "/secret").await,
        (200, "infra-backend-v1".into())
    );

    bed.rewrite(&format!("{}{}", cas.manifests(), objects(asks)));
    let started = std::time::Instant::now();
    loop {
        let (_, asked) = cas.call(port, "a.example.org", None).await;
        if asked {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "never asked for a client certificate"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    wait_ready(&c, &bed.weir).await;

    // The protected route, through its own listener's handshake.
    let (mut own, asked) = cas
        .connection(port, "a.example.org", Some(&cas.default_client))
        .await;
    assert!(asked);
    assert_eq!(
        get_on(&mut own, "a.example.org", "/secret").await,
        (200, "infra-backend-v1".into())
    );
    // The connection from before the change no longer reaches it.
    assert_eq!(get_on(&mut early, "a.example.org", "/secret").await.0, 421);

    // Through the open Gateway's certificate: its own route is served, the protected
    // wildcard route is not, with a client certificate or without.
    let (mut open, asked) = cas.connection(port, "open.example.org", None).await;
    assert!(!asked, "the open listener asks for no certificate");
    assert_eq!(
        get_on(&mut open, "open.example.org", "/open").await,
        (200, "infra-backend-v2".into())
    );
    assert_eq!(
        get_on(&mut open, "open.example.org", "/secret").await.0,
        421
    );
    // Over the protected connection, the open host is another certificate's (421 as well).
    assert_eq!(get_on(&mut own, "open.example.org", "/open").await.0, 421);
}

/// GatewayFrontendClientCertificateValidationInsecureFallback: with `AllowInsecureFallback`
/// a certificate is still asked for, and a valid one, another CA's and none are all served;
/// the Gateway says so with `InsecureFrontendValidationMode`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frontend_insecure_fallback_as_upstream_validates_it() {
    let cas = ClientCas::new();
    let case = client_validation_case(
        "client-validation-insecure-fallback",
        "mode: AllowInsecureFallback",
    );
    let c = client();
    for (port, host, route, backend, own, other) in [
        (
            "443",
            "example.org",
            "client-validation-insecure-fallback-test",
            "infra-backend-v1",
            &cas.default_client,
            &cas.per_port_client,
        ),
        (
            "8443",
            "second-example.org",
            "client-validation-insecure-fallback-test-no-hostname",
            "infra-backend-v2",
            &cas.per_port_client,
            &cas.default_client,
        ),
    ] {
        let route = format!("gateway-conformance-infra/{route}");
        let bed = client_validation_bed(&c, &cas, &case, port, &route).await;
        let s = bed.status_when(&c, |_| true).await;
        let gw = &s["gateways"]["gateway-conformance-infra/client-validation-insecure-fallback"];
        assert_eq!(
            cond_of(&gw["conditions"], "InsecureFrontendValidationMode"),
            yes("ConfigurationChanged"),
            "{gw:#}"
        );
        let tls_port = bed.tls_port.unwrap();
        for client in [Some(own), Some(other), None] {
            let (r, asked) = cas.call(tls_port, host, client).await;
            served_by(&r.unwrap(), backend);
            assert!(asked, "{port}: a certificate is asked for");
        }
    }
}

/// GatewayFrontendInvalidDefaultClientCertificateValidation and
/// GatewayInvalidFrontendClientCertificateValidation: CA references that cannot be used are
/// reported on the listeners of their port (`ResolvedRefs` with the reason, and, when none
/// can, `Accepted: False` with `NoValidCACertificate`); such an HTTPS listener is not served,
/// while the Gateway's HTTP listener and the listeners of other ports are.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unusable_frontend_validation_as_upstream_reports_it() {
    let cas = ClientCas::new();
    let listener = |gw: &Value, name: &str| {
        gw["listeners"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["name"] == name)
            .unwrap_or_else(|| panic!("listener {name}: {gw:#}"))["conditions"]
            .clone()
    };
    let c = client();

    let invalid_default = format!(
        "{}\
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: invalid-default-client-validation-config, namespace: gateway-conformance-infra}}
spec:
  gatewayClassName: weir
  tls:
    frontend:
      default:
        validation:
          caCertificateRefs: [{{kind: ConfigMap, group: '', name: does-not-exist}}]
      perPort:
      - port: 80
        tls:
          validation:
            caCertificateRefs: [{{kind: ConfigMap, group: '', name: tls-validity-checks-per-port-ca-certificate}}]
  listeners:
  - name: https
    port: 443
    protocol: HTTPS
    allowedRoutes: {{namespaces: {{from: Same}}}}
    tls: {{certificateRefs: [{{group: '', kind: Secret, name: tls-validity-checks-certificate, namespace: gateway-conformance-infra}}]}}
  - {{name: http, port: 80, protocol: HTTP, allowedRoutes: {{namespaces: {{from: Same}}}}}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: invalid-default-client-validation-config, namespace: gateway-conformance-infra}}
spec:
  parentRefs: [{{name: invalid-default-client-validation-config}}]
  hostnames: [example.org]
  rules: [{{backendRefs: [{{name: infra-backend-v1, port: 8080}}]}}]
",
        cas.manifests()
    );
    let bed = Bed::start_with(&invalid_default, &["--tls-listen", "x"]);
    let s = bed
        .route_status(
            &c,
            "gateway-conformance-infra/invalid-default-client-validation-config",
        )
        .await;
    let gw = &s["gateways"]["gateway-conformance-infra/invalid-default-client-validation-config"];
    assert_eq!(cond_of(&gw["conditions"], "Accepted").0, "True", "{gw:#}");
    assert_eq!(cond_of(&gw["conditions"], "Programmed").0, "True", "{gw:#}");
    for type_ in ["Accepted", "ResolvedRefs", "Programmed"] {
        assert_eq!(cond_of(&listener(gw, "http"), type_).0, "True", "{gw:#}");
    }
    let https = listener(gw, "https");
    assert_eq!(
        cond_of(&https, "ResolvedRefs"),
        no("InvalidCACertificateRef")
    );
    assert_eq!(cond_of(&https, "Accepted"), no("NoValidCACertificate"));
    assert_eq!(cond_of(&https, "Programmed").0, "False");
    served_by(
        &bed.request(&c, "example.org", "/", &[]).await,
        "infra-backend-v1",
    );
    for _ in 0..3 {
        let (r, _) = cas.call(bed.tls_port.unwrap(), "example.org", None).await;
        assert!(r.is_err(), "the HTTPS listener is not served");
    }
    drop(bed);

    let invalid_refs = format!(
        "{}\
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: gateway-with-invalid-client-cert-validation, namespace: gateway-conformance-infra}}
spec:
  gatewayClassName: weir
  tls:
    frontend:
      default:
        validation:
          caCertificateRefs: [{{kind: ConfigMap, group: '', name: tls-validity-checks-ca-certificate}}]
      perPort:
      - port: 7443
        tls: {{validation: {{caCertificateRefs: [{{kind: ConfigMap, group: '', name: non-exisitng-cm}}]}}}}
      - port: 8443
        tls: {{validation: {{caCertificateRefs: [{{kind: Service, group: '', name: infra-backend-v2}}]}}}}
      - port: 6443
        tls: {{validation: {{caCertificateRefs: [{{kind: ConfigMap, group: '', name: web-backend-cm, namespace: gateway-conformance-web-backend}}]}}}}
  listeners:
  - {{name: https, port: 443, protocol: HTTPS, allowedRoutes: {{namespaces: {{from: Same}}}}, tls: {{certificateRefs: [{{name: tls-validity-checks-certificate}}]}}}}
  - {{name: https-unresolved, port: 7443, hostname: first-example.org, protocol: HTTPS, allowedRoutes: {{namespaces: {{from: Same}}}}, tls: {{certificateRefs: [{{name: tls-validity-checks-certificate}}]}}}}
  - {{name: https-invalid-kind, port: 8443, hostname: second-example.org, protocol: HTTPS, allowedRoutes: {{namespaces: {{from: Same}}}}, tls: {{certificateRefs: [{{name: tls-validity-checks-certificate}}]}}}}
  - {{name: https-grant-missing, port: 6443, hostname: fourth-example.org, protocol: HTTPS, allowedRoutes: {{namespaces: {{from: Same}}}}, tls: {{certificateRefs: [{{name: tls-validity-checks-certificate}}]}}}}
",
        cas.manifests()
    );
    let bed = Bed::start_with(&invalid_refs, &["--tls-listen", "x"]);
    let s = bed
        .status_when(&c, |s| {
            s["gateways"]
                .get("gateway-conformance-infra/gateway-with-invalid-client-cert-validation")
                .is_some()
        })
        .await;
    let gw =
        &s["gateways"]["gateway-conformance-infra/gateway-with-invalid-client-cert-validation"];
    for type_ in ["Accepted", "ResolvedRefs", "Programmed"] {
        assert_eq!(cond_of(&listener(gw, "https"), type_), yes(type_), "{gw:#}");
    }
    for (name, reason) in [
        ("https-unresolved", "InvalidCACertificateRef"),
        ("https-invalid-kind", "InvalidCACertificateKind"),
        ("https-grant-missing", "RefNotPermitted"),
    ] {
        let conds = listener(gw, name);
        assert_eq!(cond_of(&conds, "ResolvedRefs"), no(reason), "{name}");
        assert_eq!(
            cond_of(&conds, "Accepted"),
            no("NoValidCACertificate"),
            "{name}"
        );
        assert_eq!(cond_of(&conds, "Programmed").0, "False", "{name}");
    }
    // The Gateway is served on its valid listener.
    assert_eq!(cond_of(&gw["conditions"], "Programmed").0, "True", "{gw:#}");
}

/// tests/conformance/cases.tsv, which scripts/conformance-report.py turns into the report: each
/// Weir test it names exists, a `full` case names one, and each feature Weir claims has a case.
#[test]
fn the_conformance_case_map_names_real_tests() {
    let root = env!("CARGO_MANIFEST_DIR");
    let read = |p: &str| std::fs::read_to_string(format!("{root}/{p}")).unwrap();
    let e2e = read("tests/gateway_api.rs");
    let controller = read("tests/gateway_controller.rs");
    let units: String = std::fs::read_dir(format!("{root}/controller/src/translate/gateway"))
        .unwrap()
        .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap())
        .collect();
    let claimed = read("controller/src/translate/gateway/mod.rs");
    let mut features = std::collections::BTreeSet::new();
    let mut cases = 0;
    let map = read("tests/conformance/cases.tsv");
    for line in map.lines() {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        cases += 1;
        let cols: Vec<&str> = line.split('\t').collect();
        assert!(cols.len() >= 4, "{line}");
        let (name, coverage, tests) = (cols[0], cols[2], cols[3]);
        features.extend(cols[1].split(' '));
        assert!(
            ["full", "partial", "none", "n/a"].contains(&coverage),
            "{name}: {coverage}"
        );
        assert!(
            coverage != "full" || tests != "-",
            "{name}: full without a test"
        );
        for t in tests.split(',').filter(|t| *t != "-") {
            let (file, f) = t.split_once("::").expect("file::fn");
            let found = match file {
                "gateway_api" => e2e.contains(&format!("fn {f}(")),
                "gateway_controller" => controller.contains(&format!("fn {f}(")),
                "unit" => units.contains(&format!("fn {f}(")),
                other => panic!("{name}: unknown test file {other}"),
            };
            assert!(found, "{name}: no test {t}");
        }
    }
    assert!(cases >= 100, "{cases} cases");
    let list = &claimed[claimed.find("pub const SUPPORTED_FEATURES").unwrap()..];
    let list = &list[..list.find("];").unwrap()];
    for f in list.split('"').skip(1).step_by(2) {
        assert!(features.contains(f), "claimed feature {f} has no case");
    }
}
