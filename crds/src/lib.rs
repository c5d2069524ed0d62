//! Weir's Kubernetes API: the `weir.dev/v1alpha1` custom resources (`Plugin`, `ClusterPlugin`,
//! `Upstream`, `Consumer`) and the annotation keys users put on Ingresses, Services and
//! Consumers.
//!
//! Types and constants only; `weir crds` prints [`crds_yaml`], and the committed copy in
//! `crds/weir.dev.yaml` is checked against it by a test.

// `printcolumn(...)` repeats `type_ = ...` by design; clippy reads that as a duplicated attribute.
#![allow(clippy::duplicated_attributes)]

pub mod annotations;
pub mod gateway;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, CustomResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The API group of Weir's resources.
pub const GROUP: &str = "weir.dev";
/// The controller name an IngressClass's `spec.controller` must carry.
pub const CONTROLLER_NAME: &str = "weir.dev/ingress-controller";
/// Label that marks a Secret as Weir's: `"true"` on a Plugin's `configFrom` Secret or an
/// Upstream's CA Secret (`spec.tls.caSecret`), or the credential kind (`key-auth`,
/// `basic-auth`, `jwt`) on a Consumer's credential Secret.
pub const CREDENTIAL_LABEL: &str = "weir.dev/credential";
/// The [`CREDENTIAL_LABEL`] value of a Plugin `configFrom` Secret (and of an Upstream's CA
/// Secret that is not of type `kubernetes.io/tls`).
pub const CONFIG_SECRET_LABEL_VALUE: &str = "true";

/// A free-form object the API server keeps as is (validated by the proxy's plugin registry).
fn free_form(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true
    })
}

/// Conditions list with the merge semantics Kubernetes tooling expects.
fn conditions_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let mut s = generator.subschema_for::<Vec<Condition>>();
    s.insert("x-kubernetes-list-type".into(), "map".into());
    s.insert(
        "x-kubernetes-list-map-keys".into(),
        serde_json::json!(["type"]),
    );
    s
}

/// A plugin configuration, applied to the Ingresses and Services that name it in their
/// `weir.dev/plugins` annotation.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "weir.dev",
    version = "v1alpha1",
    kind = "Plugin",
    namespaced,
    status = "ResourceStatus",
    shortname = "wplugin",
    category = "weir",
    printcolumn(name = "Plugin", type_ = "string", json_path = ".spec.plugin"),
    printcolumn(name = "Disabled", type_ = "boolean", json_path = ".spec.disabled"),
    printcolumn(
        name = "Accepted",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Accepted\")].status"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct PluginSpec {
    /// The plugin to run (`correlation-id`, `request-termination`, …).
    #[schemars(length(min = 1, max = 128))]
    pub plugin: String,
    /// The plugin's configuration (Kong's field names).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "free_form")]
    pub config: Option<serde_json::Value>,
    /// Read the configuration from a Secret key instead (for credentials); the Secret must be
    /// labelled `weir.dev/credential: "true"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_from: Option<ConfigFrom>,
    /// Keep the resource but do not run the plugin.
    #[serde(default)]
    pub disabled: bool,
    /// Overrides the plugin's default priority (higher runs first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i32>,
}

/// Where a Plugin's configuration comes from.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConfigFrom {
    /// A key of a Secret in the Plugin's namespace, holding JSON or YAML.
    pub secret_key_ref: SecretKeyRef,
}

/// A key of a Secret.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretKeyRef {
    /// Secret name.
    pub name: String,
    /// Key within the Secret's data.
    pub key: String,
}

/// A cluster-wide plugin configuration: named from any namespace, or applied to every route
/// with `global: true`.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "weir.dev",
    version = "v1alpha1",
    kind = "ClusterPlugin",
    status = "ResourceStatus",
    shortname = "wcplugin",
    category = "weir",
    printcolumn(name = "Plugin", type_ = "string", json_path = ".spec.plugin"),
    printcolumn(name = "Global", type_ = "boolean", json_path = ".spec.global"),
    printcolumn(name = "Disabled", type_ = "boolean", json_path = ".spec.disabled"),
    printcolumn(
        name = "Accepted",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Accepted\")].status"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ClusterPluginSpec {
    /// The plugin to run.
    #[schemars(length(min = 1, max = 128))]
    pub plugin: String,
    /// The plugin's configuration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "free_form")]
    pub config: Option<serde_json::Value>,
    /// Read the configuration from a Secret key (the Secret names its namespace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_from: Option<ClusterConfigFrom>,
    /// Keep the resource but do not run the plugin.
    #[serde(default)]
    pub disabled: bool,
    /// Overrides the plugin's default priority.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i32>,
    /// Apply to every route.
    #[serde(default)]
    pub global: bool,
}

/// Where a ClusterPlugin's configuration comes from.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterConfigFrom {
    /// A key of a Secret.
    pub secret_key_ref: NamespacedSecretKeyRef,
}

/// A key of a Secret in a given namespace.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NamespacedSecretKeyRef {
    /// Secret namespace.
    pub namespace: String,
    /// Secret name.
    pub name: String,
    /// Key within the Secret's data.
    pub key: String,
}

/// How traffic to a Service is balanced, retried, timed out and health-checked; attached to
/// the Service by `targetRef` (or by the Service's `weir.dev/upstream` annotation).
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema, Default)]
#[kube(
    group = "weir.dev",
    version = "v1alpha1",
    kind = "Upstream",
    namespaced,
    status = "ResourceStatus",
    shortname = "wupstream",
    category = "weir",
    printcolumn(name = "Service", type_ = "string", json_path = ".spec.targetRef.name"),
    printcolumn(name = "Algorithm", type_ = "string", json_path = ".spec.algorithm"),
    printcolumn(
        name = "Accepted",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Accepted\")].status"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct UpstreamSpec {
    /// The Service this Upstream configures (same namespace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_ref: Option<TargetRef>,
    /// Load-balancing algorithm (default `round-robin`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub algorithm: Option<Algorithm>,
    /// What consistent hashing hashes on (required with `algorithm: consistent-hashing`, used
    /// with it only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hash_on: Option<HashOn>,
    /// How many times a failed try is retried (default 5), each on another target while there
    /// is one: connections that could not be made, and what `retryOn` adds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 32))]
    pub retries: Option<u32>,
    /// Failures retried besides connections that could not be made; only idempotent requests
    /// are tried again once a target has seen them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_on: Option<RetryOn>,
    /// Timeouts in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeouts: Option<Timeouts>,
    /// Passive and active health checks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub healthchecks: Option<Healthchecks>,
    /// TLS towards the targets (with `weir.dev/protocol: https` or `grpcs` on the Service).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<UpstreamTls>,
}

/// The Service an Upstream applies to.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
pub struct TargetRef {
    /// Service name.
    #[schemars(length(min = 1, max = 63))]
    pub name: String,
}

/// Load-balancing algorithms.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Algorithm {
    /// Smooth weighted round-robin.
    RoundRobin,
    /// Fewest requests in flight, relative to the weight.
    LeastConnections,
    /// Consistent hashing on `hashOn`: one key keeps its target.
    ConsistentHashing,
    /// Lowest latency × load of two targets picked at random.
    PeakEwma,
}

/// The input of consistent hashing.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HashOn {
    /// What to hash.
    pub by: HashBy,
    /// Header, cookie or query-argument name (required for those kinds, not allowed for the
    /// others).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    pub name: Option<String>,
    /// What to hash when a request lacks the first input (not `cookie`); without it such
    /// requests are spread round-robin.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback: Option<HashFallback>,
    /// `Path` of the cookie the proxy sets when `by: cookie` finds none (default `/`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 1024))]
    pub cookie_path: Option<String>,
    /// `Max-Age` of that cookie in seconds; 0 (the default) makes a session cookie.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub cookie_ttl: Option<u64>,
    /// `SameSite` of that cookie (`Strict`, `Lax` or `None`); unset: no attribute.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cookie_same_site: Option<SameSite>,
    /// With `cookieSameSite: None`: leave the attribute out for the browsers that mishandle
    /// it (Chrome 51–66, Safari on iOS 12 and macOS 10.14, old UC Browser).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cookie_same_site_none_if_supported: bool,
    /// Whether that cookie is marked `Secure`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cookie_secure: bool,
    /// Hash onto subsets of this many targets instead of single targets: a key's requests
    /// take its subset's members in turn (ingress-nginx's `upstream-hash-by-subset`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 256))]
    pub subset_size: Option<u32>,
}

/// A cookie's `SameSite` attribute.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum SameSite {
    /// `SameSite=Strict`.
    Strict,
    /// `SameSite=Lax`.
    Lax,
    /// `SameSite=None`.
    None,
}

/// The second input of consistent hashing.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HashFallback {
    /// What to hash (`ip`, `header`, `path` or `query-arg`; a fallback never sets a cookie).
    pub by: HashBy,
    /// Header or query-argument name (for those kinds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    pub name: Option<String>,
}

/// Kinds of consistent-hashing input.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum HashBy {
    /// Client IP.
    Ip,
    /// A request header.
    Header,
    /// A cookie, set by the proxy when absent.
    Cookie,
    /// The request path (without the query).
    Path,
    /// A query argument.
    QueryArg,
}

/// Failures retried besides connections that could not be made.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema, Default)]
#[serde(rename_all = "camelCase")]
pub struct RetryOn {
    /// Retry when a target does not answer within the read timeout.
    #[serde(default)]
    pub timeouts: bool,
    /// Retry when a target answers one of these statuses.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(inner(range(min = 400, max = 599)))]
    pub statuses: Vec<u16>,
    /// Milliseconds from the first try after which no retry starts (the try under way goes
    /// on), as nginx's `proxy_next_upstream_timeout`; unset, no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 86_400_000))]
    pub timeout: Option<u64>,
}

/// Timeouts in milliseconds.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema, Default)]
#[serde(rename_all = "camelCase")]
pub struct Timeouts {
    /// Connection establishment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub connect: Option<u64>,
    /// Response head, and between two reads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub read: Option<u64>,
    /// Between two writes of the request body.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub write: Option<u64>,
}

/// Health checks.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema, Default)]
#[serde(rename_all = "camelCase")]
pub struct Healthchecks {
    /// Failures counted from real traffic.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub passive: Option<PassiveHealthcheck>,
    /// Periodic probes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active: Option<ActiveHealthcheck>,
    /// When every target is unhealthy, use them all rather than answer 503.
    #[serde(default)]
    pub panic: bool,
}

/// Passive health checking thresholds.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema, Default)]
#[serde(rename_all = "camelCase")]
pub struct PassiveHealthcheck {
    /// Consecutive failures (connections that could not be made, `unhealthyStatuses` answers)
    /// that mark a target down (default 5); 0 counts none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 255))]
    pub failures: Option<u32>,
    /// Consecutive timeouts that mark a target down (default 5); 0 counts none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 255))]
    pub timeouts: Option<u32>,
    /// Response statuses counted as failures (default 500, 502, 503, 504).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(inner(range(min = 100, max = 599)))]
    pub unhealthy_statuses: Option<Vec<u16>>,
    /// Seconds a target marked down stays out when no active check can bring it back
    /// (default 30).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 86400))]
    pub cooldown: Option<u64>,
}

/// Active health checking.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema, Default)]
#[serde(rename_all = "camelCase")]
pub struct ActiveHealthcheck {
    /// Probe over `http` (the default) or `https` (with the Upstream's `tls` settings).
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<ProbeType>,
    /// Path probed with GET (default `/`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 1024))]
    pub path: Option<String>,
    /// `Host` header of probes (default the target's `address:port`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 255))]
    pub host: Option<String>,
    /// Seconds between two probes of a target (default 5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 3600))]
    pub interval: Option<u32>,
    /// Seconds a probe may take (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 3600))]
    pub timeout: Option<u32>,
    /// Consecutive healthy answers that mark a target up again (default 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 255))]
    pub healthy_threshold: Option<u32>,
    /// Consecutive failed probes that mark a target down (default 3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 255))]
    pub unhealthy_threshold: Option<u32>,
    /// Statuses counted as healthy; any other is a failure (default 200–206, 300–304, 307,
    /// 308).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(inner(range(min = 100, max = 599)))]
    pub healthy_statuses: Option<Vec<u16>>,
}

/// The protocol of active probes.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ProbeType {
    /// Plain HTTP/1.1.
    Http,
    /// HTTP/1.1 over TLS.
    Https,
}

/// TLS towards the targets.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema, Default)]
#[serde(rename_all = "camelCase")]
pub struct UpstreamTls {
    /// Secret (key `ca.crt`, PEM) with the CA bundle the targets' certificates must chain to;
    /// of type `kubernetes.io/tls` or labelled `weir.dev/credential: "true"`. Default: the
    /// public web's roots.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_secret: Option<String>,
    /// `kubernetes.io/tls` Secret with a client certificate (`tls.crt`, `tls.key`) shown to
    /// targets that ask for one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_certificate_secret: Option<String>,
    /// Server name sent in SNI and verified (default `<service>.<namespace>.svc`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub sni: Option<String>,
    /// Verify the target's certificate (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verify: Option<bool>,
    /// Most intermediate certificates accepted between a target's certificate and a trusted
    /// CA (default: no limit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 10))]
    pub verify_depth: Option<u8>,
    /// Application protocol offered: `http/1.1` or `h2` (default `h2` for `grpcs`, else
    /// `http/1.1`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alpn: Option<Alpn>,
}

/// An ALPN protocol offered to the targets.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum Alpn {
    /// HTTP/1.1.
    #[serde(rename = "http/1.1")]
    Http11,
    /// HTTP/2.
    #[serde(rename = "h2")]
    H2,
}

/// A consumer of the API: who a request is, once an authentication plugin (`key-auth`,
/// `basic-auth`, `jwt`) has checked one of its credentials. Consumer-scoped plugins are named in
/// its `weir.dev/plugins` annotation.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema, Default)]
#[kube(
    group = "weir.dev",
    version = "v1alpha1",
    kind = "Consumer",
    namespaced,
    status = "ResourceStatus",
    shortname = "wconsumer",
    category = "weir",
    printcolumn(name = "Username", type_ = "string", json_path = ".spec.username"),
    printcolumn(name = "Custom ID", type_ = "string", json_path = ".spec.customId"),
    printcolumn(
        name = "Accepted",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Accepted\")].status"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ConsumerSpec {
    /// The name sent upstream as `X-Consumer-Username` (default: the resource's name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    pub username: Option<String>,
    /// An id from another system, sent upstream as `X-Consumer-Custom-ID`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    pub custom_id: Option<String>,
    /// Names of Secrets in the Consumer's namespace, each one credential, labelled
    /// `weir.dev/credential` with its kind (`key-auth`, `basic-auth` or `jwt`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub credentials: Vec<String>,
    /// ACL groups (for the `acl` plugin).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
}

/// Status of every Weir resource: `Accepted` and `Programmed` conditions.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema, Default)]
#[serde(rename_all = "camelCase")]
pub struct ResourceStatus {
    /// Standard conditions, one per type.
    #[serde(default)]
    #[schemars(schema_with = "conditions_schema")]
    pub conditions: Vec<Condition>,
}

/// The CustomResourceDefinitions of every Weir resource.
pub fn crds() -> Vec<CustomResourceDefinition> {
    vec![
        Plugin::crd(),
        ClusterPlugin::crd(),
        Upstream::crd(),
        Consumer::crd(),
    ]
}

/// The CRDs as one multi-document YAML file (what `weir crds` prints).
pub fn crds_yaml() -> String {
    let mut out = String::from("# Generated by `weir crds`; do not edit.\n");
    for crd in crds() {
        out.push_str("---\n");
        out.push_str(&serde_yaml::to_string(&crd).expect("a CRD always serialises"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn committed_crds_match_the_types() {
        let committed = include_str!("../weir.dev.yaml");
        if committed != crds_yaml() {
            if std::env::var("WEIR_BLESS").is_ok() {
                std::fs::write(
                    concat!(env!("CARGO_MANIFEST_DIR"), "/weir.dev.yaml"),
                    crds_yaml(),
                )
                .unwrap();
            }
            panic!("crds/weir.dev.yaml is stale: run `WEIR_BLESS=1 cargo test -p weir-crds` (or `weir crds > crds/weir.dev.yaml`)");
        }
    }

    #[test]
    fn config_is_preserved_free_form_and_conditions_are_a_map_list() {
        let yaml = crds_yaml();
        assert!(yaml.contains("x-kubernetes-preserve-unknown-fields: true"));
        assert!(yaml.contains("x-kubernetes-list-type: map"));
        let crd = Plugin::crd();
        let v = &crd.spec.versions[0];
        assert!(v.subresources.as_ref().unwrap().status.is_some());
        let schema = serde_json::to_value(v.schema.as_ref().unwrap()).unwrap();
        let spec = &schema["openAPIV3Schema"]["properties"]["spec"];
        assert_eq!(spec["required"], serde_json::json!(["plugin"]));
        assert_eq!(spec["properties"]["config"]["type"], "object");
        let up = serde_json::to_value(Upstream::crd().spec.versions[0].schema.as_ref().unwrap())
            .unwrap();
        let alg = &up["openAPIV3Schema"]["properties"]["spec"]["properties"]["algorithm"];
        assert_eq!(
            alg["enum"],
            serde_json::json!([
                "round-robin",
                "least-connections",
                "consistent-hashing",
                "peak-ewma"
            ])
        );
    }

    /// The rules an API server applies to `openAPIV3Schema` before it accepts a CRD
    /// ("Specifying a structural schema" in the Kubernetes docs), checked offline.
    fn structural_problems(node: &serde_json::Value, path: &str, out: &mut Vec<String>) {
        let Some(obj) = node.as_object() else {
            out.push(format!("{path}: not an object"));
            return;
        };
        let flag = |k: &str| obj.get(k).and_then(|v| v.as_bool()) == Some(true);
        let typed = obj
            .get("type")
            .and_then(|t| t.as_str())
            .is_some_and(|t| !t.is_empty());
        if !typed
            && !flag("x-kubernetes-int-or-string")
            && !flag("x-kubernetes-preserve-unknown-fields")
        {
            out.push(format!("{path}: no type"));
        }
        for forbidden in [
            "$ref",
            "patternProperties",
            "dependencies",
            "definitions",
            "id",
        ] {
            if obj.contains_key(forbidden) {
                out.push(format!("{path}: {forbidden} is not allowed"));
            }
        }
        if flag("uniqueItems") {
            out.push(format!("{path}: uniqueItems: true is not allowed"));
        }
        match obj.get("additionalProperties") {
            Some(serde_json::Value::Bool(false)) => out.push(format!(
                "{path}: additionalProperties: false is not allowed"
            )),
            Some(a) if obj.contains_key("properties") => {
                out.push(format!("{path}: additionalProperties with properties"));
                structural_problems(a, &format!("{path}.additionalProperties"), out);
            }
            Some(serde_json::Value::Bool(true)) | None => {}
            Some(a) => structural_problems(a, &format!("{path}.additionalProperties"), out),
        }
        // Inside logical junctors only value validations may appear, never structure.
        for junctor in ["allOf", "anyOf", "oneOf", "not"] {
            let Some(j) = obj.get(junctor) else { continue };
            let branches = j.as_array().cloned().unwrap_or_else(|| vec![j.clone()]);
            for (i, b) in branches.iter().enumerate() {
                for k in [
                    "type",
                    "description",
                    "default",
                    "additionalProperties",
                    "nullable",
                    "properties",
                    "items",
                ] {
                    if b.get(k).is_some() {
                        out.push(format!(
                            "{path}.{junctor}[{i}]: {k} inside a logical junctor"
                        ));
                    }
                }
            }
        }
        if let Some(props) = obj.get("properties").and_then(|p| p.as_object()) {
            for (name, child) in props {
                structural_problems(child, &format!("{path}.{name}"), out);
            }
        }
        if let Some(items) = obj.get("items") {
            structural_problems(items, &format!("{path}[]"), out);
        }
    }

    #[test]
    fn schemas_are_structural() {
        // The checker itself finds what an API server would refuse.
        let bad = serde_json::json!({"type": "object", "properties": {
            "a": {"description": "untyped"},
            "b": {"type": "object", "properties": {}, "additionalProperties": {"type": "string"}},
            "c": {"type": "string", "anyOf": [{"type": "integer"}]},
        }});
        let mut found = Vec::new();
        structural_problems(&bad, "Bad", &mut found);
        assert_eq!(found.len(), 3, "{found:#?}");
        for crd in crds() {
            let crd = serde_json::to_value(&crd).unwrap();
            let kind = crd
                .pointer("/spec/names/kind")
                .unwrap()
                .as_str()
                .unwrap()
                .to_string();
            for version in crd.pointer("/spec/versions").unwrap().as_array().unwrap() {
                let schema = version
                    .pointer("/schema/openAPIV3Schema")
                    .expect("a schema");
                let mut problems = Vec::new();
                structural_problems(schema, &kind, &mut problems);
                // metadata may only constrain name and generateName; Weir leaves it alone.
                if let Some(meta) = schema.pointer("/properties/metadata") {
                    let keys: Vec<_> = meta.as_object().unwrap().keys().collect();
                    assert!(
                        keys.iter().all(|k| *k == "type"),
                        "{kind}: metadata {keys:?}"
                    );
                }
                assert!(
                    problems.is_empty(),
                    "{kind} {}: {problems:#?}",
                    version["name"]
                );
                assert!(
                    version.pointer("/subresources/status").is_some(),
                    "{kind}: status subresource"
                );
            }
        }
    }

    #[test]
    fn manifests_parse() {
        let p: Plugin = serde_yaml::from_str(
            "apiVersion: weir.dev/v1alpha1\nkind: Plugin\nmetadata: {name: rl, namespace: default}\n\
             spec: {plugin: rate-limiting, config: {minute: 5, policy: local}, disabled: false}\n",
        )
        .unwrap();
        assert_eq!(p.spec.config.unwrap()["minute"], 5);
        let c: Consumer = serde_yaml::from_str(
            "apiVersion: weir.dev/v1alpha1\nkind: Consumer\nmetadata: {name: alice, namespace: shop}\n\
             spec: {customId: u-1, credentials: [alice-key], groups: [staff]}\n",
        )
        .unwrap();
        assert_eq!(c.spec.username, None);
        assert_eq!(c.spec.custom_id.as_deref(), Some("u-1"));
        assert_eq!(c.spec.credentials, ["alice-key"]);
        assert_eq!(c.spec.groups, ["staff"]);
    }

    #[test]
    fn upstream_manifest_parses_every_field() {
        let u: Upstream = serde_yaml::from_str(
            "apiVersion: weir.dev/v1alpha1\nkind: Upstream\nmetadata: {name: api, namespace: shop}\n\
             spec:\n  targetRef: {name: api}\n  algorithm: consistent-hashing\n\
             \x20 hashOn: {by: cookie, name: session, fallback: {by: header, name: x-user}, cookiePath: /app, cookieTtl: 3600}\n\
             \x20 retries: 2\n  retryOn: {timeouts: true, statuses: [502, 503]}\n\
             \x20 healthchecks:\n    panic: true\n\
             \x20   passive: {failures: 3, timeouts: 0, unhealthyStatuses: [500], cooldown: 10}\n\
             \x20   active: {type: https, path: /healthz, host: api.local, interval: 2, timeout: 1, healthyThreshold: 1, unhealthyThreshold: 2, healthyStatuses: [200]}\n\
             \x20 tls: {caSecret: api-ca, clientCertificateSecret: api-client, sni: api.internal, verify: true, verifyDepth: 2, alpn: h2}\n",
        )
        .unwrap();
        let h = u.spec.hash_on.unwrap();
        assert_eq!(h.fallback.unwrap().by, HashBy::Header);
        assert_eq!(
            (h.cookie_path.as_deref(), h.cookie_ttl),
            (Some("/app"), Some(3600))
        );
        assert_eq!(u.spec.retry_on.unwrap().statuses, [502, 503]);
        let hc = u.spec.healthchecks.unwrap();
        assert!(hc.panic);
        assert_eq!(hc.passive.unwrap().timeouts, Some(0));
        let a = hc.active.unwrap();
        assert_eq!((a.type_, a.timeout), (Some(ProbeType::Https), Some(1)));
        let tls = u.spec.tls.unwrap();
        assert_eq!((tls.verify_depth, tls.alpn), (Some(2), Some(Alpn::H2)));
        let alpn: Alpn = serde_yaml::from_str("http/1.1").unwrap();
        assert_eq!(alpn, Alpn::Http11);
    }

    #[test]
    fn upstream_schema_bounds() {
        let up = serde_json::to_value(Upstream::crd().spec.versions[0].schema.as_ref().unwrap())
            .unwrap();
        let spec = &up["openAPIV3Schema"]["properties"]["spec"]["properties"];
        let retry = &spec["retryOn"]["properties"]["statuses"]["items"];
        assert_eq!(
            (retry["minimum"].as_f64(), retry["maximum"].as_f64()),
            (Some(400.0), Some(599.0))
        );
        let hc = &spec["healthchecks"]["properties"];
        for statuses in [
            &hc["passive"]["properties"]["unhealthyStatuses"]["items"],
            &hc["active"]["properties"]["healthyStatuses"]["items"],
        ] {
            assert_eq!(
                (statuses["minimum"].as_f64(), statuses["maximum"].as_f64()),
                (Some(100.0), Some(599.0))
            );
        }
        assert_eq!(
            hc["active"]["properties"]["type"]["enum"],
            serde_json::json!(["http", "https"])
        );
        let tls = &spec["tls"]["properties"];
        assert_eq!(tls["alpn"]["enum"], serde_json::json!(["http/1.1", "h2"]));
        assert_eq!(tls["verifyDepth"]["maximum"].as_f64(), Some(10.0));
    }

    #[test]
    fn consumer_crd_names_and_columns() {
        let crd = Consumer::crd();
        assert_eq!(crd.spec.scope, "Namespaced");
        assert_eq!(crd.spec.names.short_names, Some(vec!["wconsumer".into()]));
        assert_eq!(crd.spec.names.categories, Some(vec!["weir".into()]));
        let v = &crd.spec.versions[0];
        let columns: Vec<&str> = v
            .additional_printer_columns
            .iter()
            .flatten()
            .map(|c| c.name.as_str())
            .collect();
        assert_eq!(columns, ["Username", "Custom ID", "Accepted", "Age"]);
        let schema = serde_json::to_value(v.schema.as_ref().unwrap()).unwrap();
        let spec = &schema["openAPIV3Schema"]["properties"]["spec"]["properties"];
        assert_eq!(spec["credentials"]["items"]["type"], "string");
        assert_eq!(spec["groups"]["items"]["type"], "string");
        assert!(crds_yaml().contains("kind: Consumer"));
    }
}
