//! `request-size-limiting`: refuse request bodies over a configured size (Kong's schema:
//! `allowed_payload_size`, `size_unit`, `require_content_length`). A declared `Content-Length`
//! over the limit is answered 413 before anything is read; for the rest the limit goes into
//! [`RequestCtx::body_limit`], which the proxy enforces on bodies as they arrive.

use std::sync::Arc;

use http::{header, StatusCode};
use serde::Deserialize;

use super::{parse_config, BodyChunk, EarlyResponse, Flow, Handled, Plugin, RequestHead, Simple};
use crate::pipeline::RequestCtx;

/// The kind: its name, its default priority (Kong's), and how to build an instance.
pub(super) const FACTORY: Simple = Simple {
    name: "request-size-limiting",
    priority: 951,
    build,
};

/// The configuration (Kong's keys).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Conf {
    #[serde(default = "default_size")]
    allowed_payload_size: u64,
    #[serde(default)]
    size_unit: SizeUnit,
    #[serde(default)]
    require_content_length: bool,
}

fn default_size() -> u64 {
    128
}

/// The unit of `allowed_payload_size`; Kong counts in powers of 1024.
#[derive(Deserialize, Default, Clone, Copy, Debug, PartialEq)]
#[serde(rename_all = "lowercase")]
enum SizeUnit {
    Bytes,
    Kilobytes,
    #[default]
    Megabytes,
}

impl SizeUnit {
    fn bytes(self) -> u64 {
        match self {
            SizeUnit::Bytes => 1,
            SizeUnit::Kilobytes => 1024,
            SizeUnit::Megabytes => 1024 * 1024,
        }
    }
}

/// An instance: the limit in bytes and its two canned refusals.
struct SizeLimit {
    limit: u64,
    require_content_length: bool,
    too_large: EarlyResponse,
    length_required: EarlyResponse,
}

/// Marks a request that declared no `Content-Length` (only with `require_content_length`).
#[derive(Clone)]
struct NoLength;

fn build(config: &serde_json::Value) -> Result<Arc<dyn Plugin>, String> {
    let conf: Conf = parse_config(config)?;
    // 0 would read as "no limit" to the proxy, the opposite of what it says.
    if conf.allowed_payload_size == 0 {
        return Err("allowed_payload_size: must be at least 1".into());
    }
    let limit = conf
        .allowed_payload_size
        .checked_mul(conf.size_unit.bytes())
        .ok_or_else(|| {
            format!(
                "allowed_payload_size: {} {:?} does not fit in 64 bits",
                conf.allowed_payload_size, conf.size_unit
            )
        })?;
    // The same words as the proxy's own 413 for streamed bodies, so clients see one message.
    let too_large = EarlyResponse::message(
        StatusCode::PAYLOAD_TOO_LARGE,
        &format!("Request size limit exceeded: at most {limit} bytes"),
    );
    let length_required = EarlyResponse::message(
        StatusCode::LENGTH_REQUIRED,
        "A valid Content-Length header is required",
    );
    Ok(Arc::new(SizeLimit {
        limit,
        require_content_length: conf.require_content_length,
        too_large,
        length_required,
    }))
}

/// What a request's declared length means for it.
#[derive(Debug, PartialEq)]
enum Declared {
    /// Over the limit: refuse it now.
    TooLarge,
    /// Within the limit.
    Fits,
    /// No (usable) `Content-Length`: the body, if any, is counted as it arrives.
    Unknown,
}

fn declared(req: &RequestHead, limit: u64) -> Declared {
    let length = req
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    match length {
        Some(n) if n > limit => Declared::TooLarge,
        Some(_) => Declared::Fits,
        None => Declared::Unknown,
    }
}

impl Plugin for SizeLimit {
    fn access<'a>(&'a self, ctx: &'a mut RequestCtx, req: &'a mut RequestHead) -> Handled<'a> {
        match declared(req, self.limit) {
            Declared::TooLarge => return Flow::Respond(self.too_large.clone()).into(),
            Declared::Unknown if self.require_content_length => {
                ctx.slots.insert(NoLength);
            }
            _ => {}
        }
        ctx.body_limit = Some(ctx.body_limit.map_or(self.limit, |l| l.min(self.limit)));
        Flow::Continue.into()
    }

    // Transfer-Encoding is gone before plugins run, so whether a request without a length has a
    // body shows only when its first bytes arrive: `require_content_length` needs this phase.
    fn reads_request_body(&self) -> bool {
        self.require_content_length
    }

    /// Only requests without a `Content-Length`; the others stream.
    fn wants_request_body(&self, ctx: &RequestCtx) -> bool {
        ctx.slots.get::<NoLength>().is_some()
    }

    fn request_body<'a>(
        &'a self,
        ctx: &'a mut RequestCtx,
        chunk: &'a mut BodyChunk,
    ) -> Handled<'a> {
        if !chunk.data.is_empty() && ctx.slots.get::<NoLength>().is_some() {
            return Flow::Respond(self.length_required.clone()).into();
        }
        Flow::Continue.into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::Step;
    use serde_json::json;

    fn limit_of(config: serde_json::Value) -> u64 {
        let conf: Conf = parse_config(&config).unwrap();
        conf.allowed_payload_size * conf.size_unit.bytes()
    }

    fn head(content_length: Option<&str>) -> RequestHead {
        let mut b = http::Request::builder().method("POST").uri("/");
        if let Some(cl) = content_length {
            b = b.header("content-length", cl);
        }
        b.body(()).unwrap().into_parts().0
    }

    #[test]
    fn units_are_powers_of_1024_and_megabytes_by_default() {
        assert_eq!(limit_of(json!({})), 128 * 1024 * 1024);
        assert_eq!(
            limit_of(json!({"allowed_payload_size": 10, "size_unit": "bytes"})),
            10
        );
        assert_eq!(
            limit_of(json!({"allowed_payload_size": 2, "size_unit": "kilobytes"})),
            2048
        );
        assert_eq!(
            limit_of(json!({"allowed_payload_size": 1, "size_unit": "megabytes"})),
            1 << 20
        );
    }

    #[test]
    fn configuration_errors_name_the_field() {
        assert!(build(&json!({})).is_ok());
        assert!(build(&json!({"require_content_length": true})).is_ok());
        for (config, field) in [
            (json!({"size_unit": "gigabytes"}), "size_unit:"),
            (json!({"allowed_payload_size": -1}), "allowed_payload_size:"),
            (json!({"allowed_payload_size": 0}), "allowed_payload_size:"),
            (
                json!({"allowed_payload_size": "1"}),
                "allowed_payload_size:",
            ),
            (
                json!({"allowed_payload_size": u64::MAX, "size_unit": "kilobytes"}),
                "allowed_payload_size:",
            ),
            (
                json!({"require_content_length": "yes"}),
                "require_content_length:",
            ),
        ] {
            let e = build(&config).err().unwrap();
            assert!(e.starts_with(field), "{config}: {e}");
        }
        let e = build(&json!({"allowed_size": 1})).err().unwrap();
        assert!(e.contains("allowed_size"), "{e}");
    }

    #[test]
    fn a_declared_length_is_judged_against_the_limit() {
        assert_eq!(declared(&head(Some("11")), 10), Declared::TooLarge);
        assert_eq!(declared(&head(Some("10")), 10), Declared::Fits);
        assert_eq!(declared(&head(Some("0")), 10), Declared::Fits);
        assert_eq!(declared(&head(None), 10), Declared::Unknown);
    }

    #[test]
    fn the_refusal_names_the_limit() {
        let p = build(&json!({"allowed_payload_size": 2, "size_unit": "kilobytes"})).unwrap();
        let mut ctx = RequestCtx::new([127, 0, 0, 1].into(), 1, Arc::from(Vec::new()));
        let mut req = head(Some("2049"));
        let Step::Ready(Ok(Flow::Respond(r))) = p.access(&mut ctx, &mut req) else {
            panic!("not refused")
        };
        assert_eq!(r.status, StatusCode::PAYLOAD_TOO_LARGE);
        let body: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
        assert_eq!(
            body["message"],
            "Request size limit exceeded: at most 2048 bytes"
        );
        assert_eq!(ctx.body_limit, None, "refused before any limit was set");
    }

    #[test]
    fn the_body_limit_keeps_the_lower_of_two() {
        let p = build(&json!({"allowed_payload_size": 100, "size_unit": "bytes"})).unwrap();
        let mut ctx = RequestCtx::new([127, 0, 0, 1].into(), 1, Arc::from(Vec::new()));
        let mut req = head(None);
        assert!(matches!(
            p.access(&mut ctx, &mut req),
            Step::Ready(Ok(Flow::Continue))
        ));
        assert_eq!(ctx.body_limit, Some(100));
        ctx.body_limit = Some(50);
        let _ = p.access(&mut ctx, &mut req);
        assert_eq!(ctx.body_limit, Some(50));
        ctx.body_limit = Some(500);
        let _ = p.access(&mut ctx, &mut req);
        assert_eq!(ctx.body_limit, Some(100));
    }

    #[test]
    fn require_content_length_refuses_only_bodies_without_one() {
        let p = build(&json!({"require_content_length": true})).unwrap();
        assert!(p.reads_request_body());
        assert!(!build(&json!({})).unwrap().reads_request_body());
        let run = |content_length: Option<&str>, data: &'static [u8]| {
            let mut ctx = RequestCtx::new([127, 0, 0, 1].into(), 1, Arc::from(Vec::new()));
            let mut req = head(content_length);
            let _ = p.access(&mut ctx, &mut req);
            let mut chunk = BodyChunk {
                data: bytes::Bytes::from_static(data),
                eof: data.is_empty(),
            };
            let status = match p.request_body(&mut ctx, &mut chunk) {
                Step::Ready(Ok(Flow::Respond(r))) => Some(r.status),
                Step::Ready(Ok(Flow::Continue)) => None,
                _ => panic!("unexpected"),
            };
            status
        };
        assert_eq!(run(None, b"abc"), Some(StatusCode::LENGTH_REQUIRED));
        assert_eq!(run(None, b""), None, "no body, no length needed");
        assert_eq!(run(Some("3"), b"abc"), None);
    }
}
