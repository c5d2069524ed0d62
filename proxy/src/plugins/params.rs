//! Query strings and urlencoded forms: decoding names and values, finding and removing
//! parameters while keeping the bytes of the others as they came.

/// Percent-decodes a query or form component (`+` is a space); malformed escapes stay as they
/// are and invalid UTF-8 (raw or escaped) is replaced by U+FFFD (decoded text is compared or
/// read, never written back).
pub(crate) fn decode(b: &[u8]) -> String {
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => match (hex(b[i + 1]), hex(b[i + 2])) {
                (Some(h), Some(l)) => {
                    out.push(h << 4 | l);
                    i += 2;
                }
                _ => out.push(b'%'),
            },
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn hex(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

/// Percent-encodes everything but RFC 3986's unreserved characters (as `ngx.encode_args`).
pub(crate) fn encode_into(out: &mut Vec<u8>, s: &str) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for &c in s.as_bytes() {
        if c.is_ascii_alphanumeric() || matches!(c, b'-' | b'.' | b'_' | b'~') {
            out.push(c);
        } else {
            out.extend_from_slice(&[b'%', HEX[usize::from(c >> 4)], HEX[usize::from(c & 15)]]);
        }
    }
}

/// The decoded values of every parameter named `name` in a query string or urlencoded form
/// (a parameter without `=` has the empty value).
pub(crate) fn values(raw: &[u8], name: &str) -> Vec<String> {
    raw.split(|&b| b == b'&')
        .filter_map(|p| {
            let (n, v) = match p.iter().position(|&b| b == b'=') {
                Some(i) => (&p[..i], &p[i + 1..]),
                None => (p, &b""[..]),
            };
            (decode(n) == name).then(|| decode(v))
        })
        .collect()
}

/// Whether a query string or urlencoded form has a parameter named `name` (no allocation
/// beyond decoding names).
pub(crate) fn contains(raw: &[u8], name: &str) -> bool {
    raw.split(|&b| b == b'&').any(|p| {
        let n = match p.iter().position(|&b| b == b'=') {
            Some(i) => &p[..i],
            None => p,
        };
        !p.is_empty() && decode(n) == name
    })
}

/// The query or form without the parameters named `name`, or `None` if it had none; the other
/// parameters keep their bytes.
pub(crate) fn without(raw: &[u8], name: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(raw.len());
    let mut removed = false;
    for p in raw.split(|&b| b == b'&').filter(|p| !p.is_empty()) {
        let n = match p.iter().position(|&b| b == b'=') {
            Some(i) => &p[..i],
            None => p,
        };
        if decode(n) == name {
            removed = true;
            continue;
        }
        if !out.is_empty() {
            out.push(b'&');
        }
        out.extend_from_slice(p);
    }
    removed.then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decoding_tolerates_malformed_escapes() {
        assert_eq!(decode(b"a%20b+c"), "a b c");
        assert_eq!(decode(b"%"), "%");
        assert_eq!(decode(b"%2"), "%2");
        assert_eq!(decode(b"%zz%41"), "%zzA");
        assert_eq!(decode(b"%C3%A9"), "\u{e9}");
        // Invalid UTF-8, raw or escaped, compares as U+FFFD.
        assert_eq!(decode(b"a\xffb%FE"), "a\u{fffd}b\u{fffd}");
    }

    #[test]
    fn values_and_removal_compare_decoded_names() {
        let q = b"apikey=a%2Bb&x=1&api%6Bey=second&flag&apikey";
        assert_eq!(values(q, "apikey"), ["a+b", "second", ""]);
        assert_eq!(values(q, "flag"), [""]);
        assert!(values(q, "nope").is_empty());
        assert_eq!(without(q, "apikey").unwrap(), b"x=1&flag");
        assert_eq!(without(b"apikey=1", "apikey").unwrap(), b"");
        assert_eq!(without(q, "nope"), None);
        assert!(contains(q, "apikey") && contains(q, "flag") && !contains(q, "nope"));
    }
}
