//! `proxy-body-size`, the proxy timeouts, `proxy-next-upstream`, and the `limit-*` rate limits.

use super::*;

impl Conv<'_> {
    /// Body size, timeouts, retries and rate limits.
    pub(super) fn limits(&mut self) {
        if let Some(v) = self.take("proxy-body-size") {
            match parse_size(&v) {
                Some(0) => {
                    self.record("proxy-body-size", &v, Status::Applied, "0: no limit");
                }
                Some(bytes) => {
                    let config = json!({"allowed_payload_size": bytes, "size_unit": "bytes"});
                    self.plugin("body-size", "request-size-limiting", config);
                    self.applied("proxy-body-size", &v);
                }
                None => self.record(
                    "proxy-body-size",
                    &v,
                    Status::Invalid,
                    "not a size (8m, 512k, 1g, 100)",
                ),
            }
        }
        self.limit_rate();
        let mut timeouts = Timeouts::default();
        for (short, slot) in [
            ("proxy-connect-timeout", 0),
            ("proxy-send-timeout", 1),
            ("proxy-read-timeout", 2),
        ] {
            let Some(v) = self.take(short) else { continue };
            match parse_seconds(&v) {
                Some(ms) => {
                    match slot {
                        0 => timeouts.connect = Some(ms),
                        1 => timeouts.write = Some(ms),
                        _ => timeouts.read = Some(ms),
                    }
                    self.applied(short, &v);
                }
                None => self.record(
                    short,
                    &v,
                    Status::Invalid,
                    "not a whole number of seconds from 1 to 3600",
                ),
            }
        }
        if timeouts != Timeouts::default() {
            self.upstream.timeouts = Some(timeouts);
        }

        let next = self.take("proxy-next-upstream");
        let tries = self.take("proxy-next-upstream-tries");
        let mut retries: Option<u32> = None;
        if let Some(v) = &next {
            let mut on = RetryOn::default();
            let mut notes = Vec::new();
            let mut off = false;
            let mut bad = None;
            for w in v.split_whitespace() {
                match w {
                    "error" => {}
                    "timeout" => on.timeouts = true,
                    "invalid_header" => notes.push("invalid_header: a malformed answer counts as a connection error, which Weir always retries"),
                    "non_idempotent" => notes.push("non_idempotent: Weir never sends a non-idempotent request twice once a backend has seen it"),
                    "off" => off = true,
                    w => match w.strip_prefix("http_").and_then(|c| c.parse::<u16>().ok()) {
                        Some(c) if (400..=599).contains(&c) => on.statuses.push(c),
                        _ => bad = Some(w.to_string()),
                    },
                }
            }
            if !v.split_whitespace().any(|w| w == "error") && !off {
                notes.push("connection failures are always retried");
            }
            match bad {
                Some(w) => self.record(
                    "proxy-next-upstream",
                    v,
                    Status::Invalid,
                    format!("{w:?} is not a proxy_next_upstream condition"),
                ),
                None => {
                    if off {
                        retries = Some(0);
                    } else {
                        on.statuses.sort_unstable();
                        on.statuses.dedup();
                        self.upstream.retry_on = Some(on);
                        retries = Some(2); // ingress-nginx's 3 tries
                    }
                    if notes.is_empty() {
                        self.applied("proxy-next-upstream", v);
                    } else {
                        self.record("proxy-next-upstream", v, Status::Differs, notes.join("; "));
                    }
                }
            }
        }
        if let Some(v) = &tries {
            match v.trim().parse::<u32>() {
                Ok(0) => {
                    retries = retries.or(Some(2)).map(|r| if r == 0 { 0 } else { 32 });
                    let m = "0 (unlimited in nginx) becomes 32 retries, Weir's most";
                    self.record("proxy-next-upstream-tries", v, Status::Differs, m);
                }
                Ok(n) => {
                    if retries != Some(0) {
                        retries = Some((n - 1).min(32));
                    }
                    self.applied("proxy-next-upstream-tries", v);
                }
                Err(_) => self.record(
                    "proxy-next-upstream-tries",
                    v,
                    Status::Invalid,
                    "not a whole number",
                ),
            }
        }
        if let Some(v) = self.take("proxy-next-upstream-timeout") {
            let t = v.trim();
            match t.strip_suffix('s').unwrap_or(t).parse::<u64>() {
                // nginx's 0: no limit.
                Ok(0) => self.applied("proxy-next-upstream-timeout", &v),
                Ok(n) if n <= 86_400 => {
                    let on = self.upstream.retry_on.get_or_insert_with(RetryOn::default);
                    on.timeout = Some(n * 1000);
                    self.applied("proxy-next-upstream-timeout", &v);
                }
                _ => self.record(
                    "proxy-next-upstream-timeout",
                    &v,
                    Status::Invalid,
                    "not a number of seconds up to a day",
                ),
            }
        }
        if let Some(r) = retries {
            self.upstream.retries = Some(r);
        }

        // limit-rps / limit-rpm / limit-connections with ingress-nginx's burst and status.
        let mult = self.take("limit-burst-multiplier");
        let whitelist = self.take("limit-whitelist");
        let burst_mult = match &mult {
            Some(v) => match v.trim().parse::<u32>() {
                Ok(m) if m >= 1 => Some(m),
                _ => {
                    self.record(
                        "limit-burst-multiplier",
                        v,
                        Status::Invalid,
                        "not a whole number from 1",
                    );
                    None
                }
            },
            None => Some(5),
        };
        let exempt = match &whitelist {
            Some(v) => match cidrs(v) {
                Ok(list) => Some(list),
                Err(m) => {
                    self.record("limit-whitelist", v, Status::Invalid, m);
                    None
                }
            },
            None => None,
        };
        // One rate-limiting plugin per route: with both limits, the stricter one is enforced.
        let mut rates: Vec<(&str, String, f64, u32)> = Vec::new();
        for (short, per_second) in [("limit-rps", 1.0f64), ("limit-rpm", 1.0 / 60.0)] {
            let Some(v) = self.take(short) else { continue };
            match (v.trim().parse::<u32>(), burst_mult) {
                (Ok(n), Some(m)) if n >= 1 => {
                    rates.push((short, v, f64::from(n) * per_second, n.saturating_mul(m)))
                }
                (Ok(_), None) => {
                    let m = "limit-burst-multiplier is invalid";
                    self.record(short, &v, Status::Invalid, m)
                }
                _ => self.record(short, &v, Status::Invalid, "not a whole number from 1"),
            }
        }
        let mut any_limit = false;
        let strict = rates.iter().min_by(|a, b| a.2.total_cmp(&b.2)).map(|r| r.0);
        for (short, v, rate, burst) in &rates {
            if Some(*short) != strict {
                let m = format!(
                    "Weir runs one rate limit per route: {}, the stricter, is enforced and this one is not",
                    strict.unwrap_or_default()
                );
                self.record(short, v, Status::Unsupported, m);
                continue;
            }
            let mut config = json!({
                "algorithm": "token-bucket",
                "rate": rate,
                "burst": f64::from(*burst),
                "limit_by": "ip",
                "error_code": 503,
                "hide_client_headers": true,
            });
            if let Some(list) = &exempt {
                config["exempt"] = json!(list);
            }
            self.plugin("rate-limit", "rate-limiting", config);
            self.applied(short, v);
            any_limit = true;
        }
        if let Some(v) = self.take("limit-connections") {
            match v.trim().parse::<u32>() {
                Ok(_) if any_limit => {
                    let m = "Weir runs one rate limit per route, and limit-rps or limit-rpm is enforced; this one is not";
                    self.record("limit-connections", &v, Status::Unsupported, m);
                }
                Ok(n) if n >= 1 => {
                    let mut config = json!({
                        "algorithm": "concurrency",
                        "max_in_flight": n,
                        "limit_by": "ip",
                        "error_code": 503,
                        "hide_client_headers": true,
                    });
                    if let Some(list) = &exempt {
                        config["exempt"] = json!(list);
                    }
                    self.plugin("limit-connections", "rate-limiting", config);
                    self.applied("limit-connections", &v);
                    any_limit = true;
                }
                _ => self.record(
                    "limit-connections",
                    &v,
                    Status::Invalid,
                    "not a whole number from 1",
                ),
            }
        }
        if let (Some(v), Some(_)) = (&mult, burst_mult) {
            let m = if any_limit {
                ""
            } else {
                "no effect without limit-rps or limit-rpm"
            };
            self.record("limit-burst-multiplier", v, Status::Applied, m);
        }
        if let (Some(v), Some(_)) = (&whitelist, &exempt) {
            let m = if any_limit {
                ""
            } else {
                "no effect without a limit"
            };
            self.record("limit-whitelist", v, Status::Applied, m);
        }
    }
}

impl Conv<'_> {
    /// `limit-rate` and `limit-rate-after`, in kilobytes (a second) as ingress-nginx writes
    /// them into nginx's `limit_rate` and `limit_rate_after`.
    fn limit_rate(&mut self) {
        let rate = self.take("limit-rate");
        let after = self.take("limit-rate-after");
        let kb = |v: &str| {
            v.trim()
                .parse::<u64>()
                .ok()
                .and_then(|n| n.checked_mul(1024))
        };
        let mut ok = true;
        for (k, v) in [("limit-rate", &rate), ("limit-rate-after", &after)] {
            if let Some(v) = v.as_deref().filter(|v| kb(v).is_none()) {
                self.record(k, v, Status::Invalid, "not a whole number of kilobytes");
                ok = false;
            }
        }
        if !ok {
            for (k, v) in [("limit-rate", &rate), ("limit-rate-after", &after)] {
                if let Some(v) = v.as_deref().filter(|v| kb(v).is_some()) {
                    self.record(
                        k,
                        v,
                        Status::Invalid,
                        "the other limit-rate annotation is invalid",
                    );
                }
            }
            return;
        }
        match rate.as_deref().map(|v| (v, kb(v).unwrap_or(0))) {
            Some((v, n)) if n > 0 => {
                self.weir.insert(a::LIMIT_RATE.into(), n.to_string());
                self.applied("limit-rate", v);
                if let Some(after) = after.as_deref() {
                    let n = kb(after).unwrap_or(0);
                    self.weir.insert(a::LIMIT_RATE_AFTER.into(), n.to_string());
                    self.applied("limit-rate-after", after);
                }
            }
            rate => {
                if let Some((v, _)) = rate {
                    self.record("limit-rate", v, Status::Applied, "0: no limit");
                }
                if let Some(v) = &after {
                    self.record(
                        "limit-rate-after",
                        v,
                        Status::Applied,
                        "no effect without limit-rate",
                    );
                }
            }
        }
    }
}
