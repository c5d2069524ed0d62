//! The plugin framework: the [`Plugin`] trait (one method per phase), the [`PluginFactory`]
//! trait (one per plugin kind: validation, instances, shared state, lifecycle), the
//! [`Registry`] that lists every kind and keeps instances across routing-table swaps, and the
//! built-in plugins.
//!
//! An instance is built from its JSON `config` by its factory, once per distinct configuration,
//! and shared by every request; per-request state lives in the request context's `slots`
//! ([`RequestCtx::slots`](crate::pipeline::RequestCtx::slots)). Field names follow Kong's
//! plugin schemas so a KongPlugin's `config` carries over unchanged.
//! `docs/plugins/writing.md` is the guide for plugin authors.

mod auth;
mod context_path;
mod cookie_rewrite;
mod correlation_id;
mod cors;
#[cfg(any(test, feature = "test-plugins"))]
pub mod example;
mod factory;
mod forward_auth;
mod grpc_web;
mod ip_restriction;
mod location_rewrite;
mod params;
mod rate_limiting;
mod redirect;
mod registry;
mod request_size_limiting;
mod request_termination;
mod rewrite;
#[cfg(any(test, feature = "test-plugins"))]
mod testing;
mod transformer;

pub use crate::pipeline::plugin::{
    clean_upstream_path, parse_config, set_upstream_target, upstream_target, BodyChunk,
    EarlyResponse, Flow, Handled, PhaseFuture, Plugin, PluginError, PluginInstance, RequestHead,
    ResponseHead, Step,
};
pub use factory::{PluginFactory, Simple};
pub use registry::{Registry, Staged};
