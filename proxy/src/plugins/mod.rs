//! The plugin framework: the [`Plugin`] trait (one method per phase), the registry that builds
//! plugins from validated configuration, and the built-in plugins.
//!
//! A plugin is built once per routing table from its JSON `config` and then shared by every
//! request; per-request state lives in [`RequestCtx::slots`]. Field names follow Kong's plugin
//! schemas so a KongPlugin's `config` carries over unchanged.

mod correlation_id;
mod registry;
mod request_termination;
mod testing;

use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, StatusCode};

use crate::pipeline::{LogRecord, RequestCtx};

pub use registry::{PluginSpec, Registry};

/// What the pipeline does after a plugin's `rewrite` or `access` handler.
#[derive(Debug)]
pub enum Flow {
    /// Go on with the next plugin.
    Continue,
    /// Answer the client with this response instead of proxying (a short-circuit).
    Respond(EarlyResponse),
}

/// A response produced by the proxy itself (a plugin's short-circuit or an error).
#[derive(Debug, Clone)]
pub struct EarlyResponse {
    /// Status code.
    pub status: StatusCode,
    /// Headers to send (`Content-Type` included).
    pub headers: HeaderMap,
    /// The whole body.
    pub body: Bytes,
}

impl EarlyResponse {
    /// A JSON body `{"message": …}`, the shape Kong clients expect from the gateway.
    pub fn message(status: StatusCode, message: &str) -> EarlyResponse {
        let body = serde_json::to_vec(&serde_json::json!({ "message": message }))
            .expect("a string always serialises");
        EarlyResponse::with_body(status, "application/json; charset=utf-8", body.into())
    }

    /// A body with an explicit content type.
    pub fn with_body(status: StatusCode, content_type: &str, body: Bytes) -> EarlyResponse {
        let mut headers = HeaderMap::new();
        if let Ok(v) = HeaderValue::from_str(content_type) {
            headers.insert(http::header::CONTENT_TYPE, v);
        }
        EarlyResponse {
            status,
            headers,
            body,
        }
    }
}

/// A failure inside a plugin; the request is answered with 500 and the chain goes on.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct PluginError(pub String);

/// One chunk of a response body as seen by `body_filter`.
#[derive(Debug)]
pub struct BodyChunk {
    /// The bytes about to be sent; a plugin may replace them (or empty them to buffer).
    pub data: Bytes,
    /// Whether this is the last chunk.
    pub eof: bool,
}

/// A request head a plugin may inspect and change before it is forwarded.
pub type RequestHead = http::request::Parts;
/// A response head a plugin may inspect and change before it is sent.
pub type ResponseHead = http::response::Parts;

/// A plugin: one small method per phase, each a no-op unless overridden.
///
/// Handlers run in priority order (higher first). `rewrite` runs for global plugins only,
/// before a route is known. If an `access` handler returns [`Flow::Respond`], later plugins'
/// `access` handlers are skipped but every plugin's `header_filter`, `body_filter` and `log`
/// still run. An `Err` (or a panic) in `rewrite`/`access` becomes a 500 the same way.
pub trait Plugin: Send + Sync + 'static {
    /// Before routing; only for global plugins.
    fn rewrite(&self, _ctx: &mut RequestCtx, _req: &mut RequestHead) -> Result<Flow, PluginError> {
        Ok(Flow::Continue)
    }

    /// After routing, before the request is forwarded: authenticate, limit, transform, answer.
    fn access(&self, _ctx: &mut RequestCtx, _req: &mut RequestHead) -> Result<Flow, PluginError> {
        Ok(Flow::Continue)
    }

    /// When the response head is known (from the upstream or a short-circuit).
    fn header_filter(
        &self,
        _ctx: &mut RequestCtx,
        _resp: &mut ResponseHead,
    ) -> Result<(), PluginError> {
        Ok(())
    }

    /// For every response body chunk; only called when [`Plugin::filters_body`] is true.
    fn body_filter(
        &self,
        _ctx: &mut RequestCtx,
        _chunk: &mut BodyChunk,
    ) -> Result<(), PluginError> {
        Ok(())
    }

    /// Whether `body_filter` should be called (bodies stream untouched otherwise).
    fn filters_body(&self) -> bool {
        false
    }

    /// After the last byte was sent (or the client went away).
    fn log(&self, _ctx: &RequestCtx, _record: &LogRecord) {}
}

/// A configured plugin ready to run.
#[derive(Clone)]
pub struct PluginInstance {
    /// The plugin's registered name.
    pub name: &'static str,
    /// The id of its configuration entity.
    pub id: Arc<str>,
    /// Effective priority (higher runs first).
    pub priority: i32,
    /// The plugin itself.
    pub plugin: Arc<dyn Plugin>,
}

impl std::fmt::Debug for PluginInstance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}({}, {})", self.name, self.id, self.priority)
    }
}

/// Deserialises a plugin's `config`, naming the offending field on error.
pub fn parse_config<T: serde::de::DeserializeOwned>(
    config: &serde_json::Value,
) -> Result<T, String> {
    serde_path_to_error::deserialize(config).map_err(|e| {
        let path = e.path().to_string();
        if path == "." {
            e.inner().to_string()
        } else {
            format!("{path}: {}", e.inner())
        }
    })
}
