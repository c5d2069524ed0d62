//! `request-transformer` and `response-transformer` (Kong's plugins, Kong's configuration): the
//! parts both share. Configuration lists hold `name:value` (or `name`) strings, split as Kong
//! splits them; header names and values are checked once, at build; header edits, query-string
//! and form edits ([`ParamOps`]) and JSON edits ([`json::JsonOps`]) run in Kong's order:
//! remove, rename, replace, add, append.

mod json;
mod request;
mod response;

use bytes::BytesMut;
use http::header::{self, Entry, HeaderMap, HeaderName, HeaderValue};
use serde::{Deserialize, Deserializer};

use super::params::{decode, encode_into};
use super::Simple;

/// `request-transformer`: edits the request's method, headers, query string, path and body.
pub(in crate::plugins) const REQUEST: Simple = Simple {
    name: "request-transformer",
    priority: 801,
    build: request::build,
};

/// `response-transformer`: edits the response's headers and its JSON body.
pub(in crate::plugins) const RESPONSE: Simple = Simple {
    name: "response-transformer",
    priority: 800,
    build: response::build,
};

/// Headers a configuration may not set, rename or remove: Weir frames every message itself and
/// drops hop-by-hop headers, so a configured value would either be ignored or make the peer
/// read the message (and the next one on the connection) wrongly.
const MANAGED: [&str; 9] = [
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "upgrade",
    "http2-settings",
];

/// Deserialises a field Kong may export as `null` (an unset list or record) as its default.
fn nullable<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// Splits an entry as Kong does (`^([^:]+):*(.-)$`): the name before the first colon, the value
/// after every colon that follows it.
fn split_entry(entry: &str) -> (&str, &str) {
    match entry.split_once(':') {
        Some((name, value)) => (name, value.trim_start_matches(':')),
        None => (entry, ""),
    }
}

/// Kong's templates (`$(headers.x)`) are Lua; a value that looks like one is refused rather
/// than sent literally.
fn no_template(field: &str, i: usize, entry: &str) -> Result<(), String> {
    if entry.contains("$(") {
        return Err(format!(
            "{field}[{i}]: {entry:?}: templates ($(...)) are not supported"
        ));
    }
    Ok(())
}

/// The names of a `remove` list (a `name:value` entry counts by its name, as in Kong).
fn names(field: &str, list: &[String]) -> Result<Vec<String>, String> {
    list.iter()
        .enumerate()
        .map(|(i, entry)| {
            let (name, _) = split_entry(entry);
            if name.is_empty() {
                return Err(format!("{field}[{i}]: {entry:?} has no name"));
            }
            Ok(name.to_string())
        })
        .collect()
}

/// The `name:value` pairs of a `rename`, `replace`, `add` or `append` list.
fn pairs(field: &str, list: &[String]) -> Result<Vec<(String, String)>, String> {
    list.iter()
        .enumerate()
        .map(|(i, entry)| {
            let (name, value) = split_entry(entry);
            if name.is_empty() {
                return Err(format!("{field}[{i}]: {entry:?} has no name"));
            }
            if value.is_empty() {
                return Err(format!(
                    "{field}[{i}]: {entry:?} has no value (expected name:value)"
                ));
            }
            no_template(field, i, entry)?;
            Ok((name.to_string(), value.to_string()))
        })
        .collect()
}

/// A header name from an entry, refused when Weir manages that header.
fn header_name(field: &str, i: usize, entry: &str, name: &str) -> Result<HeaderName, String> {
    let n = HeaderName::from_bytes(name.as_bytes())
        .map_err(|_| format!("{field}[{i}]: {entry:?} is not a header name"))?;
    if MANAGED.contains(&n.as_str()) {
        return Err(format!(
            "{field}[{i}]: {entry:?}: {n} is managed by Weir (framing and hop-by-hop headers \
             cannot be changed)"
        ));
    }
    Ok(n)
}

/// Whether a value may be sent as `Host`: the characters the proxy accepts from clients (a DNS
/// name or IP address and a port), nothing a backend could read as a path, userinfo or list.
fn valid_host(b: &[u8]) -> bool {
    !b.is_empty()
        && b.iter().all(|&c| {
            c.is_ascii_alphanumeric() || matches!(c, b'-' | b'.' | b'_' | b':' | b'[' | b']')
        })
}

/// Edits of a header map, parsed and checked at build.
#[derive(Debug, Default)]
struct HeaderOps {
    remove: Vec<HeaderName>,
    rename: Vec<(HeaderName, HeaderName)>,
    replace: Vec<(HeaderName, HeaderValue)>,
    add: Vec<(HeaderName, HeaderValue)>,
    append: Vec<(HeaderName, HeaderValue)>,
    /// Kong replaces the request's `Host` whether or not the client sent one (it is the
    /// upstream host, always there); no other header is created by `replace`.
    replace_host_always: bool,
}

/// The raw lists of one message's header edits, each with its field name for errors.
struct HeaderLists<'a> {
    remove: (&'a str, &'a [String]),
    rename: (&'a str, &'a [String]),
    replace: (&'a str, &'a [String]),
    add: (&'a str, &'a [String]),
    append: (&'a str, &'a [String]),
}

impl HeaderOps {
    /// Parses and checks the lists; `host` says whether `Host` may be replaced (requests).
    fn build(l: &HeaderLists<'_>, host: bool) -> Result<HeaderOps, String> {
        let named = |(field, list): (&str, &[String])| -> Result<Vec<HeaderName>, String> {
            let ns = names(field, list)?;
            ns.iter()
                .zip(list)
                .enumerate()
                .map(|(i, (n, entry))| {
                    let name = header_name(field, i, entry, n)?;
                    if name == header::HOST {
                        return Err(format!(
                            "{field}[{i}]: {entry:?}: Host cannot be removed or renamed \
                             (replace it instead)"
                        ));
                    }
                    Ok(name)
                })
                .collect()
        };
        let valued = |(field, list): (&str, &[String]),
                      host_ok: bool|
         -> Result<Vec<(HeaderName, HeaderValue)>, String> {
            let ps = pairs(field, list)?;
            ps.iter()
                .zip(list)
                .enumerate()
                .map(|(i, ((n, v), entry))| {
                    let name = header_name(field, i, entry, n)?;
                    if name == header::HOST && !host_ok {
                        return Err(format!(
                            "{field}[{i}]: {entry:?}: there is one Host (replace it instead)"
                        ));
                    }
                    let value = HeaderValue::from_bytes(v.as_bytes())
                        .map_err(|_| format!("{field}[{i}]: {entry:?} has an invalid value"))?;
                    if name == header::HOST && !valid_host(value.as_bytes()) {
                        return Err(format!("{field}[{i}]: {entry:?} is not a host[:port]"));
                    }
                    Ok((name, value))
                })
                .collect()
        };
        let rename = {
            let (field, list) = l.rename;
            let ps = pairs(field, list)?;
            ps.iter()
                .zip(list)
                .enumerate()
                .map(|(i, ((old, new), entry))| {
                    let old = header_name(field, i, entry, old)?;
                    let new = header_name(field, i, entry, new)?;
                    if old == header::HOST || (new == header::HOST && !host) {
                        return Err(format!(
                            "{field}[{i}]: {entry:?}: Host cannot be renamed (replace it instead)"
                        ));
                    }
                    Ok((old, new))
                })
                .collect::<Result<Vec<_>, String>>()?
        };
        Ok(HeaderOps {
            remove: named(l.remove)?,
            rename,
            replace: valued(l.replace, host)?,
            add: valued(l.add, false)?,
            append: valued(l.append, false)?,
            replace_host_always: host,
        })
    }

    /// Applies the edits in Kong's order; each step sees what the previous ones left.
    fn apply(&self, h: &mut HeaderMap) {
        for n in &self.remove {
            h.remove(n);
        }
        for (old, new) in &self.rename {
            // Names are compared lower-cased: renaming to a different case changes nothing.
            if old == new {
                continue;
            }
            let values: Vec<HeaderValue> = match h.entry(old) {
                Entry::Occupied(e) => e.remove_entry_mult().1.collect(),
                Entry::Vacant(_) => continue,
            };
            if *new == header::HOST {
                // The client chose this value: it becomes the Host only if it is one.
                if let Some(v) = values
                    .into_iter()
                    .next()
                    .filter(|v| valid_host(v.as_bytes()))
                {
                    h.insert(header::HOST, v);
                }
                continue;
            }
            h.remove(new);
            for v in values {
                h.append(new.clone(), v);
            }
        }
        for (n, v) in &self.replace {
            if h.contains_key(n) || (self.replace_host_always && n == header::HOST) {
                h.insert(n.clone(), v.clone());
            }
        }
        for (n, v) in &self.add {
            if !h.contains_key(n) {
                h.insert(n.clone(), v.clone());
            }
        }
        for (n, v) in &self.append {
            h.append(n.clone(), v.clone());
        }
    }
}

/// Edits of `name=value` parameters (a query string or an urlencoded form), by decoded name.
#[derive(Debug, Default)]
struct ParamOps {
    remove: Vec<String>,
    rename: Vec<(String, String)>,
    replace: Vec<(String, String)>,
    add: Vec<(String, String)>,
    append: Vec<(String, String)>,
}

/// One parameter of a query string or form: its decoded name (for comparisons), and how it is
/// written out: its original name bytes while its name is untouched, and its value as it came
/// (bytes after the `=`), as set by an edit, or absent (a bare `flag`).
#[derive(Debug)]
struct Param<'a> {
    name: String,
    raw_name: Option<&'a [u8]>,
    value: ParamValue<'a>,
}

/// A parameter's value: its original bytes (kept exactly, whatever they are), a value set by an
/// edit (encoded when written), or none.
#[derive(Debug)]
enum ParamValue<'a> {
    Raw(&'a [u8]),
    Set(String),
    None,
}

impl ParamOps {
    fn is_empty(&self) -> bool {
        self.remove.is_empty()
            && self.rename.is_empty()
            && self.replace.is_empty()
            && self.add.is_empty()
            && self.append.is_empty()
    }

    /// The edited query string, or `None` when the edits changed nothing.
    fn apply(&self, raw: &str) -> Option<String> {
        // Untouched pieces are substrings of `raw` split at `&` and `=`, edits are encoded
        // ASCII: the result is UTF-8 and the conversion never replaces anything.
        self.apply_bytes(raw.as_bytes())
            .map(|b| String::from_utf8_lossy(&b).into_owned())
    }

    /// The edited parameters (a query string or an urlencoded form, any bytes), or `None` when
    /// the edits changed nothing. Names are compared percent-decoded (invalid UTF-8 counts as
    /// U+FFFD), so a byte that is not UTF-8 never keeps the edits from applying; the bytes of
    /// names and values no edit touched are written back as they came.
    fn apply_bytes(&self, raw: &[u8]) -> Option<Vec<u8>> {
        let mut ps: Vec<Param<'_>> = raw
            .split(|&b| b == b'&')
            .filter(|p| !p.is_empty())
            .map(|p| {
                let (n, v) = match p.iter().position(|&b| b == b'=') {
                    Some(i) => (&p[..i], ParamValue::Raw(&p[i + 1..])),
                    None => (p, ParamValue::None),
                };
                Param {
                    name: decode(n),
                    raw_name: Some(n),
                    value: v,
                }
            })
            .collect();
        let mut changed = false;
        for n in &self.remove {
            let before = ps.len();
            ps.retain(|p| p.name != *n);
            changed |= ps.len() != before;
        }
        for (old, new) in &self.rename {
            if old == new || !ps.iter().any(|p| p.name == *old) {
                continue;
            }
            // Kong's table assignment: the renamed values replace any under the new name.
            ps.retain(|p| p.name != *new);
            for p in ps.iter_mut().filter(|p| p.name == *old) {
                p.name = new.clone();
                p.raw_name = None;
            }
            changed = true;
        }
        for (n, v) in &self.replace {
            let Some(first) = ps.iter().position(|p| p.name == *n) else {
                continue;
            };
            let mut i = 0;
            ps.retain(|p| {
                i += 1;
                i - 1 == first || p.name != *n
            });
            ps[first] = Param {
                name: n.clone(),
                raw_name: None,
                value: ParamValue::Set(v.clone()),
            };
            changed = true;
        }
        for (n, v) in &self.add {
            if !ps.iter().any(|p| p.name == *n) {
                ps.push(Param {
                    name: n.clone(),
                    raw_name: None,
                    value: ParamValue::Set(v.clone()),
                });
                changed = true;
            }
        }
        for (n, v) in &self.append {
            ps.push(Param {
                name: n.clone(),
                raw_name: None,
                value: ParamValue::Set(v.clone()),
            });
            changed = true;
        }
        if !changed {
            return None;
        }
        let mut out = Vec::with_capacity(raw.len() + 32);
        for p in &ps {
            if !out.is_empty() {
                out.push(b'&');
            }
            match p.raw_name {
                Some(n) => out.extend_from_slice(n),
                None => encode_into(&mut out, &p.name),
            }
            match &p.value {
                ParamValue::Raw(v) => {
                    out.push(b'=');
                    out.extend_from_slice(v);
                }
                ParamValue::Set(v) => {
                    out.push(b'=');
                    encode_into(&mut out, v);
                }
                ParamValue::None => {}
            }
        }
        Some(out)
    }
}

/// Builds [`ParamOps`] from the five lists (by field name, for errors).
fn param_ops(lists: [(&str, &[String]); 5]) -> Result<ParamOps, String> {
    let [remove, rename, replace, add, append] = lists;
    Ok(ParamOps {
        remove: names(remove.0, remove.1)?,
        rename: pairs(rename.0, rename.1)?,
        replace: pairs(replace.0, replace.1)?,
        add: pairs(add.0, add.1)?,
        append: pairs(append.0, append.1)?,
    })
}

/// Whether a `Content-Type` is JSON, by Kong's test (it contains `application/json`).
fn is_json(content_type: Option<&HeaderValue>) -> bool {
    content_type.is_some_and(|v| contains_ignore_case(v.as_bytes(), b"application/json"))
}

/// Whether a `Content-Type` is an urlencoded form.
fn is_form(content_type: Option<&HeaderValue>) -> bool {
    content_type
        .is_some_and(|v| contains_ignore_case(v.as_bytes(), b"application/x-www-form-urlencoded"))
}

fn contains_ignore_case(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len())
        .any(|w| w.eq_ignore_ascii_case(needle))
}

/// Whether a message's body is content-coded: its `Content-Encoding` lists a coding other than
/// `identity` (any token, even one nobody knows: `x`). Such a body is never parsed; a request
/// one is refused where the request-transformer would edit it.
fn is_encoded(h: &HeaderMap) -> bool {
    h.get_all(header::CONTENT_ENCODING).iter().any(|v| {
        v.as_bytes().split(|&b| b == b',').any(|c| {
            let c = c.trim_ascii();
            !c.is_empty() && !c.eq_ignore_ascii_case(b"identity")
        })
    })
}

/// Bodies being held back by transformer instances of one request, keyed by the instance (a
/// request may pass through several transformers, each with its own buffer).
#[derive(Clone)]
struct Buffers<K: Clone>(Vec<(usize, K, BytesMut)>);

impl<K: Clone + Send + Sync + 'static> Buffers<K> {
    /// Starts holding back the body for instance `id`.
    fn start(slots: &mut http::Extensions, id: usize, kind: K) {
        match slots.get_mut::<Buffers<K>>() {
            Some(b) => {
                b.0.retain(|(i, _, _)| *i != id);
                b.0.push((id, kind, BytesMut::new()));
            }
            None => {
                slots.insert(Buffers(vec![(id, kind, BytesMut::new())]));
            }
        }
    }

    /// The buffer of instance `id`, if it holds the body back.
    fn get(slots: &mut http::Extensions, id: usize) -> Option<(&mut K, &mut BytesMut)> {
        slots
            .get_mut::<Buffers<K>>()?
            .0
            .iter_mut()
            .find(|(i, _, _)| *i == id)
            .map(|(_, k, b)| (k, b))
    }

    /// Whether instance `id` holds this request's body back.
    fn holds(slots: &http::Extensions, id: usize) -> bool {
        slots
            .get::<Buffers<K>>()
            .is_some_and(|b| b.0.iter().any(|(i, _, _)| *i == id))
    }

    /// Stops holding back the body for instance `id`.
    fn finish(slots: &mut http::Extensions, id: usize) {
        if let Some(b) = slots.get_mut::<Buffers<K>>() {
            b.0.retain(|(i, _, _)| *i != id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn entries_split_as_kong_splits_them() {
        assert_eq!(split_entry("a:b"), ("a", "b"));
        assert_eq!(split_entry("a:b:c"), ("a", "b:c"));
        assert_eq!(split_entry("a::b"), ("a", "b"));
        assert_eq!(split_entry("a"), ("a", ""));
        assert_eq!(split_entry("a:"), ("a", ""));
    }

    #[test]
    fn pairs_need_a_name_and_a_value_and_no_template() {
        let e = pairs("add.body", &strings(&["a:1", "b"])).unwrap_err();
        assert_eq!(e, r#"add.body[1]: "b" has no value (expected name:value)"#);
        let e = pairs("add.body", &strings(&[":1"])).unwrap_err();
        assert!(e.starts_with("add.body[0]:"), "{e}");
        let e = pairs("add.querystring", &strings(&["a:$(headers.x)"])).unwrap_err();
        assert!(
            e.starts_with("add.querystring[0]:") && e.contains("template"),
            "{e}"
        );
    }

    fn lists<'a>(
        remove: &'a [String],
        rename: &'a [String],
        replace: &'a [String],
        add: &'a [String],
        append: &'a [String],
    ) -> HeaderLists<'a> {
        HeaderLists {
            remove: ("remove.headers", remove),
            rename: ("rename.headers", rename),
            replace: ("replace.headers", replace),
            add: ("add.headers", add),
            append: ("append.headers", append),
        }
    }

    #[test]
    fn header_checks_name_the_field_and_index() {
        let e = HeaderOps::build(
            &lists(&[], &[], &[], &strings(&["x-a:1", "x y:1"]), &[]),
            true,
        )
        .unwrap_err();
        assert_eq!(e, r#"add.headers[1]: "x y:1" is not a header name"#);
        for (field, entry) in [
            ("add", "Content-Length:5"),
            ("append", "transfer-encoding:chunked"),
            ("replace", "connection:close"),
            ("remove", "TE"),
            ("rename", "x-a:upgrade"),
        ] {
            let l = strings(&[entry]);
            let ls = match field {
                "add" => lists(&[], &[], &[], &l, &[]),
                "append" => lists(&[], &[], &[], &[], &l),
                "replace" => lists(&[], &[], &l, &[], &[]),
                "remove" => lists(&l, &[], &[], &[], &[]),
                _ => lists(&[], &l, &[], &[], &[]),
            };
            let e = HeaderOps::build(&ls, true).unwrap_err();
            assert!(
                e.starts_with(&format!("{field}.headers[0]:")) && e.contains("managed by Weir"),
                "{e}"
            );
        }
        let e = HeaderOps::build(&lists(&[], &[], &[], &strings(&["x-a:a\u{1}"]), &[]), true)
            .unwrap_err();
        assert!(e.contains("invalid value"), "{e}");
        // Host: replaced on requests only, never added, appended, removed or renamed away.
        assert!(HeaderOps::build(&lists(&[], &[], &strings(&["host:a"]), &[], &[]), true).is_ok());
        assert!(
            HeaderOps::build(&lists(&[], &[], &strings(&["host:a"]), &[], &[]), false).is_err()
        );
        assert!(HeaderOps::build(&lists(&[], &[], &[], &strings(&["host:a"]), &[]), true).is_err());
        assert!(HeaderOps::build(&lists(&[], &[], &[], &[], &strings(&["host:a"])), true).is_err());
        assert!(HeaderOps::build(&lists(&strings(&["host"]), &[], &[], &[], &[]), true).is_err());
        assert!(HeaderOps::build(&lists(&[], &strings(&["host:x"]), &[], &[], &[]), true).is_err());
        assert!(HeaderOps::build(&lists(&[], &strings(&["x:host"]), &[], &[], &[]), true).is_ok());
        let e = HeaderOps::build(
            &lists(&[], &[], &strings(&["host:a.test/admin"]), &[], &[]),
            true,
        )
        .unwrap_err();
        assert_eq!(
            e,
            r#"replace.headers[0]: "host:a.test/admin" is not a host[:port]"#
        );
    }

    #[test]
    fn header_edits_run_in_kongs_order() {
        let ops = HeaderOps::build(
            &lists(
                &strings(&["x-gone", "x-absent"]),
                &strings(&["x-old:x-new", "x-nothing:x-else"]),
                &strings(&["x-new:replaced", "x-missing:no", "host:upstream.test"]),
                &strings(&["x-new:not-added", "x-added:1"]),
                &strings(&["x-added:2", "x-list:b"]),
            ),
            true,
        )
        .unwrap();
        let mut h = HeaderMap::new();
        h.insert("x-gone", HeaderValue::from_static("1"));
        h.append("x-old", HeaderValue::from_static("o1"));
        h.append("x-old", HeaderValue::from_static("o2"));
        h.insert(
            "x-new",
            HeaderValue::from_static("overwritten by the rename"),
        );
        h.insert("x-list", HeaderValue::from_static("a"));
        ops.apply(&mut h);
        assert!(!h.contains_key("x-gone") && !h.contains_key("x-old"));
        assert!(!h.contains_key("x-missing") && !h.contains_key("x-else"));
        let all =
            |n: &str| -> Vec<&str> { h.get_all(n).iter().map(|v| v.to_str().unwrap()).collect() };
        assert_eq!(all("x-new"), ["replaced"]);
        assert_eq!(all("x-added"), ["1", "2"]);
        assert_eq!(all("x-list"), ["a", "b"]);
        assert_eq!(all("host"), ["upstream.test"]);

        let mut h = HeaderMap::new();
        h.append("x-old", HeaderValue::from_static("o1"));
        h.append("x-old", HeaderValue::from_static("o2"));
        ops.apply(&mut h);
        assert_eq!(all_of(&h, "x-new"), ["replaced"]);
    }

    fn all_of<'a>(h: &'a HeaderMap, n: &str) -> Vec<&'a str> {
        h.get_all(n).iter().map(|v| v.to_str().unwrap()).collect()
    }

    #[test]
    fn a_header_renamed_to_host_must_hold_a_host() {
        let ops = HeaderOps::build(
            &lists(&[], &strings(&["x-target:host"]), &[], &[], &[]),
            true,
        )
        .unwrap();
        let mut h = HeaderMap::new();
        h.insert("host", HeaderValue::from_static("public.test"));
        h.insert("x-target", HeaderValue::from_static("internal.test:8080"));
        ops.apply(&mut h);
        assert_eq!(all_of(&h, "host"), ["internal.test:8080"]);
        assert!(!h.contains_key("x-target"));
        h.insert(
            "x-target",
            HeaderValue::from_static("internal.test, evil.test"),
        );
        ops.apply(&mut h);
        assert_eq!(all_of(&h, "host"), ["internal.test:8080"]);
        assert!(!h.contains_key("x-target"));
    }

    #[test]
    fn renamed_headers_keep_every_value() {
        let ops = HeaderOps::build(
            &lists(&[], &strings(&["x-old:x-new"]), &[], &[], &[]),
            false,
        )
        .unwrap();
        let mut h = HeaderMap::new();
        h.append("x-old", HeaderValue::from_static("o1"));
        h.append("x-old", HeaderValue::from_static("o2"));
        ops.apply(&mut h);
        assert_eq!(all_of(&h, "x-new"), ["o1", "o2"]);
    }

    fn ops(
        remove: &[&str],
        rename: &[&str],
        replace: &[&str],
        add: &[&str],
        append: &[&str],
    ) -> ParamOps {
        let (a, b, c, d, e) = (
            strings(remove),
            strings(rename),
            strings(replace),
            strings(add),
            strings(append),
        );
        param_ops([
            ("remove.querystring", &a),
            ("rename.querystring", &b),
            ("replace.querystring", &c),
            ("add.querystring", &d),
            ("append.querystring", &e),
        ])
        .unwrap()
    }

    #[test]
    fn params_are_edited_in_order_and_untouched_ones_keep_their_encoding() {
        let o = ops(
            &["secret"],
            &["old:new"],
            &["page:1", "missing:x"],
            &["lang:en", "page:9"],
            &["tag:b c"],
        );
        assert_eq!(
            o.apply("q=a%2Bb+c&secret=1&old=x&page=3&page=4&tag=a&flag")
                .as_deref(),
            Some("q=a%2Bb+c&new=x&page=1&tag=a&flag&lang=en&tag=b%20c")
        );
        // Nothing applies: the caller keeps the original.
        assert_eq!(ops(&["x"], &["y:z"], &["w:1"], &[], &[]).apply("a=1"), None);
        // Everything removed: an empty query.
        assert_eq!(
            ops(&["a"], &[], &[], &[], &[]).apply("a=1&a=2").as_deref(),
            Some("")
        );
        // Names compare decoded; a rename replaces the values under the new name.
        assert_eq!(
            ops(&["a b"], &["x:y"], &[], &[], &[])
                .apply("a+b=1&y=0&x=1&x=2")
                .as_deref(),
            Some("y=1&y=2")
        );
        // Added names and values are encoded.
        assert_eq!(
            ops(&[], &[], &[], &["k&=:v/é"], &[]).apply("").as_deref(),
            Some("k%26%3D=v%2F%C3%A9")
        );
    }

    #[test]
    fn params_that_are_not_utf8_are_edited_byte_for_byte() {
        let o = ops(
            &["password"],
            &["user:login"],
            &["mode:safe"],
            &[],
            &["tag:x"],
        );
        // One byte that is not UTF-8, anywhere, does not keep the edits from applying; what the
        // edits did not touch keeps its exact bytes (and a renamed field its value's bytes).
        let raw: &[u8] = b"a\xff=%FF\xfe&password=hunter2&user=\xe9+b%20&mode=x&\xc3";
        assert_eq!(
            o.apply_bytes(raw).as_deref(),
            Some(&b"a\xff=%FF\xfe&login=\xe9+b%20&mode=safe&\xc3&tag=x"[..])
        );
        // Names are compared decoded, escapes included.
        assert_eq!(
            o.apply_bytes(b"pass%77ord=\xff&x=\xff").as_deref(),
            Some(&b"x=\xff&tag=x"[..])
        );
        // Nothing applies: the caller keeps the original.
        assert_eq!(
            ops(&["password"], &[], &[], &[], &[]).apply_bytes(b"pass\xffword=1"),
            None
        );
    }

    #[test]
    fn content_codings() {
        let coded = |values: &[&'static str]| {
            let mut h = HeaderMap::new();
            for v in values {
                h.append(header::CONTENT_ENCODING, HeaderValue::from_static(v));
            }
            is_encoded(&h)
        };
        assert!(!coded(&[]));
        assert!(!coded(&["identity"]) && !coded(&[" Identity "]) && !coded(&[""]));
        assert!(!coded(&["identity, identity"]) && !coded(&[" , "]));
        // Any other token is a coding, known or not.
        assert!(coded(&["gzip"]) && coded(&["x"]) && coded(&["br"]));
        assert!(coded(&["identity, gzip"]) && coded(&["identity", "x"]));
    }

    #[test]
    fn content_types() {
        let v = |s: &'static str| HeaderValue::from_static(s);
        assert!(is_json(Some(&v("Application/JSON; charset=utf-8"))));
        assert!(!is_json(Some(&v("text/plain"))) && !is_json(None));
        assert!(is_form(Some(&v("application/x-www-form-urlencoded"))));
        let mut h = HeaderMap::new();
        assert!(!is_encoded(&h));
        h.insert(header::CONTENT_ENCODING, v("identity"));
        assert!(!is_encoded(&h));
        h.insert(header::CONTENT_ENCODING, v("gzip"));
        assert!(is_encoded(&h));
    }
}
