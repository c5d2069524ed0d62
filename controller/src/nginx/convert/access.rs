//! Source ranges and CORS.

use super::*;

impl Conv<'_> {
    /// Source ranges and CORS.
    pub(super) fn access(&mut self) {
        let mut allow: Option<Vec<String>> = None;
        for short in ["whitelist-source-range", "allowlist-source-range"] {
            let Some(v) = self.take(short) else { continue };
            match cidrs(&v) {
                Ok(list) => {
                    allow.get_or_insert_with(Vec::new).extend(list);
                    self.applied(short, &v);
                }
                Err(m) => self.record(short, &v, Status::Invalid, m),
            }
        }
        let mut deny = None;
        if let Some(v) = self.take("denylist-source-range") {
            match cidrs(&v) {
                Ok(list) => {
                    deny = Some(list);
                    self.applied("denylist-source-range", &v);
                }
                Err(m) => self.record("denylist-source-range", &v, Status::Invalid, m),
            }
        }
        if let Some(v) = self.take("satisfy") {
            match v.trim() {
                "any" => {
                    self.weir.insert(a::SATISFY.into(), "any".into());
                    self.applied("satisfy", &v);
                }
                "all" => self.applied("satisfy", &v),
                _ => {
                    let m = "not all or any; every access rule applies (all)";
                    self.record("satisfy", &v, Status::Invalid, m);
                }
            }
        }
        if allow.is_some() || deny.is_some() {
            let mut config = json!({});
            if let Some(a) = allow {
                config["allow"] = json!(a);
            }
            if let Some(d) = deny {
                config["deny"] = json!(d);
            }
            self.plugin("source-range", "ip-restriction", config);
        }

        let enable = self.take("enable-cors");
        let keys = [
            "cors-allow-origin",
            "cors-allow-methods",
            "cors-allow-headers",
            "cors-expose-headers",
            "cors-allow-credentials",
            "cors-max-age",
        ];
        let cors: BTreeMap<&str, String> = keys
            .iter()
            .filter_map(|k| self.take(k).map(|v| (*k, v)))
            .collect();
        let on = match &enable {
            Some(v) => match parse_bool(v) {
                Some(b) => b,
                None => {
                    self.record("enable-cors", v, Status::Invalid, "not a boolean");
                    false
                }
            },
            None => false,
        };
        if !on {
            if let Some(v) = &enable {
                if parse_bool(v).is_some() {
                    self.applied("enable-cors", v);
                }
            }
            for (k, v) in &cors {
                self.record(
                    k,
                    v,
                    Status::Applied,
                    "no effect without enable-cors: \"true\"",
                );
            }
            return;
        }
        let mut errors: Vec<(&str, String)> = Vec::new();
        let origins: Vec<String> = match cors.get("cors-allow-origin") {
            Some(v) => {
                let mut out = Vec::new();
                for o in v.split(',').map(str::trim).filter(|s| !s.is_empty()) {
                    match cors_origin(o) {
                        Ok(x) => out.push(x),
                        Err(m) => errors.push(("cors-allow-origin", m)),
                    }
                }
                out
            }
            None => vec!["*".into()],
        };
        let methods: Vec<String> = cors
            .get("cors-allow-methods")
            .map(String::as_str)
            .unwrap_or(CORS_METHODS)
            .split(',')
            .map(|m| m.trim().to_ascii_uppercase())
            .filter(|m| !m.is_empty())
            .collect();
        let known = [
            "GET", "HEAD", "PUT", "PATCH", "POST", "DELETE", "OPTIONS", "TRACE", "CONNECT",
        ];
        if let Some(m) = methods.iter().find(|m| !known.contains(&m.as_str())) {
            errors.push(("cors-allow-methods", format!("{m:?} is not an HTTP method")));
        }
        let header_list = |v: &str| -> Vec<String> {
            v.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect()
        };
        let headers = header_list(
            cors.get("cors-allow-headers")
                .map(String::as_str)
                .unwrap_or(CORS_HEADERS),
        );
        let expose = cors
            .get("cors-expose-headers")
            .map(|v| header_list(v))
            .unwrap_or_default();
        for (k, list) in [
            ("cors-allow-headers", &headers),
            ("cors-expose-headers", &expose),
        ] {
            if let Some(h) = list
                .iter()
                .find(|h| !header_name_ok(h) && h.as_str() != "*")
            {
                errors.push((k, format!("{h:?} is not a header name")));
            }
        }
        let credentials = match cors.get("cors-allow-credentials") {
            Some(v) => parse_bool(v).unwrap_or_else(|| {
                errors.push(("cors-allow-credentials", "not a boolean".into()));
                true
            }),
            None => true,
        };
        let max_age = match cors.get("cors-max-age") {
            Some(v) => v.trim().parse::<u64>().unwrap_or_else(|_| {
                errors.push(("cors-max-age", "not a whole number of seconds".into()));
                1_728_000
            }),
            None => 1_728_000,
        };
        if !errors.is_empty() {
            self.record(
                "enable-cors",
                enable.as_deref().unwrap_or(""),
                Status::Invalid,
                "a cors-* annotation is invalid; CORS is not applied",
            );
            for (k, v) in &cors {
                match errors.iter().find(|(ek, _)| ek == k) {
                    Some((_, m)) => self.record(k, v, Status::Invalid, m.clone()),
                    None => self.record(k, v, Status::Invalid, "CORS is not applied"),
                }
            }
            return;
        }
        let mut config = json!({
            "origins": origins,
            "methods": methods,
            "headers": headers,
            "credentials": credentials,
            "max_age": max_age,
        });
        if !expose.is_empty() {
            config["exposed_headers"] = json!(expose);
        }
        self.plugin("cors", "cors", config);
        self.applied("enable-cors", enable.as_deref().unwrap_or(""));
        for (k, v) in &cors {
            self.applied(k, v);
        }
    }
}
