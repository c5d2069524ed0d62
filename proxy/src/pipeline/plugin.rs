//! The plugin interface: the [`Plugin`] trait (one method per phase), what its handlers
//! return ([`Step`], [`Flow`], [`EarlyResponse`]), a configured [`PluginInstance`], and the
//! helpers plugins share. It lives beside the pipeline that drives it, below the built-in
//! plugins (the `plugins` module), which implement it and re-export it.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, StatusCode};

use super::{LogRecord, RequestCtx};

/// A boxed future a phase handler (or a factory's `stop`) returns when it has to wait.
pub type PhaseFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What a handler of a phase that may wait (`rewrite`, `access`, `request_body`) returns: its
/// result now, or a future the pipeline awaits.
///
/// A handler that never waits returns [`Step::Ready`]: no allocation, no extra poll. Only a
/// handler that does I/O pays for the box of [`Step::wait`].
pub enum Step<'a, T> {
    /// The handler finished without waiting.
    Ready(T),
    /// The handler waits for I/O; the pipeline awaits this future before the next plugin.
    Wait(PhaseFuture<'a, T>),
}

impl<'a, T> Step<'a, T> {
    /// Wraps an `async` block (it may borrow the handler's arguments).
    pub fn wait(f: impl Future<Output = T> + Send + 'a) -> Step<'a, T> {
        Step::Wait(Box::pin(f))
    }
}

/// The result of a `rewrite`, `access` or `request_body` handler.
pub type Handled<'a> = Step<'a, Result<Flow, PluginError>>;

impl From<Flow> for Handled<'_> {
    fn from(flow: Flow) -> Self {
        Step::Ready(Ok(flow))
    }
}

impl From<Result<Flow, PluginError>> for Handled<'_> {
    fn from(r: Result<Flow, PluginError>) -> Self {
        Step::Ready(r)
    }
}

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

/// One chunk of a body as seen by `request_body` and `body_filter`.
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
/// still run. An `Err` (or a panic, also inside a returned future) in `rewrite`, `access` or
/// `request_body` becomes a 500 the same way.
///
/// `rewrite`, `access` and `request_body` may wait for I/O by returning [`Step::wait`];
/// `header_filter`, `body_filter` and `log` run synchronously (as in Kong: no socket calls
/// there); a `log` handler that ships lines elsewhere hands them to a task its factory owns.
pub trait Plugin: Send + Sync + 'static {
    /// Before routing; only for global plugins.
    fn rewrite<'a>(&'a self, _ctx: &'a mut RequestCtx, _req: &'a mut RequestHead) -> Handled<'a> {
        Flow::Continue.into()
    }

    /// After routing, before the request is forwarded: authenticate, limit, transform, answer.
    fn access<'a>(&'a self, _ctx: &'a mut RequestCtx, _req: &'a mut RequestHead) -> Handled<'a> {
        Flow::Continue.into()
    }

    /// Whether [`Plugin::body_before_access`] can ever be true for this instance (asked once).
    fn may_need_body_before_access(&self) -> bool {
        false
    }

    /// Whether this request's whole body must be read before `access` (a plugin that decides
    /// on it, as `key-auth` with `key_in_body`); `access` then finds it in
    /// [`RequestCtx::request_body`], bounded by `--max-buffered-body`.
    fn body_before_access(&self, _req: &RequestHead) -> bool {
        false
    }

    /// Whether `request_body` should be called (request bodies stream untouched otherwise).
    fn reads_request_body(&self) -> bool {
        false
    }

    /// For a plugin that [reads request bodies](Plugin::reads_request_body): whether this
    /// request's body is one it needs (asked after `access`). A request no plugin needs the
    /// body of streams as if none read bodies.
    fn wants_request_body(&self, _ctx: &RequestCtx) -> bool {
        true
    }

    /// For every request body chunk, after `access` and before the request is forwarded; only
    /// called when [`Plugin::reads_request_body`] is true. The plugin may replace the chunk's
    /// bytes (empty them to drop them) or stop the request with [`Flow::Respond`].
    fn request_body<'a>(
        &'a self,
        _ctx: &'a mut RequestCtx,
        _chunk: &'a mut BodyChunk,
    ) -> Handled<'a> {
        Flow::Continue.into()
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

    /// When the upstream's response trailers arrive (HTTP/2, gRPC), after `body_filter` saw
    /// the last chunk (`eof`); only called when [`Plugin::filters_body`] is true. The plugin
    /// may edit or empty the trailers (an empty map sends none) and return bytes to send as
    /// the body's last chunk, before the trailers (gRPC-Web carries its trailers so).
    fn trailers_filter(
        &self,
        _ctx: &mut RequestCtx,
        _trailers: &mut HeaderMap,
    ) -> Result<Option<Bytes>, PluginError> {
        Ok(None)
    }

    /// Whether the plugin identifies consumers (`key-auth`, `jwt`, …): a table with one strips
    /// client-sent identity headers (`X-Consumer-ID`, …) from every request.
    fn authenticates(&self) -> bool {
        false
    }

    /// Which kind of access rule the plugin is, for routes that let a request through when
    /// either kind allows it (`satisfy: any`): by default, an authentication plugin's
    /// [`AccessRule::Credentials`] and nothing otherwise.
    fn access_rule(&self) -> Option<AccessRule> {
        self.authenticates().then_some(AccessRule::Credentials)
    }

    /// Exactly once per request, when it ends for any reason: after the last byte was sent,
    /// after an error, or when the client went away (status 499 if no response had started).
    fn log(&self, _ctx: &RequestCtx, _record: &LogRecord) {}
}

/// The two kinds of access rule nginx's `satisfy` chooses between.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AccessRule {
    /// Who the client is by its address (`ip-restriction`).
    Source,
    /// Who the client is by what it presents (`basic-auth`, `key-auth`, `forward-auth`, …).
    Credentials,
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
    /// [`Plugin::filters_body`], asked once when the instance was built.
    pub filters_body: bool,
    /// [`Plugin::reads_request_body`], asked once when the instance was built.
    pub reads_request_body: bool,
    /// [`Plugin::may_need_body_before_access`], asked once when the instance was built.
    pub body_before_access: bool,
    /// [`Plugin::access_rule`], asked once when the instance was built.
    pub access_rule: Option<AccessRule>,
    /// The namespace whose consumers the plugin may find ([`PluginConfig::namespace`]).
    ///
    /// [`PluginConfig::namespace`]: crate::config::PluginConfig::namespace
    pub namespace: Option<Arc<str>>,
}

impl PluginInstance {
    /// An instance of `plugin` under the configuration entity `id`.
    pub fn new(name: &'static str, id: &str, priority: i32, plugin: Arc<dyn Plugin>) -> Self {
        PluginInstance {
            name,
            id: id.into(),
            priority,
            filters_body: plugin.filters_body(),
            reads_request_body: plugin.reads_request_body(),
            body_before_access: plugin.may_need_body_before_access(),
            access_rule: plugin.access_rule(),
            namespace: None,
            plugin,
        }
    }
}

impl std::fmt::Debug for PluginInstance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}({}, {})", self.name, self.id, self.priority)
    }
}

/// The path and query the upstream gets as plugins have left them so far: the rewrite of an
/// earlier plugin ([`RequestCtx::upstream_uri`]) or else the routed (normalised) request path
/// and its query.
pub fn upstream_target<'a>(
    ctx: &'a RequestCtx,
    req: &'a RequestHead,
) -> (&'a str, Option<&'a str>) {
    match ctx.upstream_uri.as_deref() {
        Some(uri) => match uri.split_once('?') {
            Some((path, query)) => (path, Some(query)),
            None => (uri, None),
        },
        None => (req.uri.path(), req.uri.query()),
    }
}

/// Sets the path and query the upstream gets: on [`RequestCtx::upstream_uri`] when an earlier
/// plugin set one (the route's path handling is then already done), on the request's own URI
/// otherwise (strip_path and the service path still apply).
pub fn set_upstream_target(
    ctx: &mut RequestCtx,
    req: &mut RequestHead,
    target: String,
) -> Result<(), PluginError> {
    if ctx.upstream_uri.is_some() {
        ctx.upstream_uri = Some(target);
        return Ok(());
    }
    let mut parts = req.uri.clone().into_parts();
    parts.path_and_query = Some(
        target
            .parse()
            .map_err(|_| PluginError(format!("upstream target {target:?} is invalid")))?,
    );
    req.uri = http::Uri::from_parts(parts)
        .map_err(|e| PluginError(format!("upstream target {target:?}: {e}")))?;
    Ok(())
}

/// Checks a path a plugin built for the upstream (`rewrite`, `context-path`): a leading `//`
/// becomes `/` (an upstream, or a redirect built from the path, could read `//host/x` as
/// another host), and a `.` or `..` segment, percent-encoded or not, is refused: the upstream
/// would resolve it to a path Weir never routed.
pub fn clean_upstream_path(path: &str) -> Result<&str, PluginError> {
    let trimmed = match path.strip_prefix("//") {
        Some(_) => &path[path.len() - path.trim_start_matches('/').len() - 1..],
        None => path,
    };
    let dot = |seg: &str| {
        let lower = seg.to_ascii_lowercase().replace("%2e", ".");
        lower == "." || lower == ".."
    };
    if trimmed.split('/').any(dot) {
        return Err(PluginError(format!(
            "the upstream path {path:?} has a dot segment"
        )));
    }
    Ok(trimmed)
}

/// Deserialises a plugin's `config`, naming the offending field on error.
pub fn parse_config<T: serde::de::DeserializeOwned>(
    config: &serde_json::Value,
) -> Result<T, String> {
    serde_path_to_error::deserialize(config).map_err(crate::config::path_error)
}

#[cfg(test)]
mod tests {
    use super::clean_upstream_path;

    #[test]
    fn upstream_paths_built_by_plugins_are_cleaned() {
        assert_eq!(clean_upstream_path("/a/b").unwrap(), "/a/b");
        assert_eq!(clean_upstream_path("//evil/x").unwrap(), "/evil/x");
        assert_eq!(clean_upstream_path("///x").unwrap(), "/x");
        assert_eq!(clean_upstream_path("/a//b").unwrap(), "/a//b");
        assert_eq!(clean_upstream_path("/...json").unwrap(), "/...json");
        for bad in [
            "/users/../profile",
            "/a/./b",
            "/a/%2e%2E/b",
            "/.%2e",
            "/a/..",
            "//../x",
        ] {
            assert!(clean_upstream_path(bad).is_err(), "{bad}");
        }
    }
}
