//! `response-transformer`: Kong's plugin of that name. `header_filter` edits the response
//! headers; when `json` edits are configured and the response is uncompressed
//! `application/json`, it also drops `Content-Length` and `body_filter` holds the body back to
//! its end, edits the top-level keys of the object and sends it in one piece (a body that is
//! not a JSON object goes on unchanged).

use std::sync::Arc;

use bytes::Bytes;
use http::{header, StatusCode};
use serde::Deserialize;
use serde_json::Value;

use super::json::JsonOps;
use super::{is_encoded, is_json, names, nullable, pairs, Buffers, HeaderLists, HeaderOps};
use crate::pipeline::RequestCtx;
use crate::plugins::{parse_config, BodyChunk, Plugin, PluginError, ResponseHead};

/// A JSON body larger than this goes on unchanged: holding back a response costs memory for
/// as long as the upstream takes to send it.
const MAX_JSON_BODY: usize = 8 << 20;

/// The configuration, with Kong's keys.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct Conf {
    #[serde(default, deserialize_with = "nullable")]
    remove: Lists,
    #[serde(default, deserialize_with = "nullable")]
    rename: Lists,
    #[serde(default, deserialize_with = "nullable")]
    replace: TypedLists,
    #[serde(default, deserialize_with = "nullable")]
    add: TypedLists,
    #[serde(default, deserialize_with = "nullable")]
    append: TypedLists,
}

/// `remove`'s and `rename`'s lists.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct Lists {
    #[serde(default, deserialize_with = "nullable")]
    headers: Vec<String>,
    #[serde(default, deserialize_with = "nullable")]
    json: Vec<String>,
}

/// The lists of the operations that set values, with the types of the JSON values.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct TypedLists {
    #[serde(default, deserialize_with = "nullable")]
    headers: Vec<String>,
    #[serde(default, deserialize_with = "nullable")]
    json: Vec<String>,
    #[serde(default, deserialize_with = "nullable")]
    json_types: Vec<JsonType>,
}

/// The type of the `n`th `json` entry's value (a string when not given).
#[derive(Deserialize, Clone, Copy, Debug)]
#[serde(rename_all = "lowercase")]
enum JsonType {
    String,
    Boolean,
    Number,
}

/// An instance: every edit parsed and checked at build.
#[derive(Debug)]
struct ResponseTransformer {
    headers: HeaderOps,
    json: JsonOps,
}

/// Marks a body this instance holds back.
#[derive(Clone)]
struct Held;

/// Builds an instance from its configuration.
pub(super) fn build(config: &serde_json::Value) -> Result<Arc<dyn Plugin>, String> {
    Ok(Arc::new(transformer(config)?))
}

fn transformer(config: &serde_json::Value) -> Result<ResponseTransformer, String> {
    let c: Conf = parse_config(config)?;
    let headers = HeaderOps::build(
        &HeaderLists {
            remove: ("remove.headers", &c.remove.headers),
            rename: ("rename.headers", &c.rename.headers),
            replace: ("replace.headers", &c.replace.headers),
            add: ("add.headers", &c.add.headers),
            append: ("append.headers", &c.append.headers),
        },
        false,
    )?;
    let json = JsonOps {
        remove: names("remove.json", &c.remove.json)?,
        rename: pairs("rename.json", &c.rename.json)?,
        replace: typed("replace", &c.replace)?,
        add: typed("add", &c.add)?,
        append: typed("append", &c.append)?,
    };
    Ok(ResponseTransformer { headers, json })
}

/// The `json` entries of `op` with their values typed by `json_types` (Kong's casts, checked
/// here instead of silently giving `false` or dropping the entry).
fn typed(op: &str, l: &TypedLists) -> Result<Vec<(String, Value)>, String> {
    if l.json_types.len() > l.json.len() {
        return Err(format!(
            "{op}.json_types: {} types for {} json entries",
            l.json_types.len(),
            l.json.len()
        ));
    }
    let field = format!("{op}.json");
    pairs(&field, &l.json)?
        .into_iter()
        .enumerate()
        .map(|(i, (k, v))| {
            let ty = l.json_types.get(i).copied().unwrap_or(JsonType::String);
            let value = match ty {
                JsonType::String => Value::String(v),
                JsonType::Boolean => match v.as_str() {
                    "true" => Value::Bool(true),
                    "false" => Value::Bool(false),
                    _ => {
                        return Err(format!(
                            "{field}[{i}]: {:?}: {v:?} is not a boolean ({op}.json_types[{i}])",
                            l.json[i]
                        ))
                    }
                },
                JsonType::Number => number(&v).ok_or_else(|| {
                    format!(
                        "{field}[{i}]: {:?}: {v:?} is not a number ({op}.json_types[{i}])",
                        l.json[i]
                    )
                })?,
            };
            Ok((k, value))
        })
        .collect()
}

/// A JSON number from text: integers stay exact, others become finite floats.
fn number(s: &str) -> Option<Value> {
    let s = s.trim();
    if let Ok(i) = s.parse::<i64>() {
        return Some(i.into());
    }
    if let Ok(u) = s.parse::<u64>() {
        return Some(u.into());
    }
    // `inf` and `NaN` parse as floats but are no JSON numbers.
    let f = s.parse::<f64>().ok()?;
    serde_json::Number::from_f64(f).map(Value::Number)
}

impl ResponseTransformer {
    /// This instance's key among the buffers of a request.
    fn id(&self) -> usize {
        self as *const Self as usize
    }

    /// Whether the body of this response is to be edited.
    fn edits_body(&self, resp: &ResponseHead) -> bool {
        let s = resp.status;
        let bodiless =
            s.is_informational() || s == StatusCode::NO_CONTENT || s == StatusCode::NOT_MODIFIED;
        !self.json.is_empty()
            && !bodiless
            && is_json(resp.headers.get(header::CONTENT_TYPE))
            && !is_encoded(&resp.headers)
    }
}

impl Plugin for ResponseTransformer {
    fn header_filter(
        &self,
        ctx: &mut RequestCtx,
        resp: &mut ResponseHead,
    ) -> Result<(), PluginError> {
        self.headers.apply(&mut resp.headers);
        if self.edits_body(resp) {
            // The length changes with the edits: the body goes out chunked (or close-delimited).
            resp.headers.remove(header::CONTENT_LENGTH);
            Buffers::start(&mut ctx.slots, self.id(), Held);
        }
        Ok(())
    }

    fn filters_body(&self) -> bool {
        !self.json.is_empty()
    }

    fn body_filter(&self, ctx: &mut RequestCtx, chunk: &mut BodyChunk) -> Result<(), PluginError> {
        let id = self.id();
        let Some((_, buf)) = Buffers::<Held>::get(&mut ctx.slots, id) else {
            return Ok(());
        };
        let over = buf.len() + chunk.data.len() > MAX_JSON_BODY;
        if !chunk.eof && !over {
            buf.extend_from_slice(&chunk.data);
            chunk.data = Bytes::new();
            return Ok(());
        }
        // A body that arrived in one piece is edited without a copy.
        let body = if buf.is_empty() {
            std::mem::take(&mut chunk.data)
        } else {
            buf.extend_from_slice(&chunk.data);
            std::mem::take(buf).freeze()
        };
        Buffers::<Held>::finish(&mut ctx.slots, id);
        // Too large to hold: what was held goes on as it was, and so does the rest.
        chunk.data = match over {
            false => self.json.apply(&body, false).map_or(body, Bytes::from),
            true => body,
        };
        Ok(())
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
            "remove": {"headers": ["server"], "json": ["secret"]},
            "rename": {"headers": ["x-a:x-b"], "json": ["a:b"]},
            "replace": {"headers": ["x-c:1"], "json": ["n:1.5", "s:x"], "json_types": ["number"]},
            "add": {"headers": ["x-d:1"], "json": ["b:true"], "json_types": ["boolean"]},
            "append": {"headers": ["x-d:2"], "json": ["l:x"], "json_types": ["string"]},
        }))
        .is_ok());
        assert!(
            transformer(&json!({"remove": null, "add": {"json": null, "json_types": null}}))
                .is_ok()
        );
        assert_eq!(
            err(json!({"add": {"headers": ["x-a:1", "x y:1"]}})),
            r#"add.headers[1]: "x y:1" is not a header name"#
        );
        assert!(
            err(json!({"add": {"headers": ["content-length:1"]}})).starts_with("add.headers[0]:")
        );
        assert!(err(json!({"remove": {"headers": ["transfer-encoding"]}}))
            .starts_with("remove.headers[0]:"));
        assert!(err(json!({"replace": {"headers": ["host:x"]}})).starts_with("replace.headers[0]:"));
        assert!(err(json!({"add": {"json": ["k"]}})).starts_with("add.json[0]:"));
        assert!(
            err(json!({"add": {"json": ["a:1", "k:x"], "json_types": ["number", "number"]}}))
                .starts_with("add.json[1]:")
        );
        assert!(
            err(json!({"append": {"json": ["k:yes"], "json_types": ["boolean"]}}))
                .starts_with("append.json[0]:")
        );
        assert!(
            err(json!({"replace": {"json": ["k:1"], "json_types": ["int"]}}))
                .starts_with("replace.json_types[0]:")
        );
        assert!(
            err(json!({"replace": {"json": [], "json_types": ["number"]}}))
                .starts_with("replace.json_types:")
        );
        assert!(err(json!({"remove": {"json_types": ["number"]}})).contains("json_types"));
        assert!(err(json!({"add": {"json": ["k:$(x)"]}})).contains("template"));
        assert!(err(json!({"add": {"body": ["k:1"]}})).contains("body"));
    }

    #[test]
    fn typed_values() {
        let t = transformer(&json!({"add": {
            "json": ["s:1", "i:-3", "f:2.5", "b:false", "big:18446744073709551615", "t:text"],
            "json_types": ["string", "number", "number", "boolean", "number"],
        }}))
        .unwrap();
        let values: Vec<Value> = t.json.add.iter().map(|(_, v)| v.clone()).collect();
        assert_eq!(
            values,
            [
                json!("1"),
                json!(-3),
                json!(2.5),
                json!(false),
                json!(u64::MAX),
                json!("text")
            ]
        );
        assert!(number("inf").is_none() && number("NaN").is_none() && number("").is_none());
    }

    fn ctx() -> RequestCtx {
        RequestCtx::new([127, 0, 0, 1].into(), 1, Arc::from(vec![]))
    }

    fn response(status: u16, headers: &[(&str, &str)]) -> ResponseHead {
        let mut b = http::Response::builder().status(status);
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        b.body(()).unwrap().into_parts().0
    }

    /// Runs a response through header_filter and body_filter as the pipeline does; returns
    /// the head and the bytes sent.
    fn through(
        t: &ResponseTransformer,
        status: u16,
        headers: &[(&str, &str)],
        parts: &[&str],
    ) -> (ResponseHead, String) {
        let mut c = ctx();
        let mut head = response(status, headers);
        t.header_filter(&mut c, &mut head).unwrap();
        let mut out = String::new();
        let n = parts.len().max(1);
        for i in 0..n {
            let mut chunk = BodyChunk {
                data: Bytes::from(parts.get(i).copied().unwrap_or("").to_string()),
                eof: i + 1 == n,
            };
            t.body_filter(&mut c, &mut chunk).unwrap();
            out.push_str(std::str::from_utf8(&chunk.data).unwrap());
        }
        assert!(Buffers::<Held>::get(&mut c.slots, t.id()).is_none());
        (head, out)
    }

    fn demo() -> ResponseTransformer {
        transformer(&json!({
            "remove": {"headers": ["server"], "json": ["internal"]},
            "rename": {"headers": ["x-old:x-new"]},
            "add": {"headers": ["x-added:1"], "json": ["version:2"], "json_types": ["number"]},
            "append": {"json": ["tags:b"]},
        }))
        .unwrap()
    }

    #[test]
    fn json_bodies_are_edited_and_lose_their_length() {
        let (head, body) = through(
            &demo(),
            200,
            &[
                ("content-type", "application/json"),
                ("content-length", "40"),
                ("server", "upstream"),
                ("x-old", "o"),
            ],
            &[r#"{"internal":true,"#, r#""tags":"a","id":1}"#],
        );
        assert_eq!(
            serde_json::from_str::<Value>(&body).unwrap(),
            json!({"id": 1, "tags": ["a", "b"], "version": 2})
        );
        assert!(!head.headers.contains_key("content-length"));
        assert!(!head.headers.contains_key("server") && !head.headers.contains_key("x-old"));
        assert_eq!(head.headers["x-new"], "o");
        assert_eq!(head.headers["x-added"], "1");
    }

    #[test]
    fn other_bodies_pass_unchanged_with_their_length() {
        let t = demo();
        // Not JSON: the length is gone (decided on the headers), the bytes are the same.
        let (head, body) = through(
            &t,
            200,
            &[("content-type", "application/json")],
            &["{oops", "}"],
        );
        assert_eq!(body, "{oops}");
        assert!(!head.headers.contains_key("content-length"));
        for (status, headers) in [
            (
                200,
                vec![("content-type", "text/plain"), ("content-length", "2")],
            ),
            (
                200,
                vec![
                    ("content-type", "application/json"),
                    ("content-encoding", "gzip"),
                    ("content-length", "2"),
                ],
            ),
            (
                304,
                vec![
                    ("content-type", "application/json"),
                    ("content-length", "2"),
                ],
            ),
        ] {
            let (head, body) = through(&t, status, &headers, &["{}"]);
            assert_eq!(body, "{}");
            assert_eq!(head.headers["content-length"], "2");
        }
    }

    #[test]
    fn an_oversized_body_goes_on_unchanged() {
        let t = demo();
        let big = format!("{{\"internal\":\"{}\"}}", "x".repeat(MAX_JSON_BODY));
        let (a, rest) = big.split_at(MAX_JSON_BODY / 2);
        let (b, c) = rest.split_at(MAX_JSON_BODY / 2 + 10);
        let (_, body) = through(&t, 200, &[("content-type", "application/json")], &[a, b, c]);
        assert!(body == big, "changed ({} bytes)", body.len());
        // Over the limit only with its last part: still too large to edit.
        let (a, b) = big.split_at(MAX_JSON_BODY / 2);
        let (_, body) = through(&t, 200, &[("content-type", "application/json")], &[a, b]);
        assert!(body == big, "changed ({} bytes)", body.len());
        // Within the limit: edited.
        let (_, body) = through(
            &t,
            200,
            &[("content-type", "application/json")],
            &[r#"{"internal":1}"#],
        );
        assert_eq!(body, r#"{"tags":["b"],"version":2}"#);
    }

    #[test]
    fn headers_only_configurations_never_hold_bodies() {
        let t = transformer(&json!({"add": {"headers": ["x-a:1"]}})).unwrap();
        assert!(!t.filters_body());
        let mut head = response(
            200,
            &[
                ("content-type", "application/json"),
                ("content-length", "2"),
            ],
        );
        t.header_filter(&mut ctx(), &mut head).unwrap();
        assert_eq!(head.headers["content-length"], "2");
        assert_eq!(head.headers["x-a"], "1");
    }
}
