//! Problems found while translating: each names the object, the field and what was wrong,
//! and is reported as an Event, a status condition (Weir's resources), a log line and a metric.

use std::fmt;

use crate::store::Kind;

/// Why an object (or part of it) was not served as written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Reason {
    /// A backend Service does not exist.
    ServiceNotFound,
    /// A BackendTLSPolicy cannot be applied (its CA or host name).
    InvalidBackendTls,
    /// A Gateway's client certificate validation names CA certificates that cannot be used.
    InvalidFrontendTls,
    /// A backend names a port the Service does not have.
    PortNotFound,
    /// A backend is not a Service (resource backends are not supported).
    UnsupportedBackend,
    /// An annotation value is malformed.
    InvalidAnnotation,
    /// An annotation under `weir.dev/` is not one Weir knows.
    UnknownAnnotation,
    /// A referenced Plugin or ClusterPlugin does not exist.
    PluginNotFound,
    /// A Plugin's configuration was rejected by the plugin.
    InvalidPluginConfig,
    /// A referenced Plugin is itself broken.
    PluginNotAccepted,
    /// A TLS, plugin-configuration or credential Secret is missing or unusable.
    InvalidSecret,
    /// Another Ingress already serves this host and path.
    Conflict,
    /// An Upstream resource is missing or invalid.
    InvalidUpstream,
    /// A path is invalid (bad regex, not absolute).
    InvalidPath,
    /// A host is not a DNS name.
    InvalidHost,
    /// A Consumer's username, custom id or group cannot be sent upstream in a header.
    InvalidConsumer,
    /// A valid setting this proxy version does not implement.
    Unsupported,
    /// An ingress-nginx annotation Weir does not apply.
    UnsupportedAnnotation,
    /// The proxy's validation rejected what the translator produced (a translator gap).
    RejectedByProxy,
    /// A reference to another namespace that no ReferenceGrant there allows.
    RefNotPermitted,
}

impl Reason {
    /// The PascalCase reason used in Events and conditions.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::ServiceNotFound => "ServiceNotFound",
            Reason::PortNotFound => "PortNotFound",
            Reason::UnsupportedBackend => "UnsupportedBackend",
            Reason::InvalidBackendTls => "InvalidBackendTLSPolicy",
            Reason::InvalidFrontendTls => "InvalidFrontendTLS",
            Reason::InvalidAnnotation => "InvalidAnnotation",
            Reason::UnknownAnnotation => "UnknownAnnotation",
            Reason::PluginNotFound => "PluginNotFound",
            Reason::InvalidPluginConfig => "InvalidPluginConfig",
            Reason::PluginNotAccepted => "PluginNotAccepted",
            Reason::InvalidSecret => "InvalidSecret",
            Reason::Conflict => "Conflict",
            Reason::InvalidUpstream => "InvalidUpstream",
            Reason::InvalidPath => "InvalidPath",
            Reason::InvalidHost => "InvalidHost",
            Reason::InvalidConsumer => "InvalidConsumer",
            Reason::Unsupported => "Unsupported",
            Reason::UnsupportedAnnotation => "UnsupportedAnnotation",
            Reason::RejectedByProxy => "RejectedByProxy",
            Reason::RefNotPermitted => "RefNotPermitted",
        }
    }
}

/// The object a problem is about.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectRef {
    /// Kind.
    pub kind: Kind,
    /// Namespace (none for cluster-scoped kinds).
    pub namespace: Option<String>,
    /// Name.
    pub name: String,
}

impl fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{} {ns}/{}", self.kind.as_str(), self.name),
            None => write!(f, "{} {}", self.kind.as_str(), self.name),
        }
    }
}

/// One problem.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Problem {
    /// The object at fault.
    pub object: ObjectRef,
    /// Why.
    pub reason: Reason,
    /// The offending field, e.g. `spec.rules[0].http.paths[1].backend.service.name`.
    pub field: String,
    /// What was wrong, what was expected, and what was left out.
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {}: {}: {}",
            self.object,
            self.field,
            self.reason.as_str(),
            self.message
        )
    }
}
