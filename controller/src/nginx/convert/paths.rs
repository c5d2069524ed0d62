//! `use-regex`, `rewrite-target`, `x-forwarded-prefix`, `upstream-vhost`, `server-alias`: the Ingress's paths and hosts.

use super::*;

impl Conv<'_> {
    /// `use-regex`, `rewrite-target`, `x-forwarded-prefix`, `upstream-vhost`, `server-alias`.
    pub(super) fn paths(&mut self) {
        let use_regex = self.take("use-regex");
        let rewrite = self.take("rewrite-target");
        let mut regex = false;
        if let Some(v) = &use_regex {
            match parse_bool(v) {
                Some(true) => {
                    regex = true;
                    let m = "only this Ingress's paths become regular expressions (ingress-nginx makes every path of the host one); patterns are Rust regex syntax: no look-around or back-references";
                    self.record("use-regex", v, Status::Differs, m);
                }
                Some(false) => self.applied("use-regex", v),
                None => self.record("use-regex", v, Status::Invalid, "not a boolean"),
            }
        }
        if let Some(v) = &rewrite {
            let t = v.trim();
            let b = t.as_bytes();
            // `$1`…`$9` only: nginx variables ($host, …) are not expanded.
            let groups_only = b.iter().enumerate().all(|(i, &c)| {
                c != b'$' || b.get(i + 1).is_some_and(|d| (b'1'..=b'9').contains(d))
            });
            if t.starts_with('/') && !t.contains(['?', '#', ' ']) && groups_only {
                self.weir.insert(a::REWRITE.into(), t.to_string());
                if t.contains('$') {
                    // Capture groups need the paths as regexes, as ingress-nginx makes them.
                    regex = true;
                    self.applied("rewrite-target", v);
                } else if regex {
                    self.applied("rewrite-target", v);
                } else {
                    let m = "the paths stay Ingress path matches (by path segment, case-sensitive), where ingress-nginx matches ^<path> as a case-insensitive regex";
                    self.record("rewrite-target", v, Status::Differs, m);
                }
            } else {
                let m = "Weir takes a path starting with / with $1…$9 capture groups only (no nginx variables, query or fragment); the path is forwarded unchanged";
                self.record("rewrite-target", v, Status::Unsupported, m);
            }
        }
        if regex {
            // ingress-nginx's regex locations: `~* ^<path>`, case-insensitive, open-ended,
            // longest first.
            let mut bad = Vec::new();
            for rule in self.spec.rules.iter_mut().flatten() {
                let Some(http) = rule.http.as_mut() else {
                    continue;
                };
                for p in http.paths.iter_mut() {
                    if p.path_type == "Exact" {
                        continue;
                    }
                    let path = p.path.clone().unwrap_or_else(|| "/".into());
                    let path = path.strip_prefix("/~").unwrap_or(&path).to_string();
                    // The pattern the route gets (compiled once, and kept for the router).
                    if weir_proxy::router::anchored_regex(&format!("(?i){path}")).is_err() {
                        bad.push(path.clone());
                    }
                    p.path = Some(format!("/~(?i){path}"));
                    p.path_type = "ImplementationSpecific".into();
                }
                http.paths
                    .sort_by_key(|p| std::cmp::Reverse(p.path.as_deref().map_or(0, str::len)));
            }
            if !bad.is_empty() {
                let key = if use_regex.is_some() {
                    "use-regex"
                } else {
                    "rewrite-target"
                };
                if let Some(o) = self
                    .outcomes
                    .iter_mut()
                    .find(|o| o.annotation.ends_with(key))
                {
                    o.status = Status::Unsupported;
                    o.note = format!(
                        "{} not a regular expression Weir can run (Rust regex syntax: no look-around or back-references); the path is not served",
                        bad.iter().map(|b| format!("{b:?}")).collect::<Vec<_>>().join(", ") + if bad.len() == 1 { " is" } else { " are" }
                    );
                }
            }
        }
        if let Some(v) = self.take("x-forwarded-prefix") {
            let t = v.trim();
            if http::HeaderValue::from_str(t).is_ok() && !t.is_empty() {
                self.weir.insert(a::FORWARDED_PREFIX.into(), t.to_string());
                self.applied("x-forwarded-prefix", &v);
            } else {
                self.record(
                    "x-forwarded-prefix",
                    &v,
                    Status::Invalid,
                    "not a header value",
                );
            }
        }
        if let Some(v) = self.take("upstream-vhost") {
            let t = v.trim();
            if !t.is_empty() && !t.contains('$') && http::HeaderValue::from_str(t).is_ok() {
                self.weir.insert(a::HOST_HEADER.into(), t.to_string());
                self.applied("upstream-vhost", &v);
            } else {
                let m = "Weir takes a fixed host name (no nginx variables)";
                self.record("upstream-vhost", &v, Status::Unsupported, m);
            }
        }
        if let Some(v) = self.take("server-alias") {
            let aliases = split_list(&v);
            let bad = aliases
                .iter()
                .find(|h| weir_proxy::validate::check_host(h).is_err());
            match bad {
                Some(h) => {
                    let m = format!("{h:?} is not a host name; no alias is served");
                    self.record("server-alias", &v, Status::Invalid, m);
                }
                None if aliases.is_empty() => {
                    self.record("server-alias", &v, Status::Invalid, "no host name given")
                }
                None => {
                    let rules: Vec<IngressRule> = self.spec.rules.clone().unwrap_or_default();
                    let with_host: Vec<&IngressRule> =
                        rules.iter().filter(|r| r.host.is_some()).collect();
                    let mut added = Vec::new();
                    for alias in &aliases {
                        for r in &with_host {
                            added.push(IngressRule {
                                host: Some(alias.clone()),
                                http: r.http.clone(),
                            });
                        }
                    }
                    if added.is_empty() {
                        let m = "the Ingress has no rule with a host to alias";
                        self.record("server-alias", &v, Status::Invalid, m);
                    } else {
                        self.spec.rules.get_or_insert_with(Vec::new).extend(added);
                        self.applied("server-alias", &v);
                    }
                }
            }
        }
    }
}
