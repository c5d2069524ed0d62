//! Request-path normalisation before routing, so that a route cannot be bypassed by encoding.
//!
//! Percent-encoded unreserved characters are decoded (`%61` → `a`, `%2E` → `.`), other escapes
//! are kept with upper-case hex, `.` and `..` segments are resolved (RFC 3986 §5.2.4, never
//! above the root), and `//` optionally collapses to `/`. The normalised path is what is
//! forwarded.
//!
//! Encoded slashes and backslashes (`%2F`, `%5C`, `\`) are where backends disagree: some decode
//! them into separators (and then resolve `..` across them), others do not. By default they are
//! refused ([`EscapedSlashes`]). Path parameters (`/admin;jsessionid=1/x`, which Tomcat, Jetty
//! and Spring drop before routing) are kept in the forwarded path but ignored by route matching
//! ([`without_params`]).

use std::borrow::Cow;

/// A request path that cannot be normalised (answered with 400).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadPath {
    /// A `%` not followed by two hex digits.
    #[error("malformed percent-encoding in the request path")]
    BadEscape,
    /// The path does not start with `/`.
    #[error("the request path must start with \"/\"")]
    NotAbsolute,
    /// An encoded slash or backslash (`%2F`, `%5C`), refused by the escaped-slashes policy.
    #[error("encoded slash or backslash (%2F, %5C) in the request path")]
    EscapedSlash,
    /// A raw backslash, refused by the escaped-slashes policy.
    #[error("backslash in the request path")]
    Backslash,
    /// A `.`, `..` or empty segment with path parameters (`/..;/admin`, `/;x/admin`), which
    /// backends resolve or merge away.
    #[error("path parameters on a dot or empty segment")]
    DotSegmentParams,
}

/// What to do with `%2F`, `%5C` and `\` in request paths (Envoy's choices).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum EscapedSlashes {
    /// Answer 400 (the default).
    #[default]
    Reject,
    /// Forward them as they are (`%2F` and `%5C` are not separators for routing).
    Keep,
    /// Decode them into `/`, then redirect the client to the resulting path (307).
    UnescapeAndRedirect,
    /// Decode them into `/` and route and forward the result.
    UnescapeAndForward,
}

impl std::str::FromStr for EscapedSlashes {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Ok(match s {
            "reject" => EscapedSlashes::Reject,
            "keep" => EscapedSlashes::Keep,
            "unescape-and-redirect" => EscapedSlashes::UnescapeAndRedirect,
            "unescape-and-forward" => EscapedSlashes::UnescapeAndForward,
            other => {
                return Err(format!(
                "{other:?} is not one of reject, keep, unescape-and-redirect, unescape-and-forward"
            ))
            }
        })
    }
}

impl EscapedSlashes {
    fn unescapes(self) -> bool {
        matches!(
            self,
            EscapedSlashes::UnescapeAndRedirect | EscapedSlashes::UnescapeAndForward
        )
    }
}

/// Whether a raw request path holds `%2F`, `%5C` or `\` (any case).
pub fn has_escaped_slash(path: &str) -> bool {
    let b = path.as_bytes();
    b.contains(&b'\\')
        || b.windows(3)
            .any(|w| w[0] == b'%' && matches!((w[1], w[2] | 0x20), (b'2', b'f') | (b'5', b'c')))
}

fn is_unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// Whether `path` is already normal, so the common case allocates nothing.
fn is_normal(path: &[u8], merge_slashes: bool) -> bool {
    let mut prev_slash = false;
    for (i, &b) in path.iter().enumerate() {
        if b == b'%' || b == b'\\' {
            return false;
        }
        if b == b'/' {
            if prev_slash && merge_slashes {
                return false;
            }
            prev_slash = true;
        } else {
            if prev_slash && b == b'.' {
                // "/." or "/.." followed by "/" or the end is a dot segment.
                let rest = &path[i..];
                let seg_end = rest.iter().position(|&c| c == b'/').unwrap_or(rest.len());
                if &rest[..seg_end] == b"." || &rest[..seg_end] == b".." {
                    return false;
                }
            }
            prev_slash = false;
        }
    }
    true
}

/// Normalises a path, keeping encoded slashes and backslashes as they are (route paths).
pub fn normalize_path(path: &str, merge_slashes: bool) -> Result<Cow<'_, str>, BadPath> {
    normalize_request_path(path, merge_slashes, EscapedSlashes::Keep)
}

/// Normalises an origin-form request path (without the query) under an escaped-slashes policy.
pub fn normalize_request_path(
    path: &str,
    merge_slashes: bool,
    slashes: EscapedSlashes,
) -> Result<Cow<'_, str>, BadPath> {
    let bytes = path.as_bytes();
    if bytes.first() != Some(&b'/') {
        return Err(BadPath::NotAbsolute);
    }
    if is_normal(bytes, merge_slashes) {
        return Ok(Cow::Borrowed(path));
    }

    // Pass 1: decode unreserved escapes, canonicalise the others.
    let mut decoded = String::with_capacity(path.len());
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if b == b'%' {
            let (hi, lo) = match (
                bytes.get(i + 1).and_then(|&c| hex(c)),
                bytes.get(i + 2).and_then(|&c| hex(c)),
            ) {
                (Some(h), Some(l)) => (h, l),
                _ => return Err(BadPath::BadEscape),
            };
            let c = hi * 16 + lo;
            if is_unreserved(c) {
                decoded.push(c as char);
            } else if (c == b'/' || c == b'\\') && slashes == EscapedSlashes::Reject {
                return Err(BadPath::EscapedSlash);
            } else if (c == b'/' || c == b'\\') && slashes.unescapes() {
                decoded.push('/');
            } else {
                decoded.push('%');
                decoded.push(
                    char::from_digit(hi as u32, 16)
                        .unwrap()
                        .to_ascii_uppercase(),
                );
                decoded.push(
                    char::from_digit(lo as u32, 16)
                        .unwrap()
                        .to_ascii_uppercase(),
                );
            }
            i += 3;
        } else if b == b'\\' {
            match slashes {
                EscapedSlashes::Reject => return Err(BadPath::Backslash),
                EscapedSlashes::Keep => decoded.push('\\'),
                _ => decoded.push('/'),
            }
            i += 1;
        } else {
            // Copy the run up to the next escape in one go (keeps multi-byte UTF-8 intact).
            let run = bytes[i..]
                .iter()
                .position(|&c| c == b'%' || c == b'\\')
                .map_or(bytes.len(), |p| i + p);
            decoded.push_str(&path[i..run]);
            i = run;
        }
    }

    // Pass 2: resolve dot segments and, optionally, empty segments.
    let mut out: Vec<&str> = Vec::new();
    let segments: Vec<&str> = decoded[1..].split('/').collect();
    let last = segments.len() - 1;
    for (n, seg) in segments.iter().enumerate() {
        match *seg {
            "." => {
                if n == last {
                    out.push("");
                }
            }
            ".." => {
                out.pop();
                if n == last {
                    out.push("");
                }
            }
            "" if merge_slashes && n != last => {}
            s => out.push(s),
        }
    }
    let mut result = String::with_capacity(decoded.len());
    for seg in &out {
        result.push('/');
        result.push_str(seg);
    }
    if result.is_empty() {
        result.push('/');
    }
    Ok(Cow::Owned(result))
}

/// The path routes match: every segment without its `;` parameters (`/admin;x/y` is matched
/// as `/admin/y`, as Tomcat, Jetty and Spring read it). A `.` or `..` segment that has
/// parameters (`/..;/admin`) is refused: those backends resolve it, Weir's routing would not.
pub fn without_params(path: &str) -> Result<Cow<'_, str>, BadPath> {
    if !path.as_bytes().contains(&b';') {
        return Ok(Cow::Borrowed(path));
    }
    let mut out = String::with_capacity(path.len());
    for (n, seg) in path.split('/').enumerate() {
        if n > 0 {
            out.push('/');
        }
        let bare = seg.split(';').next().unwrap_or("");
        // `/..;/` is resolved by those backends, and `/;x/` becomes an empty segment they
        // merge away (`/;x/admin` is their `/admin`): Weir's routing would read neither so.
        if bare.len() != seg.len() && (bare.is_empty() || bare == "." || bare == "..") {
            return Err(BadPath::DotSegmentParams);
        }
        out.push_str(bare);
    }
    Ok(Cow::Owned(out))
}

/// Where a prefix of [`without_params`]`(path)` that is `len` bytes long ends in `path`, the
/// parameters of its last segment included.
pub fn with_params_len(path: &str, len: usize) -> usize {
    let b = path.as_bytes();
    let (mut i, mut kept) = (0, 0);
    while i < b.len() && kept < len {
        if b[i] == b';' {
            while i < b.len() && b[i] != b'/' {
                i += 1;
            }
            continue;
        }
        i += 1;
        kept += 1;
    }
    // The prefix ended inside a segment whose parameters follow: they belong to it.
    if i < b.len() && b[i] == b';' {
        while i < b.len() && b[i] != b'/' {
            i += 1;
        }
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(p: &str) -> String {
        normalize_path(p, true).unwrap().into_owned()
    }

    #[test]
    fn normal_paths_are_borrowed() {
        for p in ["/", "/a", "/a/b/", "/a.b/c..d/.e"] {
            assert!(
                matches!(normalize_path(p, true), Ok(Cow::Borrowed(_))),
                "{p}"
            );
        }
    }

    #[test]
    fn dot_segments_resolve() {
        assert_eq!(n("/a/./b"), "/a/b");
        assert_eq!(n("/a/../b"), "/b");
        assert_eq!(n("/../../b"), "/b");
        assert_eq!(n("/a/b/.."), "/a/");
        assert_eq!(n("/a/."), "/a/");
        assert_eq!(n("/.."), "/");
    }

    #[test]
    fn escapes() {
        assert_eq!(n("/%61dmin"), "/admin");
        assert_eq!(n("/a/%2e%2E/admin"), "/admin");
        assert_eq!(n("/a%2fb"), "/a%2Fb");
        assert_eq!(n("/caf%C3%A9"), "/caf%C3%A9");
        assert_eq!(n("/café"), "/café");
        assert_eq!(normalize_path("/a%zz", true), Err(BadPath::BadEscape));
        assert_eq!(normalize_path("/a%2", true), Err(BadPath::BadEscape));
        assert_eq!(normalize_path("a", true), Err(BadPath::NotAbsolute));
    }

    #[test]
    fn escaped_slashes_follow_the_policy() {
        use EscapedSlashes::*;
        let r = |p, s| normalize_request_path(p, true, s).map(Cow::into_owned);
        for p in ["/admin%2Fsecret", "/admin%2fsecret", "/a%5Cb", "/a%5cb"] {
            assert_eq!(r(p, Reject), Err(BadPath::EscapedSlash), "{p}");
            assert!(has_escaped_slash(p), "{p}");
        }
        assert_eq!(r("/x\\..\\admin", Reject), Err(BadPath::Backslash));
        assert_eq!(r("/admin%2fsecret", Keep).unwrap(), "/admin%2Fsecret");
        assert_eq!(r("/x\\..\\admin", Keep).unwrap(), "/x\\..\\admin");
        assert_eq!(
            r("/admin%2Fsecret", UnescapeAndForward).unwrap(),
            "/admin/secret"
        );
        assert_eq!(r("/x\\..\\admin", UnescapeAndForward).unwrap(), "/admin");
        assert_eq!(r("/x%2F..%5Cadmin", UnescapeAndRedirect).unwrap(), "/admin");
        assert!(!has_escaped_slash("/a/b%20c"));
        assert_eq!(r("/plain/path", Reject).unwrap(), "/plain/path");
    }

    #[test]
    fn path_parameters_are_ignored_for_routing() {
        assert_eq!(without_params("/admin;x/secret").unwrap(), "/admin/secret");
        assert_eq!(without_params("/a;b=c;d/e;f").unwrap(), "/a/e");
        assert!(matches!(
            without_params("/plain").unwrap(),
            Cow::Borrowed(_)
        ));
        assert_eq!(
            without_params("/x/..;/admin"),
            Err(BadPath::DotSegmentParams)
        );
        assert_eq!(
            without_params("/x/.;a/admin"),
            Err(BadPath::DotSegmentParams)
        );
        assert_eq!(without_params("/x/..a;b/admin").unwrap(), "/x/..a/admin");
        let p = "/admin;x/secret;y/z";
        assert_eq!(with_params_len(p, "/admin".len()), "/admin;x".len());
        assert_eq!(
            with_params_len(p, "/admin/secret".len()),
            "/admin;x/secret;y".len()
        );
        assert_eq!(with_params_len(p, "/adm".len()), "/adm".len());
        assert_eq!(with_params_len(p, 0), 0);
        assert_eq!(with_params_len(p, "/admin/secret/z".len()), p.len());
    }

    #[test]
    fn slashes() {
        assert_eq!(n("//a///b//"), "/a/b/");
        assert_eq!(normalize_path("//a//b", false).unwrap(), "//a//b");
    }
}
