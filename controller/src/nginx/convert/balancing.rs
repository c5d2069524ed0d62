//! `load-balance`, `upstream-hash-by`, `affinity` and the session cookie.

use super::*;

impl Conv<'_> {
    /// `load-balance`, `upstream-hash-by`, `affinity` and the session cookie.
    pub(super) fn balancing(&mut self) {
        let affinity = self.take("affinity");
        let cookie_keys = [
            "session-cookie-name",
            "session-cookie-path",
            "session-cookie-max-age",
            "session-cookie-expires",
            "session-cookie-samesite",
            "session-cookie-conditional-samesite-none",
            "session-cookie-secure",
        ];
        let cookie: BTreeMap<&str, String> = cookie_keys
            .iter()
            .filter_map(|k| self.take(k).map(|v| (*k, v)))
            .collect();
        let hash_by = self.take("upstream-hash-by");
        let subset = self.take("upstream-hash-by-subset");
        let subset_size = self.take("upstream-hash-by-subset-size");
        let lb = self.take("load-balance");
        let mut decided = false;
        match affinity.as_deref().map(str::trim) {
            Some("cookie") => {
                let v = affinity.clone().unwrap_or_default();
                let mut h = HashOn {
                    by: HashBy::Cookie,
                    name: Some(
                        cookie
                            .get("session-cookie-name")
                            .map(|s| s.trim().to_string())
                            .unwrap_or_else(|| "INGRESSCOOKIE".into()),
                    ),
                    fallback: None,
                    cookie_path: None,
                    cookie_ttl: None,
                    cookie_same_site: None,
                    cookie_same_site_none_if_supported: false,
                    cookie_secure: false,
                    subset_size: None,
                };
                let mut bad: Vec<(&str, &str)> = Vec::new();
                if let Some(p) = cookie.get("session-cookie-path") {
                    if p.trim().starts_with('/') && !p.contains([';', ' ']) {
                        h.cookie_path = Some(p.trim().into());
                    } else {
                        bad.push(("session-cookie-path", "not a path"));
                    }
                }
                let secs = |k: &str| cookie.get(k).map(|v| v.trim().parse::<u64>());
                match (
                    secs("session-cookie-max-age"),
                    secs("session-cookie-expires"),
                ) {
                    (Some(Ok(n)), _) | (None, Some(Ok(n))) => h.cookie_ttl = Some(n),
                    (Some(Err(_)), _) => {
                        bad.push(("session-cookie-max-age", "not a whole number of seconds"))
                    }
                    (None, Some(Err(_))) => {
                        bad.push(("session-cookie-expires", "not a whole number of seconds"))
                    }
                    (None, None) => {}
                }
                if let Some(s) = cookie.get("session-cookie-samesite") {
                    match s.trim() {
                        "Strict" | "strict" => h.cookie_same_site = Some(SameSite::Strict),
                        "Lax" | "lax" => h.cookie_same_site = Some(SameSite::Lax),
                        "None" | "none" => h.cookie_same_site = Some(SameSite::None),
                        _ => bad.push(("session-cookie-samesite", "not Strict, Lax or None")),
                    }
                }
                if let Some(s) = cookie.get("session-cookie-conditional-samesite-none") {
                    match parse_bool(s) {
                        Some(b) => h.cookie_same_site_none_if_supported = b,
                        None => {
                            bad.push(("session-cookie-conditional-samesite-none", "not a boolean"))
                        }
                    }
                }
                if let Some(s) = cookie.get("session-cookie-secure") {
                    match parse_bool(s) {
                        Some(b) => h.cookie_secure = b,
                        None => bad.push(("session-cookie-secure", "not a boolean")),
                    }
                }
                if h.cookie_same_site == Some(SameSite::None) {
                    h.cookie_secure = true;
                }
                if let Some(n) = &h.name {
                    if n.is_empty()
                        || !n
                            .bytes()
                            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
                    {
                        bad.push(("session-cookie-name", "not a cookie name"));
                    }
                }
                for (k, val) in &cookie {
                    match bad.iter().find(|(bk, _)| bk == k) {
                        Some((_, m)) => self.record(k, val, Status::Invalid, *m),
                        None if *k == "session-cookie-max-age"
                            && cookie.contains_key("session-cookie-expires") =>
                        {
                            self.applied(k, val)
                        }
                        None if *k == "session-cookie-expires" => {
                            let m = if cookie.contains_key("session-cookie-max-age") {
                                "Max-Age is set from session-cookie-max-age; no Expires attribute"
                            } else {
                                "sent as Max-Age rather than Expires"
                            };
                            self.record(k, val, Status::Differs, m)
                        }
                        None => self.applied(k, val),
                    }
                }
                if bad.is_empty() {
                    self.upstream.algorithm = Some(Algorithm::ConsistentHashing);
                    self.upstream.hash_on = Some(h);
                    let m = "the cookie holds a random key hashed onto the pods (consistent hashing) rather than naming a pod";
                    self.record("affinity", &v, Status::Differs, m);
                    decided = true;
                } else {
                    self.record(
                        "affinity",
                        &v,
                        Status::Invalid,
                        "a session-cookie-* annotation is invalid",
                    );
                }
            }
            Some(_) => {
                let v = affinity.clone().unwrap_or_default();
                self.record(
                    "affinity",
                    &v,
                    Status::Invalid,
                    "only \"cookie\" affinity exists",
                );
                for (k, val) in &cookie {
                    self.record(k, val, Status::Invalid, "affinity is invalid");
                }
            }
            None => {
                for (k, val) in &cookie {
                    self.record(
                        k,
                        val,
                        Status::Applied,
                        "no effect without affinity: cookie",
                    );
                }
            }
        }
        if let Some(v) = &hash_by {
            if decided {
                self.record(
                    "upstream-hash-by",
                    v,
                    Status::Applied,
                    "affinity wins, as in ingress-nginx",
                );
            } else {
                let t = v.trim();
                let by = |by, name: Option<&str>| HashOn {
                    by,
                    name: name.map(str::to_string),
                    fallback: None,
                    cookie_path: None,
                    cookie_ttl: None,
                    cookie_same_site: None,
                    cookie_same_site_none_if_supported: false,
                    cookie_secure: false,
                    subset_size: None,
                };
                let (h, note) = match t {
                    "$remote_addr" | "$binary_remote_addr" => (Some(by(HashBy::Ip, None)), ""),
                    "$uri" | "$document_uri" => (Some(by(HashBy::Path, None)), ""),
                    "$request_uri" => (
                        Some(by(HashBy::Path, None)),
                        "hashes the path without the query string",
                    ),
                    _ => {
                        if let Some(h) = t.strip_prefix("$http_") {
                            (Some(by(HashBy::Header, Some(&h.replace('_', "-")))), "")
                        } else if let Some(c) = t.strip_prefix("$cookie_") {
                            (
                                Some(by(HashBy::Cookie, Some(c))),
                                "Weir sets the cookie (a random key) when a request has none",
                            )
                        } else if let Some(q) = t.strip_prefix("$arg_") {
                            (Some(by(HashBy::QueryArg, Some(q))), "")
                        } else {
                            (None, "")
                        }
                    }
                };
                match h {
                    Some(h)
                        if h.name.as_deref().is_none_or(|n| {
                            !n.is_empty()
                                && n.bytes()
                                    .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
                        }) =>
                    {
                        self.upstream.algorithm = Some(Algorithm::ConsistentHashing);
                        self.upstream.hash_on = Some(h);
                        decided = true;
                        self.hash_subsets(subset.as_deref(), subset_size.as_deref());
                        if note.is_empty() {
                            self.applied("upstream-hash-by", v);
                        } else {
                            self.record("upstream-hash-by", v, Status::Differs, note);
                        }
                    }
                    _ => {
                        let m = "Weir hashes one of $remote_addr, $uri, $request_uri, $http_<name>, $cookie_<name> or $arg_<name>, not combinations; round-robin is used";
                        self.record("upstream-hash-by", v, Status::Unsupported, m);
                    }
                }
            }
        }
        if self
            .upstream
            .hash_on
            .as_ref()
            .is_none_or(|h| h.by == HashBy::Cookie)
        {
            for (k, v) in [
                ("upstream-hash-by-subset", &subset),
                ("upstream-hash-by-subset-size", &subset_size),
            ] {
                if let Some(v) = v {
                    let m = "no effect without upstream-hash-by, or where affinity: cookie decides";
                    self.record(k, v, Status::Applied, m);
                }
            }
        }
        if let Some(v) = &lb {
            let alg = match v.trim() {
                "round_robin" => Some(Algorithm::RoundRobin),
                "ewma" => Some(Algorithm::PeakEwma),
                _ => None,
            };
            match alg {
                Some(_) if decided => self.record(
                    "load-balance",
                    v,
                    Status::Applied,
                    "affinity or upstream-hash-by wins, as in ingress-nginx",
                ),
                Some(alg) => {
                    self.upstream.algorithm = Some(alg);
                    self.applied("load-balance", v);
                }
                None => {
                    let m = "Weir balances with round_robin or ewma (and least-connections natively); round-robin is used";
                    self.record("load-balance", v, Status::Unsupported, m);
                }
            }
        }
    }
}

impl Conv<'_> {
    /// `upstream-hash-by-subset` and `upstream-hash-by-subset-size`, with `upstream-hash-by`
    /// applied.
    fn hash_subsets(&mut self, subset: Option<&str>, size: Option<&str>) {
        let on = match subset {
            None => false,
            Some(v) => match parse_bool(v) {
                Some(b) => b,
                None => {
                    self.record(
                        "upstream-hash-by-subset",
                        v,
                        Status::Invalid,
                        "not a boolean",
                    );
                    false
                }
            },
        };
        let n = match size.map(|v| (v, v.trim().parse::<u32>())) {
            None => Some(3),
            Some((_, Ok(n))) if (1..=256).contains(&n) => Some(n),
            Some((v, _)) => {
                let m = "not a whole number from 1 to 256; subsets are not used";
                self.record("upstream-hash-by-subset-size", v, Status::Invalid, m);
                None
            }
        };
        if !on {
            if let Some(v) = subset.filter(|v| parse_bool(v).is_some()) {
                self.applied("upstream-hash-by-subset", v);
            }
            if let (Some(v), Some(_)) = (size, n) {
                let m = "no effect without upstream-hash-by-subset: \"true\"";
                self.record("upstream-hash-by-subset-size", v, Status::Applied, m);
            }
            return;
        }
        let v = subset.unwrap_or_default();
        let Some(n) = n else {
            self.record(
                "upstream-hash-by-subset",
                v,
                Status::Invalid,
                "its size is invalid",
            );
            return;
        };
        if let Some(h) = self.upstream.hash_on.as_mut() {
            h.subset_size = Some(n);
        }
        let m =
            "a key's requests take its subset's pods in turn (ingress-nginx picks one at random)";
        self.record("upstream-hash-by-subset", v, Status::Differs, m);
        if let Some(s) = size {
            self.applied("upstream-hash-by-subset-size", s);
        }
    }
}
