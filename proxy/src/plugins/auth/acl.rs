//! `acl`: allow or deny authenticated consumers by their groups (Kong's schema: `allow`,
//! `deny`, `hide_groups_header`). Runs after the authentication plugins; a request without a
//! consumer is refused.

use std::collections::HashSet;
use std::sync::Arc;

use http::{HeaderValue, StatusCode};
use serde::Deserialize;

use crate::consumers::CONSUMER_GROUPS;
use crate::pipeline::RequestCtx;
use crate::plugins::{parse_config, EarlyResponse, Flow, Handled, Plugin, RequestHead, Simple};

/// The kind: its name, its default priority (Kong's), and how to build an instance.
pub(crate) const FACTORY: Simple = Simple {
    name: "acl",
    priority: 950,
    build,
};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Conf {
    #[serde(default)]
    allow: Option<Vec<String>>,
    #[serde(default)]
    deny: Option<Vec<String>>,
    #[serde(default)]
    hide_groups_header: bool,
}

enum Rule {
    Allow(HashSet<String>),
    Deny(HashSet<String>),
}

struct Acl {
    rule: Rule,
    hide_groups_header: bool,
}

fn build(config: &serde_json::Value) -> Result<Arc<dyn Plugin>, String> {
    let conf: Conf = parse_config(config)?;
    let set = |field: &str, groups: Vec<String>| -> Result<HashSet<String>, String> {
        if groups.is_empty() {
            return Err(format!("{field}: must name at least one group"));
        }
        match groups.iter().position(|g| g.trim().is_empty()) {
            Some(i) => Err(format!("{field}[{i}]: a group name may not be empty")),
            None => Ok(groups.into_iter().collect()),
        }
    };
    let rule = match (conf.allow, conf.deny) {
        (Some(a), None) => Rule::Allow(set("allow", a)?),
        (None, Some(d)) => Rule::Deny(set("deny", d)?),
        (Some(_), Some(_)) => return Err("allow: set either allow or deny, not both".into()),
        (None, None) => return Err("allow: set allow or deny".into()),
    };
    Ok(Arc::new(Acl {
        rule,
        hide_groups_header: conf.hide_groups_header,
    }))
}

impl Acl {
    fn allows(&self, groups: &[String]) -> bool {
        match &self.rule {
            Rule::Allow(allow) => groups.iter().any(|g| allow.contains(g)),
            Rule::Deny(deny) => !groups.iter().any(|g| deny.contains(g)),
        }
    }
}

impl Plugin for Acl {
    /// Decides on what the client presents (for `acl`: who authentication found).
    fn access_rule(&self) -> Option<crate::pipeline::plugin::AccessRule> {
        Some(crate::pipeline::plugin::AccessRule::Credentials)
    }

    fn access<'a>(&'a self, ctx: &'a mut RequestCtx, req: &'a mut RequestHead) -> Handled<'a> {
        let Some(consumer) = ctx.consumer_entry() else {
            // Kong: no consumer means no authentication plugin ran before this one (or it let
            // the request through without one).
            return Flow::Respond(EarlyResponse::message(
                StatusCode::UNAUTHORIZED,
                "Unauthorized",
            ))
            .into();
        };
        // Groups are what the consumer's namespace wrote: an acl trusts only those of consumers
        // it may see (a cluster-wide authentication plugin may have let in another namespace's).
        if !ctx.consumers().can_see(consumer) || !self.allows(&consumer.groups) {
            return Flow::Respond(EarlyResponse::message(
                StatusCode::FORBIDDEN,
                "You cannot consume this service",
            ))
            .into();
        }
        if !self.hide_groups_header && !consumer.groups.is_empty() {
            if let Ok(v) = HeaderValue::from_str(&consumer.groups.join(", ")) {
                req.headers.insert(CONSUMER_GROUPS, v);
            }
        }
        Flow::Continue.into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Consumer;
    use crate::plugins::auth::testing::{self, head, run};
    use serde_json::json;

    fn ctx(groups: &[&str], authenticated: bool) -> RequestCtx {
        let c = Consumer {
            id: "ns/c".into(),
            username: None,
            custom_id: None,
            namespace: Some("ns".into()),
            groups: groups.iter().map(|g| g.to_string()).collect(),
            credentials: vec![],
        };
        let mut ctx = testing::ctx(vec![c], None);
        if authenticated {
            ctx.consumer = Some("ns/c".into());
        }
        ctx
    }

    fn status(
        config: serde_json::Value,
        groups: &[&str],
        authenticated: bool,
    ) -> (u16, Option<String>) {
        let p = build(&config).unwrap();
        let mut c = ctx(groups, authenticated);
        let mut r = head("/", &[]);
        match run(&*p, &mut c, &mut r) {
            Some(e) => (e.status.as_u16(), None),
            None => (
                200,
                r.headers
                    .get("x-consumer-groups")
                    .map(|v| v.to_str().unwrap().to_string()),
            ),
        }
    }

    #[test]
    fn allow_and_deny_by_group() {
        let allow = json!({"allow": ["admin", "ops"]});
        assert_eq!(
            status(allow.clone(), &["dev", "ops"], true),
            (200, Some("dev, ops".into()))
        );
        assert_eq!(status(allow.clone(), &["dev"], true).0, 403);
        assert_eq!(status(allow.clone(), &[], true).0, 403);
        assert_eq!(status(allow, &["admin"], false).0, 401);
        let deny = json!({"deny": ["banned"], "hide_groups_header": true});
        assert_eq!(status(deny.clone(), &["dev"], true), (200, None));
        assert_eq!(status(deny.clone(), &["dev", "banned"], true).0, 403);
        assert_eq!(status(deny, &[], true), (200, None));
    }

    #[test]
    fn configuration_errors_name_the_field() {
        for (config, field) in [
            (json!({}), "allow"),
            (json!({"allow": ["a"], "deny": ["b"]}), "allow"),
            (json!({"deny": []}), "deny"),
            (json!({"allow": ["a", " "]}), "allow[1]"),
            (json!({"whitelist": ["a"]}), "whitelist"),
        ] {
            let e = build(&config).err().unwrap();
            assert!(e.starts_with(field) || e.contains(field), "{config}: {e}");
        }
    }
}
