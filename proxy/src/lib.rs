//! Weir's data plane.
//!
//! A routing table ([`config::Config`]) is validated and compiled ([`compile::Runtime`]) into a
//! router, per-route plugin chains and balancers, then swapped atomically into a running
//! [`server::Proxy`]. Requests go through Kong's phases ([`pipeline`]) with plugins
//! ([`plugins`]) and are forwarded over pooled upstream connections ([`upstream`]).
//!
//! This crate knows routing tables, not Kubernetes.

pub(crate) mod access_log;
pub mod admin;
pub mod balancer;
pub mod compile;
pub mod config;
pub mod consumers;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
pub mod health;
pub mod metrics;
pub mod pipeline;
pub mod plugins;
pub mod redis;
pub mod router;
pub mod server;
pub(crate) mod timer;
pub mod tls;
pub mod upstream;
pub(crate) mod wire;

pub use config::Config;
pub use plugins::Registry;
pub use server::{Proxy, ProxyOptions};
