//! Test plugins that wait for I/O: `test-await` (a network round trip in `access`) and
//! `test-request-body` (the `request_body` phase).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, StatusCode};
use serde::Deserialize;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use super::super::{
    parse_config, BodyChunk, EarlyResponse, Flow, Handled, Plugin, PluginError, PluginFactory,
    RequestHead, Step,
};
use crate::pipeline::RequestCtx;

/// `test-await`: in `access`, connects to `addr`, sends `PING <token>\n`, waits for one line
/// and forwards it upstream as `x-test-awaited`. `token` is a secret field.
pub(in crate::plugins) struct Await;

pub(in crate::plugins) const AWAIT: Await = Await;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AwaitConf {
    addr: std::net::SocketAddr,
    #[serde(default)]
    token: String,
}

struct Awaiting(AwaitConf);

impl PluginFactory for Await {
    fn name(&self) -> &'static str {
        "test-await"
    }
    fn priority(&self) -> i32 {
        700
    }
    fn secret_fields(&self) -> &'static [&'static str] {
        &["token"]
    }
    fn build(&self, config: &serde_json::Value) -> Result<Arc<dyn Plugin>, String> {
        Ok(Arc::new(Awaiting(parse_config(config)?)))
    }
}

impl Awaiting {
    async fn round_trip(&self) -> Result<String, PluginError> {
        let err = |e: std::io::Error| PluginError(format!("test-await: {e}"));
        let mut conn = tokio::net::TcpStream::connect(self.0.addr)
            .await
            .map_err(err)?;
        conn.write_all(format!("PING {}\n", self.0.token).as_bytes())
            .await
            .map_err(err)?;
        let mut line = String::new();
        BufReader::new(conn)
            .read_line(&mut line)
            .await
            .map_err(err)?;
        Ok(line.trim_end().to_string())
    }
}

impl Plugin for Awaiting {
    fn access<'a>(&'a self, _ctx: &'a mut RequestCtx, req: &'a mut RequestHead) -> Handled<'a> {
        Step::wait(async move {
            let line = tokio::time::timeout(Duration::from_secs(30), self.round_trip())
                .await
                .map_err(|_| PluginError("test-await: timed out".into()))??;
            let v = HeaderValue::from_str(&line).map_err(|e| PluginError(e.to_string()))?;
            req.headers.insert("x-test-awaited", v);
            Ok(Flow::Continue)
        })
    }
}

/// `test-request-body`: sees every request body chunk after a yield to the runtime; refuses
/// with 413 once more than `max` bytes arrived, upper-cases the body with `upper`, and adds
/// `append` after the last chunk.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RequestBody {
    #[serde(default)]
    max: Option<u64>,
    #[serde(default)]
    upper: bool,
    #[serde(default)]
    append: String,
}

/// Bytes seen so far in this request.
#[derive(Clone, Default)]
struct Seen(u64);

pub(super) fn build_request_body(c: &serde_json::Value) -> Result<Arc<dyn Plugin>, String> {
    Ok(Arc::new(parse_config::<RequestBody>(c)?))
}

impl Plugin for RequestBody {
    fn reads_request_body(&self) -> bool {
        true
    }

    fn request_body<'a>(
        &'a self,
        ctx: &'a mut RequestCtx,
        chunk: &'a mut BodyChunk,
    ) -> Handled<'a> {
        Step::wait(async move {
            tokio::task::yield_now().await;
            let seen = ctx.slots.get_or_insert_default::<Seen>();
            seen.0 += chunk.data.len() as u64;
            if self.max.is_some_and(|m| seen.0 > m) {
                return Ok(Flow::Respond(EarlyResponse::message(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "body refused by test-request-body",
                )));
            }
            if self.upper {
                chunk.data = Bytes::from(chunk.data.to_ascii_uppercase());
            }
            if chunk.eof && !self.append.is_empty() {
                chunk.data = Bytes::from([&chunk.data[..], self.append.as_bytes()].concat());
            }
            Ok(Flow::Continue)
        })
    }
}
