//! `proxy-cookie-path`, `proxy-cookie-domain`: a `cookie-rewrite` plugin.

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
}
