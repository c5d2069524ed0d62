//! `grpc-web`: lets browser clients call gRPC services without Envoy (Kong's plugin, binary
//! and text modes). A gRPC-Web request (`application/grpc-web[+proto]`, or base64
//! `application/grpc-web-text[+proto]`) goes upstream as gRPC (`application/grpc`,
//! `te: trailers`, the text body decoded); the answer comes back as gRPC-Web: its trailers
//! become the body's last frame (flag `0x80`, `name:value\r\n` lines), base64-encoded in text
//! mode. Requests of other types pass untouched.

use std::sync::Arc;

use base64::Engine as _;
use bytes::{BufMut, Bytes, BytesMut};
use http::header::{self, HeaderValue};
use http::{HeaderMap, Method, StatusCode};
use serde::Deserialize;

use super::{
    parse_config, BodyChunk, EarlyResponse, Flow, Handled, Plugin, PluginError, RequestHead,
    ResponseHead, Simple,
};
use crate::pipeline::RequestCtx;

pub(super) const FACTORY: Simple = Simple {
    name: "grpc-web",
    priority: 3,
    build,
};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Conf {
    #[serde(default)]
    proto: Option<String>,
    #[serde(default)]
    pass_stripped_path: Option<bool>,
    #[serde(default = "any_origin")]
    allow_origin_header: String,
}

fn any_origin() -> String {
    "*".into()
}

struct GrpcWeb {
    allow_origin: HeaderValue,
    preflight: EarlyResponse,
}

/// The request's gRPC-Web mode, kept from `access` to the response.
#[derive(Clone, Debug)]
struct Mode {
    text: bool,
    /// `+proto` and the like, carried over to the upstream and back.
    suffix: String,
    /// Text mode: base64 received but not decoded yet (a chunk may end mid-quantum).
    pending: BytesMut,
}

fn build(config: &serde_json::Value) -> Result<Arc<dyn Plugin>, String> {
    let conf: Conf = parse_config(config)?;
    if conf.proto.is_some() {
        return Err(
            "proto: JSON transcoding is not supported; clients send application/grpc-web+proto"
                .into(),
        );
    }
    if conf.pass_stripped_path == Some(true) {
        return Err("pass_stripped_path: not supported; use the Ingress's strip-path".into());
    }
    let allow_origin = HeaderValue::from_str(&conf.allow_origin_header).map_err(|_| {
        format!(
            "allow_origin_header: {:?} is not a header value",
            conf.allow_origin_header
        )
    })?;
    let mut preflight =
        EarlyResponse::with_body(StatusCode::NO_CONTENT, "text/plain", Bytes::new());
    let h = &mut preflight.headers;
    h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, allow_origin.clone());
    h.insert(
        header::ACCESS_CONTROL_ALLOW_METHODS,
        HeaderValue::from_static("POST"),
    );
    h.insert(
        header::ACCESS_CONTROL_ALLOW_HEADERS,
        HeaderValue::from_static("content-type,x-grpc-web,x-user-agent,grpc-timeout,authorization"),
    );
    h.insert(
        header::ACCESS_CONTROL_MAX_AGE,
        HeaderValue::from_static("86400"),
    );
    Ok(Arc::new(GrpcWeb {
        allow_origin,
        preflight,
    }))
}

/// The mode a content type asks for, if it is gRPC-Web.
fn mode_of(content_type: &[u8]) -> Option<Mode> {
    let ct = std::str::from_utf8(content_type).ok()?.to_ascii_lowercase();
    let (text, rest) = if let Some(rest) = ct.strip_prefix("application/grpc-web-text") {
        (true, rest)
    } else {
        (false, ct.strip_prefix("application/grpc-web")?)
    };
    // `+proto`, `+json`, or nothing; parameters after `;` are dropped.
    let suffix = rest.split(';').next().unwrap_or("").trim();
    if !(suffix.is_empty() || suffix.starts_with('+')) {
        return None;
    }
    Some(Mode {
        text,
        suffix: suffix.to_string(),
        pending: BytesMut::new(),
    })
}

/// Decodes the complete base64 quanta of `pending` (padded segments may follow each other:
/// clients flush messages one by one), leaving an incomplete tail for the next chunk.
fn decode_text(pending: &mut BytesMut, eof: bool) -> Result<Bytes, String> {
    let engine = &base64::engine::general_purpose::STANDARD;
    let mut out = BytesMut::new();
    let clean: Vec<u8> = pending
        .iter()
        .copied()
        .filter(|b| !b.is_ascii_whitespace())
        .collect();
    // Whole quanta only, unless this is the end.
    let usable = if eof {
        clean.len()
    } else {
        clean.len() / 4 * 4
    };
    let mut rest = &clean[..usable];
    while !rest.is_empty() {
        // A segment ends after its padding (or at the end of the input).
        let end = match rest.iter().position(|b| *b == b'=') {
            Some(i) => {
                let mut j = i;
                while j < rest.len() && rest[j] == b'=' {
                    j += 1;
                }
                j
            }
            None => rest.len(),
        };
        let decoded = engine
            .decode(&rest[..end])
            .map_err(|e| format!("the grpc-web-text body is not base64: {e}"))?;
        out.extend_from_slice(&decoded);
        rest = &rest[end..];
    }
    let tail = clean[usable..].to_vec();
    pending.clear();
    pending.extend_from_slice(&tail);
    Ok(out.freeze())
}

/// gRPC-Web's trailer frame: flag `0x80`, the length, then `name:value\r\n` lines.
fn trailer_frame(trailers: &HeaderMap) -> Bytes {
    let mut lines = BytesMut::new();
    for (name, value) in trailers {
        lines.extend_from_slice(name.as_str().as_bytes());
        lines.put_u8(b':');
        lines.extend_from_slice(value.as_bytes());
        lines.extend_from_slice(b"\r\n");
    }
    let mut frame = BytesMut::with_capacity(5 + lines.len());
    frame.put_u8(0x80);
    frame.put_u32(lines.len() as u32);
    frame.extend_from_slice(&lines);
    frame.freeze()
}

fn encode_text(data: &[u8]) -> Bytes {
    Bytes::from(base64::engine::general_purpose::STANDARD.encode(data))
}

impl Plugin for GrpcWeb {
    fn access<'a>(&'a self, ctx: &'a mut RequestCtx, req: &'a mut RequestHead) -> Handled<'a> {
        if req.method == Method::OPTIONS
            && req.headers.contains_key(header::ORIGIN)
            && req
                .headers
                .contains_key(header::ACCESS_CONTROL_REQUEST_METHOD)
        {
            let mut answer = self.preflight.clone();
            // Whatever metadata the client means to send is allowed (PROTOCOL-WEB).
            if let Some(asked) = req.headers.get(header::ACCESS_CONTROL_REQUEST_HEADERS) {
                answer
                    .headers
                    .insert(header::ACCESS_CONTROL_ALLOW_HEADERS, asked.clone());
            }
            return Flow::Respond(answer).into();
        }
        let Some(mode) = req
            .headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| mode_of(v.as_bytes()))
        else {
            return Flow::Continue.into();
        };
        let grpc = format!("application/grpc{}", mode.suffix);
        if let Ok(v) = HeaderValue::from_str(&grpc) {
            req.headers.insert(header::CONTENT_TYPE, v);
        }
        // `te: trailers` is the proxy's to add, for HTTP/2 upstreams only.
        ctx.slots.insert(mode);
        Flow::Continue.into()
    }

    fn reads_request_body(&self) -> bool {
        true
    }

    /// Only text-mode bodies need decoding: binary gRPC-Web and plain gRPC calls (streaming
    /// ones included) stream through.
    fn wants_request_body(&self, ctx: &RequestCtx) -> bool {
        ctx.slots.get::<Mode>().is_some_and(|m| m.text)
    }

    fn request_body<'a>(
        &'a self,
        ctx: &'a mut RequestCtx,
        chunk: &'a mut BodyChunk,
    ) -> Handled<'a> {
        let Some(mode) = ctx.slots.get_mut::<Mode>() else {
            return Flow::Continue.into();
        };
        if !mode.text {
            return Flow::Continue.into();
        }
        mode.pending.extend_from_slice(&chunk.data);
        match decode_text(&mut mode.pending, chunk.eof) {
            Ok(bytes) => {
                chunk.data = bytes;
                Flow::Continue.into()
            }
            Err(message) => {
                Flow::Respond(EarlyResponse::message(StatusCode::BAD_REQUEST, &message)).into()
            }
        }
    }

    fn header_filter(
        &self,
        ctx: &mut RequestCtx,
        resp: &mut ResponseHead,
    ) -> Result<(), PluginError> {
        let Some(mode) = ctx.slots.get::<Mode>() else {
            return Ok(());
        };
        let ct = format!(
            "application/grpc-web{}{}",
            if mode.text { "-text" } else { "" },
            if mode.suffix.is_empty() {
                "+proto"
            } else {
                &mode.suffix
            }
        );
        if let Ok(v) = HeaderValue::from_str(&ct) {
            resp.headers.insert(header::CONTENT_TYPE, v);
        }
        // The trailer frame (and base64) change the length.
        resp.headers.remove(header::CONTENT_LENGTH);
        // The `cors` plugin's answer, when it gave one, stands.
        if !resp
            .headers
            .contains_key(header::ACCESS_CONTROL_ALLOW_ORIGIN)
        {
            resp.headers.insert(
                header::ACCESS_CONTROL_ALLOW_ORIGIN,
                self.allow_origin.clone(),
            );
        }
        if !resp
            .headers
            .contains_key(header::ACCESS_CONTROL_EXPOSE_HEADERS)
        {
            resp.headers.insert(
                header::ACCESS_CONTROL_EXPOSE_HEADERS,
                HeaderValue::from_static("grpc-status,grpc-message"),
            );
        }
        Ok(())
    }

    fn filters_body(&self) -> bool {
        true
    }

    fn body_filter(&self, ctx: &mut RequestCtx, chunk: &mut BodyChunk) -> Result<(), PluginError> {
        if ctx.slots.get::<Mode>().is_some_and(|m| m.text) && !chunk.data.is_empty() {
            chunk.data = encode_text(&chunk.data);
        }
        Ok(())
    }

    fn trailers_filter(
        &self,
        ctx: &mut RequestCtx,
        trailers: &mut HeaderMap,
    ) -> Result<Option<Bytes>, PluginError> {
        let Some(mode) = ctx.slots.get::<Mode>() else {
            return Ok(None);
        };
        // Browsers cannot read HTTP trailers: they travel in the body.
        let frame = trailer_frame(trailers);
        trailers.clear();
        Ok(Some(if mode.text {
            encode_text(&frame)
        } else {
            frame
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn modes_from_content_types() {
        let m = mode_of(b"application/grpc-web+proto").unwrap();
        assert!(!m.text);
        assert_eq!(m.suffix, "+proto");
        let m = mode_of(b"Application/GRPC-Web-Text").unwrap();
        assert!(m.text);
        assert_eq!(m.suffix, "");
        assert!(mode_of(b"application/grpc").is_none());
        assert!(mode_of(b"application/grpc-webx").is_none());
        assert!(mode_of(b"application/json").is_none());
    }

    #[test]
    fn text_bodies_decode_across_chunks_and_segments() {
        let engine = &base64::engine::general_purpose::STANDARD;
        let a = engine.encode([0u8, 0, 0, 0, 1, b'x']);
        let b = engine.encode(b"hello");
        let whole = format!("{a}{b}");
        let mut pending = BytesMut::new();
        let mut out = Vec::new();
        for piece in whole.as_bytes().chunks(3) {
            pending.extend_from_slice(piece);
            out.extend_from_slice(&decode_text(&mut pending, false).unwrap());
        }
        out.extend_from_slice(&decode_text(&mut pending, true).unwrap());
        assert_eq!(out, [&[0u8, 0, 0, 0, 1, b'x'][..], b"hello"].concat());
        let mut bad = BytesMut::from(&b"!!!!"[..]);
        assert!(decode_text(&mut bad, true).is_err());
    }

    #[test]
    fn trailers_become_the_last_frame() {
        let mut t = HeaderMap::new();
        t.insert("grpc-status", HeaderValue::from_static("0"));
        t.insert("grpc-message", HeaderValue::from_static("ok"));
        let f = trailer_frame(&t);
        assert_eq!(f[0], 0x80);
        let len = u32::from_be_bytes([f[1], f[2], f[3], f[4]]) as usize;
        assert_eq!(&f[5..], b"grpc-status:0\r\ngrpc-message:ok\r\n");
        assert_eq!(len, f.len() - 5);
    }

    #[test]
    fn config_errors_name_the_field() {
        assert!(build(&json!({})).is_ok());
        for (config, field) in [
            (json!({"proto": "x.proto"}), "proto:"),
            (json!({"pass_stripped_path": true}), "pass_stripped_path:"),
            (
                json!({"allow_origin_header": "a\nb"}),
                "allow_origin_header:",
            ),
            (json!({"colour": 1}), "colour"),
        ] {
            let e = build(&config).err().expect("refused");
            assert!(e.contains(field), "{config}: {e}");
        }
    }
}
