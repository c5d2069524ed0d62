//! Weir's controller: Kubernetes objects (from the API or a folder of manifests) → the proxy's
//! routing table, with every problem reported on the object that causes it.

pub mod cluster;
pub mod manifests;
pub mod nginx;
pub mod problem;
pub mod standalone;
pub mod store;
pub mod to_gateway_api;
pub mod translate;

pub use problem::{ObjectRef, Problem, Reason};
pub use store::{Key, Kind, Object, Store};
pub use translate::{translate, Options, Translation};
