//! Host names of listeners and routes, as the Gateway API intersects them.
//!
//! A `*.example.com` wildcard matches any name with one or more labels before `.example.com`
//! (never `example.com` itself). A route attaches to a listener when some of their names meet;
//! the names it is then served for are the most specific of each meeting pair.

use std::collections::BTreeSet;

/// The names a route is served for on one listener: `None` when route and listener have no
/// name in common (the route does not attach), `Some(empty)` for every host.
pub fn intersect(listener: Option<&str>, route: &[String]) -> Option<BTreeSet<String>> {
    let listener = listener.filter(|l| !l.is_empty());
    match (listener, route.is_empty()) {
        (None, true) => Some(BTreeSet::new()),
        (None, false) => Some(route.iter().map(|h| h.to_ascii_lowercase()).collect()),
        (Some(l), true) => Some(BTreeSet::from([l.to_ascii_lowercase()])),
        (Some(l), false) => {
            let l = l.to_ascii_lowercase();
            let out: BTreeSet<String> = route
                .iter()
                .filter_map(|r| meet(&l, &r.to_ascii_lowercase()))
                .collect();
            (!out.is_empty()).then_some(out)
        }
    }
}

/// The more specific of two names when one covers the other (or they are equal).
fn meet(a: &str, b: &str) -> Option<String> {
    if a == b {
        return Some(a.to_string());
    }
    if covers(a, b) {
        return Some(b.to_string());
    }
    if covers(b, a) {
        return Some(a.to_string());
    }
    None
}

/// Whether the wildcard `pattern` (`*.suffix`) covers `name` (itself a name or a narrower
/// wildcard).
pub fn covers(pattern: &str, name: &str) -> bool {
    let Some(suffix) = pattern.strip_prefix("*.") else {
        return false;
    };
    let name = name.strip_prefix("*.").unwrap_or(name);
    name.len() > suffix.len()
        && name.ends_with(suffix)
        && name.as_bytes()[name.len() - suffix.len() - 1] == b'.'
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    fn set(v: &[&str]) -> Option<BTreeSet<String>> {
        Some(v.iter().map(|s| s.to_string()).collect())
    }

    #[test]
    fn intersections_follow_the_spec() {
        assert_eq!(intersect(None, &[]), set(&[]));
        assert_eq!(intersect(None, &names(&["A.com"])), set(&["a.com"]));
        assert_eq!(intersect(Some("a.com"), &[]), set(&["a.com"]));
        assert_eq!(intersect(Some("a.com"), &names(&["b.com"])), None);
        // A wildcard listener takes the route's specific names under it, at any depth.
        assert_eq!(
            intersect(
                Some("*.wildcard.io"),
                &names(&[
                    "foo.wildcard.io",
                    "x.y.wildcard.io",
                    "wildcard.io",
                    "other.io"
                ])
            ),
            set(&["foo.wildcard.io", "x.y.wildcard.io"])
        );
        // A wildcard route takes the listener's name under it.
        assert_eq!(
            intersect(Some("very.specific.com"), &names(&["*.specific.com"])),
            set(&["very.specific.com"])
        );
        assert_eq!(
            intersect(
                Some("*.anotherwildcard.io"),
                &names(&["*.foo.anotherwildcard.io"])
            ),
            set(&["*.foo.anotherwildcard.io"])
        );
        assert_eq!(
            intersect(Some("*.a.io"), &names(&["*.a.io"])),
            set(&["*.a.io"])
        );
        assert_eq!(intersect(Some("*.a.io"), &names(&["a.io"])), None);
    }
}
