//! `proxy-cookie-path`, `proxy-cookie-domain`, `proxy-redirect-from`, `proxy-redirect-to`:
//! the upstream's cookies and redirects rewritten (`cookie-rewrite` and `location-rewrite`
//! plugins).

use super::*;

impl Conv<'_> {
    /// `proxy-cookie-path: "<from> <to>"` and `proxy-cookie-domain: "<from> <to>"` (nginx's
    /// `proxy_cookie_path` and `proxy_cookie_domain`; `off` is nginx's default).
    pub(super) fn cookies(&mut self) {
        let mut config = serde_json::Map::new();
        for (key, field) in [
            ("proxy-cookie-path", "path"),
            ("proxy-cookie-domain", "domain"),
        ] {
            let Some(v) = self.take(key) else { continue };
            let words: Vec<&str> = v.split_whitespace().collect();
            match words.as_slice() {
                ["off"] => self.applied(key, &v),
                [from, _] if from.starts_with('~') || v.contains('$') => self.record(
                    key,
                    &v,
                    Status::Unsupported,
                    "regular expressions and nginx variables are not supported",
                ),
                [from, to] => {
                    // The plugin's own rules, so that a bad value is reported on the annotation.
                    let visible =
                        |w: &str| w.bytes().all(|b| (0x21..0x7f).contains(&b) && b != b';');
                    let paths_ok =
                        field != "path" || (from.starts_with('/') && to.starts_with('/'));
                    if visible(from) && visible(to) && paths_ok {
                        config.insert(field.into(), json!([{"from": from, "to": to}]));
                        self.applied(key, &v);
                    } else {
                        let m = "each of <from> and <to> must be visible ASCII without ';' (paths starting with /)";
                        self.record(key, &v, Status::Invalid, m);
                    }
                }
                _ => self.record(
                    key,
                    &v,
                    Status::Invalid,
                    "expected \"<from> <to>\" or \"off\"",
                ),
            }
        }
        if !config.is_empty() {
            self.plugin("cookie-rewrite", "cookie-rewrite", config.into());
        }
    }

    /// `proxy-redirect-from` and `proxy-redirect-to` (nginx's `proxy_redirect <from> <to>`;
    /// ingress-nginx's default is `off`).
    pub(super) fn redirect_rewrites(&mut self) {
        let from = self.take("proxy-redirect-from");
        let to = self.take("proxy-redirect-to");
        let (from, to) = match (from, to) {
            (None, None) => return,
            (Some(f), to) if f.trim() == "off" => {
                self.applied("proxy-redirect-from", &f);
                if let Some(t) = to {
                    self.record(
                        "proxy-redirect-to",
                        &t,
                        Status::Applied,
                        "no effect with proxy-redirect-from: off",
                    );
                }
                return;
            }
            (Some(f), Some(t)) => (f, t),
            (Some(f), None) => {
                self.record(
                    "proxy-redirect-from",
                    &f,
                    Status::Invalid,
                    "needs proxy-redirect-to",
                );
                return;
            }
            (None, Some(t)) => {
                self.record(
                    "proxy-redirect-to",
                    &t,
                    Status::Applied,
                    "no effect without proxy-redirect-from",
                );
                return;
            }
        };
        let (f, t) = (from.trim(), to.trim());
        let visible = |w: &str| !w.is_empty() && w.bytes().all(|b| (0x21..0x7f).contains(&b));
        let (status, note) =
            if f == "default" || f.starts_with('~') || f.contains('$') || t.contains('$') {
                (
                    Status::Unsupported,
                    "`default`, regular expressions and nginx variables are not supported",
                )
            } else if !visible(f) || !visible(t) {
                (
                    Status::Invalid,
                    "a URL or path of visible ASCII characters, without spaces",
                )
            } else {
                self.plugin(
                    "location-rewrite",
                    "location-rewrite",
                    json!({"rules": [{"from": f, "to": t}]}),
                );
                (Status::Applied, "")
            };
        self.record("proxy-redirect-from", &from, status, note);
        self.record("proxy-redirect-to", &to, status, note);
    }
}

impl Conv<'_> {
    /// `custom-headers: <ConfigMap>`: its data set on every answer (nginx's
    /// `more_set_headers`), as a `response-transformer` that replaces a header the upstream
    /// sent and adds it otherwise.
    pub(super) fn custom_headers(&mut self) {
        let Some(v) = self.take("custom-headers") else {
            return;
        };
        let headers = match self.header_config_map(&v) {
            Ok(h) => h,
            Err(m) => return self.record("custom-headers", &v, Status::Invalid, m),
        };
        let entries: Vec<String> = headers.iter().map(|(k, v)| format!("{k}:{v}")).collect();
        let config = json!({"replace": {"headers": entries}, "add": {"headers": entries}});
        if let Some(m) = Self::plugin_config_error("response-transformer", &config) {
            return self.record("custom-headers", &v, Status::Invalid, m);
        }
        self.plugin("custom-headers", "response-transformer", config);
        self.applied("custom-headers", &v);
    }
}
