//! `auth-type: basic` with an htpasswd Secret, and `auth-url` (external authentication).

use super::*;

impl Conv<'_> {
    /// `auth-type: basic` and `auth-url` (external authentication).
    pub(super) fn auth(&mut self) {
        let auth_type = self.take("auth-type");
        let secret = self.take("auth-secret");
        let secret_type = self.take("auth-secret-type");
        let realm = self.take("auth-realm");
        match auth_type.as_deref().map(str::trim) {
            Some("basic") => {
                let v = auth_type.clone().unwrap_or_default();
                match self.htpasswd(secret.as_deref(), secret_type.as_deref()) {
                    Ok(lines) => {
                        let mut config = json!({"htpasswd": lines});
                        if let Some(r) = &realm {
                            config["realm"] = json!(r);
                        }
                        self.basic_auth_plugin(config);
                        self.applied("auth-type", &v);
                        if let Some(s) = &secret {
                            let m = "the Secret must be labelled weir.dev/credential: \"true\" (Weir reads only labelled and TLS Secrets in a cluster)";
                            self.record("auth-secret", s, Status::Differs, m);
                        }
                        if let Some(t) = &secret_type {
                            self.applied("auth-secret-type", t);
                        }
                        if let Some(r) = &realm {
                            self.applied("auth-realm", r);
                        }
                    }
                    Err((field, m)) => {
                        self.record(
                            "auth-type",
                            &v,
                            Status::Invalid,
                            format!("{} {m}", self.full(field)),
                        );
                        for (k, val) in [
                            ("auth-secret", &secret),
                            ("auth-secret-type", &secret_type),
                            ("auth-realm", &realm),
                        ] {
                            if let Some(val) = val {
                                let st = if k == field {
                                    Status::Invalid
                                } else {
                                    Status::Applied
                                };
                                let note = if k == field { m.clone() } else { String::new() };
                                self.record(k, val, st, note);
                            }
                        }
                    }
                }
            }
            Some(other) => {
                let v = auth_type.clone().unwrap_or_default();
                let m = if other == "digest" {
                    "digest authentication is not supported"
                } else {
                    "not basic or digest"
                };
                self.record("auth-type", &v, Status::Unsupported, m);
                for (k, val) in [
                    ("auth-secret", &secret),
                    ("auth-secret-type", &secret_type),
                    ("auth-realm", &realm),
                ] {
                    if let Some(val) = val {
                        self.record(
                            k,
                            val,
                            Status::Unsupported,
                            "its auth-type is not supported",
                        );
                    }
                }
            }
            None => {
                for (k, val) in [
                    ("auth-secret", &secret),
                    ("auth-secret-type", &secret_type),
                    ("auth-realm", &realm),
                ] {
                    if let Some(val) = val {
                        self.record(k, val, Status::Applied, "no effect without auth-type");
                    }
                }
            }
        }

        let url = self.take("auth-url");
        let method = self.take("auth-method");
        let response_headers = self.take("auth-response-headers");
        let signin = self.take("auth-signin");
        let signin_param = self.take("auth-signin-redirect-param");
        let request_redirect = self.take("auth-request-redirect");
        let always_set_cookie = self.take("auth-always-set-cookie");
        let proxy_set_headers = self.take("auth-proxy-set-headers");
        let Some(u) = url else {
            for (k, val) in [
                ("auth-method", &method),
                ("auth-response-headers", &response_headers),
                ("auth-signin", &signin),
                ("auth-signin-redirect-param", &signin_param),
                ("auth-request-redirect", &request_redirect),
                ("auth-always-set-cookie", &always_set_cookie),
                ("auth-proxy-set-headers", &proxy_set_headers),
            ] {
                if let Some(val) = val {
                    self.record(k, val, Status::Applied, "no effect without auth-url");
                }
            }
            return;
        };
        let t = u.trim();
        let mut errors: Vec<(&str, String)> = Vec::new();
        if !(t.starts_with("http://") || t.starts_with("https://"))
            || t.contains(char::is_whitespace)
        {
            errors.push(("auth-url", "not an http(s) URL".into()));
        } else if t.contains('$') {
            errors.push(("auth-url", "nginx variables ($host, …) are not expanded; name the authentication service's URL".into()));
        } else if t.contains('#')
            || t.split_once("://").is_some_and(|(_, rest)| {
                rest.split(['/', '?'])
                    .next()
                    .is_some_and(|a| a.contains('@'))
            })
        {
            // As the forward-auth plugin refuses them: credentials belong in headers.
            let m = "a URL with credentials or a fragment is not accepted";
            errors.push(("auth-url", m.into()));
        }
        let mut config = json!({"url": t});
        if let Some(m) = &method {
            let m = m.trim().to_ascii_uppercase();
            if m.is_empty() || !m.bytes().all(|b| b.is_ascii_uppercase()) {
                errors.push(("auth-method", "not an HTTP method".into()));
            }
            config["method"] = json!(m);
        }
        if let Some(h) = &response_headers {
            let list: Vec<String> = h
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect();
            if let Some(bad) = list.iter().find(|x| !header_name_ok(x)) {
                errors.push((
                    "auth-response-headers",
                    format!("{bad:?} is not a header name"),
                ));
            }
            config["response_headers"] = json!(list);
        }
        if let Some(s) = &signin {
            let s = s.trim();
            if !(s.starts_with("http://") || s.starts_with("https://")) || s.contains('$') {
                errors.push((
                    "auth-signin",
                    "not an http(s) URL (nginx variables are not expanded)".into(),
                ));
            }
            config["signin"] = json!(s);
        }
        if let Some(p) = &signin_param {
            config["signin_redirect_param"] = json!(p.trim());
        }
        if let Some(r) = &request_redirect {
            match r.trim() {
                // nginx's default value: the plugin's own.
                "$request_uri" => {}
                t if t.contains('$') => errors.push((
                    "auth-request-redirect",
                    "nginx variables other than $request_uri are not expanded".into(),
                )),
                t => config["request_redirect"] = json!(t),
            }
        }
        // ingress-nginx passes the auth service's cookies to the client on a successful
        // answer, or on every one with auth-always-set-cookie.
        config["set_cookies"] = json!("on_success");
        if let Some(v) = &always_set_cookie {
            match parse_bool(v) {
                Some(true) => config["set_cookies"] = json!("always"),
                Some(false) => {}
                None => errors.push(("auth-always-set-cookie", "not a boolean".into())),
            }
        }
        if let Some(v) = &proxy_set_headers {
            match self.header_config_map(v) {
                Ok(h) => config["headers"] = json!(h),
                Err(m) => errors.push(("auth-proxy-set-headers", m)),
            }
        }
        // The plugin's own check of the headers (the proxy's reserved names); the rest of
        // the configuration is checked above, without building a TLS client per Ingress.
        if errors.is_empty() && proxy_set_headers.is_some() {
            if let Some(m) = Self::plugin_config_error("forward-auth", &config) {
                let key = if m.starts_with("headers") {
                    "auth-proxy-set-headers"
                } else {
                    "auth-url"
                };
                errors.push((key, m));
            }
        }
        let all = [
            ("auth-url", Some(u.clone())),
            ("auth-method", method),
            ("auth-response-headers", response_headers),
            ("auth-signin", signin),
            ("auth-signin-redirect-param", signin_param),
            ("auth-request-redirect", request_redirect),
            ("auth-always-set-cookie", always_set_cookie),
            ("auth-proxy-set-headers", proxy_set_headers),
        ];
        if errors.is_empty() {
            self.plugin("forward-auth", "forward-auth", config);
            for (k, v) in all {
                if let Some(v) = v {
                    self.applied(k, &v);
                }
            }
        } else {
            for (k, v) in all {
                if let Some(v) = v {
                    match errors.iter().find(|(ek, _)| *ek == k) {
                        Some((_, m)) => self.record(k, &v, Status::Invalid, m.clone()),
                        None => self.record(k, &v, Status::Invalid, "auth-url cannot be applied"),
                    }
                }
            }
        }
    }

    /// The htpasswd lines of an `auth-secret` (`auth-file`: key `auth`; `auth-map`: user →
    /// hash), or (annotation, why).
    pub(super) fn htpasswd(
        &self,
        secret: Option<&str>,
        kind: Option<&str>,
    ) -> Result<Vec<String>, (&'static str, String)> {
        let Some(s) = secret else {
            return Err(("auth-secret", "is missing".into()));
        };
        let (ns, name) = match s.trim().split_once('/') {
            Some((ns, n)) => (ns.to_string(), n.to_string()),
            None => (self.key.namespace.clone(), s.trim().to_string()),
        };
        if ns != self.key.namespace {
            return Err((
                "auth-secret",
                "names a Secret in another namespace, which Weir does not read for an Ingress"
                    .into(),
            ));
        }
        let Some(secret) = self
            .store
            .secrets
            .get(&Key::new(ns.as_str(), name.as_str()))
        else {
            return Err(("auth-secret", format!("Secret {ns}/{name} not found (it must carry the label weir.dev/credential: \"true\")")));
        };
        let mut entries: BTreeMap<String, String> = BTreeMap::new();
        for (k, v) in secret.data.iter().flatten() {
            if let Ok(text) = String::from_utf8(v.0.clone()) {
                entries.insert(k.clone(), text);
            }
        }
        for (k, v) in secret.string_data.iter().flatten() {
            entries.insert(k.clone(), v.clone());
        }
        let lines: Vec<String> = match kind.map(str::trim).unwrap_or("auth-file") {
            "auth-file" => {
                let text = entries.get("auth").ok_or((
                    "auth-secret",
                    format!("Secret {ns}/{name} has no key \"auth\" (auth-file format)"),
                ))?;
                text.lines()
                    .map(str::trim)
                    .filter(|l| !l.is_empty() && !l.starts_with('#'))
                    .map(str::to_string)
                    .collect()
            }
            "auth-map" => entries
                .iter()
                .map(|(user, hash)| format!("{user}:{}", hash.trim()))
                .collect(),
            other => {
                return Err((
                    "auth-secret-type",
                    format!("{other:?} is not auth-file or auth-map"),
                ))
            }
        };
        if lines.is_empty() {
            return Err(("auth-secret", format!("Secret {ns}/{name} holds no user")));
        }
        Ok(lines)
    }

    /// basic-auth with the credentials in a generated configuration Secret, so that no
    /// password hash appears in a Plugin.
    pub(super) fn basic_auth_plugin(&mut self, config: serde_json::Value) {
        let name = format!("{}-nginx-basic-auth", self.key.name);
        let mut meta = self.meta(&name);
        meta.labels.get_or_insert_with(BTreeMap::new).insert(
            weir_crds::CREDENTIAL_LABEL.into(),
            weir_crds::CONFIG_SECRET_LABEL_VALUE.into(),
        );
        self.secrets.push(Secret {
            metadata: meta,
            string_data: Some(BTreeMap::from([(
                "config".to_string(),
                serde_json::to_string(&config).unwrap_or_default(),
            )])),
            type_: Some("Opaque".into()),
            ..Secret::default()
        });
        let mut p = self.generated_plugin(&name, "basic-auth", None, None);
        p.spec.config_from = Some(weir_crds::ConfigFrom {
            secret_key_ref: weir_crds::SecretKeyRef {
                name: name.clone(),
                key: "config".into(),
            },
        });
        self.plugins.push(p);
        self.plugin_names.push(name);
    }
}
