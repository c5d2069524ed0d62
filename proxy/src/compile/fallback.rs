//! A route's fallback service, compiled: the upstream statuses it answers instead (a bit set)
//! and the headers its error-page requests carry.

use http::header::{HeaderName, HeaderValue};

use crate::config::Fallback;

/// A route's fallback, compiled.
#[derive(Debug)]
pub struct CompiledFallback {
    /// The fallback service, an index into [`Runtime::services`](super::Runtime).
    pub service: usize,
    /// Upstream statuses answered by the fallback instead, one bit per status 400–599.
    statuses: [u64; 4],
    /// Whether any status is listed.
    pub intercepts_any: bool,
    /// Headers set on error-page requests.
    pub headers: Box<[(HeaderName, HeaderValue)]>,
}

impl CompiledFallback {
    /// The fallback of a validated route, its service at index `service`.
    pub fn new(f: &Fallback, service: usize) -> Result<CompiledFallback, (String, String)> {
        let mut statuses = [0u64; 4];
        for (i, s) in f.statuses.iter().enumerate() {
            if !(400..=599).contains(s) {
                return Err((
                    format!("fallback.statuses[{i}]"),
                    format!("{s} is not a status between 400 and 599"),
                ));
            }
            let bit = usize::from(s - 400);
            statuses[bit / 64] |= 1 << (bit % 64);
        }
        let headers = f
            .headers
            .iter()
            .map(|(n, v)| {
                let field = || format!("fallback.headers.{n}");
                let name = HeaderName::from_bytes(n.as_bytes())
                    .map_err(|_| (field(), "not a valid header name".to_string()))?;
                let value = HeaderValue::from_str(v)
                    .map_err(|_| (field(), format!("{v:?} is not a valid header value")))?;
                Ok((name, value))
            })
            .collect::<Result<Box<[_]>, (String, String)>>()?;
        Ok(CompiledFallback {
            service,
            intercepts_any: statuses != [0; 4],
            statuses,
            headers,
        })
    }

    /// Whether an upstream answer with `status` is replaced by the fallback's.
    #[inline]
    pub fn intercepts(&self, status: u16) -> bool {
        let Some(bit) = status.checked_sub(400).map(usize::from) else {
            return false;
        };
        bit < 200 && self.statuses[bit / 64] & (1 << (bit % 64)) != 0
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A fallback compiled from its YAML, its service at index 2.
    pub(crate) fn fallback(yaml: &str) -> CompiledFallback {
        let f: Fallback = serde_yaml::from_str(yaml).unwrap();
        CompiledFallback::new(&f, 2).unwrap()
    }

    #[test]
    fn only_listed_statuses_are_intercepted() {
        let f = fallback("{service: e, statuses: [400, 404, 463, 503, 599]}");
        assert!(f.intercepts_any);
        for s in [400, 404, 463, 503, 599] {
            assert!(f.intercepts(s), "{s}");
        }
        for s in [0, 200, 302, 399, 401, 500, 502, 598, 600, 1000, u16::MAX] {
            assert!(!f.intercepts(s), "{s}");
        }
        let none = fallback("{service: e}");
        assert!(!none.intercepts_any);
        assert!(!none.intercepts(404));
    }

    #[test]
    fn bad_statuses_and_headers_are_refused() {
        let f: Fallback = serde_yaml::from_str("{service: e, statuses: [404, 600]}").unwrap();
        let (field, _) = CompiledFallback::new(&f, 0).unwrap_err();
        assert_eq!(field, "fallback.statuses[1]");
        let f: Fallback = serde_yaml::from_str("{service: e, headers: {'a b': x}}").unwrap();
        let (field, _) = CompiledFallback::new(&f, 0).unwrap_err();
        assert_eq!(field, "fallback.headers.a b");
    }
}
