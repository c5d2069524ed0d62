//! A route's canary (ingress-nginx's canary rules): which of the route's two services serves a
//! request, decided once, from its headers, before the route's plugins run.
//!
//! The rules, in order: the `header` (with `header_value`, that value sends the request to the
//! canary; else with `header_pattern`, a value the pattern finds a match in; else `always` and
//! `never`), the `cookie` (`always`, `never`), then the weight. A header or cookie value that
//! decides nothing falls through to the next rule.

use crate::balancer::hash_on::cookie;
use http::header::{HeaderMap, HeaderName};
use regex::Regex;

use crate::config::Canary;
use crate::validate::header_pattern;

/// A route's canary, compiled.
#[derive(Debug)]
pub struct CompiledCanary {
    /// The canary's service, an index into [`Runtime::services`](super::Runtime).
    pub service: usize,
    /// Requests out of `weight_total` sent to the canary when no header or cookie decided.
    pub weight: u32,
    /// What `weight` is a part of (at least 1).
    pub weight_total: u32,
    /// The header that chooses.
    pub header: Option<HeaderName>,
    /// The header value that sends a request to the canary.
    pub header_value: Option<Box<[u8]>>,
    /// Unanchored: a value it finds a match in sends a request to the canary.
    pub header_pattern: Option<Regex>,
    /// The cookie that chooses.
    pub cookie: Option<Box<str>>,
}

impl CompiledCanary {
    /// The canary of a validated route, its service at index `service`.
    pub fn new(c: &Canary, service: usize) -> Result<CompiledCanary, (&'static str, String)> {
        let header = c
            .header
            .as_deref()
            .map(|h| HeaderName::from_bytes(h.as_bytes()))
            .transpose()
            .map_err(|e| ("canary.header", e.to_string()))?;
        let header_pattern = c
            .header_pattern
            .as_deref()
            .map(header_pattern)
            .transpose()
            .map_err(|m| ("canary.header_pattern", m))?;
        Ok(CompiledCanary {
            service,
            weight: c.weight,
            weight_total: c.weight_total.max(1),
            header,
            header_value: c.header_value.as_deref().map(|v| v.as_bytes().into()),
            header_pattern,
            cookie: c.cookie.as_deref().map(Box::from),
        })
    }

    /// Whether the canary serves a request with these headers.
    #[inline]
    pub fn chooses(&self, headers: &HeaderMap) -> bool {
        self.decide(headers, || fastrand::u32(0..self.weight_total))
    }

    /// [`CompiledCanary::chooses`] with the weight's draw given: `roll` returns a number in
    /// `0..weight_total`, called only when the weight decides and is neither 0 nor whole.
    pub fn decide(&self, headers: &HeaderMap, roll: impl FnOnce() -> u32) -> bool {
        if let Some(decided) = self.by_header(headers) {
            return decided;
        }
        if let Some(decided) = self.by_cookie(headers) {
            return decided;
        }
        match self.weight {
            0 => false,
            w if w >= self.weight_total => true,
            w => roll() < w,
        }
    }

    fn by_header(&self, headers: &HeaderMap) -> Option<bool> {
        let value = headers.get(self.header.as_ref()?)?.as_bytes();
        if let Some(wanted) = &self.header_value {
            return (value == &wanted[..]).then_some(true);
        }
        if let Some(re) = &self.header_pattern {
            let text = std::str::from_utf8(value).ok()?;
            return re.is_match(text).then_some(true);
        }
        always_or_never(value)
    }

    fn by_cookie(&self, headers: &HeaderMap) -> Option<bool> {
        always_or_never(cookie(headers, self.cookie.as_deref()?)?.trim_ascii())
    }
}

fn always_or_never(value: &[u8]) -> Option<bool> {
    match value {
        b"always" => Some(true),
        b"never" => Some(false),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validate::{is_cookie_name, MAX_PATTERN_LEN};
    use http::HeaderValue;

    fn canary(yaml: &str) -> CompiledCanary {
        let c: Canary = serde_yaml::from_str(yaml).unwrap();
        CompiledCanary::new(&c, 1).unwrap()
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    /// The decision with a draw that must not happen.
    fn decided(c: &CompiledCanary, pairs: &[(&str, &str)]) -> bool {
        c.decide(&headers(pairs), || panic!("the weight was drawn"))
    }

    /// The decision, and whether the weight was drawn (`roll` being the draw).
    fn with_roll(c: &CompiledCanary, pairs: &[(&str, &str)], roll: u32) -> (bool, bool) {
        let mut drawn = false;
        let d = c.decide(&headers(pairs), || {
            drawn = true;
            roll
        });
        (d, drawn)
    }

    #[test]
    fn the_header_says_always_or_never() {
        let c = canary("{service: c, header: x-canary, weight: 50}");
        assert!(decided(&c, &[("x-canary", "always")]));
        assert!(!decided(&c, &[("x-canary", "never")]));
        // Other values, and no header, fall through to the weight.
        assert_eq!(with_roll(&c, &[("x-canary", "yes")], 10), (true, true));
        assert_eq!(with_roll(&c, &[("x-canary", "Always")], 60), (false, true));
        assert_eq!(with_roll(&c, &[], 10), (true, true));
        // Another header decides nothing.
        assert_eq!(with_roll(&c, &[("x-other", "always")], 60), (false, true));
    }

    #[test]
    fn a_header_value_replaces_always() {
        let c = canary("{service: c, header: x-canary, header_value: beta}");
        assert!(decided(&c, &[("x-canary", "beta")]));
        // `always` is just another value now, and `never` too: both fall through to weight 0.
        assert_eq!(with_roll(&c, &[("x-canary", "always")], 0), (false, false));
        assert_eq!(with_roll(&c, &[("x-canary", "betamax")], 0), (false, false));
        let heavy = canary("{service: c, header: x-canary, header_value: beta, weight: 100}");
        assert!(
            decided(&heavy, &[("x-canary", "never")]),
            "never falls through to the weight"
        );
    }

    #[test]
    fn a_header_pattern_matches_unanchored_when_no_value_is_set() {
        let c = canary("{service: c, header: x-user, header_pattern: '^(alice|bob)$'}");
        assert!(decided(&c, &[("x-user", "alice")]));
        assert!(!c.decide(&headers(&[("x-user", "carol")]), || 0));
        let loose = canary("{service: c, header: x-user, header_pattern: 'beta'}");
        assert!(decided(&loose, &[("x-user", "pre-beta-2")]), "unanchored");
        assert!(
            !loose.decide(&headers(&[("x-user", "always")]), || 0),
            "no always with a pattern"
        );
        // The value wins over the pattern.
        let both = canary("{service: c, header: x-user, header_value: a, header_pattern: b}");
        assert!(decided(&both, &[("x-user", "a")]));
        assert!(!both.decide(&headers(&[("x-user", "b")]), || 0));
    }

    #[test]
    fn the_cookie_says_always_or_never_after_the_header() {
        let c = canary("{service: c, header: x-canary, cookie: canary, weight: 50}");
        assert!(decided(&c, &[("cookie", "a=1; canary=always")]));
        assert!(!decided(&c, &[("cookie", "canary=never; b=2")]));
        assert!(decided(
            &c,
            &[("cookie", "a=1"), ("cookie", "canary=always")]
        ));
        // The header goes first.
        assert!(!decided(
            &c,
            &[("x-canary", "never"), ("cookie", "canary=always")]
        ));
        assert!(decided(
            &c,
            &[("x-canary", "always"), ("cookie", "canary=never")]
        ));
        // A header value that decides nothing leaves it to the cookie.
        assert!(decided(
            &c,
            &[("x-canary", "maybe"), ("cookie", "canary=always")]
        ));
        // Other cookie values, similar names and no cookie fall through.
        for cookie in ["canary=yes", "canaryx=always", "xcanary=always", "canary="] {
            assert_eq!(
                with_roll(&c, &[("cookie", cookie)], 70),
                (false, true),
                "{cookie}"
            );
        }
    }

    #[test]
    fn weight_zero_never_and_whole_always_without_a_draw() {
        let none = canary("{service: c, weight: 0}");
        let all = canary("{service: c, weight: 100}");
        let tenths = canary("{service: c, weight: 10, weight_total: 10}");
        for _ in 0..1000 {
            assert!(!none.decide(&HeaderMap::new(), || panic!("drawn")));
            assert!(all.decide(&HeaderMap::new(), || panic!("drawn")));
            assert!(tenths.decide(&HeaderMap::new(), || panic!("drawn")));
        }
        let part = canary("{service: c, weight: 20}");
        assert!(part.decide(&HeaderMap::new(), || 19));
        assert!(!part.decide(&HeaderMap::new(), || 20));
    }

    #[test]
    fn the_weight_holds_over_many_draws() {
        let c = canary("{service: c, weight: 20}");
        let h = HeaderMap::new();
        let n = 100_000;
        let hits = (0..n).filter(|_| c.chooses(&h)).count();
        let share = hits as f64 / n as f64;
        // 20 % with a standard deviation of 0.13 points: 1 point is more than 7 of them.
        assert!((share - 0.20).abs() < 0.01, "{share}");
        let odd = canary("{service: c, weight: 1, weight_total: 3}");
        let hits = (0..n).filter(|_| odd.chooses(&h)).count();
        let share = hits as f64 / n as f64;
        assert!((share - 1.0 / 3.0).abs() < 0.01, "{share}");
    }

    #[test]
    fn patterns_are_bounded() {
        assert!(header_pattern("a+b").is_ok());
        assert!(header_pattern("(").unwrap_err().contains("invalid regex"));
        assert!(header_pattern(&"a".repeat(MAX_PATTERN_LEN + 1))
            .unwrap_err()
            .contains("longer than"));
        // Small to write, large compiled.
        assert!(header_pattern("\\w{1000}\\w{1000}").is_err());
    }

    #[test]
    fn cookie_names() {
        assert!(is_cookie_name("canary_1"));
        for bad in ["", "a b", "a=b", "a;b", "ü"] {
            assert!(!is_cookie_name(bad), "{bad}");
        }
    }
}
