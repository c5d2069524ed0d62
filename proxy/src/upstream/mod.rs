//! Talking to upstream targets: a per-worker connection pool and the streamed request body.

mod body;
mod pool;

pub use body::{BodyStats, UpstreamBody};
pub use pool::{checkout, Conn, ConnectError, PoolKey, SendError};
