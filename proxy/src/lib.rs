//! Weir's data plane.
//!
//! A routing table ([`config::Config`]) is validated and compiled ([`compile::Runtime`]) into a
//! router, per-route plugin chains and balancers, then swapped atomically into a running
//! [`server::Proxy`]. Requests go through Kong's phases ([`pipeline`]) with plugins
//! ([`plugins`]) and are forwarded over pooled upstream connections ([`upstream`]).
//!
//! This crate knows routing tables, not Kubernetes.
//!
//! The modules form layers, each naming only those below it (`tests/layers.rs` checks it):
//!
//! 1. `config` (the routing table's types, shared with the controller), `grpc`, `timer`, `wire`;
//! 2. `router`, `balancer`, `tls`, `consumers`, then `redis`, `metrics`;
//! 3. `upstream` (connections, pools, DNS), then `health`;
//! 4. `pipeline` (the request context, the plugin interface and the phase loops), then
//!    `plugins` (the built-in plugins);
//! 5. `validate` (a table's checks), then `compile` (a table made ready to serve);
//! 6. `access_log`, `server` (connections and the request session), `admin`, and `process`
//!    (listeners, workers, signals, drain) on top.

pub(crate) mod access_log;
pub mod admin;
pub mod balancer;
pub mod compile;
pub mod config;
pub mod consumers;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
pub mod grpc;
pub mod health;
pub mod metrics;
pub mod pipeline;
pub mod plugins;
pub mod process;
pub mod redis;
pub mod router;
pub mod server;
pub(crate) mod timer;
pub mod tls;
pub mod upstream;
pub mod validate;
pub(crate) mod wire;

pub use config::Config;
pub use plugins::Registry;
pub use server::{Proxy, ProxyOptions};
