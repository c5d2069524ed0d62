//! `example-require-header`: the example plugin of docs/plugins/writing.md (the guide quotes
//! this file whole, and a test checks that it does). Requests without the configured header
//! are answered 400; the others go on, and their responses say which header was checked.

use std::sync::Arc;

use http::{HeaderName, HeaderValue, StatusCode};
use serde::Deserialize;

use super::{
    parse_config, EarlyResponse, Flow, Handled, Plugin, PluginError, RequestHead, ResponseHead,
    Simple,
};
use crate::pipeline::RequestCtx;

/// The kind: its name, its default priority, and how to build an instance.
pub(super) const FACTORY: Simple = Simple {
    name: "example-require-header",
    priority: 1000,
    build,
};

/// The configuration, with Kong-style snake_case keys; unknown keys are errors.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Conf {
    header_name: String,
    #[serde(default = "default_status")]
    status_code: u16,
}

fn default_status() -> u16 {
    400
}

/// An instance: everything parsed and checked once, when the routing table is compiled.
struct RequireHeader {
    header: HeaderName,
    refusal: EarlyResponse,
    checked: HeaderValue,
}

fn build(config: &serde_json::Value) -> Result<Arc<dyn Plugin>, String> {
    let conf: Conf = parse_config(config)?;
    let header = HeaderName::from_bytes(conf.header_name.as_bytes())
        .map_err(|_| format!("header_name: {:?} is not a header name", conf.header_name))?;
    let status = StatusCode::from_u16(conf.status_code)
        .ok()
        .filter(|s| s.is_client_error())
        .ok_or_else(|| format!("status_code: {} is not a 4xx status", conf.status_code))?;
    let refusal = EarlyResponse::message(status, &format!("missing header {header}"));
    let checked = HeaderValue::from_str(header.as_str()).expect("a header name is a value");
    Ok(Arc::new(RequireHeader {
        header,
        refusal,
        checked,
    }))
}

/// Marks a request this plugin let through (per-request state lives in `ctx.slots`).
#[derive(Clone)]
struct Passed;

impl Plugin for RequireHeader {
    fn access<'a>(&'a self, ctx: &'a mut RequestCtx, req: &'a mut RequestHead) -> Handled<'a> {
        if !req.headers.contains_key(&self.header) {
            return Flow::Respond(self.refusal.clone()).into();
        }
        ctx.slots.insert(Passed);
        Flow::Continue.into()
    }

    fn header_filter(
        &self,
        ctx: &mut RequestCtx,
        resp: &mut ResponseHead,
    ) -> Result<(), PluginError> {
        if ctx.slots.get::<Passed>().is_some() {
            resp.headers
                .insert("x-checked-header", self.checked.clone());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn configuration_errors_name_the_field() {
        assert!(build(&json!({"header_name": "x-team"})).is_ok());
        let e = build(&json!({"header_name": "bad header"})).err().unwrap();
        assert!(e.starts_with("header_name:"), "{e}");
        let e = build(&json!({"header_name": "x-team", "status_code": 500}))
            .err()
            .unwrap();
        assert!(e.starts_with("status_code:"), "{e}");
        let e = build(&json!({})).err().unwrap();
        assert!(e.contains("header_name"), "{e}");
    }
}
