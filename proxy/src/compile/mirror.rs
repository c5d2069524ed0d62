//! A route's mirrors, compiled, and the draw that picks which of them copy a request.

use super::CompiledRoute;

/// One mirror of a compiled route.
#[derive(Debug, Clone)]
pub struct CompiledMirror {
    /// The mirror service's index.
    pub service: usize,
    /// The share of requests copied, in millionths (1,000,000: every request).
    pub per_million: u32,
    /// The copy's `Host`, when the mirror sets one.
    pub host: Option<http::HeaderValue>,
    /// The copy carries the request's body.
    pub body: bool,
}

/// The mirrors of `route` that copy this request (each drawn by its share).
pub fn chosen(route: &CompiledRoute) -> Vec<CompiledMirror> {
    route
        .mirrors
        .iter()
        .filter(|m| m.per_million >= 1_000_000 || fastrand::u32(0..1_000_000) < m.per_million)
        .cloned()
        .collect()
}
