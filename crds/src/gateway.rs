//! The Gateway API kinds Weir reads (`gateway.networking.k8s.io`, standard channel v1.6):
//! GatewayClass, Gateway, HTTPRoute, GRPCRoute, TLSRoute, ReferenceGrant, BackendTLSPolicy.
//!
//! The CRDs are the upstream ones, installed by the user; these types only read them. They are
//! written here rather than taken from the `gateway-api` crate because that crate (0.22) is
//! built on kube 4 and k8s-openapi 0.28 while Weir is on kube 5 and 0.29: using it would
//! compile a second kube and k8s-openapi (the largest crates of the build) and its types could
//! not share Weir's store. Every field is optional or defaulted: the API server validates
//! against the upstream schema, and a manifest folder may leave out what a server would
//! default; the translator applies the spec's defaults where it reads a field.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::CustomResource;
use serde::{Deserialize, Serialize};

/// The status of a Gateway API object as the API server has it, read only to keep what other
/// controllers wrote (a route's parents of other gateways) and to skip writes that change
/// nothing; Weir's own part is computed by the translator.
pub type ObservedStatus = serde_json::Value;

/// The API group.
pub const GROUP: &str = "gateway.networking.k8s.io";
/// The `spec.controllerName` of the GatewayClasses Weir serves.
pub const CONTROLLER_NAME: &str = "weir.dev/gateway-controller";

/// A class of Gateways and the controller that serves them.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[kube(
    group = "gateway.networking.k8s.io",
    version = "v1",
    kind = "GatewayClass",
    status = "ObservedStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct GatewayClassSpec {
    /// The controller that serves Gateways of this class.
    #[serde(default)]
    pub controller_name: String,
    /// Implementation-specific parameters (Weir takes none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parameters_ref: Option<serde_json::Value>,
    /// Free text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// Where traffic enters: listeners, each a port, protocol and optional host name.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[kube(
    group = "gateway.networking.k8s.io",
    version = "v1",
    kind = "Gateway",
    namespaced,
    status = "ObservedStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct GatewaySpec {
    /// The GatewayClass.
    #[serde(default)]
    pub gateway_class_name: String,
    /// The listeners.
    #[serde(default)]
    pub listeners: Vec<Listener>,
    /// Requested addresses.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub addresses: Vec<serde_json::Value>,
    /// TLS settings of the Gateway as a whole.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<GatewayTls>,
    /// What the implementation should create for the Gateway.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub infrastructure: Option<GatewayInfrastructure>,
}

/// A Gateway's `spec.infrastructure` (Weir creates nothing per Gateway; it reads only
/// whether parameters are asked for).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct GatewayInfrastructure {
    /// Implementation-specific parameters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parameters_ref: Option<serde_json::Value>,
}

/// A Gateway's TLS settings (`spec.tls`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct GatewayTls {
    /// Towards backends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend: Option<GatewayBackendTls>,
    /// Towards clients: the validation of their certificates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frontend: Option<FrontendTls>,
}

/// How the Gateway's HTTPS listeners check client certificates (`spec.tls.frontend`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct FrontendTls {
    /// For every HTTPS listener whose port has no `perPort` entry.
    #[serde(default)]
    pub default: FrontendTlsConfig,
    /// Per port, replacing `default` for the HTTPS listeners on that port.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub per_port: Vec<FrontendTlsPortConfig>,
}

/// One port's frontend TLS settings (`spec.tls.frontend.perPort[]`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct FrontendTlsPortConfig {
    /// The listeners' port.
    #[serde(default)]
    pub port: i32,
    /// Their settings.
    #[serde(default)]
    pub tls: FrontendTlsConfig,
}

/// Frontend TLS settings (`default`, or a port's `tls`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct FrontendTlsConfig {
    /// Client certificate validation; unset, none is asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub validation: Option<FrontendValidation>,
}

/// Client certificate validation (`validation`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct FrontendValidation {
    /// The CA certificates (ConfigMaps with `ca.crt`).
    #[serde(default)]
    pub ca_certificate_refs: Vec<ObjectReference>,
    /// `AllowValidOnly` (the default) or `AllowInsecureFallback`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
}

/// How the Gateway speaks TLS to backends (`spec.tls.backend`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct GatewayBackendTls {
    /// The client certificate presented to backends that BackendTLSPolicies make TLS ones
    /// (a Secret with `tls.crt` and `tls.key`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_certificate_ref: Option<ObjectReference>,
}

/// One listener of a Gateway.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct Listener {
    /// Unique within the Gateway; what a route's `sectionName` names.
    #[serde(default)]
    pub name: String,
    /// Host name (exact or `*.` wildcard); unset, every host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    /// The port.
    #[serde(default)]
    pub port: i32,
    /// `HTTP`, `HTTPS`, `TLS`, `TCP`, `UDP` or a domain-prefixed protocol.
    #[serde(default)]
    pub protocol: String,
    /// TLS settings (HTTPS and TLS).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<ListenerTls>,
    /// Which routes may attach.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_routes: Option<AllowedRoutes>,
}

/// A listener's TLS settings.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ListenerTls {
    /// `Terminate` (default) or `Passthrough`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// The certificates (Secrets of type `kubernetes.io/tls`).
    #[serde(default)]
    pub certificate_refs: Vec<ObjectReference>,
    /// Implementation-specific options.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub options: BTreeMap<String, String>,
}

/// A reference to an object, possibly in another namespace.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Default)]
#[serde(rename_all = "camelCase")]
pub struct ObjectReference {
    /// API group (`""` for the core group).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// Kind.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Name.
    #[serde(default)]
    pub name: String,
    /// Namespace; unset, the referring object's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

/// Which routes may attach to a listener.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct AllowedRoutes {
    /// From which namespaces.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespaces: Option<RouteNamespaces>,
    /// Which kinds; empty, those of the listener's protocol.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kinds: Vec<RouteGroupKind>,
}

/// The namespaces routes may come from.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct RouteNamespaces {
    /// `Same` (default), `All` or `Selector`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// The namespaces' labels, with `Selector`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<LabelSelector>,
}

/// A route kind.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Default)]
#[serde(rename_all = "camelCase")]
pub struct RouteGroupKind {
    /// API group; unset, the Gateway API's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// Kind.
    #[serde(default)]
    pub kind: String,
}

/// A route's reference to where it attaches.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Default)]
#[serde(rename_all = "camelCase")]
pub struct ParentReference {
    /// API group; unset, the Gateway API's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// Kind; unset, `Gateway`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Namespace; unset, the route's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Name.
    #[serde(default)]
    pub name: String,
    /// A listener's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub section_name: Option<String>,
    /// A listener's port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<i32>,
}

/// HTTP routing rules attached to Gateways.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[kube(
    group = "gateway.networking.k8s.io",
    version = "v1",
    kind = "HTTPRoute",
    namespaced,
    status = "ObservedStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct HTTPRouteSpec {
    /// Where the route attaches.
    #[serde(default)]
    pub parent_refs: Vec<ParentReference>,
    /// Host names (exact or `*.` wildcard); empty, the listeners'.
    #[serde(default)]
    pub hostnames: Vec<String>,
    /// The rules; none is one rule matching every request with no backend.
    #[serde(default)]
    pub rules: Vec<HTTPRouteRule>,
}

/// One rule of an HTTPRoute.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct HTTPRouteRule {
    /// The rule's name (shown in logs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Any one of these matches; none matches every request (`PathPrefix /`).
    #[serde(default)]
    pub matches: Vec<HTTPRouteMatch>,
    /// Filters applied to every request of the rule.
    #[serde(default)]
    pub filters: Vec<HTTPRouteFilter>,
    /// Where requests go, by weight.
    #[serde(default)]
    pub backend_refs: Vec<HTTPBackendRef>,
    /// Timeouts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeouts: Option<HTTPRouteTimeouts>,
    /// Retries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<HTTPRouteRetry>,
}

/// Conditions on a request; all must hold.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct HTTPRouteMatch {
    /// The path; unset, `PathPrefix /`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<HTTPPathMatch>,
    /// Headers.
    #[serde(default)]
    pub headers: Vec<ValueMatch>,
    /// Query parameters.
    #[serde(default)]
    pub query_params: Vec<ValueMatch>,
    /// The method.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
}

/// A path condition.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct HTTPPathMatch {
    /// `Exact`, `PathPrefix` (default) or `RegularExpression`.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
    /// The path or pattern; unset, `/`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
}

/// A header or query-parameter condition.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ValueMatch {
    /// `Exact` (default) or `RegularExpression`.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
    /// The header or parameter name.
    #[serde(default)]
    pub name: String,
    /// The value or pattern.
    #[serde(default)]
    pub value: String,
}

/// A filter of a rule or of a backend.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct HTTPRouteFilter {
    /// Which of the fields below applies.
    #[serde(default, rename = "type")]
    pub type_: String,
    /// `RequestHeaderModifier`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_header_modifier: Option<HeaderModifier>,
    /// `ResponseHeaderModifier`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_header_modifier: Option<HeaderModifier>,
    /// `RequestRedirect`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_redirect: Option<RequestRedirect>,
    /// `URLRewrite`.
    #[serde(
        default,
        rename = "urlRewrite",
        skip_serializing_if = "Option::is_none"
    )]
    pub url_rewrite: Option<UrlRewrite>,
    /// `RequestMirror`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_mirror: Option<serde_json::Value>,
    /// `CORS`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cors: Option<serde_json::Value>,
    /// `ExtensionRef`: a Weir `Plugin` (group `weir.dev`, kind `Plugin`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extension_ref: Option<LocalObjectReference>,
}

/// A reference to an object of the same namespace.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct LocalObjectReference {
    /// API group.
    #[serde(default)]
    pub group: String,
    /// Kind.
    #[serde(default)]
    pub kind: String,
    /// Name.
    #[serde(default)]
    pub name: String,
}

/// Header edits.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct HeaderModifier {
    /// Replace (or add) these headers.
    #[serde(default)]
    pub set: Vec<HeaderValue>,
    /// Add a value to these headers.
    #[serde(default)]
    pub add: Vec<HeaderValue>,
    /// Remove these headers.
    #[serde(default)]
    pub remove: Vec<String>,
}

/// A header name and value.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct HeaderValue {
    /// Name.
    #[serde(default)]
    pub name: String,
    /// Value.
    #[serde(default)]
    pub value: String,
}

/// A redirect answered by the gateway.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct RequestRedirect {
    /// `http` or `https`; unset, the request's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheme: Option<String>,
    /// Unset, the request's host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    /// The new path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<PathModifier>,
    /// Unset, the scheme's (or the listener's) port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<i32>,
    /// 301 (default), 302, 303, 307 or 308.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_code: Option<i32>,
}

/// A rewrite of the request sent upstream.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct UrlRewrite {
    /// The `Host` sent upstream.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    /// The path sent upstream.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<PathModifier>,
}

/// A path change.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct PathModifier {
    /// `ReplaceFullPath` or `ReplacePrefixMatch`.
    #[serde(default, rename = "type")]
    pub type_: String,
    /// With `ReplaceFullPath`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replace_full_path: Option<String>,
    /// With `ReplacePrefixMatch`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replace_prefix_match: Option<String>,
}

/// A backend of an HTTPRoute rule.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct HTTPBackendRef {
    /// API group; unset, the core group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// Kind; unset, `Service`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Name.
    #[serde(default)]
    pub name: String,
    /// Namespace; unset, the route's (another needs a ReferenceGrant).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// The Service port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<i32>,
    /// Share of the rule's requests; unset, 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<i32>,
    /// Filters for requests sent to this backend.
    #[serde(default)]
    pub filters: Vec<HTTPRouteFilter>,
}

/// Timeouts of a rule (Gateway API durations such as `10s`, `500ms`, `1h2m`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct HTTPRouteTimeouts {
    /// From the request's start until the response is complete.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<String>,
    /// One try to a backend.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend_request: Option<String>,
}

/// Retries of a rule.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct HTTPRouteRetry {
    /// Statuses retried.
    #[serde(default)]
    pub codes: Vec<i32>,
    /// Most tries after the first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempts: Option<i32>,
    /// Wait between tries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff: Option<String>,
}

/// gRPC routing rules attached to Gateways.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[kube(
    group = "gateway.networking.k8s.io",
    version = "v1",
    kind = "GRPCRoute",
    namespaced,
    status = "ObservedStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct GRPCRouteSpec {
    /// Where the route attaches.
    #[serde(default)]
    pub parent_refs: Vec<ParentReference>,
    /// Host names.
    #[serde(default)]
    pub hostnames: Vec<String>,
    /// The rules.
    #[serde(default)]
    pub rules: Vec<GRPCRouteRule>,
}

/// One rule of a GRPCRoute.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct GRPCRouteRule {
    /// The rule's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Any one of these matches; none matches every call.
    #[serde(default)]
    pub matches: Vec<GRPCRouteMatch>,
    /// Filters.
    #[serde(default)]
    pub filters: Vec<HTTPRouteFilter>,
    /// Where calls go, by weight.
    #[serde(default)]
    pub backend_refs: Vec<HTTPBackendRef>,
}

/// Conditions on a gRPC call.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct GRPCRouteMatch {
    /// Service and method.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<GRPCMethodMatch>,
    /// Headers.
    #[serde(default)]
    pub headers: Vec<ValueMatch>,
}

/// A gRPC service and method condition.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct GRPCMethodMatch {
    /// `Exact` (default) or `RegularExpression`.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
    /// The fully qualified service (`pkg.Service`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<String>,
    /// The method.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
}

/// TLS connections routed by server name, without Weir terminating them (a listener with
/// protocol `TLS` and `tls.mode: Passthrough`).
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[kube(
    group = "gateway.networking.k8s.io",
    version = "v1",
    kind = "TLSRoute",
    namespaced,
    status = "ObservedStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct TLSRouteSpec {
    /// Where the route attaches.
    #[serde(default)]
    pub parent_refs: Vec<ParentReference>,
    /// Server names (exact or `*.` wildcard); empty, the listeners'.
    #[serde(default)]
    pub hostnames: Vec<String>,
    /// The rules (their backends).
    #[serde(default)]
    pub rules: Vec<TLSRouteRule>,
}

/// One rule of a TLSRoute.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct TLSRouteRule {
    /// The rule's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Where connections go, by weight.
    #[serde(default)]
    pub backend_refs: Vec<HTTPBackendRef>,
}

/// How Weir speaks TLS to the Services it targets: the CA to trust and the name to verify.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[kube(
    group = "gateway.networking.k8s.io",
    version = "v1",
    kind = "BackendTLSPolicy",
    namespaced,
    status = "ObservedStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct BackendTLSPolicySpec {
    /// The Services (and optionally their ports, by `sectionName`) the policy applies to.
    #[serde(default)]
    pub target_refs: Vec<PolicyTargetReference>,
    /// How the backend's certificate is verified.
    #[serde(default)]
    pub validation: BackendTLSValidation,
}

/// A policy's target, in the policy's namespace.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct PolicyTargetReference {
    /// API group (`""` for a Service).
    #[serde(default)]
    pub group: String,
    /// Kind (`Service`).
    #[serde(default)]
    pub kind: String,
    /// Name.
    #[serde(default)]
    pub name: String,
    /// A port name of the Service; unset, every port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub section_name: Option<String>,
}

/// A BackendTLSPolicy's `validation`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct BackendTLSValidation {
    /// ConfigMaps (key `ca.crt`) holding the CA certificates to trust.
    #[serde(default)]
    pub ca_certificate_refs: Vec<LocalObjectReference>,
    /// `System`: the well-known public CAs instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub well_known_ca_certificates: Option<String>,
    /// The server name sent (SNI) and, without `subjectAltNames`, verified.
    #[serde(default)]
    pub hostname: String,
    /// Names the certificate may carry instead of `hostname`.
    #[serde(default)]
    pub subject_alt_names: Vec<SubjectAltName>,
}

/// One accepted subject alternative name.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct SubjectAltName {
    /// `Hostname` or `URI`.
    #[serde(default, rename = "type")]
    pub type_: String,
    /// The DNS name, for `Hostname`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    /// The URI, for `URI`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uri: Option<String>,
}

/// Permission for objects of other namespaces to refer to objects of this one.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[kube(
    group = "gateway.networking.k8s.io",
    version = "v1",
    kind = "ReferenceGrant",
    namespaced,
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct ReferenceGrantSpec {
    /// Who may refer.
    #[serde(default)]
    pub from: Vec<ReferenceGrantFrom>,
    /// To what.
    #[serde(default)]
    pub to: Vec<ReferenceGrantTo>,
}

/// The referring side of a ReferenceGrant.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ReferenceGrantFrom {
    /// API group (`""` for the core group).
    #[serde(default)]
    pub group: String,
    /// Kind.
    #[serde(default)]
    pub kind: String,
    /// Namespace.
    #[serde(default)]
    pub namespace: String,
}

/// The referred side of a ReferenceGrant.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ReferenceGrantTo {
    /// API group (`""` for the core group).
    #[serde(default)]
    pub group: String,
    /// Kind.
    #[serde(default)]
    pub kind: String,
    /// Only this object; unset, every object of the kind.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}
