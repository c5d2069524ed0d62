//! Plugins that exist only to let Weir's end-to-end tests observe the phase pipeline from
//! outside the process. They are compiled in only with the `test-plugins` cargo feature, which
//! the workspace enables for test builds alone.

mod lifecycle;
mod waiting;

use std::collections::BTreeSet;
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use http::{HeaderValue, StatusCode};
use serde::Deserialize;

use super::{
    parse_config, BodyChunk, EarlyResponse, Flow, Handled, Plugin, PluginError, PluginFactory,
    RequestHead, ResponseHead, Simple,
};
use crate::pipeline::{LogRecord, RequestCtx};

/// Every test plugin kind, and the guide's example plugin.
pub(super) fn factories() -> Vec<Arc<dyn PluginFactory>> {
    vec![
        simple("test-phases", 500, build_phases),
        simple("test-phases-2", 499, build_phases),
        simple("test-phases-3", 498, build_phases),
        simple("test-panic", 400, build_panic),
        simple("test-body", 300, build_body),
        simple("test-counter", 600, build_counter),
        simple("test-set-target", 450, build_set_target),
        simple("test-log-tries", 590, build_log_tries),
        Arc::new(waiting::AWAIT),
        simple("test-request-body", 450, waiting::build_request_body),
        Arc::new(lifecycle::Lifecycle::default()),
        Arc::new(super::example::FACTORY),
    ]
}

fn simple(
    name: &'static str,
    priority: i32,
    build: fn(&serde_json::Value) -> Result<Arc<dyn Plugin>, String>,
) -> Arc<dyn PluginFactory> {
    Arc::new(Simple {
        name,
        priority,
        build,
    })
}

/// Records which phases ran: `x-test-rewrite` and `x-test-access` on the forwarded request,
/// `x-test-header-filter` on the response, and a JSON line per request in `log_file`. With
/// `respond`, short-circuits in access. Registered three times (`test-phases`, `-2`, `-3`) so
/// one route can carry several.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Phases {
    tag: String,
    #[serde(default)]
    respond: Option<u16>,
    #[serde(default)]
    log_file: Option<String>,
}

/// Tags whose access handler ran in this request.
#[derive(Default, Clone)]
struct Ran(BTreeSet<String>);

fn build_phases(c: &serde_json::Value) -> Result<Arc<dyn Plugin>, String> {
    Ok(Arc::new(parse_config::<Phases>(c)?))
}

impl Phases {
    fn run_access(&self, ctx: &mut RequestCtx, req: &mut RequestHead) -> Result<Flow, PluginError> {
        ctx.slots
            .get_or_insert_default::<Ran>()
            .0
            .insert(self.tag.clone());
        if let Ok(v) = HeaderValue::from_str(&self.tag) {
            req.headers.append("x-test-access", v);
        }
        match self.respond {
            Some(code) => {
                let status = StatusCode::from_u16(code).map_err(|e| PluginError(e.to_string()))?;
                Ok(Flow::Respond(EarlyResponse::message(
                    status,
                    &format!("stopped by {}", self.tag),
                )))
            }
            None => Ok(Flow::Continue),
        }
    }
}

impl Plugin for Phases {
    fn rewrite<'a>(&'a self, _ctx: &'a mut RequestCtx, req: &'a mut RequestHead) -> Handled<'a> {
        if let Ok(v) = HeaderValue::from_str(&self.tag) {
            req.headers.append("x-test-rewrite", v);
        }
        Flow::Continue.into()
    }

    fn access<'a>(&'a self, ctx: &'a mut RequestCtx, req: &'a mut RequestHead) -> Handled<'a> {
        self.run_access(ctx, req).into()
    }

    fn header_filter(
        &self,
        _ctx: &mut RequestCtx,
        resp: &mut ResponseHead,
    ) -> Result<(), PluginError> {
        if let Ok(v) = HeaderValue::from_str(&self.tag) {
            resp.headers.append("x-test-header-filter", v);
        }
        Ok(())
    }

    fn log(&self, ctx: &RequestCtx, record: &LogRecord) {
        let Some(path) = &self.log_file else { return };
        let ran = ctx
            .slots
            .get::<Ran>()
            .is_some_and(|r| r.0.contains(&self.tag));
        let line = serde_json::json!({"tag": self.tag, "access": ran, "status": record.status, "path": record.path, "aborted": record.aborted});
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
        {
            let _ = writeln!(f, "{line}");
        }
    }
}

/// A canary in miniature: a request carrying `x-test-target: PORT` is sent to 127.0.0.1:PORT
/// through [`RequestCtx::set_target`]; every response gets `x-test-tries` (the tries the
/// balancer made, as plugins read them) and `x-test-targets` (their targets).
struct SetTarget;

fn build_set_target(_: &serde_json::Value) -> Result<Arc<dyn Plugin>, String> {
    Ok(Arc::new(SetTarget))
}

impl Plugin for SetTarget {
    fn access<'a>(&'a self, ctx: &'a mut RequestCtx, req: &'a mut RequestHead) -> Handled<'a> {
        let port = req
            .headers
            .get("x-test-target")
            .and_then(|v| v.to_str().ok()?.parse::<u16>().ok());
        match port {
            Some(p) => ctx
                .set_target("127.0.0.1", p)
                .map(|()| Flow::Continue)
                .map_err(PluginError)
                .into(),
            None => Ok(Flow::Continue).into(),
        }
    }

    fn header_filter(
        &self,
        ctx: &mut RequestCtx,
        resp: &mut ResponseHead,
    ) -> Result<(), PluginError> {
        resp.headers
            .insert("x-test-tries", HeaderValue::from(ctx.tries.len()));
        let targets: Vec<&str> = ctx.tries.iter().map(|t| &*t.target).collect();
        if let Ok(v) = HeaderValue::from_str(&targets.join(",")) {
            resp.headers.insert("x-test-targets", v);
        }
        Ok(())
    }
}

/// Appends, in the `log` phase, a JSON line per request to `log_file`: its path, the status
/// sent and every try the balancer made as plugins read them (`RequestCtx::tries`: target,
/// error, status, ms).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LogTries {
    log_file: String,
}

fn build_log_tries(c: &serde_json::Value) -> Result<Arc<dyn Plugin>, String> {
    Ok(Arc::new(parse_config::<LogTries>(c)?))
}

impl Plugin for LogTries {
    fn log(&self, ctx: &RequestCtx, record: &LogRecord) {
        let line = serde_json::json!({
            "path": record.path,
            "status": record.status,
            "count": ctx.tries.len(),
            "tries": ctx.tries,
        });
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log_file)
        {
            let _ = writeln!(f, "{line}");
        }
    }
}

/// Panics in the named phase (`rewrite`, `access`, `header_filter`, `body_filter`, `log`), or
/// returns an error there with `error: true`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Panic {
    phase: String,
    #[serde(default)]
    error: bool,
}

fn build_panic(c: &serde_json::Value) -> Result<Arc<dyn Plugin>, String> {
    let p: Panic = parse_config(c)?;
    if ![
        "rewrite",
        "access",
        "request_body",
        "header_filter",
        "body_filter",
        "log",
    ]
    .contains(&p.phase.as_str())
    {
        return Err(format!("phase: unknown phase {:?}", p.phase));
    }
    Ok(Arc::new(p))
}

impl Panic {
    fn fail(&self, phase: &str) -> Result<(), PluginError> {
        if self.phase != phase {
            Ok(())
        } else if self.error {
            Err(PluginError(format!("test-panic: error in {phase}")))
        } else {
            panic!("test-panic: panic in {phase}")
        }
    }
}

impl Plugin for Panic {
    fn rewrite<'a>(&'a self, _ctx: &'a mut RequestCtx, _req: &'a mut RequestHead) -> Handled<'a> {
        self.fail("rewrite").map(|_| Flow::Continue).into()
    }
    fn access<'a>(&'a self, _ctx: &'a mut RequestCtx, _req: &'a mut RequestHead) -> Handled<'a> {
        self.fail("access").map(|_| Flow::Continue).into()
    }
    fn reads_request_body(&self) -> bool {
        self.phase == "request_body"
    }
    fn request_body<'a>(
        &'a self,
        _ctx: &'a mut RequestCtx,
        _chunk: &'a mut BodyChunk,
    ) -> Handled<'a> {
        self.fail("request_body").map(|_| Flow::Continue).into()
    }
    fn header_filter(
        &self,
        _ctx: &mut RequestCtx,
        _resp: &mut ResponseHead,
    ) -> Result<(), PluginError> {
        self.fail("header_filter")
    }
    fn body_filter(
        &self,
        _ctx: &mut RequestCtx,
        _chunk: &mut BodyChunk,
    ) -> Result<(), PluginError> {
        self.fail("body_filter")
    }
    fn filters_body(&self) -> bool {
        self.phase == "body_filter"
    }
    fn log(&self, _ctx: &RequestCtx, _record: &LogRecord) {
        let _ = self.fail("log");
    }
}

/// Replaces the whole response body: buffers every chunk, emits `prefix` + the byte count of
/// the original body at `eof`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Body {
    prefix: String,
}

#[derive(Default, Clone)]
struct Seen(BytesMut);

fn build_body(c: &serde_json::Value) -> Result<Arc<dyn Plugin>, String> {
    Ok(Arc::new(parse_config::<Body>(c)?))
}

impl Plugin for Body {
    fn header_filter(
        &self,
        _ctx: &mut RequestCtx,
        resp: &mut ResponseHead,
    ) -> Result<(), PluginError> {
        resp.headers.remove(http::header::CONTENT_LENGTH);
        Ok(())
    }
    fn filters_body(&self) -> bool {
        true
    }
    fn body_filter(&self, ctx: &mut RequestCtx, chunk: &mut BodyChunk) -> Result<(), PluginError> {
        let seen = ctx.slots.get_or_insert_default::<Seen>();
        seen.0.extend_from_slice(&chunk.data);
        chunk.data = Bytes::new();
        if chunk.eof {
            chunk.data = Bytes::from(format!("{}{}", self.prefix, seen.0.len()));
        }
        Ok(())
    }
}

/// Counts the requests its instance served: `x-test-instance` (a number unique to the
/// instance) and `x-test-count` on every response. Shows whether a push kept the instance.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CounterConf {
    #[allow(dead_code)]
    tag: String,
}

struct Counter {
    instance: u64,
    served: AtomicU64,
}

static INSTANCES: AtomicU64 = AtomicU64::new(0);

fn build_counter(c: &serde_json::Value) -> Result<Arc<dyn Plugin>, String> {
    parse_config::<CounterConf>(c)?;
    Ok(Arc::new(Counter {
        instance: INSTANCES.fetch_add(1, Ordering::Relaxed) + 1,
        served: AtomicU64::new(0),
    }))
}

impl Plugin for Counter {
    fn header_filter(
        &self,
        _ctx: &mut RequestCtx,
        resp: &mut ResponseHead,
    ) -> Result<(), PluginError> {
        let n = self.served.fetch_add(1, Ordering::Relaxed) + 1;
        resp.headers.insert("x-test-instance", self.instance.into());
        resp.headers.insert("x-test-count", n.into());
        Ok(())
    }
}
