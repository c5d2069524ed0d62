//! Canaries, `default-backend`, `custom-http-errors`, `service-upstream`, `enable-access-log`.

use super::*;

impl Conv<'_> {
    pub(super) fn canary(&mut self, canary: bool) {
        let keys = [
            ("canary-weight", a::CANARY_WEIGHT),
            ("canary-weight-total", a::CANARY_WEIGHT_TOTAL),
            ("canary-by-header", a::CANARY_BY_HEADER),
            ("canary-by-header-value", a::CANARY_BY_HEADER_VALUE),
            ("canary-by-header-pattern", a::CANARY_BY_HEADER_PATTERN),
            ("canary-by-cookie", a::CANARY_BY_COOKIE),
        ];
        for (short, weir) in keys {
            let Some(v) = self.take(short) else { continue };
            if !canary {
                let m = "ignored without canary: \"true\", as ingress-nginx ignores it";
                self.record(short, &v, Status::Applied, m);
                continue;
            }
            // Checked as the native annotation is, so the two never disagree.
            let one = BTreeMap::from([(weir.to_string(), v.trim().to_string())]);
            let (parsed, _) = crate::translate::annotations::ingress(&one);
            if let Err(errors) = parsed {
                let m = errors
                    .into_iter()
                    .map(|(_, m)| m)
                    .collect::<Vec<_>>()
                    .join("; ");
                self.record(
                    short,
                    &v,
                    Status::Invalid,
                    format!("{m}; the canary rule is not used"),
                );
                continue;
            }
            self.weir.insert(weir.into(), v.trim().to_string());
            self.applied(short, &v);
        }
        if canary {
            self.weir.insert(a::CANARY.into(), "true".into());
        }
    }

    /// `default-backend`, `custom-http-errors`, `service-upstream`, `enable-access-log`.
    pub(super) fn backends(&mut self) {
        if let Some(v) = self.take("default-backend") {
            let t = v.trim();
            let ok = !t.is_empty()
                && t.len() <= 63
                && t.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
            if ok {
                self.weir.insert(a::DEFAULT_BACKEND.into(), t.into());
                let m = "the Service's first port is used";
                self.record("default-backend", &v, Status::Differs, m);
            } else {
                self.record("default-backend", &v, Status::Invalid, "not a Service name");
            }
        }
        if let Some(v) = self.take("custom-http-errors") {
            let codes: Result<Vec<u16>, _> =
                v.split(',').map(|c| c.trim().parse::<u16>()).collect();
            match codes {
                Ok(c) if !c.is_empty() && c.iter().all(|c| (400..=599).contains(c)) => {
                    let list: Vec<String> = c.iter().map(u16::to_string).collect();
                    self.weir
                        .insert(a::CUSTOM_HTTP_ERRORS.into(), list.join(","));
                    self.applied("custom-http-errors", &v);
                }
                _ => self.record(
                    "custom-http-errors",
                    &v,
                    Status::Invalid,
                    "not a list of statuses from 400 to 599",
                ),
            }
        }
        if let Some(v) = self.take("service-upstream") {
            match parse_bool(&v) {
                Some(b) => {
                    if b {
                        self.weir.insert(a::SERVICE_UPSTREAM.into(), "true".into());
                    }
                    self.applied("service-upstream", &v);
                }
                None => self.record("service-upstream", &v, Status::Invalid, "not a boolean"),
            }
        }
        if let Some(v) = self.take("enable-access-log") {
            match parse_bool(&v) {
                Some(b) => {
                    if !b {
                        self.weir.insert(a::ACCESS_LOG.into(), "false".into());
                    }
                    self.applied("enable-access-log", &v);
                }
                None => self.record("enable-access-log", &v, Status::Invalid, "not a boolean"),
            }
        }
    }
}
