//! The input of consistent hashing, taken from a request: the client's address, a header, a
//! cookie (set by the proxy when the client has none), the path or a query argument, with a
//! second input for requests that lack the first.

use std::net::IpAddr;

use http::{header, HeaderMap, HeaderName, HeaderValue};

use super::hashing::hash_key;
use crate::config::{HashBy, HashOn, SameSite};

/// Where one hashing input is read.
#[derive(Debug, Clone)]
enum Source {
    Ip,
    Header(HeaderName),
    Cookie(String),
    Path,
    QueryArg(String),
}

/// An upstream's `hash_on`, compiled.
#[derive(Debug, Clone)]
pub struct HashInput {
    primary: Source,
    fallback: Option<Source>,
    /// `; Path=…[; Max-Age=…]; HttpOnly`, appended to a cookie the proxy sets.
    cookie_attributes: String,
    /// The same without `SameSite=None`, for browsers that mishandle it (when asked).
    cookie_attributes_without_none: Option<String>,
}

/// A request's hashing key, and the cookie to set when the key was made here.
#[derive(Debug, Default)]
pub struct Key {
    /// The hash; `None` when the request carries no input (it is then balanced round-robin).
    pub hash: Option<u64>,
    /// A `Set-Cookie` value for the response, when `by: cookie` found none.
    pub set_cookie: Option<HeaderValue>,
}

impl HashInput {
    /// Compiles a validated `hash_on`.
    pub fn new(h: &HashOn) -> HashInput {
        let source = |by: HashBy, name: Option<&str>| {
            let name = name.unwrap_or_default();
            match by {
                HashBy::Ip => Source::Ip,
                HashBy::Header => Source::Header(
                    HeaderName::from_bytes(name.as_bytes())
                        .unwrap_or(HeaderName::from_static("x-invalid")),
                ),
                HashBy::Cookie => Source::Cookie(name.to_string()),
                HashBy::Path => Source::Path,
                HashBy::QueryArg => Source::QueryArg(name.to_string()),
            }
        };
        let attributes = |same_site: Option<SameSite>| {
            let mut a = format!("; Path={}", h.cookie_path);
            if h.cookie_ttl > 0 {
                a.push_str(&format!("; Max-Age={}", h.cookie_ttl));
            }
            match same_site {
                Some(SameSite::Strict) => a.push_str("; SameSite=Strict"),
                Some(SameSite::Lax) => a.push_str("; SameSite=Lax"),
                Some(SameSite::None) => a.push_str("; SameSite=None"),
                None => {}
            }
            if h.cookie_secure {
                a.push_str("; Secure");
            }
            a.push_str("; HttpOnly");
            a
        };
        let conditional =
            h.cookie_same_site_none_if_supported && h.cookie_same_site == Some(SameSite::None);
        HashInput {
            primary: source(h.by, h.name.as_deref()),
            fallback: h.fallback.as_ref().map(|f| source(f.by, f.name.as_deref())),
            cookie_attributes: attributes(h.cookie_same_site),
            cookie_attributes_without_none: conditional.then(|| attributes(None)),
        }
    }

    /// The key of a request.
    pub fn key(&self, ip: IpAddr, headers: &HeaderMap, path: &str, query: Option<&str>) -> Key {
        if let Some(h) = read(&self.primary, ip, headers, path, query) {
            return Key {
                hash: Some(h),
                set_cookie: None,
            };
        }
        if let Source::Cookie(name) = &self.primary {
            // Kong and ingress-nginx's affinity: a new client gets a random key, kept in a
            // cookie so its next requests land on the same target.
            let value = uuid::Uuid::new_v4().simple().to_string();
            let attributes = match &self.cookie_attributes_without_none {
                Some(without) if user_agent_rejects_none(headers) => without,
                _ => &self.cookie_attributes,
            };
            let cookie = format!("{name}={value}{attributes}");
            return Key {
                hash: Some(hash_key(value.as_bytes())),
                set_cookie: HeaderValue::from_str(&cookie).ok(),
            };
        }
        Key {
            hash: self
                .fallback
                .as_ref()
                .and_then(|f| read(f, ip, headers, path, query)),
            set_cookie: None,
        }
    }
}

/// Whether the request's browser mishandles `SameSite=None`.
fn user_agent_rejects_none(headers: &HeaderMap) -> bool {
    headers
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(super::same_site::rejects_same_site_none)
}

fn read(
    source: &Source,
    ip: IpAddr,
    headers: &HeaderMap,
    path: &str,
    query: Option<&str>,
) -> Option<u64> {
    match source {
        Source::Ip => Some(match ip {
            IpAddr::V4(a) => hash_key(&a.octets()),
            IpAddr::V6(a) => hash_key(&a.octets()),
        }),
        Source::Header(name) => {
            let mut values = headers.get_all(name).iter();
            let first = values.next()?;
            match values.next() {
                None => Some(hash_key(first.as_bytes())),
                // Every value counts, in order (a proxy in front may have split one list).
                Some(second) => {
                    let mut all = first.as_bytes().to_vec();
                    for v in std::iter::once(second).chain(values) {
                        all.push(b',');
                        all.extend_from_slice(v.as_bytes());
                    }
                    Some(hash_key(&all))
                }
            }
        }
        Source::Cookie(name) => cookie(headers, name)
            .filter(|v| !v.is_empty())
            .map(hash_key),
        Source::Path => Some(hash_key(path.as_bytes())),
        Source::QueryArg(name) => query?
            .split('&')
            .filter_map(|kv| {
                let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
                (k == name && !v.is_empty()).then_some(v)
            })
            .next()
            .map(|v| hash_key(v.as_bytes())),
    }
}

/// The value of the first cookie `name` in the request's `Cookie` headers, as sent (maybe
/// empty): shared by hashing and canary decisions.
pub(crate) fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a [u8]> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .flat_map(|v| v.as_bytes().split(|b| *b == b';'))
        .find_map(|pair| {
            let pair = pair.trim_ascii();
            let eq = pair.iter().position(|b| *b == b'=')?;
            (&pair[..eq] == name.as_bytes()).then(|| &pair[eq + 1..])
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(yaml: &str) -> HashInput {
        HashInput::new(&serde_yaml::from_str(yaml).unwrap())
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        h
    }

    const IP: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 1));

    #[test]
    fn each_input_is_read_and_the_fallback_used_when_it_is_missing() {
        let h = input("{by: header, name: x-user, fallback: {by: query-arg, name: u}}");
        let a = h.key(IP, &headers(&[("x-user", "alice")]), "/", None).hash;
        assert_eq!(a, Some(hash_key(b"alice")));
        let q = h.key(IP, &headers(&[]), "/", Some("x=1&u=bob")).hash;
        assert_eq!(q, Some(hash_key(b"bob")));
        assert_eq!(h.key(IP, &headers(&[]), "/", Some("u=")).hash, None);

        let p = input("{by: path}");
        assert_eq!(
            p.key(IP, &headers(&[]), "/a/b", Some("z=1")).hash,
            Some(hash_key(b"/a/b"))
        );
        let ip = input("{by: ip}");
        let other = IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 2));
        assert_ne!(
            ip.key(IP, &headers(&[]), "/", None).hash,
            ip.key(other, &headers(&[]), "/", None).hash
        );
        let multi = h.key(IP, &headers(&[("x-user", "a"), ("x-user", "b")]), "/", None);
        assert_eq!(multi.hash, Some(hash_key(b"a,b")));
    }

    #[test]
    fn a_missing_cookie_is_made_and_set_then_honoured() {
        let h = input("{by: cookie, name: sticky, cookie_path: /app, cookie_ttl: 3600}");
        let made = h.key(IP, &headers(&[("cookie", "other=1")]), "/", None);
        let set = made.set_cookie.expect("a cookie to set");
        let set = set.to_str().unwrap();
        assert!(set.starts_with("sticky="), "{set}");
        assert!(
            set.ends_with("; Path=/app; Max-Age=3600; HttpOnly"),
            "{set}"
        );
        let value = &set["sticky=".len()..set.find(';').unwrap()];
        let back = h.key(
            IP,
            &headers(&[("cookie", &format!("a=b; sticky={value}"))]),
            "/",
            None,
        );
        assert_eq!(back.hash, made.hash, "the cookie's value is the key");
        assert!(back.set_cookie.is_none());
        // A cookie named like the end of another is not it.
        let k = h.key(IP, &headers(&[("cookie", "xsticky=1")]), "/", None);
        assert!(k.set_cookie.is_some());
    }

    #[test]
    fn same_site_none_is_left_out_for_browsers_that_mishandle_it_when_asked() {
        let old_chrome = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/60.0.3112.90 Safari/537.36";
        let firefox = "Mozilla/5.0 (X11; Linux x86_64; rv:121.0) Gecko/20100101 Firefox/121.0";
        let set = |h: &HashInput, ua: &str| {
            let k = h.key(IP, &headers(&[("user-agent", ua)]), "/", None);
            let c = k.set_cookie.unwrap();
            c.to_str().unwrap().split_once(';').unwrap().1.to_string()
        };
        let conditional = input(
            "{by: cookie, name: s, cookie_same_site: None, cookie_secure: true, cookie_same_site_none_if_supported: true}",
        );
        assert_eq!(
            set(&conditional, firefox),
            " Path=/; SameSite=None; Secure; HttpOnly"
        );
        assert_eq!(set(&conditional, old_chrome), " Path=/; Secure; HttpOnly");
        let always = input("{by: cookie, name: s, cookie_same_site: None, cookie_secure: true}");
        assert_eq!(
            set(&always, old_chrome),
            " Path=/; SameSite=None; Secure; HttpOnly"
        );
    }
}
