//! The status the Gateway API asks for, computed by the translator: the same document is
//! written to the API server by the leader and shown by the admin API in standalone mode.

use std::collections::BTreeMap;

use serde::Serialize;
use weir_crds::gateway::{ParentReference, RouteGroupKind};

/// One condition (`type`, `status`, `reason`, `message`), as Kubernetes writes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Cond {
    /// Condition type (`Accepted`, `Programmed`, …).
    #[serde(rename = "type")]
    pub type_: &'static str,
    /// `True` or `False`.
    pub status: &'static str,
    /// A CamelCase reason from the spec.
    pub reason: String,
    /// What a person should know.
    pub message: String,
}

impl Cond {
    /// A condition that holds.
    pub fn yes(type_: &'static str, reason: &str) -> Cond {
        Cond {
            type_,
            status: "True",
            reason: reason.to_string(),
            message: String::new(),
        }
    }

    /// A condition that does not hold, and why.
    pub fn no(type_: &'static str, reason: &str, message: impl Into<String>) -> Cond {
        Cond {
            type_,
            status: "False",
            reason: reason.to_string(),
            message: message.into(),
        }
    }

    /// A condition that holds, with a message (`Conflicted: True`).
    pub fn yes_because(type_: &'static str, reason: &str, message: impl Into<String>) -> Cond {
        Cond {
            message: message.into(),
            ..Cond::yes(type_, reason)
        }
    }

    /// Whether the condition holds.
    pub fn holds(&self) -> bool {
        self.status == "True"
    }
}

/// A GatewayClass's status.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClassStatus {
    /// `metadata.generation` the conditions describe.
    pub observed_generation: Option<i64>,
    /// `Accepted`, `SupportedVersion`.
    pub conditions: Vec<Cond>,
    /// The conformance features Weir supports.
    pub supported_features: Vec<&'static str>,
}

/// A Gateway's status.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GatewayStatus {
    /// `metadata.generation` the conditions describe.
    pub observed_generation: Option<i64>,
    /// `Accepted`, `Programmed`.
    pub conditions: Vec<Cond>,
    /// One per listener, in spec order.
    pub listeners: Vec<ListenerStatus>,
}

/// One listener's status.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ListenerStatus {
    /// The listener's name.
    pub name: String,
    /// The route kinds that may attach.
    pub supported_kinds: Vec<RouteGroupKind>,
    /// Routes attached and accepted.
    pub attached_routes: i32,
    /// `Accepted`, `Programmed`, `ResolvedRefs`, `Conflicted`.
    pub conditions: Vec<Cond>,
}

/// A route's status for one of its parents.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RouteParentStatus {
    /// The parent reference as the route wrote it.
    pub parent_ref: ParentReference,
    /// Always Weir's gateway controller name.
    pub controller_name: &'static str,
    /// `Accepted`, `ResolvedRefs`.
    pub conditions: Vec<Cond>,
}

/// A route's status: one entry per parent that is Weir's.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RouteStatus {
    /// `metadata.generation` the conditions describe.
    pub observed_generation: Option<i64>,
    /// Per parent.
    pub parents: Vec<RouteParentStatus>,
}

/// Everything of the Gateway API a translation decided, keyed by `namespace/name` (classes by
/// name).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Status {
    /// GatewayClasses naming Weir's controller.
    pub gateway_classes: BTreeMap<String, ClassStatus>,
    /// Gateways of those classes.
    pub gateways: BTreeMap<String, GatewayStatus>,
    /// HTTPRoutes with a parent that is Weir's.
    #[serde(rename = "httpRoutes")]
    pub http_routes: BTreeMap<String, RouteStatus>,
    /// GRPCRoutes with a parent that is Weir's.
    #[serde(rename = "grpcRoutes")]
    pub grpc_routes: BTreeMap<String, RouteStatus>,
    /// TLSRoutes with a parent that is Weir's.
    #[serde(rename = "tlsRoutes")]
    pub tls_routes: BTreeMap<String, RouteStatus>,
    /// BackendTLSPolicies that routes of Weir's Gateways met.
    #[serde(rename = "backendTLSPolicies")]
    pub backend_tls_policies: BTreeMap<String, PolicyStatus>,
}

/// A policy's status: one entry per Gateway of Weir's whose routes it applies to.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyStatus {
    /// `metadata.generation` the conditions describe.
    pub observed_generation: Option<i64>,
    /// Per Gateway.
    pub ancestors: Vec<PolicyAncestorStatus>,
}

/// A policy's status for one Gateway.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyAncestorStatus {
    /// The Gateway.
    pub ancestor_ref: ParentReference,
    /// Always Weir's gateway controller name.
    pub controller_name: &'static str,
    /// `Accepted`, `ResolvedRefs`.
    pub conditions: Vec<Cond>,
}

impl Status {
    /// Whether nothing of the Gateway API is Weir's.
    pub fn is_empty(&self) -> bool {
        self.gateway_classes.is_empty()
            && self.gateways.is_empty()
            && self.http_routes.is_empty()
            && self.grpc_routes.is_empty()
            && self.tls_routes.is_empty()
    }
}
