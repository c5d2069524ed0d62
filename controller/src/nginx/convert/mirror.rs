//! `mirror-*`: request mirroring, as `weir.dev/mirror-*`.

use super::*;
use crate::translate::annotations::{is_mirror_host, MirrorTarget};

impl Conv<'_> {
    /// `mirror-target`, `mirror-uri`, `mirror-request-body`, `mirror-host`.
    pub(super) fn mirror(&mut self) {
        let target = self.take("mirror-target");
        let uri = self.take("mirror-uri");
        let body = self.take("mirror-request-body");
        let host = self.take("mirror-host");
        let Some(target) = target else {
            if let Some(v) = uri {
                let m = "a mirror location of your own (written in a snippet) is not supported; mirror-target says where copies go";
                self.record("mirror-uri", &v, Status::Unsupported, m);
            }
            for (k, v) in [("mirror-request-body", body), ("mirror-host", host)] {
                if let Some(v) = v {
                    self.record(k, &v, Status::Applied, "no effect without mirror-target");
                }
            }
            return;
        };
        let t = target.trim();
        // `$request_uri` is where nginx puts the request's own path and query, which is what
        // Weir's copy carries; other nginx variables have no equivalent.
        let base = t
            .strip_suffix("/$request_uri")
            .or_else(|| t.strip_suffix("$request_uri"))
            .unwrap_or(t);
        if base.contains('$') {
            let m = "nginx variables other than a trailing $request_uri are not supported";
            self.record("mirror-target", &target, Status::Unsupported, m);
        } else {
            let (url, differs) = match base.parse::<http::Uri>() {
                Ok(u) if u.path() != "/" || u.query().is_some() => {
                    match (u.scheme_str(), u.authority()) {
                        (Some(s), Some(a)) => (format!("{s}://{a}"), true),
                        _ => (base.to_string(), false),
                    }
                }
                _ => (base.to_string(), false),
            };
            match MirrorTarget::parse(&url) {
                Ok(t) => {
                    self.weir.insert(a::MIRROR_TARGET.into(), url);
                    let mut notes = Vec::new();
                    if differs {
                        notes.push("the copy is sent with the request's own path and query, not the target's path");
                    }
                    if t.tls {
                        notes.push("the mirror's certificate is verified against the public roots (nginx does not verify it)");
                    }
                    let status = if differs {
                        Status::Differs
                    } else {
                        Status::Applied
                    };
                    self.record("mirror-target", &target, status, notes.join("; "));
                }
                Err(m) => self.record("mirror-target", &target, Status::Invalid, m),
            }
        }
        if let Some(v) = uri {
            let m = "no effect: the name of nginx's internal mirror location";
            self.record("mirror-uri", &v, Status::Applied, m);
        }
        if let Some(v) = body {
            match v.trim() {
                "on" | "off" => {
                    let b = if v.trim() == "on" { "true" } else { "false" };
                    self.weir.insert(a::MIRROR_REQUEST_BODY.into(), b.into());
                    self.applied("mirror-request-body", &v);
                }
                _ => self.record(
                    "mirror-request-body",
                    &v,
                    Status::Invalid,
                    "not \"on\" or \"off\"",
                ),
            }
        }
        if let Some(v) = host {
            let h = v.trim();
            if !is_mirror_host(h) {
                self.record("mirror-host", &v, Status::Invalid, "not a host name");
            } else {
                self.weir.insert(a::MIRROR_HOST.into(), h.to_string());
                self.applied("mirror-host", &v);
            }
        }
    }
}
