//! `permanent-redirect`, `temporal-redirect`, `app-root`, `from-to-www-redirect`: redirect plugins, and extra Ingresses where a redirect needs routes of its own.

use super::*;

impl Conv<'_> {
    /// `permanent-redirect`, `temporal-redirect`, `app-root`, `from-to-www-redirect`.
    pub(super) fn redirects(&mut self) {
        let permanent = self.take("permanent-redirect");
        let permanent_code = self.take("permanent-redirect-code");
        let temporal = self.take("temporal-redirect");
        let temporal_code = self.take("temporal-redirect-code");
        let target_ok = |u: &str| {
            let u = u.trim();
            (u.starts_with("http://") || u.starts_with("https://") || u.starts_with('/'))
                && !u.contains(char::is_whitespace)
                && !u.contains('$')
        };
        let code = |v: &Option<String>, default: u16| -> Result<u16, String> {
            match v {
                None => Ok(default),
                Some(v) => match v.trim().parse::<u16>() {
                    Ok(c) if [301, 302, 303, 307, 308].contains(&c) => Ok(c),
                    _ => Err(format!("{v:?} is not one of 301, 302, 303, 307, 308")),
                },
            }
        };
        // Each target with its code; permanent-redirect wins over temporal-redirect.
        let mut redirect: Option<(String, u16)> = None;
        for (target_key, target, code_key, code_value, default) in [
            (
                "permanent-redirect",
                &permanent,
                "permanent-redirect-code",
                &permanent_code,
                301,
            ),
            (
                "temporal-redirect",
                &temporal,
                "temporal-redirect-code",
                &temporal_code,
                302,
            ),
        ] {
            let parsed_code = code(code_value, default);
            if let (Some(cv), Err(m)) = (code_value, &parsed_code) {
                self.record(code_key, cv, Status::Invalid, m.clone());
            }
            let Some(v) = target else {
                if let (Some(cv), Ok(_)) = (code_value, &parsed_code) {
                    let m = format!("no effect without {target_key}");
                    self.record(code_key, cv, Status::Applied, m);
                }
                continue;
            };
            if redirect.is_some() {
                let m = "permanent-redirect wins, as in ingress-nginx";
                self.record(target_key, v, Status::Applied, m);
                if let (Some(cv), Ok(_)) = (code_value, &parsed_code) {
                    self.record(code_key, cv, Status::Applied, m);
                }
                continue;
            }
            match (target_ok(v), parsed_code) {
                (true, Ok(c)) => {
                    redirect = Some((v.trim().to_string(), c));
                    self.applied(target_key, v);
                    if let Some(cv) = code_value {
                        self.applied(code_key, cv);
                    }
                }
                (false, code) => {
                    let m = "not an http(s) URL or path (nginx variables are not expanded)";
                    self.record(target_key, v, Status::Invalid, m);
                    if let (Some(cv), Ok(_)) = (code_value, code) {
                        self.record(code_key, cv, Status::Applied, "its redirect is invalid");
                    }
                }
                (true, Err(_)) => {
                    self.record(target_key, v, Status::Invalid, "its code is invalid")
                }
            }
        }
        if let Some((location, status)) = redirect {
            let config = json!({"location": location, "status_code": status});
            self.plugin("redirect", "redirect", config);
        }

        if let Some(v) = self.take("app-root") {
            let t = v.trim();
            if t.starts_with('/') && !t.contains(['?', '#', ' ', '$']) {
                let name = format!("{}-app-root", self.key.name);
                let plugin = format!("{}-nginx-app-root", self.key.name);
                let config = json!({"location": t, "status_code": 302});
                self.plugins
                    .push(self.generated_plugin(&plugin, "redirect", Some(config), None));
                let hosts: Vec<Option<String>> = self.hosts();
                self.extra_ingress(&name, &plugin, hosts, "/", "Exact");
                self.applied("app-root", &v);
            } else {
                self.record(
                    "app-root",
                    &v,
                    Status::Invalid,
                    "not a path starting with /",
                );
            }
        }

        if let Some(v) = self.take("from-to-www-redirect") {
            match parse_bool(&v) {
                Some(true) => {
                    let hosts: Vec<String> = self.hosts().into_iter().flatten().collect();
                    let tls_hosts: Vec<String> = self
                        .spec
                        .tls
                        .iter()
                        .flatten()
                        .flat_map(|t| t.hosts.clone().unwrap_or_default())
                        .collect();
                    for (i, h) in hosts.iter().enumerate() {
                        let other = match h.strip_prefix("www.") {
                            Some(bare) => bare.to_string(),
                            None => format!("www.{h}"),
                        };
                        if hosts.contains(&other) || h.starts_with('*') {
                            continue;
                        }
                        let scheme = if tls_hosts.contains(h) {
                            "https"
                        } else {
                            "http"
                        };
                        let plugin = format!("{}-nginx-www-redirect-{i}", self.key.name);
                        let config = json!({
                            "location": format!("{scheme}://{h}"),
                            "status_code": 308,
                            "keep_incoming_path": true,
                            "keep_incoming_query": true,
                        });
                        self.plugins.push(self.generated_plugin(
                            &plugin,
                            "redirect",
                            Some(config),
                            None,
                        ));
                        let name = format!("{}-www-redirect-{i}", self.key.name);
                        self.extra_ingress(&name, &plugin, vec![Some(other)], "/", "Prefix");
                    }
                    let m = "redirects to https:// when the Ingress has TLS for the host, else http:// (ingress-nginx keeps the request's scheme)";
                    self.record("from-to-www-redirect", &v, Status::Differs, m);
                }
                Some(false) => self.applied("from-to-www-redirect", &v),
                None => self.record("from-to-www-redirect", &v, Status::Invalid, "not a boolean"),
            }
        }
    }

    /// The hosts of the Ingress's rules (`None` for a rule without one), without repeats.
    pub(super) fn hosts(&self) -> Vec<Option<String>> {
        let mut hosts: Vec<Option<String>> = Vec::new();
        for r in self.spec.rules.iter().flatten() {
            if !hosts.contains(&r.host) {
                hosts.push(r.host.clone());
            }
        }
        hosts
    }

    /// The first backend of the Ingress (what an extra redirect Ingress names; its plugin
    /// answers before the backend is asked).
    pub(super) fn first_backend(&self) -> Option<IngressBackend> {
        self.spec
            .rules
            .iter()
            .flatten()
            .flat_map(|r| r.http.iter().flat_map(|h| h.paths.iter()))
            .map(|p| p.backend.clone())
            .next()
            .or_else(|| self.spec.default_backend.clone())
    }

    pub(super) fn extra_ingress(
        &mut self,
        name: &str,
        plugin: &str,
        hosts: Vec<Option<String>>,
        path: &str,
        path_type: &str,
    ) {
        let Some(backend) = self.first_backend() else {
            return;
        };
        let mut meta = self.meta(name);
        let mut annotations = BTreeMap::new();
        annotations.insert(a::PLUGINS.into(), plugin.into());
        if let Some(class) = self
            .ing
            .metadata
            .annotations
            .as_ref()
            .and_then(|m| m.get(a::INGRESS_CLASS))
        {
            annotations.insert(a::INGRESS_CLASS.into(), class.clone());
        }
        meta.annotations = Some(annotations);
        let rules = hosts
            .into_iter()
            .map(|host| IngressRule {
                host,
                http: Some(HTTPIngressRuleValue {
                    paths: vec![HTTPIngressPath {
                        path: Some(path.into()),
                        path_type: path_type.into(),
                        backend: backend.clone(),
                    }],
                }),
            })
            .collect();
        self.extra.push(Ingress {
            metadata: meta,
            spec: Some(IngressSpec {
                ingress_class_name: self.spec.ingress_class_name.clone(),
                rules: Some(rules),
                ..IngressSpec::default()
            }),
            status: None,
        });
    }
}
