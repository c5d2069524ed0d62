//! `weir controller` with the Gateway API, end to end against the list/watch API server of
//! tests/common/apiserver.rs: Gateway API off while its CRDs are not installed (Ingresses
//! served, the log says so), watched from the moment they appear, Gateways and HTTPRoutes
//! served beside the Ingresses from the one table, and the status written back: GatewayClass,
//! Gateway (with its address) and route parents, next to another controller's entries.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::apiserver::ApiServer;
use common::*;
use serde_json::Value;

/// Waits until `f` holds, failing after `limit` with `what`.
async fn within<F, Fut>(limit: Duration, what: &str, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let started = Instant::now();
    while !f().await {
        assert!(
            started.elapsed() < limit,
            "{what}: not seen within {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `weir controller` pushing to `weir`'s admin API, reading the API server of `kubeconfig`,
/// publishing 192.0.2.10 as the Gateways' address, its log (at `info`) to `log`.
fn controller(weir: &Weir, kubeconfig: &std::path::Path, log: Stdio) -> Proc {
    Proc {
        child: Command::new(WEIR)
            .args([
                "controller",
                "--proxy-admin",
                &format!("http://127.0.0.1:{}", weir.admin),
                "--publish-status-address",
                "192.0.2.10",
            ])
            .env("KUBECONFIG", kubeconfig)
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap(),
        port: 0,
    }
}

fn backend(namespace: &str, name: &str, port: u16) -> String {
    format!(
        "apiVersion: v1\nkind: Service\nmetadata: {{name: {name}, namespace: {namespace}}}\n\
         spec: {{ports: [{{name: http, port: 8080}}]}}\n---\n\
         apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\n\
         metadata: {{name: {name}-1, namespace: {namespace}, labels: {{kubernetes.io/service-name: {name}}}}}\n\
         addressType: IPv4\nports: [{{name: http, port: {port}}}]\n\
         endpoints:\n- addresses: [127.0.0.1]\n  conditions: {{ready: true}}\n"
    )
}

const INGRESS: &str = "\
apiVersion: networking.k8s.io/v1
kind: IngressClass
metadata: {name: weir}
spec: {controller: weir.dev/ingress-controller}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: legacy, namespace: default}
spec:
  ingressClassName: weir
  rules:
  - host: legacy.example
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {service: {name: old, port: {name: http}}}}
";

/// Weir's class and Gateway, another controller's, and a route attached to both; the other
/// controller has already written its entry in the route's status.
const GATEWAY_API: &str = "\
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: weir}
spec: {controllerName: weir.dev/gateway-controller}
---
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: other}
spec: {controllerName: example.com/other}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: web, namespace: default}
spec:
  gatewayClassName: weir
  listeners:
  - {name: http, port: 80, protocol: HTTP}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: theirs, namespace: default}
spec:
  gatewayClassName: other
  listeners:
  - {name: http, port: 80, protocol: HTTP}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: shop, namespace: default}
spec:
  parentRefs: [{name: web}, {name: theirs}]
  hostnames: [shop.example]
  rules:
  - matches: [{path: {type: PathPrefix, value: /cart}}]
    backendRefs: [{name: new, port: 8080}]
  - matches: [{path: {type: PathPrefix, value: /far}}]
    backendRefs: [{name: far, namespace: elsewhere, port: 8080}]
status:
  parents:
  - parentRef: {name: theirs}
    controllerName: example.com/other
    conditions:
    - {type: Accepted, status: 'True', reason: Accepted, message: '', lastTransitionTime: '2026-01-01T00:00:00Z'}
";

/// Lets HTTPRoutes of `default` use Service `elsewhere/far`, as a v1beta1 ReferenceGrant (the
/// only version Gateway API releases before v1.5 serve).
const GRANT: &str = "\
apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata: {name: let-default-in, namespace: elsewhere}
spec:
  from: [{group: gateway.networking.k8s.io, kind: HTTPRoute, namespace: default}]
  to: [{group: '', kind: Service, name: far}]
";

fn condition<'a>(conds: &'a Value, type_: &str) -> &'a Value {
    conds
        .as_array()
        .and_then(|l| l.iter().find(|c| c["type"] == type_))
        .unwrap_or(&Value::Null)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_api_is_watched_once_installed_and_its_status_written() {
    let api = ApiServer::start();
    let old = echo("old");
    let new = echo("new");
    let far = echo("far");
    api.apply(INGRESS);
    api.apply(&backend("default", "old", old.port));
    api.apply(&backend("default", "new", new.port));
    api.apply(&backend("elsewhere", "far", far.port));
    // Stored before the CRDs are served: as if applied right after installing them.
    api.apply(GATEWAY_API);

    let weir = Weir::start("{}", &[]);
    let dir = temp_dir("gateway-controller");
    let kubeconfig = api.kubeconfig(&dir);
    let log_path = dir.join("controller.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let mut controller = controller(&weir, &kubeconfig, log.into());
    let c = client();
    let served_by = |host: &'static str, path: &'static str| {
        let c = c.clone();
        let url = weir.url(path);
        async move { get(&c, &url, &[("host", host)]).await.echo_name() }
    };

    // Without the CRDs: Ingresses are served, Gateway API is off and the log says so.
    within(Duration::from_secs(15), "the Ingress served", || async {
        served_by("legacy.example", "/").await.as_deref() == Some("old")
    })
    .await;
    let said = std::fs::read_to_string(&log_path).unwrap();
    assert!(said.contains("Gateway API is off"), "{said}");
    assert_eq!(served_by("shop.example", "/cart").await, None);
    assert_eq!(
        api.get("gateway.networking.k8s.io/v1", "GatewayClass", "", "weir")
            .unwrap()["status"],
        Value::Null
    );

    // The CRDs appear (a poll every 5 s): the route is served beside the Ingress.
    api.apply(GRANT);
    api.serve_api(
        "gateway.networking.k8s.io/v1",
        &["GatewayClass", "Gateway", "HTTPRoute", "GRPCRoute"],
    );
    api.serve_api("gateway.networking.k8s.io/v1beta1", &["ReferenceGrant"]);
    within(Duration::from_secs(15), "the HTTPRoute served", || async {
        served_by("shop.example", "/cart/1").await.as_deref() == Some("new")
    })
    .await;
    assert_eq!(
        served_by("shop.example", "/far").await.as_deref(),
        Some("far"),
        "the v1beta1 ReferenceGrant is read"
    );
    assert_eq!(
        served_by("legacy.example", "/").await.as_deref(),
        Some("old")
    );
    let said = std::fs::read_to_string(&log_path).unwrap();
    assert!(said.contains("Gateway API is on"), "{said}");

    // The status, written by the leader.
    let get = |kind: &'static str, ns: &'static str, name: &'static str| {
        api.get("gateway.networking.k8s.io/v1", kind, ns, name)
            .map(|o| o["status"].clone())
            .unwrap_or_default()
    };
    within(Duration::from_secs(10), "route status", || async {
        get("HTTPRoute", "default", "shop")["parents"]
            .as_array()
            .is_some_and(|p| p.len() == 2)
    })
    .await;
    let class = get("GatewayClass", "", "weir");
    assert_eq!(
        condition(&class["conditions"], "Accepted")["status"],
        "True",
        "{class:#}"
    );
    assert_eq!(
        condition(&class["conditions"], "Accepted")["observedGeneration"],
        1
    );
    assert!(
        class["supportedFeatures"]
            .as_array()
            .unwrap()
            .contains(&serde_json::json!({"name": "HTTPRoute"})),
        "{class:#}"
    );
    assert_eq!(get("GatewayClass", "", "other"), Value::Null, "not Weir's");
    assert_eq!(
        get("Gateway", "default", "theirs"),
        Value::Null,
        "not Weir's"
    );
    let gw = get("Gateway", "default", "web");
    assert_eq!(
        condition(&gw["conditions"], "Programmed")["status"],
        "True",
        "{gw:#}"
    );
    assert_eq!(
        gw["addresses"],
        serde_json::json!([{"type": "IPAddress", "value": "192.0.2.10"}])
    );
    assert_eq!(gw["listeners"][0]["name"], "http");
    assert_eq!(gw["listeners"][0]["attachedRoutes"], 1);
    let parents = get("HTTPRoute", "default", "shop")["parents"].clone();
    assert_eq!(
        parents[0]["controllerName"], "example.com/other",
        "kept: {parents:#}"
    );
    assert_eq!(
        parents[0]["conditions"][0]["lastTransitionTime"],
        "2026-01-01T00:00:00Z"
    );
    assert_eq!(parents[1]["controllerName"], "weir.dev/gateway-controller");
    assert_eq!(parents[1]["parentRef"], serde_json::json!({"name": "web"}));
    let accepted = condition(&parents[1]["conditions"], "Accepted");
    assert_eq!(accepted["status"], "True", "{parents:#}");
    assert!(accepted["lastTransitionTime"]
        .as_str()
        .is_some_and(|t| t.len() >= 20));
    assert_eq!(
        condition(&parents[1]["conditions"], "ResolvedRefs")["status"],
        "True"
    );

    // Writes settle: the status is not rewritten while nothing changes.
    let version = |kind: &'static str, ns: &'static str, name: &'static str| {
        api.get("gateway.networking.k8s.io/v1", kind, ns, name)
            .unwrap()["metadata"]["resourceVersion"]
            .clone()
    };
    let before = (
        version("HTTPRoute", "default", "shop"),
        version("Gateway", "default", "web"),
    );
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert_eq!(
        before,
        (
            version("HTTPRoute", "default", "shop"),
            version("Gateway", "default", "web")
        )
    );

    // The route leaves Weir's Gateway: Weir's entry goes, the other controller's stays, and
    // the route is no longer served.
    api.apply(&GATEWAY_API.replace(
        "parentRefs: [{name: web}, {name: theirs}]",
        "parentRefs: [{name: theirs}]",
    ));
    within(
        Duration::from_secs(10),
        "Weir's parent entry removed",
        || async {
            get("HTTPRoute", "default", "shop")["parents"]
                .as_array()
                .is_some_and(|p| p.len() == 1 && p[0]["controllerName"] == "example.com/other")
        },
    )
    .await;
    within(
        Duration::from_secs(5),
        "the route no longer served",
        || async { served_by("shop.example", "/cart").await.is_none() },
    )
    .await;
    within(Duration::from_secs(5), "no routes attached", || async {
        get("Gateway", "default", "web")["listeners"][0]["attachedRoutes"] == 0
    })
    .await;

    controller.terminate();
    controller.wait_exit(Duration::from_secs(5));
    let _ = std::fs::remove_dir_all(dir);
}

/// Whether every condition of an object's status (its own, its route parents' or its policy
/// ancestors') was written for the object's current generation, and there is one.
fn latest(obj: &Value) -> bool {
    let generation = &obj["metadata"]["generation"];
    let status = &obj["status"];
    let mut conds: Vec<&Value> = Vec::new();
    conds.extend(status["conditions"].as_array().into_iter().flatten());
    for list in ["parents", "ancestors"] {
        for p in status[list].as_array().into_iter().flatten() {
            conds.extend(p["conditions"].as_array().into_iter().flatten());
        }
    }
    !conds.is_empty() && conds.iter().all(|c| &c["observedGeneration"] == generation)
}

/// The upstream cases that change objects and read their status back, against one
/// controller: GatewayClassObservedGenerationBump, GatewayObservedGenerationBump,
/// HTTPRouteObservedGenerationBump, BackendTLSPolicyObservedGenerationBump,
/// GatewayModifyListeners, GatewayNameMaximumLength, GatewayInvalidParametersRef and
/// GatewayOptionalAddressValue, each with the suite's objects and changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_follows_each_generation_as_upstream_changes_objects() {
    let long_name = format!("gateway-name-maximum-length-{}", "a".repeat(225));
    assert_eq!(long_name.len(), 253);
    let pem = |file: &str| {
        let text = common::tls::fixture(file);
        let lines: Vec<String> = text.lines().map(|l| format!("    {l}")).collect();
        lines.join("\n")
    };
    let secret = format!(
        "apiVersion: v1\nkind: Secret\n\
         metadata: {{name: tls-validity-checks-certificate, namespace: infra}}\n\
         type: kubernetes.io/tls\nstringData:\n  tls.crt: |\n{}\n  tls.key: |\n{}\n",
        pem("a.example.test.crt"),
        pem("a.example.test.key"),
    );
    let ca = format!(
        "apiVersion: v1\nkind: ConfigMap\n\
         metadata: {{name: tls-checks-ca-certificate, namespace: infra}}\n\
         data:\n  ca.crt: |\n{}\n",
        pem("ca.crt"),
    );
    let objects = format!(
        "\
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {{name: weir}}
spec: {{controllerName: weir.dev/gateway-controller}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {{name: gatewayclass-observed-generation-bump}}
spec: {{controllerName: weir.dev/gateway-controller, description: old}}
---
apiVersion: v1
kind: Namespace
metadata: {{name: infra}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: same-namespace, namespace: infra}}
spec:
  gatewayClassName: weir
  listeners: [{{name: http, port: 80, protocol: HTTP, allowedRoutes: {{namespaces: {{from: Same}}}}}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: gateway-observed-generation-bump, namespace: infra}}
spec:
  gatewayClassName: weir
  listeners: [{{name: http, hostname: bar.com, port: 80, protocol: HTTP, allowedRoutes: {{namespaces: {{from: All}}}}}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata:
  name: {long_name}
  namespace: infra
  annotations: {{gateway-api/skip-this-for-readiness: 'true'}}
spec:
  gatewayClassName: weir
  listeners: [{{name: http, port: 80, protocol: HTTP}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: gateway-without-address-value, namespace: infra}}
spec:
  gatewayClassName: weir
  addresses: [{{type: IPAddress}}]
  listeners: [{{name: http, port: 8080, protocol: HTTP}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: gateway-invalid-parameters-ref, namespace: infra}}
spec:
  gatewayClassName: weir
  listeners: [{{name: http, port: 80, protocol: HTTP}}]
  infrastructure:
    parametersRef: {{group: invalid.io, kind: InvalidParameters, name: invalid}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: gateway-add-listener, namespace: infra}}
spec:
  gatewayClassName: weir
  listeners:
  - name: https
    port: 443
    protocol: HTTPS
    hostname: secure.test.com
    allowedRoutes: {{namespaces: {{from: All}}}}
    tls: {{certificateRefs: [{{group: '', kind: Secret, name: tls-validity-checks-certificate, namespace: infra}}]}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: http-route-1, namespace: infra}}
spec:
  parentRefs: [{{kind: Gateway, name: gateway-add-listener, namespace: infra}}]
  rules: [{{backendRefs: [{{name: infra-backend-v1, port: 8080}}]}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: gateway-remove-listener, namespace: infra}}
spec:
  gatewayClassName: weir
  listeners:
  - name: https
    port: 443
    protocol: HTTPS
    hostname: secure.test.com
    allowedRoutes: {{namespaces: {{from: All}}}}
    tls: {{certificateRefs: [{{group: '', kind: Secret, name: tls-validity-checks-certificate, namespace: infra}}]}}
  - {{name: http, port: 80, protocol: HTTP, allowedRoutes: {{namespaces: {{from: All}}}}}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: http-route-2, namespace: infra}}
spec:
  parentRefs: [{{kind: Gateway, name: gateway-remove-listener, namespace: infra}}]
  rules: [{{backendRefs: [{{name: infra-backend-v1, port: 8080}}]}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: observed-generation-bump, namespace: infra}}
spec:
  parentRefs: [{{name: same-namespace}}]
  rules: [{{backendRefs: [{{name: infra-backend-v1, port: 8080}}]}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: backendtlspolicy-observed-generation-bump, namespace: infra}}
spec:
  parentRefs: [{{name: same-namespace}}]
  rules: [{{backendRefs: [{{name: observed-generation-bump-test, port: 443}}]}}]
---
apiVersion: v1
kind: Service
metadata: {{name: observed-generation-bump-test, namespace: infra}}
spec:
  selector: {{app: observed-generation-bump-test}}
  ports: [{{name: https, protocol: TCP, port: 443, targetPort: 8443}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: BackendTLSPolicy
metadata: {{name: observed-generation-bump, namespace: infra}}
spec:
  targetRefs: [{{group: '', kind: Service, name: observed-generation-bump-test, sectionName: https}}]
  validation:
    caCertificateRefs: [{{group: '', kind: ConfigMap, name: tls-checks-ca-certificate}}]
    hostname: abc.example.com
---
{secret}---
{ca}"
    );
    let api = ApiServer::start();
    let v1 = echo("infra-backend-v1");
    let v2 = echo("infra-backend-v2");
    api.apply(&backend("infra", "infra-backend-v1", v1.port));
    api.apply(&backend("infra", "infra-backend-v2", v2.port));
    api.apply(&objects);
    api.serve_api(
        "gateway.networking.k8s.io/v1",
        &[
            "GatewayClass",
            "Gateway",
            "HTTPRoute",
            "GRPCRoute",
            "ReferenceGrant",
            "BackendTLSPolicy",
        ],
    );

    let weir = Weir::start("{}", &[]);
    let dir = temp_dir("gateway-generations");
    let kubeconfig = api.kubeconfig(&dir);
    let mut controller = controller(&weir, &kubeconfig, Stdio::null());
    const GW: &str = "gateway.networking.k8s.io/v1";
    let get = |kind: &str, name: &str| {
        let ns = if kind == "GatewayClass" { "" } else { "infra" };
        api.get(GW, kind, ns, name).unwrap_or_default()
    };
    let limit = Duration::from_secs(20);
    let current = |kind: &'static str, name: String| {
        let get = &get;
        move || {
            let name = name.clone();
            async move { latest(&get(kind, &name)) }
        }
    };
    for (kind, name) in [
        ("GatewayClass", "gatewayclass-observed-generation-bump"),
        ("Gateway", "gateway-observed-generation-bump"),
        ("Gateway", long_name.as_str()),
        ("Gateway", "gateway-invalid-parameters-ref"),
        ("Gateway", "gateway-without-address-value"),
        ("Gateway", "gateway-add-listener"),
        ("Gateway", "gateway-remove-listener"),
        ("HTTPRoute", "observed-generation-bump"),
        ("BackendTLSPolicy", "observed-generation-bump"),
    ] {
        within(
            limit,
            &format!("{kind} {name}"),
            current(kind, name.to_string()),
        )
        .await;
    }
    // GatewayOptionalAddressValue: an address without a value is any address; Weir's are.
    let gw = get("Gateway", "gateway-without-address-value");
    assert_eq!(
        gw["status"]["addresses"],
        serde_json::json!([{"type": "IPAddress", "value": "192.0.2.10"}]),
        "{gw:#}"
    );
    let gw = get("Gateway", "gateway-invalid-parameters-ref");
    assert_eq!(
        condition(&gw["status"]["conditions"], "Accepted")["reason"],
        "InvalidParameters",
        "{gw:#}"
    );
    assert_eq!(
        condition(&gw["status"]["conditions"], "Accepted")["status"],
        "False"
    );

    // Each change: a new generation, and the status written for it.
    let generation = |kind: &str, name: &str| get(kind, name)["metadata"]["generation"].clone();
    let changes = [
        (
            "GatewayClass",
            "gatewayclass-observed-generation-bump",
            "description: old",
            "description: new",
        ),
        (
            "Gateway",
            "gateway-observed-generation-bump",
            "allowedRoutes: {namespaces: {from: All}}}]",
            "allowedRoutes: {namespaces: {from: All}}}, {name: alternate, hostname: foo.com, \
             port: 80, protocol: HTTP, allowedRoutes: {namespaces: {from: All}}}]",
        ),
        (
            "HTTPRoute",
            "observed-generation-bump",
            "parentRefs: [{name: same-namespace}]\n  rules: [{backendRefs: [{name: \
             infra-backend-v1",
            "parentRefs: [{name: same-namespace}]\n  rules: [{backendRefs: [{name: \
             infra-backend-v2",
        ),
        (
            "BackendTLSPolicy",
            "observed-generation-bump",
            "hostname: abc.example.com",
            "hostname: foo.example.com",
        ),
        (
            "Gateway",
            "gateway-add-listener",
            "namespace: infra}]}\n---\napiVersion: gateway.networking.k8s.io/v1\nkind: \
             HTTPRoute\nmetadata: {name: http-route-1",
            "namespace: infra}]}\n  - {name: http, port: 80, protocol: HTTP, hostname: \
             data.test.com, allowedRoutes: {namespaces: {from: All}}}\n---\napiVersion: \
             gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {name: http-route-1",
        ),
        (
            "Gateway",
            "gateway-remove-listener",
            "  - name: https\n    port: 443\n    protocol: HTTPS\n    hostname: \
             secure.test.com\n    allowedRoutes: {namespaces: {from: All}}\n    tls: \
             {certificateRefs: [{group: '', kind: Secret, name: \
             tls-validity-checks-certificate, namespace: infra}]}\n  - {name: http",
            "  - {name: http",
        ),
    ];
    let mut changed = objects.clone();
    for (kind, name, from, to) in changes {
        let before = generation(kind, name);
        let at = changed.find(&format!("name: {name}")).unwrap();
        let offset = changed[at..]
            .find(from)
            .unwrap_or_else(|| panic!("{name}: {from}"));
        changed.replace_range(at + offset..at + offset + from.len(), to);
        api.apply(&changed);
        assert_ne!(generation(kind, name), before, "{kind} {name}");
        within(
            limit,
            &format!("{kind} {name} changed"),
            current(kind, name.to_string()),
        )
        .await;
    }

    let class = get("GatewayClass", "gatewayclass-observed-generation-bump");
    assert_eq!(
        condition(&class["status"]["conditions"], "Accepted")["status"],
        "True"
    );
    let gw = get("Gateway", "gateway-observed-generation-bump");
    for c in ["Accepted", "Programmed"] {
        assert_eq!(
            condition(&gw["status"]["conditions"], c)["status"],
            "True",
            "{gw:#}"
        );
    }
    let route = get("HTTPRoute", "observed-generation-bump");
    for c in ["Accepted", "ResolvedRefs"] {
        let parent = &route["status"]["parents"][0];
        assert_eq!(parent["parentRef"]["name"], "same-namespace");
        assert_eq!(
            condition(&parent["conditions"], c)["status"],
            "True",
            "{route:#}"
        );
    }
    let policy = get("BackendTLSPolicy", "observed-generation-bump");
    let ancestor = &policy["status"]["ancestors"][0];
    assert_eq!(
        ancestor["ancestorRef"]["name"], "same-namespace",
        "{policy:#}"
    );
    assert_eq!(
        condition(&ancestor["conditions"], "Accepted")["status"],
        "True"
    );

    // Listeners added and removed: exactly the listeners of the spec, each with its routes.
    let listeners = |name: &str| -> Vec<(String, i64, bool)> {
        let gw = get("Gateway", name);
        gw["status"]["listeners"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| {
                let kinds = l["supportedKinds"].as_array().unwrap();
                assert!(kinds.iter().any(|k| k["kind"] == "HTTPRoute"), "{gw:#}");
                let ok = ["Accepted", "ResolvedRefs"]
                    .iter()
                    .all(|c| condition(&l["conditions"], c)["status"] == "True");
                (
                    l["name"].as_str().unwrap().to_string(),
                    l["attachedRoutes"].as_i64().unwrap(),
                    ok,
                )
            })
            .collect()
    };
    within(limit, "routes attached to the added listener", || async {
        listeners("gateway-add-listener")
            == [
                ("https".to_string(), 1, true),
                ("http".to_string(), 1, true),
            ]
    })
    .await;
    within(limit, "the removed listener gone", || async {
        listeners("gateway-remove-listener") == [("http".to_string(), 1, true)]
    })
    .await;

    controller.terminate();
    controller.wait_exit(Duration::from_secs(5));
    let _ = std::fs::remove_dir_all(dir);
}

/// A cluster with an older Gateway API's experimental channel serves TLSRoutes at
/// `v1alpha2` and BackendTLSPolicies at `v1alpha3` only: Weir reads them there, and writes
/// their status there too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_is_written_at_the_version_a_kind_is_served() {
    let ca = common::tls::fixture("ca.crt");
    let ca: Vec<String> = ca.lines().map(|l| format!("    {l}")).collect();
    let objects = format!(
        "\
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {{name: weir}}
spec: {{controllerName: weir.dev/gateway-controller}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: edge, namespace: default}}
spec:
  gatewayClassName: weir
  listeners:
  - {{name: http, port: 80, protocol: HTTP}}
  - {{name: tls, port: 443, protocol: TLS, tls: {{mode: Passthrough}}}}
---
apiVersion: gateway.networking.k8s.io/v1alpha2
kind: TLSRoute
metadata: {{name: console, namespace: default}}
spec:
  parentRefs: [{{name: edge}}]
  hostnames: [console.example.com]
  rules: [{{backendRefs: [{{name: new, port: 8080}}]}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: shop, namespace: default}}
spec:
  parentRefs: [{{name: edge}}]
  rules: [{{backendRefs: [{{name: new, port: 8080}}]}}]
---
apiVersion: gateway.networking.k8s.io/v1alpha3
kind: BackendTLSPolicy
metadata: {{name: new-tls, namespace: default}}
spec:
  targetRefs: [{{group: '', kind: Service, name: new}}]
  validation:
    caCertificateRefs: [{{group: '', kind: ConfigMap, name: new-ca}}]
    hostname: new.example.com
---
apiVersion: v1
kind: ConfigMap
metadata: {{name: new-ca, namespace: default}}
data:
  ca.crt: |
{}
",
        ca.join("\n")
    );
    let api = ApiServer::start();
    let new = echo("new");
    api.apply(&backend("default", "new", new.port));
    api.apply(&objects);
    api.serve_api(
        "gateway.networking.k8s.io/v1",
        &["GatewayClass", "Gateway", "HTTPRoute"],
    );
    api.serve_api("gateway.networking.k8s.io/v1alpha2", &["TLSRoute"]);
    api.serve_api("gateway.networking.k8s.io/v1alpha3", &["BackendTLSPolicy"]);

    let weir = Weir::start("{}", &[]);
    let dir = temp_dir("gateway-versions");
    let kubeconfig = api.kubeconfig(&dir);
    let mut controller = controller(&weir, &kubeconfig, Stdio::null());
    let limit = Duration::from_secs(20);
    let get = |version: &str, kind: &str, name: &str| {
        api.get(
            &format!("gateway.networking.k8s.io/{version}"),
            kind,
            "default",
            name,
        )
        .unwrap_or_default()
    };
    within(limit, "the v1alpha2 TLSRoute's status", || async {
        let route = get("v1alpha2", "TLSRoute", "console");
        condition(&route["status"]["parents"][0]["conditions"], "Accepted")["status"] == "True"
    })
    .await;
    within(limit, "the v1alpha3 BackendTLSPolicy's status", || async {
        let policy = get("v1alpha3", "BackendTLSPolicy", "new-tls");
        let ancestor = &policy["status"]["ancestors"][0];
        ancestor["ancestorRef"]["name"] == "edge"
            && condition(&ancestor["conditions"], "Accepted")["status"] == "True"
    })
    .await;

    controller.terminate();
    controller.wait_exit(Duration::from_secs(5));
    let _ = std::fs::remove_dir_all(dir);
}
