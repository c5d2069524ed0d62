//! Authentication and access control: `key-auth`, `basic-auth`, `jwt` and `mtls-auth` identify
//! a consumer from its credential ([`RequestCtx::authenticate`]); `acl` allows or denies by the consumer's
//! groups.
//!
//! Consumers and credentials come from the routing table, indexed per table in a
//! [`Directory`](crate::consumers::Directory); a plugin finds only the consumers its namespace
//! may see ([`RequestCtx::consumers`]). What the authentication plugins share lives here:
//! Kong's `anonymous` fallback and the 401 answer.

mod acl;
mod basic_auth;
mod htpasswd;
mod jwt;
mod key_auth;
mod mtls_auth;
#[cfg(test)]
mod testing;

use http::{HeaderValue, StatusCode};

use super::{EarlyResponse, Flow, PluginError, RequestHead};
use crate::pipeline::RequestCtx;

pub(super) use acl::FACTORY as ACL;
pub(super) use basic_auth::FACTORY as BASIC_AUTH;
pub(super) use jwt::FACTORY as JWT;
pub(super) use key_auth::FACTORY as KEY_AUTH;
pub(super) use mtls_auth::FACTORY as MTLS_AUTH;

/// Kong's message for a credential that matches no consumer.
const INVALID: &str = "Invalid authentication credentials";

/// An authentication plugin's `anonymous`: the consumer (id or username) a request goes on as
/// when it brings no valid credential. Without one, such a request is refused.
#[derive(Debug, Default)]
pub(super) struct Anonymous(Option<String>);

impl Anonymous {
    /// Checks the configured value (`anonymous: …` is an id or username, not empty).
    pub(super) fn new(value: Option<String>) -> Result<Anonymous, String> {
        match value {
            Some(v) if v.trim().is_empty() => {
                Err("anonymous: must name a consumer (its id or username)".into())
            }
            v => Ok(Anonymous(v)),
        }
    }

    /// Kong's logical OR of authentication plugins: when this one has an anonymous fallback and
    /// an earlier one already identified the client by a credential, it has nothing to do.
    pub(super) fn already_done(&self, ctx: &RequestCtx) -> bool {
        self.0.is_some() && ctx.credential.is_some()
    }

    /// What to do with a request that failed authentication with `refusal`: go on as the
    /// anonymous consumer, or refuse. A configured consumer that does not exist is a 500, as
    /// in Kong: the gateway is misconfigured, and the client must not pass.
    pub(super) fn fallback(
        &self,
        ctx: &mut RequestCtx,
        req: &mut RequestHead,
        refusal: EarlyResponse,
    ) -> Result<Flow, PluginError> {
        let Some(name) = &self.0 else {
            return Ok(Flow::Respond(refusal));
        };
        let consumer = ctx
            .consumers()
            .find(name)
            .map(|c| c.id.clone())
            .ok_or_else(|| PluginError(format!("anonymous consumer {name:?} not found")))?;
        ctx.authenticate(req, consumer, None);
        Ok(Flow::Continue)
    }
}

/// `hide_credentials` for a query parameter: the upstream's query without `name`.
pub(super) fn remove_query_param(ctx: &mut RequestCtx, req: &mut RequestHead, name: &str) {
    let (path, query) = crate::plugins::upstream_target(ctx, req);
    let Some(rest) = crate::plugins::params::without(query.unwrap_or("").as_bytes(), name) else {
        return;
    };
    let mut target = path.to_string();
    if !rest.is_empty() {
        target.push('?');
        target.push_str(&String::from_utf8_lossy(&rest));
    }
    // The query was parsed from a valid URI and only lost parameters.
    let _ = crate::plugins::set_upstream_target(ctx, req, target);
}

/// A 401 with a `{"message"}` body and, when the scheme has one, its challenge.
pub(super) fn unauthorized(message: &str, challenge: Option<&HeaderValue>) -> EarlyResponse {
    let mut r = EarlyResponse::message(StatusCode::UNAUTHORIZED, message);
    if let Some(c) = challenge {
        r.headers.insert(http::header::WWW_AUTHENTICATE, c.clone());
    }
    r
}

/// The `WWW-Authenticate` challenge `<scheme> realm="<realm>"`, checked at configuration time.
pub(super) fn challenge(scheme: &str, realm: &str) -> Result<HeaderValue, String> {
    if realm.contains(['"', '\\']) {
        return Err(format!("realm: {realm:?} may not hold '\"' or '\\\\'"));
    }
    HeaderValue::from_str(&format!("{scheme} realm=\"{realm}\""))
        .map_err(|_| format!("realm: {realm:?} is not a valid header value"))
}
