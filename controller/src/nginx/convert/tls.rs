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

impl Conv<'_> {
    /// `ssl-passthrough`, as `weir.dev/ssl-passthrough`.
    pub(super) fn ssl_passthrough(&mut self) {
        let Some(v) = self.take("ssl-passthrough") else {
            return;
        };
        match parse_bool(&v) {
            Some(true) => {
                self.weir.insert(a::SSL_PASSTHROUGH.into(), "true".into());
                let m = "TLS connections naming the Ingress's hosts go, undecrypted, to the backend of each rule's \"/\" path, as in ingress-nginx; no --enable-ssl-passthrough flag is needed (Weir reads the server name without an extra hop)";
                self.record("ssl-passthrough", &v, Status::Applied, m);
            }
            Some(false) => self.applied("ssl-passthrough", &v),
            None => self.record("ssl-passthrough", &v, Status::Invalid, "not a boolean"),
        }
    }
}

/// An annotation carried over (Weir's annotation and its value), or why not.
type Carried = Result<(&'static str, String), (Status, String)>;

impl Conv<'_> {
    /// `auth-tls-*`: client certificates, as `weir.dev/client-certificate-*`.
    pub(super) fn client_certificates(&mut self) {
        const KEYS: [&str; 6] = [
            "auth-tls-secret",
            "auth-tls-verify-client",
            "auth-tls-verify-depth",
            "auth-tls-error-page",
            "auth-tls-pass-certificate-to-upstream",
            "auth-tls-match-cn",
        ];
        let tls: BTreeMap<&str, String> = KEYS
            .iter()
            .filter_map(|k| self.take(k).map(|v| (*k, v)))
            .collect();
        if tls.is_empty() {
            return;
        }
        let Some(secret) = tls.get("auth-tls-secret") else {
            for (k, v) in &tls {
                let m = "no effect without auth-tls-secret";
                self.record(k, v, Status::Applied, m);
            }
            return;
        };
        // Each setting (annotation, value), as Weir's annotation and value or why it cannot be.
        let mut out: Vec<(&str, &str, Carried)> = Vec::new();
        let (ns, name) = match secret.trim().split_once('/') {
            Some((ns, name)) => (ns.to_string(), name.to_string()),
            None => (self.key.namespace.clone(), secret.trim().to_string()),
        };
        let mode = tls.get("auth-tls-verify-client").map(|v| v.trim());
        let off = mode == Some("off");
        out.push((
            "auth-tls-secret",
            secret,
            if ns != self.key.namespace {
                let m = "Weir reads client CA Secrets from the Ingress's own namespace; copy the Secret there";
                Err((Status::Unsupported, m.into()))
            } else {
                Ok((a::CLIENT_CERTIFICATE_SECRET, name))
            },
        ));
        if let Some(v) = tls.get("auth-tls-verify-client") {
            let mode = match v.trim() {
                "on" => Ok("require"),
                "optional" => Ok("optional"),
                "optional_no_ca" => Ok("optional_no_ca"),
                "off" => Ok(""),
                _ => Err((
                    Status::Invalid,
                    "not on, off, optional or optional_no_ca".to_string(),
                )),
            };
            out.push((
                "auth-tls-verify-client",
                v,
                mode.map(|m| (a::CLIENT_CERTIFICATE_MODE, m.to_string())),
            ));
        }
        if let Some(v) = tls.get("auth-tls-verify-depth") {
            let depth = match v.trim().parse::<u8>() {
                Ok(d @ 1..=16) => Ok((a::CLIENT_CERTIFICATE_VERIFY_DEPTH, d.to_string())),
                _ => Err((
                    Status::Invalid,
                    "not a whole number from 1 to 16".to_string(),
                )),
            };
            out.push(("auth-tls-verify-depth", v, depth));
        }
        if let Some(v) = tls.get("auth-tls-error-page") {
            out.push((
                "auth-tls-error-page",
                v,
                Ok((a::CLIENT_CERTIFICATE_ERROR_PAGE, v.trim().to_string())),
            ));
        }
        if let Some(v) = tls.get("auth-tls-pass-certificate-to-upstream") {
            let pass = match parse_bool(v) {
                Some(b) => Ok((a::CLIENT_CERTIFICATE_PASS_TO_UPSTREAM, b.to_string())),
                None => Err((Status::Invalid, "not a boolean".to_string())),
            };
            out.push(("auth-tls-pass-certificate-to-upstream", v, pass));
        }
        if let Some(v) = tls.get("auth-tls-match-cn") {
            out.push((
                "auth-tls-match-cn",
                v,
                Ok((a::CLIENT_CERTIFICATE_MATCH_SUBJECT, v.trim().to_string())),
            ));
        }
        // One setting that cannot be carried over leaves the host unprotected: none is
        // applied, and the Ingress fails closed (auth-* annotations guard access).
        let failed = out.iter().any(|(_, _, r)| r.is_err());
        for (k, v, r) in out {
            match r {
                Err((status, m)) => self.record(k, v, status, m),
                Ok(_) if failed => {
                    let m = "not applied: another auth-tls annotation of this Ingress is not";
                    self.record(k, v, Status::Unsupported, m);
                }
                Ok(_) if off => {
                    let m = "no effect: auth-tls-verify-client is off (no client certificate is asked for, and no ssl-client-* header is sent)";
                    self.record(k, v, Status::Applied, m);
                }
                Ok((weir, value)) => {
                    if !value.is_empty() {
                        self.weir.insert(weir.into(), value);
                    }
                    let note = match k {
                        "auth-tls-secret" => "the Secret must be of type kubernetes.io/tls or labelled weir.dev/credential: \"true\" (Weir reads only those in a cluster); its ca.crl, when present, must cover every CA of a client's chain, as nginx's ssl_crl",
                        "auth-tls-match-cn" => "matched against the subject DN in RFC 2253 order (CN first), as nginx's $ssl_client_s_dn",
                        _ => "",
                    };
                    let status = if note.is_empty() {
                        Status::Applied
                    } else {
                        Status::Differs
                    };
                    self.record(k, v, status, note);
                }
            }
        }
    }
}
