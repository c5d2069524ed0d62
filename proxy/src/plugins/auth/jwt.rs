//! `jwt`: identify the consumer by a signed JSON Web Token (RFC 7519). Kong's schema:
//! `uri_param_names`, `cookie_names`, `header_names`, `key_claim_name`, `secret_is_base64`,
//! `claims_to_verify`, `maximum_expiration`, `anonymous`, `run_on_preflight`, `realm`.
//!
//! Weir adds two options Kong's plugin does not have:
//! - `leeway` (seconds, default 0): clock skew allowed between the token's issuer and Weir
//!   when checking `exp` and `nbf`;
//! - `hide_credentials` (default false): the token does not go upstream (removed from the
//!   header, query parameter or cookie it came in), as with `key-auth` and `basic-auth`.
//!
//! The token's key claim (`iss` by default, read from the payload, then the header) selects a
//! credential in the table's directory, whose verification key was parsed once per table. The
//! token must be signed with the credential's algorithm: the algorithm is never taken from the
//! token alone, so an `HS256` token "signed" with an RSA public key, or an `alg: none` token,
//! fails.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use base64::Engine as _;
use http::{header, HeaderMap, HeaderName, HeaderValue, Method};
use serde::Deserialize;
use serde_json::{Map, Value};

use super::{challenge, unauthorized, Anonymous};
use crate::config::JwtAlgorithm;
use crate::consumers::View;
use crate::pipeline::RequestCtx;
use crate::plugins::{
    params, parse_config, EarlyResponse, Flow, Handled, Plugin, RequestHead, Simple,
};
use crate::validate::is_cookie_name;

/// The kind: its name, its default priority (Kong's), and how to build an instance.
pub(crate) const FACTORY: Simple = Simple {
    name: "jwt",
    priority: 1450,
    build,
};

/// Kong's bound on `maximum_expiration`: a year.
const MAX_EXPIRATION: u64 = 31_536_000;

/// Token parts are base64url; padding is tolerated (Kong adds what is missing).
const BASE64URL: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::URL_SAFE,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// The configuration as given: Kong's field names and defaults, and Weir's two additions.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Conf {
    #[serde(default = "default_uri_params")]
    uri_param_names: Vec<String>,
    #[serde(default)]
    cookie_names: Vec<String>,
    #[serde(default = "default_headers")]
    header_names: Vec<String>,
    #[serde(default = "default_key_claim")]
    key_claim_name: String,
    #[serde(default)]
    secret_is_base64: bool,
    /// Kong's default is `null` (nothing verified), so exported configurations carry it.
    #[serde(default)]
    claims_to_verify: Option<Vec<Claim>>,
    #[serde(default)]
    anonymous: Option<String>,
    #[serde(default = "yes")]
    run_on_preflight: bool,
    #[serde(default)]
    maximum_expiration: u64,
    #[serde(default)]
    hide_credentials: bool,
    #[serde(default)]
    leeway: u64,
    #[serde(default)]
    realm: Option<String>,
}

fn default_uri_params() -> Vec<String> {
    vec!["jwt".into()]
}

fn default_headers() -> Vec<String> {
    vec!["authorization".into()]
}

fn default_key_claim() -> String {
    "iss".into()
}

fn yes() -> bool {
    true
}

/// A registered claim `claims_to_verify` may name (RFC 7519 §4.1.4, §4.1.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Claim {
    Exp,
    Nbf,
}

impl Claim {
    fn name(self) -> &'static str {
        match self {
            Claim::Exp => "exp",
            Claim::Nbf => "nbf",
        }
    }
}

/// A configured instance, checked and ready.
struct Jwt {
    uri_params: Vec<String>,
    cookies: Vec<String>,
    headers: Vec<HeaderName>,
    key_claim: String,
    secret_is_base64: bool,
    /// `claims_to_verify`, without repeats.
    claims: Vec<Claim>,
    /// Seconds; 0 is no limit.
    maximum_expiration: u64,
    /// Seconds.
    leeway: u64,
    hide: bool,
    anonymous: Anonymous,
    run_on_preflight: bool,
    /// `Bearer realm="…"`, for a request without a token.
    challenge: HeaderValue,
    /// The same with `error="invalid_token"` (RFC 6750 §3.1), for a token that was refused.
    invalid_token: HeaderValue,
}

fn build(config: &serde_json::Value) -> Result<Arc<dyn Plugin>, String> {
    Ok(Arc::new(configure(config)?))
}

/// Checks a configuration and makes the plugin.
fn configure(config: &serde_json::Value) -> Result<Jwt, String> {
    let conf: Conf = parse_config(config)?;
    for (i, name) in conf.uri_param_names.iter().enumerate() {
        if name.is_empty() {
            return Err(format!("uri_param_names[{i}]: must not be empty"));
        }
    }
    for (i, name) in conf.cookie_names.iter().enumerate() {
        if !is_cookie_name(name) {
            return Err(format!(
                "cookie_names[{i}]: {name:?} is not a valid cookie name"
            ));
        }
    }
    let headers = conf
        .header_names
        .iter()
        .enumerate()
        .map(|(i, n)| {
            HeaderName::from_bytes(n.as_bytes())
                .map_err(|_| format!("header_names[{i}]: {n:?} is not a valid header name"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    // Kong accepts three empty lists; such a plugin could never find a token.
    if conf.uri_param_names.is_empty() && conf.cookie_names.is_empty() && headers.is_empty() {
        return Err("header_names: at least one of uri_param_names, cookie_names and header_names must name a place to look for the token".into());
    }
    if conf.key_claim_name.is_empty() {
        return Err("key_claim_name: must not be empty".into());
    }
    let mut claims = Vec::new();
    for c in conf.claims_to_verify.into_iter().flatten() {
        if !claims.contains(&c) {
            claims.push(c);
        }
    }
    if conf.maximum_expiration > MAX_EXPIRATION {
        return Err(format!(
            "maximum_expiration: must be between 0 and {MAX_EXPIRATION} (a year)"
        ));
    }
    // Kong's entity check: a maximum lifetime is measured from a verified `exp`.
    if conf.maximum_expiration > 0 && !claims.contains(&Claim::Exp) {
        return Err("claims_to_verify: must contain \"exp\" when maximum_expiration is set".into());
    }
    let base = challenge("Bearer", conf.realm.as_deref().unwrap_or("weir"))?;
    let mut invalid = base.as_bytes().to_vec();
    invalid.extend_from_slice(b", error=\"invalid_token\"");
    Ok(Jwt {
        uri_params: conf.uri_param_names,
        cookies: conf.cookie_names,
        headers,
        key_claim: conf.key_claim_name,
        secret_is_base64: conf.secret_is_base64,
        claims,
        maximum_expiration: conf.maximum_expiration,
        leeway: conf.leeway,
        hide: conf.hide_credentials,
        anonymous: Anonymous::new(conf.anonymous)?,
        run_on_preflight: conf.run_on_preflight,
        invalid_token: HeaderValue::from_bytes(&invalid)
            .map_err(|_| "realm: is not a valid header value".to_string())?,
        challenge: base,
    })
}

/// Where a token was found, to hide it there.
#[derive(Debug, PartialEq)]
enum Place {
    Query(String),
    Cookie(String),
    Header(HeaderName),
}

/// What the request carries.
#[derive(Debug)]
enum Presented {
    None,
    /// Two different tokens: ambiguous, refused (Kong's "Multiple tokens provided").
    Multiple,
    /// One token, and every place it was found (the same token may come twice).
    Token(String, Vec<Place>),
}

/// Gathers tokens as Kong does: every place, empty values ignored, equal tokens counted once.
#[derive(Default)]
struct Gathered {
    token: Option<String>,
    places: Vec<Place>,
    multiple: bool,
}

impl Gathered {
    fn add(&mut self, value: &str, place: Place) {
        if value.is_empty() {
            return;
        }
        match &self.token {
            None => self.token = Some(value.to_string()),
            Some(t) if t != value => self.multiple = true,
            Some(_) => {}
        }
        if !self.places.contains(&place) {
            self.places.push(place);
        }
    }

    fn into_presented(self) -> Presented {
        if self.multiple {
            return Presented::Multiple;
        }
        match self.token {
            Some(t) => Presented::Token(t, self.places),
            None => Presented::None,
        }
    }
}

/// The token of a header value: `Bearer <token>` (the scheme case-insensitive, RFC 9110
/// §11.1) or the bare token. A value with another scheme (`Basic …`) holds no token: a JWT
/// has no spaces, so it cannot be one.
fn header_token(value: &str) -> Option<&str> {
    let value = value.trim();
    let token = match value.split_once([' ', '\t']) {
        Some((scheme, rest)) if scheme.eq_ignore_ascii_case("bearer") => rest.trim(),
        Some(_) => return None,
        None if value.eq_ignore_ascii_case("bearer") => return None,
        None => value,
    };
    (!token.is_empty()).then_some(token)
}

/// The `name=value` pairs of a `Cookie` header value (RFC 6265 §5.4), names and values
/// trimmed; a value in double quotes is unquoted.
fn cookie_pairs(value: &str) -> impl Iterator<Item = (&str, &str)> {
    value.split(';').filter_map(|pair| {
        let (name, value) = pair.split_once('=')?;
        let value = value.trim();
        let value = value
            .strip_prefix('"')
            .and_then(|v| v.strip_suffix('"'))
            .unwrap_or(value);
        Some((name.trim(), value))
    })
}

/// A token split and decoded, its signature not yet checked.
#[derive(Debug)]
struct Decoded<'t> {
    /// `<header>.<payload>` as sent: what the signature covers.
    signing_input: &'t str,
    /// The third part, without padding (the form `jsonwebtoken` compares).
    signature: &'t str,
    alg: JwtAlgorithm,
    header: Map<String, Value>,
    claims: Map<String, Value>,
}

/// Splits and decodes a token. The errors are Kong's reasons (clients may compare them):
/// a token without three parts reads as "invalid JSON" there too.
fn decode(token: &str) -> Result<Decoded<'_>, &'static str> {
    let mut parts = token.split('.');
    let (Some(h), Some(p), Some(s), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err("invalid JSON");
    };
    let json = |part: &str| -> Result<Value, &'static str> {
        let bytes = BASE64URL.decode(part).map_err(|_| "invalid JSON")?;
        serde_json::from_slice(&bytes).map_err(|_| "invalid JSON")
    };
    let Value::Object(header) = json(h)? else {
        return Err("invalid alg");
    };
    // Only the algorithms a credential can have; `none` and the rest are refused here.
    let alg = header
        .get("alg")
        .and_then(|a| JwtAlgorithm::deserialize(a).ok())
        .ok_or("invalid alg")?;
    let Value::Object(claims) = json(p)? else {
        return Err("invalid claims");
    };
    if BASE64URL.decode(s).is_err() {
        return Err("invalid signature");
    }
    Ok(Decoded {
        signing_input: &token[..h.len() + 1 + p.len()],
        signature: s.trim_end_matches('='),
        alg,
        header,
        claims,
    })
}

fn verification_algorithm(alg: JwtAlgorithm) -> jsonwebtoken::Algorithm {
    use jsonwebtoken::Algorithm as A;
    match alg {
        JwtAlgorithm::HS256 => A::HS256,
        JwtAlgorithm::HS384 => A::HS384,
        JwtAlgorithm::HS512 => A::HS512,
        JwtAlgorithm::RS256 => A::RS256,
        JwtAlgorithm::RS384 => A::RS384,
        JwtAlgorithm::RS512 => A::RS512,
        JwtAlgorithm::ES256 => A::ES256,
        JwtAlgorithm::ES384 => A::ES384,
    }
}

/// A registered claim that failed its check.
#[derive(Debug, PartialEq)]
enum ClaimError {
    /// Listed in `claims_to_verify`, but missing or not a number.
    NotANumber(Claim),
    Expired,
    NotYetValid,
    /// `exp` further away than `maximum_expiration`.
    TooLong,
}

impl ClaimError {
    fn claim(&self) -> &'static str {
        match self {
            ClaimError::NotANumber(c) => c.name(),
            ClaimError::NotYetValid => "nbf",
            ClaimError::Expired | ClaimError::TooLong => "exp",
        }
    }

    /// Kong's text, which it sends under the claim's name.
    fn problem(&self) -> &'static str {
        match self {
            ClaimError::NotANumber(_) => "must be a number",
            ClaimError::Expired => "token expired",
            ClaimError::NotYetValid => "token not valid yet",
            ClaimError::TooLong => "exceeds maximum allowed expiration",
        }
    }

    /// The `message`: the problem, naming the claim when the problem alone does not.
    fn message(&self) -> String {
        match self {
            ClaimError::NotANumber(c) => format!("{} {}", c.name(), self.problem()),
            _ => self.problem().to_string(),
        }
    }
}

/// Why a token was refused.
#[derive(Debug, PartialEq)]
enum Refusal {
    /// The token itself, or its credential: the 401's message.
    Token(String),
    /// A registered claim.
    Claim(ClaimError),
}

/// Seconds since the epoch, whole as Kong's `ngx.time()`.
fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs() as f64)
}

impl Jwt {
    fn skip(&self, req: &RequestHead) -> bool {
        !self.run_on_preflight && req.method == Method::OPTIONS
    }

    /// Kong's order: query parameters, cookies, headers. All are read, so that two different
    /// tokens are found out wherever they are.
    fn find(&self, ctx: &RequestCtx, req: &RequestHead) -> Presented {
        let mut found = Gathered::default();
        let query = crate::plugins::upstream_target(ctx, req).1.unwrap_or("");
        for name in &self.uri_params {
            for value in params::values(query.as_bytes(), name) {
                found.add(&value, Place::Query(name.clone()));
            }
        }
        if !self.cookies.is_empty() {
            for value in req.headers.get_all(header::COOKIE) {
                // A header with bytes that are not ASCII is still searched (lossily): skipping
                // it would let a second token through to the upstream unseen.
                let value = String::from_utf8_lossy(value.as_bytes());
                for (name, value) in cookie_pairs(&value) {
                    if self.cookies.iter().any(|c| c == name) {
                        found.add(value, Place::Cookie(name.to_string()));
                    }
                }
            }
        }
        for name in &self.headers {
            for value in req.headers.get_all(name) {
                if let Some(token) = value.to_str().ok().and_then(header_token) {
                    found.add(token, Place::Header(name.clone()));
                }
            }
        }
        found.into_presented()
    }

    /// Checks a token and finds its consumer and credential, or says why not.
    fn verify(
        &self,
        consumers: View<'_>,
        token: &str,
        now: f64,
    ) -> Result<(Arc<str>, Arc<str>), Refusal> {
        let jwt = decode(token).map_err(|why| Refusal::Token(format!("Bad token; {why}")))?;
        let name = &self.key_claim;
        // Kong reads the key claim from the payload, then from the header (`kid`, say).
        let key = match jwt.claims.get(name).or_else(|| jwt.header.get(name)) {
            None | Some(Value::Null) => {
                return Err(Refusal::Token(format!("No mandatory '{name}' in claims")))
            }
            Some(Value::String(k)) if !k.is_empty() => k,
            Some(_) => return Err(Refusal::Token(format!("Invalid '{name}' in claims"))),
        };
        // Every credential with this key the plugin may see is tried (namespaces may share an
        // issuer); the first one's refusal is the answer when none verifies.
        let mut refusal = None;
        for (credential, consumer) in consumers.jwt(key) {
            match self.check_signature(&jwt, credential) {
                Ok(()) => {
                    self.check_claims(&jwt.claims, now)
                        .map_err(Refusal::Claim)?;
                    return Ok((consumer.id.clone(), credential.id.clone()));
                }
                Err(r) => {
                    refusal.get_or_insert(r);
                }
            }
        }
        Err(refusal
            .unwrap_or_else(|| Refusal::Token(format!("No credentials found for given '{name}'"))))
    }

    /// Whether the token is signed with `credential`'s algorithm and key.
    fn check_signature(
        &self,
        jwt: &Decoded<'_>,
        credential: &crate::consumers::JwtCredential,
    ) -> Result<(), Refusal> {
        // The credential's algorithm decides how the signature is checked; a token claiming
        // another one is refused before its signature is looked at (alg confusion).
        if jwt.alg != credential.algorithm {
            return Err(Refusal::Token("Invalid algorithm".into()));
        }
        let decoding_key = if self.secret_is_base64 && credential.algorithm.is_hmac() {
            credential
                .base64_key
                .as_ref()
                .ok_or_else(|| Refusal::Token("Invalid key/secret".into()))?
        } else {
            &credential.key
        };
        let valid = jsonwebtoken::crypto::verify(
            jwt.signature,
            jwt.signing_input.as_bytes(),
            decoding_key,
            verification_algorithm(credential.algorithm),
        );
        match valid {
            Ok(true) => Ok(()),
            _ => Err(Refusal::Token("Invalid signature".into())),
        }
    }

    /// `claims_to_verify` and `maximum_expiration` at time `now` (seconds since the epoch).
    ///
    /// A listed claim is required: a token without it is refused. Kong does the same (its
    /// type check fails on a missing claim); a token could otherwise drop its `exp` to live
    /// forever.
    fn check_claims(&self, claims: &Map<String, Value>, now: f64) -> Result<(), ClaimError> {
        let leeway = self.leeway as f64;
        for &claim in &self.claims {
            let value = claims
                .get(claim.name())
                .and_then(Value::as_f64)
                .ok_or(ClaimError::NotANumber(claim))?;
            match claim {
                Claim::Exp if now >= value + leeway => return Err(ClaimError::Expired),
                Claim::Nbf if now + leeway < value => return Err(ClaimError::NotYetValid),
                _ => {}
            }
        }
        if self.maximum_expiration > 0 {
            // `exp` was verified above (configuration requires it); no leeway here: the
            // limit is on how long the issuer made the token live.
            let exp = claims.get("exp").and_then(Value::as_f64);
            if exp.is_none_or(|exp| exp - now > self.maximum_expiration as f64) {
                return Err(ClaimError::TooLong);
            }
        }
        Ok(())
    }

    /// A refused token: 401 with the `invalid_token` challenge.
    fn refuse(&self, message: &str) -> EarlyResponse {
        unauthorized(message, Some(&self.invalid_token))
    }

    /// The answer to a refused token. A failed claim has, besides the `message`, Kong's body
    /// field named after the claim (`{"exp": "token expired"}`), for clients that read it.
    fn respond(&self, refusal: Refusal) -> EarlyResponse {
        let e = match refusal {
            Refusal::Token(message) => return self.refuse(&message),
            Refusal::Claim(e) => e,
        };
        let mut r = self.refuse(&e.message());
        let mut body = Map::new();
        body.insert("message".into(), e.message().into());
        body.insert(e.claim().into(), e.problem().into());
        r.body = serde_json::to_vec(&body)
            .expect("strings always serialise")
            .into();
        r
    }

    /// `hide_credentials`: the token does not go upstream, wherever it was.
    fn hide(&self, ctx: &mut RequestCtx, req: &mut RequestHead, places: &[Place]) {
        for place in places {
            match place {
                Place::Header(h) => {
                    req.headers.remove(h);
                }
                Place::Cookie(name) => remove_cookie(&mut req.headers, name),
                Place::Query(name) => super::remove_query_param(ctx, req, name),
            }
        }
    }
}

/// Removes the cookies named `name` from the `Cookie` headers (whatever bytes they hold), and
/// a header left empty.
fn remove_cookie(headers: &mut HeaderMap, name: &str) {
    let mut kept = Vec::new();
    for value in headers.get_all(header::COOKIE) {
        let rest: Vec<&[u8]> = value
            .as_bytes()
            .split(|&b| b == b';')
            .map(<[u8]>::trim_ascii)
            .filter(|pair| {
                let n = pair.split(|&b| b == b'=').next().unwrap_or(pair);
                !pair.is_empty() && n.trim_ascii() != name.as_bytes()
            })
            .collect();
        if !rest.is_empty() {
            // Made of parts of a valid value.
            if let Ok(v) = HeaderValue::from_bytes(&rest.join(&b"; "[..])) {
                kept.push(v);
            }
        }
    }
    headers.remove(header::COOKIE);
    for v in kept {
        headers.append(header::COOKIE, v);
    }
}

impl Plugin for Jwt {
    fn authenticates(&self) -> bool {
        true
    }

    fn access<'a>(&'a self, ctx: &'a mut RequestCtx, req: &'a mut RequestHead) -> Handled<'a> {
        if self.skip(req) || self.anonymous.already_done(ctx) {
            return Flow::Continue.into();
        }
        let refusal = match self.find(ctx, req) {
            Presented::None => unauthorized("Unauthorized", Some(&self.challenge)),
            Presented::Multiple => self.refuse("Multiple tokens provided"),
            Presented::Token(token, places) => match self.verify(ctx.consumers(), &token, now()) {
                Ok((consumer, credential)) => {
                    if self.hide {
                        self.hide(ctx, req, &places);
                    }
                    ctx.authenticate(req, consumer, Some(credential));
                    return Flow::Continue.into();
                }
                Err(refusal) => self.respond(refusal),
            },
        };
        self.anonymous.fallback(ctx, req, refusal).into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Credential;
    use crate::plugins::auth::testing::{self, body, head, message, run};
    use jsonwebtoken::{Algorithm, EncodingKey, Header};
    use serde_json::json;

    /// Fixed test keys, generated once with `openssl genpkey` (RSA 2048, P-256, P-384).
    const RSA_PRIVATE: &str = "-----BEGIN PRIVATE KEY-----
MIIEvgIBADANBgkqhkiG9w0BAQEFAASCBKgwggSkAgEAAoIBAQDscEQnciLWHi5T
owTXS0B7R+pNjHdhfr/4Msg+27ElE8k1+YYf2hKfhVDdeCHV7wMSlqcTPEQ4+Ub3
PGUa7al6zyqREMOHXvd3ffz3zGZhV/ZN4wl/k4I0Oq27Hguor8RWdj3h/n4N2Bct
LYNgOMr0qVU9jEGuvfXQ2TeLZPdDGrEDOzy6RLjBnKrdxvcsNY6Je56id+1F8bQG
V0ugXDcgvaOUwEqF73qWIqNsXGiXORG3U2ydr2Liv+BYoE3o3hx3SeJDY4tiuJ9v
B7saro9YpmZPJ+I8qFk7rwJV+tFcRX6FjUSpXZUzvlsUnHW1b+x2PShid+ocGTPj
Zlbg7EK3AgMBAAECggEADatr9U/e/bwe94zsQbpDDx2YSUV+vW9DkAj3lNLEyhz7
vBgiDgNgokJl63f/lMvNxKxbGnyYgSbAWJjwS39EFiqWDm8GrvPpoMny7yytGqGo
RtaCfRK9K2HdG31gNS98TXdmmoNJLGm65UzFVLHT4hNML1PFlGG9LYbxdCixNvre
n2MDF+nY+yeqBIDz2XFQAjnHS14/IfzTX/HSp8jaVLUq2u9U3Oe2CmweE634hh24
wjb0UaU3UBGPma/Yxj9XbwSRXcH9l3vIfclQIobDvSYt611Piy8Dlfo8EpVfzoPj
bS15inN2gZoJyAehvl3mA4EUfze7dfSJxPhYMdjYQQKBgQD6BfULfppdK+PDK8fh
jV2AquZbdEhcuvSc+UUqmt6Z/PSlEAgaQPAXOVTkcMxgd2ImZyUYBeWkHQL5RgI9
/bo+Hap0QwEhujVyyjjVGrefpRQmnPCkSsdH4iXZq9A6rSeQNDxoiXA8lp3cGdDW
l6KIxSSBewgnYt4JvRMn3gXB4QKBgQDyFy0GrDsnj3Z6XYse6uj7dKg2d+3byxwT
0tE6HT0mZFe4CtJIK9M0ds4eIGG8lPqZ+G9KfEDdBZgrkN1FWvNhD+kMasYLx6JS
th4oBU8W5PdR5tUlLtoOgzwh66xaSg/QYeAuoBiFvf5q+eOfQGtUDqqFxw7T+Tbb
8Z4IjfHHlwKBgGNUvI8NhFxh1II0wZuNo0k8HHrXDuywZgB7VAxiLO/2vGdboCx2
Aizn3R9I5RmqNHdXYThTF3IFCKpqMvfX9wc4mADKogd5SETLrJqVm8A0QHY6wawz
/UpEwY7iIL8/DcnPxvQtLkcT+7F3HC41XiCCWkeKzql/MQGjeZnMLnNhAoGBANVN
tk560mQ485s9cKb9M+rbDptvcBSJEWQmDFO4D3kUUHXIkx8j/iPryhChV3xhh6zC
SMzITh5wH3PDYDMLwAV1j1Fxgq4+Z7eY31lD1DvH4mI3kPYCIf9HgmQg0ut69hQV
KQHr7a9piBGZvAVFLUwS4AyfJ2F94+hHK4c+ChphAoGBAIS3K7kczvPvmNnxoWmL
I8Z5gGdohnm8aZLKsMY7Y/7kxlW+IBPA9VfUj7JsOsAnisl6H0L34TBVaAZyldKN
RiJYvO1AGWoutNvyh7wJkf+Hu13UpJCe422HP/br57R/o2RtTVdMNX5+H7+uCJxB
4sWacYy4GARnOpzsR0CHIFA3
-----END PRIVATE KEY-----
";
    const RSA_PUBLIC: &str = "-----BEGIN PUBLIC KEY-----
MIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEA7HBEJ3Ii1h4uU6ME10tA
e0fqTYx3YX6/+DLIPtuxJRPJNfmGH9oSn4VQ3Xgh1e8DEpanEzxEOPlG9zxlGu2p
es8qkRDDh173d33898xmYVf2TeMJf5OCNDqtux4LqK/EVnY94f5+DdgXLS2DYDjK
9KlVPYxBrr310Nk3i2T3QxqxAzs8ukS4wZyq3cb3LDWOiXueonftRfG0BldLoFw3
IL2jlMBKhe96liKjbFxolzkRt1Nsna9i4r/gWKBN6N4cd0niQ2OLYrifbwe7Gq6P
WKZmTyfiPKhZO68CVfrRXEV+hY1EqV2VM75bFJx1tW/sdj0oYnfqHBkz42ZW4OxC
twIDAQAB
-----END PUBLIC KEY-----
";
    const P256_PRIVATE: &str = "-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgFu6KIlYVJ3DjFAKY
JdpbkNXNgFGKKfMo1NwF/NIz39OhRANCAAQqQ2v8AnGpBRr8MbYftRhTKIeOgf6g
cfTbb/YUq6IePv8U+DYpFmtfsVwQDukXeYnpvPrcxO+jO6yPlxRDTiOH
-----END PRIVATE KEY-----
";
    const P256_PUBLIC: &str = "-----BEGIN PUBLIC KEY-----
MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEKkNr/AJxqQUa/DG2H7UYUyiHjoH+
oHH022/2FKuiHj7/FPg2KRZrX7FcEA7pF3mJ6bz63MTvozusj5cUQ04jhw==
-----END PUBLIC KEY-----
";
    const P384_PRIVATE: &str = "-----BEGIN PRIVATE KEY-----
MIG2AgEAMBAGByqGSM49AgEGBSuBBAAiBIGeMIGbAgEBBDDdXonB5UHcTX7RxiXI
dCd+KcpSRJEdI7SxT5yXF4U4CEw+3xsfSN4s6X3gpTGDrEOhZANiAASC+u1dhhIB
kGiogAMLPELkX39YsCrCgUZpXy5b/umsOPlmU5a6FZWUqkDloD1Rfm2sMa2I0dgp
PUB+DLSm96rW/a19nSzwnD1BX8BdQadfSKWoWf3grjAZsPlujqoi2Y8=
-----END PRIVATE KEY-----
";
    const P384_PUBLIC: &str = "-----BEGIN PUBLIC KEY-----
MHYwEAYHKoZIzj0CAQYFK4EEACIDYgAEgvrtXYYSAZBoqIADCzxC5F9/WLAqwoFG
aV8uW/7prDj5ZlOWuhWVlKpA5aA9UX5trDGtiNHYKT1Afgy0pveq1v2tfZ0s8Jw9
QV/AXUGnX0ilqFn94K4wGbD5bo6qItmP
-----END PUBLIC KEY-----
";

    /// The secret of alice's credential for `alg` (HS*), not base64: it has spaces.
    fn secret(alg: Algorithm) -> &'static [u8] {
        match alg {
            Algorithm::HS256 => b"secret for HS256",
            Algorithm::HS384 => b"secret for HS384",
            _ => b"secret for HS512",
        }
    }

    /// The raw secret of the `b64` credentials, stored in base64: URL-safe and unpadded
    /// (`-_-_a2V5ISE`), and standard and padded (`+/+/a2V5ISE=`).
    const B64_SECRET: &[u8] = b"\xfb\xff\xbfkey!!";

    fn jwt_cred(id: &str, key: &str, alg: JwtAlgorithm) -> Credential {
        let (secret, public) = match alg {
            JwtAlgorithm::HS256 | JwtAlgorithm::HS384 | JwtAlgorithm::HS512 => (
                Some(String::from_utf8(secret(verification_algorithm(alg)).to_vec()).unwrap()),
                None,
            ),
            JwtAlgorithm::ES256 => (None, Some(P256_PUBLIC.to_string())),
            JwtAlgorithm::ES384 => (None, Some(P384_PUBLIC.to_string())),
            _ => (None, Some(RSA_PUBLIC.to_string())),
        };
        Credential::Jwt {
            id: id.into(),
            key: key.into(),
            algorithm: alg,
            secret,
            rsa_public_key: public,
        }
    }

    /// alice has one credential per algorithm, keyed by the algorithm's name (`HS256`, …),
    /// and `b64` and `b64-std`, HS256 with [`B64_SECRET`] in base64.
    fn ctx() -> RequestCtx {
        let mut credentials: Vec<Credential> = JwtAlgorithm::ALL
            .iter()
            .map(|&a| jwt_cred(&format!("ns/alice-{}", a.as_str()), a.as_str(), a))
            .collect();
        for (key, encoded) in [("b64", "-_-_a2V5ISE"), ("b64-std", "+/+/a2V5ISE=")] {
            credentials.push(Credential::Jwt {
                id: format!("ns/alice-{key}"),
                key: key.into(),
                algorithm: JwtAlgorithm::HS256,
                secret: Some(encoded.into()),
                rsa_public_key: None,
            });
        }
        let alice = testing::consumer("alice", Some("A-1"), credentials);
        testing::ctx(vec![alice, testing::guest()], Some("ns"))
    }

    fn encoding_key(alg: Algorithm) -> EncodingKey {
        match alg {
            Algorithm::HS256 | Algorithm::HS384 | Algorithm::HS512 => {
                EncodingKey::from_secret(secret(alg))
            }
            Algorithm::ES256 => EncodingKey::from_ec_pem(P256_PRIVATE.as_bytes()).unwrap(),
            Algorithm::ES384 => EncodingKey::from_ec_pem(P384_PRIVATE.as_bytes()).unwrap(),
            _ => EncodingKey::from_rsa_pem(RSA_PRIVATE.as_bytes()).unwrap(),
        }
    }

    /// A token signed with `alg`'s test key.
    fn token(alg: Algorithm, claims: Value) -> String {
        jsonwebtoken::encode(&Header::new(alg), &claims, &encoding_key(alg)).unwrap()
    }

    /// An HS256 token for alice's `HS256` credential.
    fn hs256(claims: Value) -> String {
        token(Algorithm::HS256, claims)
    }

    fn alice() -> String {
        hs256(json!({"iss": "HS256"}))
    }

    fn plugin(config: Value) -> Arc<dyn Plugin> {
        build(&config).unwrap()
    }

    fn bearer(token: &str) -> String {
        format!("Bearer {token}")
    }

    /// The refusal of a request with `Authorization: Bearer <token>`.
    fn refused(p: &dyn Plugin, token: &str) -> EarlyResponse {
        let (mut c, mut r) = (ctx(), head("/x", &[("authorization", &bearer(token))]));
        let e = run(p, &mut c, &mut r).expect("refused");
        assert_eq!(e.status, 401);
        assert!(c.consumer.is_none());
        e
    }

    #[test]
    fn a_token_of_each_algorithm_identifies_the_consumer() {
        let p = plugin(json!({}));
        for alg in JwtAlgorithm::ALL {
            let t = token(
                verification_algorithm(alg),
                json!({"iss": alg.as_str(), "sub": "x"}),
            );
            let (mut c, mut r) = (ctx(), head("/x", &[("authorization", &bearer(&t))]));
            assert!(run(&*p, &mut c, &mut r).is_none(), "{alg:?}");
            let credential = format!("ns/alice-{}", alg.as_str());
            assert_eq!(c.consumer.as_deref(), Some("ns/alice"));
            assert_eq!(c.credential.as_deref(), Some(credential.as_str()));
            assert_eq!(r.headers["x-consumer-username"], "alice");
            assert_eq!(r.headers["x-consumer-custom-id"], "A-1");
            assert_eq!(r.headers["x-credential-identifier"], credential.as_str());
            assert!(r.headers.get("x-anonymous-consumer").is_none());
            // Without hide_credentials the token goes on.
            assert_eq!(r.headers["authorization"], bearer(&t).as_str());
        }
    }

    #[test]
    fn a_request_without_a_token_gets_the_challenge() {
        let p = plugin(json!({}));
        for h in [
            vec![],
            vec![("authorization", "Basic YTpi")],
            vec![("authorization", "Bearer")],
            vec![("authorization", "Bearer   ")],
        ] {
            let (mut c, mut r) = (ctx(), head("/x?jwt=", &h));
            let e = run(&*p, &mut c, &mut r).expect("refused");
            assert_eq!(
                (e.status.as_u16(), message(&e).as_str()),
                (401, "Unauthorized")
            );
            assert_eq!(
                e.headers["www-authenticate"], "Bearer realm=\"weir\"",
                "{h:?}"
            );
        }
        let e = refused(&*plugin(json!({"realm": "api"})), "x.y.z");
        assert_eq!(
            e.headers["www-authenticate"],
            "Bearer realm=\"api\", error=\"invalid_token\""
        );
    }

    #[test]
    fn the_key_claim_selects_the_credential() {
        let p = plugin(json!({}));
        for (claims, msg) in [
            (json!({"sub": "x"}), "No mandatory 'iss' in claims"),
            (json!({"iss": null}), "No mandatory 'iss' in claims"),
            (json!({"iss": ""}), "Invalid 'iss' in claims"),
            (json!({"iss": 256}), "Invalid 'iss' in claims"),
            (
                json!({"iss": "nobody"}),
                "No credentials found for given 'iss'",
            ),
        ] {
            let e = refused(&*p, &hs256(claims.clone()));
            assert_eq!(message(&e), msg, "{claims}");
            assert_eq!(
                e.headers["www-authenticate"],
                "Bearer realm=\"weir\", error=\"invalid_token\""
            );
        }
        // Another claim name, read from the payload or else from the header (as Kong).
        let p = plugin(json!({"key_claim_name": "kid"}));
        let (mut c, mut r) = (
            ctx(),
            head(
                "/x",
                &[("authorization", &bearer(&hs256(json!({"kid": "HS256"}))))],
            ),
        );
        assert!(run(&*p, &mut c, &mut r).is_none());
        let mut h = Header::new(Algorithm::HS256);
        h.kid = Some("HS256".into());
        let t = jsonwebtoken::encode(&h, &json!({}), &encoding_key(Algorithm::HS256)).unwrap();
        let (mut c, mut r) = (ctx(), head("/x", &[("authorization", &bearer(&t))]));
        assert!(run(&*p, &mut c, &mut r).is_none());
        assert_eq!(c.credential.as_deref(), Some("ns/alice-HS256"));
        assert_eq!(
            message(&refused(&*p, &alice())),
            "No mandatory 'kid' in claims"
        );
    }

    #[test]
    fn a_credential_of_another_namespace_is_not_found() {
        let p = plugin(json!({}));
        let (mut c, mut r) = (ctx(), head("/x", &[("authorization", &bearer(&alice()))]));
        c.consumer_scope = Some("other".into());
        let e = run(&*p, &mut c, &mut r).unwrap();
        assert_eq!(message(&e), "No credentials found for given 'iss'");
    }

    #[test]
    fn the_token_must_use_the_credentials_algorithm() {
        let p = plugin(json!({}));
        // An HS384 token for the HS256 credential, even signed with its secret.
        let t = jsonwebtoken::encode(
            &Header::new(Algorithm::HS384),
            &json!({"iss": "HS256"}),
            &EncodingKey::from_secret(secret(Algorithm::HS256)),
        )
        .unwrap();
        assert_eq!(message(&refused(&*p, &t)), "Invalid algorithm");
        // Alg confusion: an HS256 token "signed" with the RSA credential's public key as the
        // HMAC secret. A verifier trusting the token's `alg` would accept it.
        for iss in ["RS256", "ES256"] {
            let public = if iss == "RS256" {
                RSA_PUBLIC
            } else {
                P256_PUBLIC
            };
            let forged = jsonwebtoken::encode(
                &Header::new(Algorithm::HS256),
                &json!({"iss": iss}),
                &EncodingKey::from_secret(public.as_bytes()),
            )
            .unwrap();
            assert_eq!(
                message(&refused(&*p, &forged)),
                "Invalid algorithm",
                "{iss}"
            );
        }
        // An RS256 token for the RS512 credential (same key pair).
        let t = token(Algorithm::RS256, json!({"iss": "RS512"}));
        assert_eq!(message(&refused(&*p, &t)), "Invalid algorithm");
        // `alg: none`, and algorithms no credential can have, are not tokens at all.
        for alg in ["none", "PS256", "EdDSA"] {
            let h = BASE64URL.encode(format!(r#"{{"alg":"{alg}"}}"#));
            let c = BASE64URL.encode(r#"{"iss":"HS256"}"#);
            let e = refused(&*p, &format!("{h}.{c}.sig"));
            assert_eq!(message(&e), "Bad token; invalid alg", "{alg}");
        }
    }

    #[test]
    fn a_wrong_signature_is_refused() {
        let p = plugin(json!({}));
        let wrong = jsonwebtoken::encode(
            &Header::new(Algorithm::HS256),
            &json!({"iss": "HS256"}),
            &EncodingKey::from_secret(b"not the secret"),
        )
        .unwrap();
        assert_eq!(message(&refused(&*p, &wrong)), "Invalid signature");
        // A payload changed after signing, for each algorithm.
        for alg in JwtAlgorithm::ALL {
            let t = token(verification_algorithm(alg), json!({"iss": alg.as_str()}));
            let parts: Vec<&str> = t.split('.').collect();
            let other = BASE64URL.encode(format!(r#"{{"iss":"{}","admin":true}}"#, alg.as_str()));
            let tampered = format!("{}.{}.{}", parts[0], other, parts[2]);
            assert_eq!(
                message(&refused(&*p, &tampered)),
                "Invalid signature",
                "{alg:?}"
            );
            // No signature at all.
            let unsigned = format!("{}.{}.", parts[0], parts[1]);
            assert_eq!(
                message(&refused(&*p, &unsigned)),
                "Invalid signature",
                "{alg:?}"
            );
        }
    }

    #[test]
    fn malformed_tokens_are_refused_without_echoing_them() {
        let p = plugin(json!({}));
        let h = BASE64URL.encode(r#"{"alg":"HS256","typ":"JWT"}"#);
        let c = BASE64URL.encode(r#"{"iss":"HS256"}"#);
        let sig = alice().rsplit('.').next().unwrap().to_string();
        for (t, why) in [
            (format!("{h}.{c}"), "invalid JSON"),
            (format!("{h}.{c}.{sig}.{sig}"), "invalid JSON"),
            ("secret-looking-garbage".into(), "invalid JSON"),
            (format!("{h}.!!!.{sig}"), "invalid JSON"),
            (
                format!("{h}.{}.{sig}", BASE64URL.encode("not json")),
                "invalid JSON",
            ),
            (
                format!("{}.{c}.{sig}", BASE64URL.encode("[1]")),
                "invalid alg",
            ),
            (
                format!("{}.{c}.{sig}", BASE64URL.encode("{}")),
                "invalid alg",
            ),
            (
                format!("{}.{c}.{sig}", BASE64URL.encode(r#"{"alg":256}"#)),
                "invalid alg",
            ),
            (
                format!("{h}.{}.{sig}", BASE64URL.encode(r#"["iss"]"#)),
                "invalid claims",
            ),
            (
                format!("{h}.{}.{sig}", BASE64URL.encode("null")),
                "invalid claims",
            ),
            (format!("{h}.{c}.not*base64"), "invalid signature"),
        ] {
            let e = refused(&*p, &t);
            assert_eq!(message(&e), format!("Bad token; {why}"), "{t}");
            assert!(!String::from_utf8_lossy(&e.body).contains(&t), "{t}");
        }
    }

    #[test]
    fn padded_parts_are_accepted() {
        // Kong adds missing padding before decoding, so padded parts are fine too.
        use base64::engine::general_purpose::URL_SAFE;
        let h = URL_SAFE.encode(r#"{"alg":"HS256","x":12}"#);
        let c = URL_SAFE.encode(r#"{"iss":"HS256","n":123}"#);
        assert!(h.ends_with("==") && c.ends_with("=") && !c.ends_with("=="));
        let input = format!("{h}.{c}");
        let key = encoding_key(Algorithm::HS256);
        let sig = jsonwebtoken::crypto::sign(input.as_bytes(), &key, Algorithm::HS256).unwrap();
        let p = plugin(json!({}));
        let (mut c, mut r) = (
            ctx(),
            head(
                "/x",
                &[("authorization", &bearer(&format!("{input}.{sig}=")))],
            ),
        );
        assert!(run(&*p, &mut c, &mut r).is_none());
        assert_eq!(c.credential.as_deref(), Some("ns/alice-HS256"));
    }

    #[test]
    fn the_token_is_found_in_the_query_a_cookie_or_a_header_and_hidden_there() {
        let t = alice();
        let p = plugin(json!({
            "uri_param_names": ["jwt", "token"],
            "cookie_names": ["session"],
            "header_names": ["authorization", "x-token"],
            "hide_credentials": true,
        }));
        let cookie = format!("a=1; session={t}; b=2");
        let quoted = format!("session=\"{t}\"");
        let lower = format!("bearer {t}");
        for (uri, headers, upstream_uri, kept) in [
            (format!("/x?a=1&jwt={t}&b=2"), vec![], "/x?a=1&b=2", None),
            (format!("/x?token={t}"), vec![], "/x", None),
            (
                "/x".to_string(),
                vec![("cookie", cookie.as_str())],
                "/x",
                Some("a=1; b=2"),
            ),
            (
                "/x".to_string(),
                vec![("cookie", quoted.as_str())],
                "/x",
                None,
            ),
            (
                "/x".to_string(),
                vec![("authorization", lower.as_str())],
                "/x",
                None,
            ),
            ("/x".to_string(), vec![("x-token", t.as_str())], "/x", None),
        ] {
            let (mut c, mut r) = (ctx(), head(&uri, &headers));
            assert!(run(&*p, &mut c, &mut r).is_none(), "{uri} {headers:?}");
            assert_eq!(c.consumer.as_deref(), Some("ns/alice"));
            assert_eq!(r.uri.path_and_query().unwrap().as_str(), upstream_uri);
            assert_eq!(r.headers.get("cookie").map(|v| v.to_str().unwrap()), kept);
            assert!(r.headers.get("authorization").is_none());
            assert!(r.headers.get("x-token").is_none());
        }
        // Split cookie headers (HTTP/2) are all searched and cleaned.
        let (mut c, mut r) = (
            ctx(),
            head(
                "/x",
                &[("cookie", "a=1"), ("cookie", &format!("session={t}"))],
            ),
        );
        assert!(run(&*p, &mut c, &mut r).is_none());
        assert_eq!(r.headers.get_all("cookie").iter().count(), 1);
        assert_eq!(r.headers["cookie"], "a=1");
        // And one holding bytes that are not ASCII loses the token, keeping the rest as it was.
        let (mut c, mut r) = (
            ctx(),
            head("/x", &[("cookie", &format!("session={t}; x=\u{ff}"))]),
        );
        assert!(run(&*p, &mut c, &mut r).is_none());
        assert_eq!(r.headers["cookie"].as_bytes(), "x=\u{ff}".as_bytes());
        // The same token in two places counts once, and is hidden from both.
        let (mut c, mut r) = (
            ctx(),
            head(
                &format!("/x?jwt={t}&q=1"),
                &[("authorization", &bearer(&t))],
            ),
        );
        assert!(run(&*p, &mut c, &mut r).is_none());
        assert_eq!(r.uri.path_and_query().unwrap().as_str(), "/x?q=1");
        assert!(r.headers.get("authorization").is_none());
        // Places not configured are not searched; by default, no cookies.
        let p = plugin(json!({"uri_param_names": []}));
        let (mut c, mut r) = (
            ctx(),
            head(&format!("/x?jwt={t}"), &[("cookie", &format!("jwt={t}"))]),
        );
        assert_eq!(message(&run(&*p, &mut c, &mut r).unwrap()), "Unauthorized");
    }

    #[test]
    fn two_different_tokens_are_refused() {
        let p = plugin(json!({"cookie_names": ["jwt"]}));
        let (t, u) = (alice(), hs256(json!({"iss": "HS256", "n": 2})));
        for (uri, headers) in [
            (format!("/x?jwt={t}&jwt={u}"), vec![]),
            (format!("/x?jwt={t}"), vec![("authorization", bearer(&u))]),
            (format!("/x?jwt={t}"), vec![("cookie", format!("jwt={u}"))]),
            (
                "/x".into(),
                vec![("authorization", bearer(&t)), ("authorization", bearer(&u))],
            ),
            // A Cookie header with bytes that are not ASCII is searched all the same.
            (
                "/x".into(),
                vec![
                    ("authorization", bearer(&t)),
                    ("cookie", format!("jwt={u}; x=\u{ff}")),
                ],
            ),
        ] {
            let headers: Vec<(&str, &str)> =
                headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
            let (mut c, mut r) = (ctx(), head(&uri, &headers));
            let e = run(&*p, &mut c, &mut r).expect("refused");
            assert_eq!(message(&e), "Multiple tokens provided", "{uri} {headers:?}");
            assert!(c.consumer.is_none());
        }
    }

    #[test]
    fn registered_claims_are_checked_when_listed() {
        let p = plugin(json!({"claims_to_verify": ["exp", "nbf"]}));
        let future = now() + 3600.0;
        let past = now() - 3600.0;
        let ok = hs256(json!({"iss": "HS256", "exp": future, "nbf": past}));
        let (mut c, mut r) = (ctx(), head("/x", &[("authorization", &bearer(&ok))]));
        assert!(run(&*p, &mut c, &mut r).is_none());
        for (claims, msg, field, problem) in [
            (
                json!({"exp": past, "nbf": past}),
                "token expired",
                "exp",
                "token expired",
            ),
            (
                json!({"exp": future, "nbf": future}),
                "token not valid yet",
                "nbf",
                "token not valid yet",
            ),
            (
                json!({"nbf": past}),
                "exp must be a number",
                "exp",
                "must be a number",
            ),
            (
                json!({"exp": "soon", "nbf": past}),
                "exp must be a number",
                "exp",
                "must be a number",
            ),
            (
                json!({"exp": future}),
                "nbf must be a number",
                "nbf",
                "must be a number",
            ),
        ] {
            let mut claims = claims;
            claims["iss"] = json!("HS256");
            let e = refused(&*p, &hs256(claims.clone()));
            let b = body(&e);
            assert_eq!(b["message"], msg, "{claims}");
            // Kong's body names the claim.
            assert_eq!(b[field], problem, "{claims}");
        }
        // Not listed: not checked.
        let p = plugin(json!({"claims_to_verify": null}));
        let (mut c, mut r) = (
            ctx(),
            head(
                "/x",
                &[(
                    "authorization",
                    &bearer(&hs256(json!({"iss": "HS256", "exp": past}))),
                )],
            ),
        );
        assert!(run(&*p, &mut c, &mut r).is_none());
    }

    /// The plugin itself, to call its pure checks.
    fn jwt(config: Value) -> Jwt {
        configure(&config).unwrap()
    }

    fn claims(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn exp_and_nbf_honour_the_leeway_at_a_fixed_time() {
        let now = 1_000_000.0;
        let strict = jwt(json!({"claims_to_verify": ["exp", "nbf"]}));
        let lenient = jwt(json!({"claims_to_verify": ["exp", "nbf"], "leeway": 30}));
        let at = |exp: f64, nbf: f64| claims(json!({"exp": exp, "nbf": nbf}));
        // `exp` is the first instant the token is no longer valid (Kong: exp <= now).
        assert_eq!(strict.check_claims(&at(now + 1.0, now), now), Ok(()));
        assert_eq!(
            strict.check_claims(&at(now, now), now),
            Err(ClaimError::Expired)
        );
        assert_eq!(
            strict.check_claims(&at(now + 1.0, now + 1.0), now),
            Err(ClaimError::NotYetValid)
        );
        // A token expired 10 s ago, or valid in 10 s, passes with 30 s of leeway; not 30 s.
        assert_eq!(
            lenient.check_claims(&at(now - 10.0, now + 10.0), now),
            Ok(())
        );
        assert_eq!(
            lenient.check_claims(&at(now - 29.5, now + 30.0), now),
            Ok(())
        );
        assert_eq!(
            lenient.check_claims(&at(now - 30.0, now), now),
            Err(ClaimError::Expired)
        );
        assert_eq!(
            lenient.check_claims(&at(now, now + 30.5), now),
            Err(ClaimError::NotYetValid)
        );
        // Fractional times are numbers too.
        assert_eq!(strict.check_claims(&at(now + 0.5, now - 0.5), now), Ok(()));
    }

    #[test]
    fn maximum_expiration_limits_the_tokens_lifetime() {
        let t0 = 1_000_000.0;
        let p = jwt(json!({"claims_to_verify": ["exp"], "maximum_expiration": 3600, "leeway": 60}));
        let exp = |exp: f64| claims(json!({"exp": exp}));
        assert_eq!(p.check_claims(&exp(t0 + 3600.0), t0), Ok(()));
        assert_eq!(
            p.check_claims(&exp(t0 + 3601.0), t0),
            Err(ClaimError::TooLong)
        );
        // The leeway applies to `exp` itself.
        assert_eq!(p.check_claims(&exp(t0 - 59.0), t0), Ok(()));
        assert_eq!(
            p.check_claims(&exp(t0 - 60.0), t0),
            Err(ClaimError::Expired)
        );
        // End to end, with Kong's field in the body.
        let p = plugin(json!({"claims_to_verify": ["exp"], "maximum_expiration": 60}));
        let e = refused(&*p, &hs256(json!({"iss": "HS256", "exp": now() + 3600.0})));
        assert_eq!(message(&e), "exceeds maximum allowed expiration");
        assert_eq!(body(&e)["exp"], "exceeds maximum allowed expiration");
        let (mut c, mut r) = (
            ctx(),
            head(
                "/x",
                &[(
                    "authorization",
                    &bearer(&hs256(json!({"iss": "HS256", "exp": now() + 30.0}))),
                )],
            ),
        );
        assert!(run(&*p, &mut c, &mut r).is_none());
    }

    #[test]
    fn base64_secrets_are_decoded_when_asked() {
        let signed = |iss: &str| {
            jsonwebtoken::encode(
                &Header::new(Algorithm::HS256),
                &json!({ "iss": iss }),
                &EncodingKey::from_secret(B64_SECRET),
            )
            .unwrap()
        };
        let p = plugin(json!({"secret_is_base64": true}));
        // Either alphabet, padded or not.
        for key in ["b64", "b64-std"] {
            let (mut c, mut r) = (
                ctx(),
                head("/x", &[("authorization", &bearer(&signed(key)))]),
            );
            assert!(run(&*p, &mut c, &mut r).is_none(), "{key}");
            assert_eq!(
                c.credential.as_deref(),
                Some(format!("ns/alice-{key}").as_str())
            );
        }
        let signed = signed("b64");
        // Without the option the secret is the text itself.
        assert_eq!(
            message(&refused(&*plugin(json!({})), &signed)),
            "Invalid signature"
        );
        // A secret that is not base64 is no key.
        assert_eq!(message(&refused(&*p, &alice())), "Invalid key/secret");
        // Public keys are PEM, never base64-decoded.
        let t = token(Algorithm::RS256, json!({"iss": "RS256"}));
        let (mut c, mut r) = (ctx(), head("/x", &[("authorization", &bearer(&t))]));
        assert!(run(&*p, &mut c, &mut r).is_none());
    }

    #[test]
    fn anonymous_is_used_when_authentication_fails() {
        let hiding = |mut config: Value| {
            config["hide_credentials"] = json!(true);
            plugin(config)
        };
        let bad = bearer(&hs256(json!({"iss": "nobody"})));
        let refused = [vec![], vec![("authorization", bad.as_str())]];
        let heads = testing::assert_anonymous_fallback(hiding, &refused, ctx);
        for (h, r) in refused.iter().zip(heads) {
            // A refused token is not hidden: nothing was authenticated by it.
            assert_eq!(r.headers.get("authorization").is_some(), !h.is_empty());
        }
    }

    #[test]
    fn preflights_pass_when_asked() {
        testing::assert_preflight_switch(plugin, ctx);
    }

    #[test]
    fn configuration_errors_name_the_field() {
        for (config, field) in [
            (json!({"uri_param_names": [""]}), "uri_param_names[0]"),
            (json!({"cookie_names": ["a b"]}), "cookie_names[0]"),
            (json!({"cookie_names": ["ok", "a=b"]}), "cookie_names[1]"),
            (json!({"header_names": ["bad name"]}), "header_names[0]"),
            (
                json!({"uri_param_names": [], "header_names": []}),
                "header_names",
            ),
            (json!({"key_claim_name": ""}), "key_claim_name"),
            (
                json!({"claims_to_verify": ["exp", "iat"]}),
                "claims_to_verify[1]",
            ),
            (
                json!({"maximum_expiration": 31_536_001}),
                "maximum_expiration",
            ),
            (json!({"maximum_expiration": -1}), "maximum_expiration"),
            (json!({"maximum_expiration": 60}), "claims_to_verify"),
            (
                json!({"maximum_expiration": 60, "claims_to_verify": ["nbf"]}),
                "claims_to_verify",
            ),
            (json!({"leeway": -5}), "leeway"),
            (json!({"secret_is_base64": "yes"}), "secret_is_base64"),
            (json!({"anonymous": ""}), "anonymous"),
            (json!({"realm": "a\"b"}), "realm"),
            (json!({"nope": 1}), "nope"),
        ] {
            let e = build(&config).err().unwrap();
            assert!(e.contains(field), "{config}: {e}");
        }
        // Kong's defaults, and `null` where Kong exports it.
        let p = jwt(json!({"claims_to_verify": null, "anonymous": null, "realm": null}));
        assert_eq!(p.uri_params, ["jwt"]);
        assert!(p.cookies.is_empty());
        assert_eq!(p.headers, [header::AUTHORIZATION]);
        assert_eq!(p.key_claim, "iss");
        assert!(p.claims.is_empty() && p.run_on_preflight && !p.hide && !p.secret_is_base64);
        assert_eq!((p.maximum_expiration, p.leeway), (0, 0));
    }
}
