//! `request-transformer`: Kong's plugin of that name. In `access` it edits the headers, the
//! method, the query string and the upstream path; in `request_body`, only when `body` edits
//! are configured, it edits JSON (top-level keys) and urlencoded form bodies, which then go
//! upstream with their new exact length. Every other body streams untouched.
//!
//! A JSON or form body with a `Content-Encoding` is refused (415) where body edits are
//! configured: many upstreams ignore a request's `Content-Encoding` and parse the body anyway,
//! so forwarding it unedited would let any client skip the edits (`remove.body` included).

use std::sync::Arc;

use bytes::Bytes;
use http::{header, HeaderValue, Method, StatusCode};
use serde::Deserialize;
use serde_json::Value;

use super::json::JsonOps;
use super::{
    is_encoded, is_form, is_json, nullable, param_ops, Buffers, HeaderLists, HeaderOps, ParamOps,
};
use crate::pipeline::RequestCtx;
use crate::plugins::{
    parse_config, BodyChunk, EarlyResponse, Flow, Handled, Plugin, PluginError, RequestHead,
};

/// The configuration, with Kong's keys.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct Conf {
    #[serde(default)]
    http_method: Option<String>,
    #[serde(default, deserialize_with = "nullable")]
    remove: Lists,
    #[serde(default, deserialize_with = "nullable")]
    rename: Lists,
    #[serde(default, deserialize_with = "nullable")]
    replace: ReplaceLists,
    #[serde(default, deserialize_with = "nullable")]
    add: Lists,
    #[serde(default, deserialize_with = "nullable")]
    append: Lists,
}

/// One operation's lists.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct Lists {
    #[serde(default, deserialize_with = "nullable")]
    headers: Vec<String>,
    #[serde(default, deserialize_with = "nullable")]
    querystring: Vec<String>,
    #[serde(default, deserialize_with = "nullable")]
    body: Vec<String>,
}

/// `replace`'s lists, and the upstream path.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct ReplaceLists {
    #[serde(default, deserialize_with = "nullable")]
    headers: Vec<String>,
    #[serde(default, deserialize_with = "nullable")]
    querystring: Vec<String>,
    #[serde(default, deserialize_with = "nullable")]
    body: Vec<String>,
    #[serde(default)]
    uri: Option<String>,
}

/// An instance: every edit parsed and checked at build.
#[derive(Debug)]
struct RequestTransformer {
    method: Option<Method>,
    headers: HeaderOps,
    query: ParamOps,
    /// `replace.uri`: the whole upstream path (the query string is kept).
    uri: Option<String>,
    /// The `body` edits, for JSON bodies (values are strings, as in Kong).
    json: JsonOps,
    /// The same edits, for urlencoded forms.
    form: ParamOps,
}

/// What an instance does with a request's body.
#[derive(Clone, Copy, Debug, PartialEq)]
enum BodyKind {
    /// Holds it back and edits it as JSON.
    Json,
    /// Holds it back and edits it as an urlencoded form.
    Form,
    /// A content-coded body of a type the instance edits, whose length `access` could not see
    /// (chunked, or HTTP/2 without `Content-Length`): refused at its first byte.
    Coded,
}

/// What `access` decided about the body.
#[derive(Debug, PartialEq)]
enum BodyPlan {
    /// Nothing to do: it streams as it is.
    Pass,
    /// Watch it in `request_body`, as this kind.
    Watch(BodyKind),
    /// Refuse the request now (415): a coded body the edits would have to skip.
    Refuse,
}

/// The answer to a request whose body is content-coded where the edits apply.
fn coded_body_refused() -> EarlyResponse {
    let mut r = EarlyResponse::message(
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "content-coded request bodies cannot be transformed: send the body without \
         Content-Encoding",
    );
    // RFC 9110 §15.5.16: say which codings would have been accepted.
    r.headers.insert(
        header::ACCEPT_ENCODING,
        HeaderValue::from_static("identity"),
    );
    r
}

/// Builds an instance from its configuration.
pub(super) fn build(config: &serde_json::Value) -> Result<Arc<dyn Plugin>, String> {
    Ok(Arc::new(transformer(config)?))
}

fn transformer(config: &serde_json::Value) -> Result<RequestTransformer, String> {
    let c: Conf = parse_config(config)?;
    let method = match c.http_method.as_deref() {
        None => None,
        Some(m) if !m.is_empty() && m.bytes().all(|b| b.is_ascii_alphabetic()) => Some(
            Method::from_bytes(m.to_ascii_uppercase().as_bytes())
                .map_err(|_| format!("http_method: {m:?} is not a method"))?,
        ),
        Some(m) => return Err(format!("http_method: {m:?} is not a method (letters only)")),
    };
    let headers = HeaderOps::build(
        &HeaderLists {
            remove: ("remove.headers", &c.remove.headers),
            rename: ("rename.headers", &c.rename.headers),
            replace: ("replace.headers", &c.replace.headers),
            add: ("add.headers", &c.add.headers),
            append: ("append.headers", &c.append.headers),
        },
        true,
    )?;
    let query = param_ops([
        ("remove.querystring", &c.remove.querystring),
        ("rename.querystring", &c.rename.querystring),
        ("replace.querystring", &c.replace.querystring),
        ("add.querystring", &c.add.querystring),
        ("append.querystring", &c.append.querystring),
    ])?;
    let form = param_ops([
        ("remove.body", &c.remove.body),
        ("rename.body", &c.rename.body),
        ("replace.body", &c.replace.body),
        ("add.body", &c.add.body),
        ("append.body", &c.append.body),
    ])?;
    let strings = |v: &[(String, String)]| -> Vec<(String, Value)> {
        v.iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect()
    };
    let json = JsonOps {
        remove: form.remove.clone(),
        rename: form.rename.clone(),
        replace: strings(&form.replace),
        add: strings(&form.add),
        append: strings(&form.append),
    };
    let uri = match c.replace.uri {
        None => None,
        Some(u) => {
            if u.contains("$(") {
                return Err(format!(
                    "replace.uri: {u:?}: templates ($(...)) are not supported"
                ));
            }
            let path_ok = u.starts_with('/')
                && !u.contains(['?', '#'])
                && http::uri::PathAndQuery::try_from(u.as_str()).is_ok();
            if !path_ok {
                return Err(format!(
                    "replace.uri: {u:?} is not a path (it starts with /, has no ? or #, and \
                     escapes other special characters as %XX)"
                ));
            }
            Some(u)
        }
    };
    Ok(RequestTransformer {
        method,
        headers,
        query,
        uri,
        json,
        form,
    })
}

impl RequestTransformer {
    /// This instance's key among the buffers of a request.
    fn id(&self) -> usize {
        self as *const Self as usize
    }

    /// Edits the query string and sets the upstream path: on `ctx.upstream_uri` when a plugin
    /// (or `replace.uri`) set one, on the request's own URI otherwise.
    fn rewrite_target(
        &self,
        ctx: &mut RequestCtx,
        req: &mut RequestHead,
    ) -> Result<(), PluginError> {
        if self.query.is_empty() && self.uri.is_none() {
            return Ok(());
        }
        let (path, query) = match ctx.upstream_uri.as_deref() {
            Some(u) => match u.split_once('?') {
                Some((p, q)) => (p.to_string(), Some(q)),
                None => (u.to_string(), None),
            },
            None => (req.uri.path().to_string(), req.uri.query()),
        };
        let edited = match self.query.is_empty() {
            true => None,
            false => self.query.apply(query.unwrap_or("")),
        };
        if edited.is_none() && self.uri.is_none() {
            return Ok(());
        }
        let query = edited.as_deref().or(query).filter(|q| !q.is_empty());
        let mut target = self.uri.clone().unwrap_or(path);
        if let Some(q) = query {
            target.push('?');
            target.push_str(q);
        }
        if self.uri.is_some() {
            ctx.upstream_uri = Some(target);
            return Ok(());
        }
        crate::plugins::set_upstream_target(ctx, req, target)
    }

    /// What to do with the body, judged on the headers as the upstream will get them.
    fn body_plan(&self, req: &RequestHead) -> BodyPlan {
        if self.form.is_empty() {
            return BodyPlan::Pass;
        }
        // Kong's order of tests: a JSON type wins over a form type.
        let ct = req.headers.get(header::CONTENT_TYPE);
        let kind = if is_json(ct) {
            BodyKind::Json
        } else if is_form(ct) {
            BodyKind::Form
        } else {
            return BodyPlan::Pass;
        };
        if !is_encoded(&req.headers) {
            return BodyPlan::Watch(kind);
        }
        // A coded body of a type the plugin edits cannot be edited, and must not go on unedited
        // (the upstream may well ignore the coding). Refused before it is read when its length
        // says there is one; without a length, at its first byte; no body at all is fine.
        // (Transfer-Encoding is gone by now: the proxy removed it as hop-by-hop.)
        let length = req
            .headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok());
        match length {
            Some(0) => BodyPlan::Pass,
            Some(_) => BodyPlan::Refuse,
            None => BodyPlan::Watch(BodyKind::Coded),
        }
    }

    /// The body after the edits (or as it was, when they change nothing or it is not of its
    /// declared kind).
    fn edit_body(&self, kind: BodyKind, body: Bytes) -> Bytes {
        let edited = match kind {
            BodyKind::Json => self.json.apply(&body, true),
            // Edited as bytes: a byte that is not UTF-8 must not make the edits skip a form
            // (upstreams parse such forms, replacing what they cannot decode).
            BodyKind::Form => self.form.apply_bytes(&body),
            BodyKind::Coded => None,
        };
        edited.map_or(body, Bytes::from)
    }
}

impl Plugin for RequestTransformer {
    fn access<'a>(&'a self, ctx: &'a mut RequestCtx, req: &'a mut RequestHead) -> Handled<'a> {
        self.headers.apply(&mut req.headers);
        if let Some(m) = &self.method {
            req.method = m.clone();
        }
        if let Err(e) = self.rewrite_target(ctx, req) {
            return Err(e).into();
        }
        match self.body_plan(req) {
            BodyPlan::Pass => {}
            BodyPlan::Watch(kind) => Buffers::start(&mut ctx.slots, self.id(), kind),
            BodyPlan::Refuse => return Flow::Respond(coded_body_refused()).into(),
        }
        Flow::Continue.into()
    }

    fn reads_request_body(&self) -> bool {
        !self.form.is_empty()
    }

    /// Only bodies `access` chose to edit (JSON or forms, or coded ones to refuse): uploads of
    /// other types stream.
    fn wants_request_body(&self, ctx: &RequestCtx) -> bool {
        Buffers::<BodyKind>::holds(&ctx.slots, self.id())
    }

    fn request_body<'a>(
        &'a self,
        ctx: &'a mut RequestCtx,
        chunk: &'a mut BodyChunk,
    ) -> Handled<'a> {
        let id = self.id();
        let Some((kind, buf)) = Buffers::<BodyKind>::get(&mut ctx.slots, id) else {
            return Flow::Continue.into();
        };
        let kind = *kind;
        if kind == BodyKind::Coded {
            // Nothing is held back: the first byte decides.
            if !chunk.data.is_empty() {
                Buffers::<BodyKind>::finish(&mut ctx.slots, id);
                return Flow::Respond(coded_body_refused()).into();
            }
            if chunk.eof {
                Buffers::<BodyKind>::finish(&mut ctx.slots, id);
            }
            return Flow::Continue.into();
        }
        if !chunk.eof {
            buf.extend_from_slice(&chunk.data);
            chunk.data = Bytes::new();
            return Flow::Continue.into();
        }
        // A body that arrived in one piece is edited without a copy.
        let body = if buf.is_empty() {
            std::mem::take(&mut chunk.data)
        } else {
            buf.extend_from_slice(&chunk.data);
            std::mem::take(buf).freeze()
        };
        Buffers::<BodyKind>::finish(&mut ctx.slots, id);
        chunk.data = self.edit_body(kind, body);
        Flow::Continue.into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn err(config: serde_json::Value) -> String {
        transformer(&config).expect_err("refused")
    }

    #[test]
    fn configuration_errors_name_the_field() {
        assert!(transformer(&json!({})).is_ok());
        assert!(transformer(&json!({
            "http_method": "post",
            "remove": {"headers": ["x-a"], "querystring": ["q"], "body": ["b"]},
            "rename": {"headers": ["x-b:x-c"], "querystring": ["q:r"], "body": ["b:c"]},
            "replace": {"headers": ["host:a.test"], "querystring": ["q:1"], "body": ["b:2"], "uri": "/v2/x%20y"},
            "add": {"headers": ["x-d:1"], "querystring": ["q:1"], "body": ["b:2"]},
            "append": {"headers": ["x-d:2"], "querystring": ["q:2"], "body": ["b:3"]},
        }))
        .is_ok());
        // Kong exports unset fields as null.
        assert!(transformer(
            &json!({"http_method": null, "replace": {"uri": null, "body": null}, "add": null})
        )
        .is_ok());
        assert_eq!(
            err(json!({"add": {"headers": ["x-a:1", "x y:1"]}})),
            r#"add.headers[1]: "x y:1" is not a header name"#
        );
        assert!(
            err(json!({"add": {"headers": ["content-length:1"]}})).starts_with("add.headers[0]:")
        );
        assert!(err(json!({"append": {"headers": ["connection:close"]}}))
            .starts_with("append.headers[0]:"));
        assert!(
            err(json!({"replace": {"headers": ["transfer-encoding:chunked"]}}))
                .starts_with("replace.headers[0]:")
        );
        assert!(err(json!({"add": {"querystring": ["q"]}})).starts_with("add.querystring[0]:"));
        assert!(err(json!({"rename": {"body": ["a:"]}})).starts_with("rename.body[0]:"));
        assert!(err(json!({"add": {"body": ["a:$(headers.b)"]}})).contains("template"));
        assert!(err(json!({"replace": {"uri": "/$(uri_captures.x)"}})).starts_with("replace.uri:"));
        assert!(err(json!({"replace": {"uri": "v2"}})).starts_with("replace.uri:"));
        assert!(err(json!({"replace": {"uri": "/a?b=1"}})).starts_with("replace.uri:"));
        assert!(err(json!({"http_method": "GE T"})).starts_with("http_method:"));
        assert!(err(json!({"http_method": 5})).starts_with("http_method:"));
        assert!(err(json!({"add": {"cookies": ["a:1"]}})).contains("cookies"));
        assert!(err(json!({"colour": 1})).contains("colour"));
        assert!(err(json!({"add": {"headers": "x-a:1"}})).starts_with("add.headers:"));
    }

    #[test]
    fn only_body_edits_read_bodies() {
        let t =
            transformer(&json!({"add": {"headers": ["x-a:1"], "querystring": ["q:1"]}})).unwrap();
        assert!(!t.reads_request_body());
        let t = transformer(&json!({"remove": {"body": ["b"]}})).unwrap();
        assert!(t.reads_request_body());
    }

    fn head(uri: &str, headers: &[(&str, &str)]) -> RequestHead {
        let mut b = http::Request::builder().uri(uri);
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        b.body(()).unwrap().into_parts().0
    }

    fn ctx() -> RequestCtx {
        RequestCtx::new([127, 0, 0, 1].into(), 1, Arc::from(vec![]))
    }

    fn access(t: &RequestTransformer, ctx: &mut RequestCtx, req: &mut RequestHead) {
        match t.access(ctx, req) {
            crate::plugins::Step::Ready(Ok(Flow::Continue)) => {}
            _ => panic!("access did not continue"),
        }
    }

    #[test]
    fn access_edits_headers_method_and_query() {
        let t = transformer(&json!({
            "http_method": "put",
            "remove": {"headers": ["x-secret"], "querystring": ["token"]},
            "replace": {"headers": ["host:internal.test"]},
            "add": {"headers": ["x-team:blue"], "querystring": ["v:2"]},
        }))
        .unwrap();
        let mut req = head(
            "/users?token=abc&id=7",
            &[("host", "public.test"), ("x-secret", "s")],
        );
        let mut c = ctx();
        access(&t, &mut c, &mut req);
        assert_eq!(req.method, Method::PUT);
        assert_eq!(req.uri, "/users?id=7&v=2");
        assert_eq!(req.headers["host"], "internal.test");
        assert_eq!(req.headers["x-team"], "blue");
        assert!(!req.headers.contains_key("x-secret"));
        assert_eq!(c.upstream_uri, None);

        // Removing the only parameter removes the `?`.
        let t = transformer(&json!({"remove": {"querystring": ["a"]}})).unwrap();
        let mut req = head("/p?a=1", &[]);
        access(&t, &mut ctx(), &mut req);
        assert_eq!(req.uri, "/p");
    }

    #[test]
    fn replace_uri_sets_the_upstream_path_and_keeps_the_edited_query() {
        let t = transformer(&json!({
            "replace": {"uri": "/v2/users"},
            "add": {"querystring": ["v:2"]},
        }))
        .unwrap();
        let mut req = head("/users?id=7", &[]);
        let mut c = ctx();
        access(&t, &mut c, &mut req);
        assert_eq!(c.upstream_uri.as_deref(), Some("/v2/users?id=7&v=2"));

        let t = transformer(&json!({"replace": {"uri": "/v2"}})).unwrap();
        let mut c = ctx();
        access(&t, &mut c, &mut head("/users", &[]));
        assert_eq!(c.upstream_uri.as_deref(), Some("/v2"));

        // A path set by an earlier plugin gets the query edits.
        let t = transformer(&json!({"add": {"querystring": ["v:2"]}})).unwrap();
        let mut c = ctx();
        c.upstream_uri = Some("/elsewhere?a=1".into());
        access(&t, &mut c, &mut head("/users", &[]));
        assert_eq!(c.upstream_uri.as_deref(), Some("/elsewhere?a=1&v=2"));
    }

    /// Runs `body` (in `parts`) through the plugin's request_body as the pipeline does.
    fn body_through(t: &RequestTransformer, content_type: &str, parts: &[&str]) -> String {
        let parts: Vec<&[u8]> = parts.iter().map(|p| p.as_bytes()).collect();
        let out = bytes_through(t, &[("content-type", content_type)], &parts)
            .unwrap_or_else(|r| panic!("refused: {r:?}"));
        String::from_utf8(out).unwrap()
    }

    /// Runs a request with `headers` and a body in `parts` through `access` and
    /// `request_body`: the bytes forwarded, or the plugin's answer.
    fn bytes_through(
        t: &RequestTransformer,
        headers: &[(&str, &str)],
        parts: &[&[u8]],
    ) -> Result<Vec<u8>, Box<EarlyResponse>> {
        let mut req = head("/", headers);
        let mut c = ctx();
        match t.access(&mut c, &mut req) {
            crate::plugins::Step::Ready(Ok(Flow::Continue)) => {}
            crate::plugins::Step::Ready(Ok(Flow::Respond(r))) => return Err(Box::new(r)),
            _ => panic!("access failed or waited"),
        }
        let mut out = Vec::new();
        let n = parts.len().max(1);
        for i in 0..n {
            let mut chunk = BodyChunk {
                data: Bytes::copy_from_slice(parts.get(i).copied().unwrap_or(b"")),
                eof: i + 1 == n,
            };
            let answer = match t.request_body(&mut c, &mut chunk) {
                crate::plugins::Step::Ready(Ok(Flow::Continue)) => None,
                crate::plugins::Step::Ready(Ok(Flow::Respond(r))) => Some(r),
                _ => panic!("request_body failed or waited"),
            };
            if let Some(r) = answer {
                assert!(Buffers::<BodyKind>::get(&mut c.slots, t.id()).is_none());
                return Err(Box::new(r));
            }
            out.extend_from_slice(&chunk.data);
        }
        assert!(Buffers::<BodyKind>::get(&mut c.slots, t.id()).is_none());
        Ok(out)
    }

    /// Asserts `r` is the refusal of a content-coded body.
    fn assert_refused(r: Result<Vec<u8>, Box<EarlyResponse>>) {
        let r = r.expect_err("refused");
        assert_eq!(r.status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
        assert_eq!(r.headers["accept-encoding"], "identity");
        let body: Value = serde_json::from_slice(&r.body).unwrap();
        assert!(
            body["message"]
                .as_str()
                .unwrap()
                .contains("cannot be transformed"),
            "{body}"
        );
    }

    #[test]
    fn json_and_form_bodies_are_edited_whole() {
        let t = transformer(&json!({
            "remove": {"body": ["password"]},
            "rename": {"body": ["user:login"]},
            "add": {"body": ["source:weir"]},
            "append": {"body": ["tags:new"]},
        }))
        .unwrap();
        let out = body_through(
            &t,
            "application/json; charset=utf-8",
            &[r#"{"user":"ann","pass"#, r#"word":"x","tags":["old"]}"#],
        );
        assert_eq!(
            serde_json::from_str::<Value>(&out).unwrap(),
            json!({"login": "ann", "tags": ["old", "new"], "source": "weir"})
        );
        let out = body_through(
            &t,
            "application/x-www-form-urlencoded",
            &["user=ann&pass", "word=x&tags=old"],
        );
        assert_eq!(out, "login=ann&tags=old&source=weir&tags=new");
        // Not JSON although it says so, or another type: passed on byte for byte.
        assert_eq!(
            body_through(&t, "application/json", &["{not json", "}"]),
            "{not json}"
        );
        assert_eq!(body_through(&t, "text/plain", &["user=ann"]), "user=ann");
        // An empty JSON body gets the added keys, as in Kong.
        assert_eq!(
            serde_json::from_str::<Value>(&body_through(&t, "application/json", &[])).unwrap(),
            json!({"source": "weir", "tags": ["new"]})
        );
    }

    #[test]
    fn content_coded_json_and_form_bodies_are_refused() {
        let t = transformer(&json!({"remove": {"body": ["password"]}})).unwrap();
        let body: &[u8] = br#"{"password":"x"}"#;
        // With a length, before the body is read: any coding but identity, known or not.
        for (ct, ce) in [
            ("application/json", "gzip"),
            ("application/json; charset=utf-8", "x"),
            ("application/x-www-form-urlencoded", "deflate"),
            ("application/json", "identity, gzip"),
        ] {
            let mut req = head(
                "/",
                &[
                    ("content-type", ct),
                    ("content-encoding", ce),
                    ("content-length", "16"),
                ],
            );
            let mut c = ctx();
            match t.access(&mut c, &mut req) {
                crate::plugins::Step::Ready(Ok(Flow::Respond(r))) => {
                    assert_refused(Err(Box::new(r)))
                }
                _ => panic!("{ct} / {ce}: not refused in access"),
            }
            assert!(Buffers::<BodyKind>::get(&mut c.slots, t.id()).is_none());
        }
        // Without a length (chunked, HTTP/2): at the first byte, nothing forwarded.
        let coded = [
            ("content-type", "application/json"),
            ("content-encoding", "gzip"),
        ];
        assert_refused(bytes_through(&t, &coded, &[b"", body]));
        // No body at all, or an empty one: nothing to edit, nothing to refuse.
        assert_eq!(bytes_through(&t, &coded, &[]).unwrap(), b"");
        let empty = [
            ("content-type", "application/json"),
            ("content-encoding", "gzip"),
            ("content-length", "0"),
        ];
        assert_eq!(bytes_through(&t, &empty, &[]).unwrap(), b"");
        // `identity` (or an empty value) is no coding: the body is edited.
        for ce in ["identity", "Identity", ""] {
            let h = [
                ("content-type", "application/json"),
                ("content-encoding", ce),
            ];
            assert_eq!(bytes_through(&t, &h, &[body]).unwrap(), b"{}", "{ce:?}");
        }
        // A type the plugin does not edit streams as it is, coded or not.
        let h = [("content-type", "text/plain"), ("content-encoding", "gzip")];
        assert_eq!(bytes_through(&t, &h, &[body]).unwrap(), body);
        // Judged on the headers the upstream gets: a coding the configuration removes does not
        // count.
        let t2 = transformer(&json!({
            "remove": {"body": ["password"], "headers": ["content-encoding"]},
        }))
        .unwrap();
        assert_eq!(bytes_through(&t2, &coded, &[body]).unwrap(), b"{}");
        // Without body keys, bodies are not the plugin's business.
        let t3 = transformer(&json!({"remove": {"headers": ["x-a"]}})).unwrap();
        let h = [
            ("content-type", "application/json"),
            ("content-encoding", "gzip"),
            ("content-length", "16"),
        ];
        assert_eq!(bytes_through(&t3, &h, &[body]).unwrap(), body);
    }

    #[test]
    fn forms_that_are_not_utf8_are_still_edited() {
        let t = transformer(&json!({
            "remove": {"body": ["password"]},
            "rename": {"body": ["user:login"]},
            "replace": {"body": ["mode:safe"]},
        }))
        .unwrap();
        let form = [("content-type", "application/x-www-form-urlencoded")];
        // One byte that is not UTF-8 (in a value, a name, or escaped) no longer lets the form
        // through unedited; the untouched bytes are kept exactly, across chunks too.
        let out = bytes_through(
            &t,
            &form,
            &[
                b"note=caf\xe9&pass",
                b"word=hunter2&user=\xff%FE&mode=x&k\xfe=%ZZ",
            ],
        )
        .unwrap();
        assert_eq!(out, b"note=caf\xe9&login=\xff%FE&mode=safe&k\xfe=%ZZ");
        let out = bytes_through(&t, &form, &[b"password=\xff\xfe"]).unwrap();
        assert_eq!(out, b"");
        // Nothing to change: byte for byte.
        let out = bytes_through(&t, &form, &[b"a=\xff&b"]).unwrap();
        assert_eq!(out, b"a=\xff&b");
    }

    #[test]
    fn json_that_is_not_an_object_passes_unchanged() {
        // As in Kong: only what parses as a JSON object is edited, the rest goes on as it came,
        // also what a lenient parser (Python's json: NaN, a BOM, UTF-16, lone surrogates) would
        // read with the field in it. Documented in docs/plugins/request-transformer.md.
        let t = transformer(&json!({"remove": {"body": ["password"]}})).unwrap();
        let json = [("content-type", "application/json")];
        for body in [
            &br#"{"password":"x","#[..],
            br#"[{"password":"x"}]"#,
            br#"{"password":"x","n":NaN}"#,
            b"\xef\xbb\xbf{\"password\":\"x\"}",
            b"{\"password\":\"\xff\"}",
            br#"{"password":"\ud800"}"#,
        ] {
            assert_eq!(bytes_through(&t, &json, &[body]).unwrap(), body);
        }
        let utf16: Vec<u8> =
            r#"{"password":"x"}"#.encode_utf16().flat_map(u16::to_le_bytes).collect();
        assert_eq!(bytes_through(&t, &json, &[&utf16]).unwrap(), utf16);
    }
}
