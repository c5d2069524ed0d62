//! Request-path normalisation before routing, so that a route cannot be bypassed by encoding.
//!
//! Percent-encoded unreserved characters are decoded (`%61` → `a`, `%2E` → `.`), other escapes
//! are kept with upper-case hex (`%2f` → `%2F`: an encoded slash is not a separator), `.` and `..`
//! segments are resolved (RFC 3986 §5.2.4, never above the root), and `//` optionally collapses
//! to `/`. The normalised path is both what routes match and what is forwarded.

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
    if path.contains(&b'%') {
        return false;
    }
    let mut prev_slash = false;
    for (i, &b) in path.iter().enumerate() {
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

/// Normalises an origin-form request path (without the query).
pub fn normalize_path(path: &str, merge_slashes: bool) -> Result<Cow<'_, str>, BadPath> {
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
        } else {
            // Copy the run up to the next escape in one go (keeps multi-byte UTF-8 intact).
            let run = bytes[i..]
                .iter()
                .position(|&c| c == b'%')
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
    fn slashes() {
        assert_eq!(n("//a///b//"), "/a/b/");
        assert_eq!(normalize_path("//a//b", false).unwrap(), "//a//b");
    }
}
