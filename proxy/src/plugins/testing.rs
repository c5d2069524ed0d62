//! Plugins that exist only to let Weir's end-to-end tests observe the phase pipeline from
//! outside the process. They are registered only when the proxy is started with
//! `WEIR_ENABLE_TEST_PLUGINS=1`.

use std::collections::BTreeSet;
use std::io::Write;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use http::{HeaderValue, StatusCode};
use serde::Deserialize;

use super::{
    parse_config, BodyChunk, EarlyResponse, Flow, Plugin, PluginError, PluginSpec, RequestHead,
    ResponseHead,
};
use crate::pipeline::{LogRecord, RequestCtx};

pub(super) const SPECS: [PluginSpec; 5] = [
    PluginSpec {
        name: "test-phases",
        priority: 500,
        build: build_phases,
    },
    PluginSpec {
        name: "test-phases-2",
        priority: 499,
        build: build_phases,
    },
    PluginSpec {
        name: "test-phases-3",
        priority: 498,
        build: build_phases,
    },
    PluginSpec {
        name: "test-panic",
        priority: 400,
        build: build_panic,
    },
    PluginSpec {
        name: "test-body",
        priority: 300,
        build: build_body,
    },
];

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

impl Plugin for Phases {
    fn rewrite(&self, _ctx: &mut RequestCtx, req: &mut RequestHead) -> Result<Flow, PluginError> {
        if let Ok(v) = HeaderValue::from_str(&self.tag) {
            req.headers.append("x-test-rewrite", v);
        }
        Ok(Flow::Continue)
    }

    fn access(&self, ctx: &mut RequestCtx, req: &mut RequestHead) -> Result<Flow, PluginError> {
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
        let line = serde_json::json!({"tag": self.tag, "access": ran, "status": record.status, "path": record.path});
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
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
    if !["rewrite", "access", "header_filter", "body_filter", "log"].contains(&p.phase.as_str()) {
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
    fn rewrite(&self, _ctx: &mut RequestCtx, _req: &mut RequestHead) -> Result<Flow, PluginError> {
        self.fail("rewrite").map(|_| Flow::Continue)
    }
    fn access(&self, _ctx: &mut RequestCtx, _req: &mut RequestHead) -> Result<Flow, PluginError> {
        self.fail("access").map(|_| Flow::Continue)
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
