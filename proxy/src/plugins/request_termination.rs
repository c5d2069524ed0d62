//! `request-termination`: answer every matching request with a fixed response (Kong's schema:
//! `status_code`, `message`, `body`, `content_type`, `trigger`, `echo`).

use std::sync::Arc;

use bytes::Bytes;
use http::StatusCode;
use serde::Deserialize;

use super::{parse_config, EarlyResponse, Flow, Handled, Plugin, PluginError, RequestHead, Simple};
use crate::pipeline::RequestCtx;

pub(super) const FACTORY: Simple = Simple {
    name: "request-termination",
    priority: 2,
    build,
};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Conf {
    #[serde(default = "default_status")]
    status_code: u16,
    #[serde(default)]
    message: Option<String>,
    #[serde(default)]
    body: Option<String>,
    #[serde(default)]
    content_type: Option<String>,
    #[serde(default)]
    trigger: Option<String>,
    #[serde(default)]
    echo: bool,
}

fn default_status() -> u16 {
    503
}

struct RequestTermination {
    conf: Conf,
    status: StatusCode,
    trigger: Option<http::HeaderName>,
    canned: EarlyResponse,
}

fn build(config: &serde_json::Value) -> Result<Arc<dyn Plugin>, String> {
    let conf: Conf = parse_config(config)?;
    let status = StatusCode::from_u16(conf.status_code)
        .ok()
        .filter(|_| (100..=599).contains(&conf.status_code))
        .ok_or_else(|| {
            format!(
                "status_code: {} is not between 100 and 599",
                conf.status_code
            )
        })?;
    if conf.message.is_some() && conf.body.is_some() {
        return Err("message: set either `message` or `body`, not both".into());
    }
    if conf.content_type.is_some() && conf.body.is_none() {
        return Err("content_type: only allowed together with `body`".into());
    }
    let trigger = match &conf.trigger {
        None => None,
        Some(t) => Some(
            http::HeaderName::from_bytes(t.as_bytes())
                .map_err(|_| format!("trigger: {t:?} is not a valid header name"))?,
        ),
    };
    if let Some(ct) = &conf.content_type {
        http::HeaderValue::from_str(ct)
            .map_err(|_| format!("content_type: {ct:?} is not a valid header value"))?;
    }
    let canned = match &conf.body {
        Some(body) => EarlyResponse::with_body(
            status,
            conf.content_type
                .as_deref()
                .unwrap_or("application/json; charset=utf-8"),
            Bytes::from(body.clone()),
        ),
        None => {
            let default_msg = status.canonical_reason().unwrap_or("Request terminated");
            EarlyResponse::message(status, conf.message.as_deref().unwrap_or(default_msg))
        }
    };
    Ok(Arc::new(RequestTermination {
        conf,
        status,
        trigger,
        canned,
    }))
}

impl Plugin for RequestTermination {
    fn access<'a>(&'a self, _ctx: &'a mut RequestCtx, req: &'a mut RequestHead) -> Handled<'a> {
        self.answer(req).into()
    }
}

impl RequestTermination {
    fn answer(&self, req: &RequestHead) -> Result<Flow, PluginError> {
        if let Some(t) = &self.trigger {
            let in_query = req.uri.query().is_some_and(|q| {
                q.split('&').any(|kv| {
                    kv.split('=')
                        .next()
                        .is_some_and(|k| k.eq_ignore_ascii_case(t.as_str()))
                })
            });
            if !req.headers.contains_key(t) && !in_query {
                return Ok(Flow::Continue);
            }
        }
        if self.conf.echo {
            let headers: serde_json::Map<String, serde_json::Value> = req
                .headers
                .iter()
                .map(|(k, v)| (k.to_string(), String::from_utf8_lossy(v.as_bytes()).into()))
                .collect();
            let body = serde_json::json!({
                "message": self.conf.message,
                "request": {
                    "method": req.method.as_str(),
                    "uri": req.uri.to_string(),
                    "headers": headers,
                }
            });
            let bytes = serde_json::to_vec(&body).map_err(|e| PluginError(e.to_string()))?;
            return Ok(Flow::Respond(EarlyResponse::with_body(
                self.status,
                "application/json; charset=utf-8",
                bytes.into(),
            )));
        }
        Ok(Flow::Respond(self.canned.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn config_checks() {
        assert!(build(&json!({})).is_ok());
        assert!(build(&json!({"status_code": 403, "message": "nope"})).is_ok());
        let e = build(&json!({"status_code": 700})).err().unwrap();
        assert!(e.contains("status_code"), "{e}");
        let e = build(&json!({"message": "a", "body": "b"})).err().unwrap();
        assert!(e.contains("message"), "{e}");
        let e = build(&json!({"status_code": "x"})).err().unwrap();
        assert!(e.starts_with("status_code"), "{e}");
        let e = build(&json!({"colour": 1})).err().unwrap();
        assert!(e.contains("colour"), "{e}");
    }
}
