//! Headers the proxy adds to an upstream request, kept beside the client's own.

use http::header::{HeaderMap, HeaderName, HeaderValue};

/// Most headers [`Added`] holds.
const CAPACITY: usize = 8;

/// Headers the proxy adds to an upstream request (`X-Forwarded-*`, `X-Real-IP`, `Via`).
///
/// They are written after the message's own headers: the HTTP/1.1 encoder puts them straight
/// into the request head instead of inserting each into the `HeaderMap` (which showed in
/// per-request profiles); for HTTP/2 they are appended to the map with [`Added::append_to`].
/// Whoever fills it has removed any header of the same name the message must not keep.
#[derive(Debug, Default, Clone)]
pub struct Added {
    slots: [Option<(HeaderName, HeaderValue)>; CAPACITY],
    len: usize,
}

impl Added {
    /// Adds a header line; beyond the capacity it goes nowhere (a bug, asserted in tests).
    pub fn push(&mut self, name: HeaderName, value: HeaderValue) {
        debug_assert!(self.len < CAPACITY, "Added is full");
        if let Some(slot) = self.slots.get_mut(self.len) {
            *slot = Some((name, value));
            self.len += 1;
        }
    }

    /// The header lines in the order they were added.
    pub fn iter(&self) -> impl Iterator<Item = (&HeaderName, &HeaderValue)> {
        self.slots[..self.len].iter().flatten().map(|(n, v)| (n, v))
    }

    /// Moves the header lines into `headers` (appended after any of the same name).
    pub fn append_to(&mut self, headers: &mut HeaderMap) {
        for (name, value) in self.slots[..self.len].iter_mut().filter_map(Option::take) {
            headers.append(name, value);
        }
        self.len = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_keep_their_order_and_move_into_a_map() {
        let mut a = Added::default();
        a.push(
            HeaderName::from_static("x-a"),
            HeaderValue::from_static("1"),
        );
        a.push(http::header::VIA, HeaderValue::from_static("1.1 weir"));
        let names: Vec<_> = a.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["x-a", "via"]);
        let mut map = HeaderMap::new();
        map.insert(http::header::VIA, HeaderValue::from_static("1.0 other"));
        a.append_to(&mut map);
        assert_eq!(a.iter().count(), 0);
        let via: Vec<_> = map.get_all("via").iter().collect();
        assert_eq!(via, ["1.0 other", "1.1 weir"]);
        assert_eq!(map["x-a"], "1");
    }
}
