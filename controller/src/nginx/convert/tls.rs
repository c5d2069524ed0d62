//! `ssl-redirect`, `force-ssl-redirect`, `backend-protocol` and `proxy-ssl-*`: TLS towards clients and backends.

use super::*;

impl Conv<'_> {
    /// `ssl-redirect`, `force-ssl-redirect`, `backend-protocol`, `proxy-ssl-*`.
    pub(super) fn tls(&mut self) {
        let has_tls = self.spec.tls.as_ref().is_some_and(|t| !t.is_empty());
        let mut redirect = has_tls;
        if let Some(v) = self.take("ssl-redirect") {
            match parse_bool(&v) {
                Some(b) => {
                    redirect = b && has_tls;
                    let m = if b && !has_tls {
                        "no effect: the Ingress has no TLS section (force-ssl-redirect redirects without one)"
                    } else {
                        ""
                    };
                    self.record("ssl-redirect", &v, Status::Applied, m);
                }
                None => self.record("ssl-redirect", &v, Status::Invalid, "not a boolean"),
            }
        }
        if let Some(v) = self.take("force-ssl-redirect") {
            match parse_bool(&v) {
                Some(b) => {
                    redirect |= b;
                    self.applied("force-ssl-redirect", &v);
                }
                None => self.record("force-ssl-redirect", &v, Status::Invalid, "not a boolean"),
            }
        }
        // Written out either way, so that converting the emitted Ingress again (it keeps its
        // class) changes nothing; a user's own weir.dev/protocols is left alone.
        let own = self
            .ing
            .metadata
            .annotations
            .as_ref()
            .is_some_and(|m| m.contains_key(a::PROTOCOLS));
        if !own {
            if redirect {
                self.weir.insert(a::PROTOCOLS.into(), "https".into());
                self.weir
                    .insert(a::HTTPS_REDIRECT_STATUS_CODE.into(), "308".into());
            } else if has_tls {
                self.weir.insert(a::PROTOCOLS.into(), "http,https".into());
            }
        }

        let mut secure = false;
        if let Some(v) = self.take("backend-protocol") {
            let p = match v.trim().to_ascii_uppercase().as_str() {
                "HTTP" => Some("http"),
                "HTTPS" => Some("https"),
                "GRPC" => Some("grpc"),
                "GRPCS" => Some("grpcs"),
                _ => None,
            };
            match p {
                Some(p) => {
                    secure = matches!(p, "https" | "grpcs");
                    self.weir.insert(a::PROTOCOL.into(), p.into());
                    self.applied("backend-protocol", &v);
                }
                None => {
                    let m = "Weir speaks HTTP, HTTPS, GRPC and GRPCS to backends (not AUTO_HTTP, AJP or FCGI); HTTP is used";
                    self.record("backend-protocol", &v, Status::Unsupported, m);
                }
            }
        }
        let ssl_keys = [
            "proxy-ssl-secret",
            "proxy-ssl-verify",
            "proxy-ssl-name",
            "proxy-ssl-server-name",
            "proxy-ssl-verify-depth",
        ];
        let ssl: BTreeMap<&str, String> = ssl_keys
            .iter()
            .filter_map(|k| self.take(k).map(|v| (*k, v)))
            .collect();
        if !secure {
            for (k, v) in &ssl {
                let m = "no effect: the backend protocol is not HTTPS or GRPCS";
                self.record(k, v, Status::Applied, m);
            }
            return;
        }
        // ingress-nginx does not verify backends unless told to.
        let mut tls = UpstreamTls {
            verify: Some(false),
            ..UpstreamTls::default()
        };
        let mut failed = false;
        if let Some(v) = ssl.get("proxy-ssl-verify") {
            match v.trim() {
                "on" => {
                    tls.verify = Some(true);
                    self.applied("proxy-ssl-verify", v);
                }
                "off" => self.applied("proxy-ssl-verify", v),
                _ => {
                    self.record(
                        "proxy-ssl-verify",
                        v,
                        Status::Invalid,
                        "not \"on\" or \"off\"",
                    );
                    failed = true;
                }
            }
        }
        if let Some(v) = ssl.get("proxy-ssl-secret") {
            let (ns, name) = match v.trim().split_once('/') {
                Some((ns, name)) => (ns.to_string(), name.to_string()),
                None => (self.key.namespace.clone(), v.trim().to_string()),
            };
            if ns != self.key.namespace {
                let m = "Weir reads backend TLS Secrets from the Ingress's own namespace; copy the Secret there";
                self.record("proxy-ssl-secret", v, Status::Unsupported, m);
                failed = true;
            } else {
                let secret = self
                    .store
                    .secrets
                    .get(&Key::new(ns.as_str(), name.as_str()));
                let has = |k: &str| {
                    secret.is_some_and(|s| {
                        s.data.as_ref().is_some_and(|d| d.contains_key(k))
                            || s.string_data.as_ref().is_some_and(|d| d.contains_key(k))
                    })
                };
                match secret {
                    None => {
                        let m = format!("Secret {ns}/{name} not found (Weir reads TLS Secrets and Secrets labelled weir.dev/credential: \"true\")");
                        self.record("proxy-ssl-secret", v, Status::Invalid, m);
                        failed = true;
                    }
                    Some(_) => {
                        if has("ca.crt") && tls.verify == Some(true) {
                            tls.ca_secret = Some(name.clone());
                        }
                        if has("tls.crt") && has("tls.key") {
                            tls.client_certificate_secret = Some(name.clone());
                        }
                        self.applied("proxy-ssl-secret", v);
                    }
                }
            }
        }
        let server_name = match ssl.get("proxy-ssl-server-name") {
            Some(v) => match v.trim() {
                "on" => {
                    self.applied("proxy-ssl-server-name", v);
                    true
                }
                "off" => {
                    let m = "Weir always sends SNI (proxy-ssl-name, else the Service's DNS name)";
                    self.record("proxy-ssl-server-name", v, Status::Differs, m);
                    false
                }
                _ => {
                    let m = "not \"on\" or \"off\"";
                    self.record("proxy-ssl-server-name", v, Status::Invalid, m);
                    failed = true;
                    false
                }
            },
            None => false,
        };
        if let Some(v) = ssl.get("proxy-ssl-name") {
            let t = v.trim();
            if weir_proxy::validate::check_host(t).is_ok() && !t.contains('$') {
                tls.sni = Some(t.to_string());
                if server_name {
                    self.applied("proxy-ssl-name", v);
                } else {
                    let m = "also sent in SNI, as if proxy-ssl-server-name were on";
                    self.record("proxy-ssl-name", v, Status::Differs, m);
                }
            } else {
                self.record("proxy-ssl-name", v, Status::Invalid, "not a host name");
                failed = true;
            }
        }
        if let Some(v) = ssl.get("proxy-ssl-verify-depth") {
            match v.trim().parse::<u8>() {
                Ok(d) if d <= 10 => {
                    tls.verify_depth = Some(d);
                    self.applied("proxy-ssl-verify-depth", v);
                }
                _ => {
                    let m = "not a number from 0 to 10";
                    self.record("proxy-ssl-verify-depth", v, Status::Invalid, m);
                    failed = true;
                }
            }
        }
        if failed {
            // Fail closed: TLS that is not what was asked for is not spoken.
            self.guard_failed.push(format!(
                "{}proxy-ssl-* (backend TLS cannot be set up as asked)",
                self.prefix
            ));
        }
        self.upstream.tls = Some(tls);
    }
}
