//! Writing the Gateway API status the translator decided: GatewayClasses', Gateways' (with the
//! addresses Weir is reached at) and routes' (Weir's entries in `status.parents`, next to other
//! controllers' entries, which are kept as they are).
//!
//! The documents are built by plain functions from the translation and the status the API
//! server has; a write happens only when they differ, so watching our own writes settles.

use k8s_openapi::jiff::Timestamp;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::{Api, Resource};
use serde_json::{json, Value};
use weir_crds::gateway::{
    BackendTLSPolicy, GRPCRoute, Gateway, GatewayClass, HTTPRoute, TLSRoute, CONTROLLER_NAME,
};

use super::Reporter;
use crate::store::{Key, Kind, Store};
use crate::translate::gateway::status::{Cond, GatewayStatus, PolicyStatus, RouteStatus};
use crate::translate::Translation;

/// Conditions as the API server keeps them: with `observedGeneration`, and a
/// `lastTransitionTime` kept from `old` while the status stays the same.
fn conditions(new: &[Cond], old: &Value, generation: Option<i64>, now: &str) -> Value {
    let old = old.as_array().map(Vec::as_slice).unwrap_or_default();
    new.iter()
        .map(|c| {
            let since = old
                .iter()
                .find(|o| o["type"] == c.type_ && o["status"] == c.status)
                .and_then(|o| o["lastTransitionTime"].as_str())
                .unwrap_or(now);
            let mut v = json!({
                "type": c.type_,
                "status": c.status,
                "reason": c.reason,
                "message": c.message,
                "lastTransitionTime": since,
            });
            if let Some(g) = generation {
                v["observedGeneration"] = g.into();
            }
            v
        })
        .collect()
}

/// Whether two status fragments say the same, ignoring key order.
fn same(a: &Value, b: &Value) -> bool {
    a == b
}

/// A GatewayClass's status document, or `None` when `current` already says it.
pub(super) fn class_status(
    desired: &crate::translate::gateway::status::ClassStatus,
    current: &Value,
    now: &str,
) -> Option<Value> {
    let mut features: Vec<&str> = desired.supported_features.clone();
    features.sort_unstable();
    let generation = desired.observed_generation;
    let doc = json!({
        "conditions": conditions(&desired.conditions, &current["conditions"], generation, now),
        "supportedFeatures": features.iter().map(|f| json!({"name": f})).collect::<Vec<_>>(),
    });
    let unchanged = same(&current["conditions"], &doc["conditions"])
        && same(&current["supportedFeatures"], &doc["supportedFeatures"]);
    (!unchanged).then_some(doc)
}

/// A Gateway's status document, or `None` when `current` already says it.
pub(super) fn gateway_status(
    desired: &GatewayStatus,
    addresses: Option<&[Value]>,
    current: &Value,
    now: &str,
) -> Option<Value> {
    let generation = desired.observed_generation;
    let listeners: Vec<Value> = desired
        .listeners
        .iter()
        .map(|l| {
            let old = current["listeners"]
                .as_array()
                .and_then(|ls| ls.iter().find(|o| o["name"] == l.name.as_str()))
                .map(|o| &o["conditions"])
                .unwrap_or(&Value::Null);
            json!({
                "name": l.name,
                "supportedKinds": l.supported_kinds,
                "attachedRoutes": l.attached_routes,
                "conditions": conditions(&l.conditions, old, generation, now),
            })
        })
        .collect();
    let mut doc = json!({
        "conditions": conditions(&desired.conditions, &current["conditions"], generation, now),
        "listeners": listeners,
    });
    if let Some(a) = addresses {
        doc["addresses"] = a.into();
    }
    let unchanged = same(&current["conditions"], &doc["conditions"])
        && same(&current["listeners"], &doc["listeners"])
        && addresses.is_none_or(|_| same(&current["addresses"], &doc["addresses"]));
    (!unchanged).then_some(doc)
}

/// A route's `status.parents`: other controllers' entries as they are, then Weir's (none when
/// `desired` is `None`: the route has no parent that is Weir's any more). `None` when
/// `current` already says it.
pub(super) fn route_parents(
    desired: Option<&RouteStatus>,
    current: &Value,
    now: &str,
) -> Option<Value> {
    let ours: Vec<(Value, &[Cond])> = desired
        .map(|d| d.parents.as_slice())
        .unwrap_or_default()
        .iter()
        .map(|p| {
            let r = serde_json::to_value(&p.parent_ref).unwrap_or_default();
            (r, p.conditions.as_slice())
        })
        .collect();
    let generation = desired.and_then(|d| d.observed_generation);
    merged_entries(&ours, generation, &current["parents"], "parentRef", now)
}

/// A BackendTLSPolicy's `status.ancestors`, as [`route_parents`] does a route's parents.
pub(super) fn policy_ancestors(
    desired: Option<&PolicyStatus>,
    current: &Value,
    now: &str,
) -> Option<Value> {
    let ours: Vec<(Value, &[Cond])> = desired
        .map(|d| d.ancestors.as_slice())
        .unwrap_or_default()
        .iter()
        .map(|a| {
            let r = serde_json::to_value(&a.ancestor_ref).unwrap_or_default();
            (r, a.conditions.as_slice())
        })
        .collect();
    let generation = desired.and_then(|d| d.observed_generation);
    merged_entries(&ours, generation, &current["ancestors"], "ancestorRef", now)
}

/// A status list of per-parent entries (`ref_key` naming the parent): other controllers'
/// entries kept as they are, then Weir's `ours`; `None` when `old` already says it.
fn merged_entries(
    ours: &[(Value, &[Cond])],
    generation: Option<i64>,
    old_list: &Value,
    ref_key: &str,
    now: &str,
) -> Option<Value> {
    let old: &[Value] = old_list.as_array().map(Vec::as_slice).unwrap_or_default();
    let mut entries: Vec<Value> = old
        .iter()
        .filter(|p| p["controllerName"] != CONTROLLER_NAME)
        .cloned()
        .collect();
    let others = entries.len();
    for (parent_ref, conds) in ours {
        let previous = old
            .iter()
            .find(|o| o["controllerName"] == CONTROLLER_NAME && o[ref_key] == *parent_ref)
            .map(|o| &o["conditions"])
            .unwrap_or(&Value::Null);
        entries.push(json!({
            ref_key: parent_ref,
            "controllerName": CONTROLLER_NAME,
            "conditions": conditions(conds, previous, generation, now),
        }));
    }
    if entries.len() == others && old.len() == others {
        return None;
    }
    let doc = Value::Array(entries);
    (!same(old_list, &doc)).then_some(doc)
}

/// The addresses a Gateway is reached at, in its status's form.
fn gateway_addresses(reporter: &Reporter, store: &Store) -> Option<Vec<Value>> {
    let list = reporter.addresses(store)?;
    Some(
        list.into_iter()
            .filter_map(|a| match (a.ip, a.hostname) {
                (Some(ip), _) => Some(json!({"type": "IPAddress", "value": ip})),
                (None, Some(h)) => Some(json!({"type": "Hostname", "value": h})),
                (None, None) => None,
            })
            .collect(),
    )
}

impl Reporter {
    /// The API of `K` in `key`'s namespace at the version it is read at (a cluster with the
    /// experimental channel of an older Gateway API release serves TLSRoutes and
    /// BackendTLSPolicies at `v1alpha2` and `v1alpha3` only).
    fn served_api<K>(&self, store: &Store, kind: Kind, key: &Key) -> Api<DynamicObject>
    where
        K: Resource<DynamicType = ()>,
    {
        let version = store
            .served_versions
            .get(&kind)
            .map_or("v1", String::as_str);
        let ar = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(&K::group(&()), version, &K::kind(&())),
            &K::plural(&()),
        );
        Api::namespaced_with(self.client.clone(), &key.namespace, &ar)
    }

    /// Writes the Gateway API status that changed.
    pub(super) async fn gateway_api(&self, t: &Translation, store: &Store) {
        let now = Timestamp::now().to_string();
        let desired = &t.gateway_api;
        let pp = PatchParams::default();
        for (name, want) in &desired.gateway_classes {
            let Some(class) = store.gateway_classes.get(name) else {
                continue;
            };
            let current = class.status.clone().unwrap_or_default();
            if let Some(doc) = class_status(want, &current, &now) {
                let api: Api<GatewayClass> = Api::all(self.client.clone());
                let r = api
                    .patch_status(name, &pp, &Patch::Merge(&json!({ "status": doc })))
                    .await;
                log("GatewayClass", name, r.map(drop));
            }
        }
        let addresses = gateway_addresses(self, store);
        for (key, want) in &desired.gateways {
            let Some(gw) = store.gateways.get(&key_of(key)) else {
                continue;
            };
            let current = gw.status.clone().unwrap_or_default();
            if let Some(doc) = gateway_status(want, addresses.as_deref(), &current, &now) {
                let k = key_of(key);
                let api: Api<Gateway> = Api::namespaced(self.client.clone(), &k.namespace);
                let r = api
                    .patch_status(&k.name, &pp, &Patch::Merge(&json!({ "status": doc })))
                    .await;
                log("Gateway", key, r.map(drop));
            }
        }
        for (key, route) in &store.http_routes {
            let current = route.status.clone().unwrap_or_default();
            let want = desired.http_routes.get(&key.to_string());
            if let Some(parents) = route_parents(want, &current, &now) {
                let api: Api<HTTPRoute> = Api::namespaced(self.client.clone(), &key.namespace);
                let patch = json!({ "status": { "parents": parents } });
                let r = api
                    .patch_status(&key.name, &pp, &Patch::Merge(&patch))
                    .await;
                log("HTTPRoute", &key.to_string(), r.map(drop));
            }
        }
        for (key, route) in &store.grpc_routes {
            let current = route.status.clone().unwrap_or_default();
            let want = desired.grpc_routes.get(&key.to_string());
            if let Some(parents) = route_parents(want, &current, &now) {
                let api: Api<GRPCRoute> = Api::namespaced(self.client.clone(), &key.namespace);
                let patch = json!({ "status": { "parents": parents } });
                let r = api
                    .patch_status(&key.name, &pp, &Patch::Merge(&patch))
                    .await;
                log("GRPCRoute", &key.to_string(), r.map(drop));
            }
        }
        for (key, route) in &store.tls_routes {
            let current = route.status.clone().unwrap_or_default();
            let want = desired.tls_routes.get(&key.to_string());
            if let Some(parents) = route_parents(want, &current, &now) {
                let api = self.served_api::<TLSRoute>(store, Kind::TLSRoute, key);
                let patch = json!({ "status": { "parents": parents } });
                let r = api
                    .patch_status(&key.name, &pp, &Patch::Merge(&patch))
                    .await;
                log("TLSRoute", &key.to_string(), r.map(drop));
            }
        }
        for (key, policy) in &store.backend_tls_policies {
            let current = policy.status.clone().unwrap_or_default();
            let want = desired.backend_tls_policies.get(&key.to_string());
            if let Some(ancestors) = policy_ancestors(want, &current, &now) {
                let api = self.served_api::<BackendTLSPolicy>(store, Kind::BackendTLSPolicy, key);
                let patch = json!({ "status": { "ancestors": ancestors } });
                let r = api
                    .patch_status(&key.name, &pp, &Patch::Merge(&patch))
                    .await;
                log("BackendTLSPolicy", &key.to_string(), r.map(drop));
            }
        }
    }
}

/// `namespace/name` as a key.
fn key_of(s: &str) -> Key {
    let (ns, name) = s.split_once('/').unwrap_or(("", s));
    Key::new(ns, name)
}

fn log(kind: &str, name: &str, r: Result<(), kube::Error>) {
    match r {
        Ok(()) => tracing::debug!(kind, object = name, "status updated"),
        Err(e) => tracing::warn!(kind, object = name, error = %e, "updating status failed"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::translate::gateway::status::{ClassStatus, RouteParentStatus};
    use weir_crds::gateway::ParentReference;

    fn ours(name: &str, accepted: bool) -> RouteParentStatus {
        RouteParentStatus {
            parent_ref: ParentReference {
                name: name.into(),
                ..Default::default()
            },
            controller_name: CONTROLLER_NAME,
            conditions: vec![if accepted {
                Cond::yes("Accepted", "Accepted")
            } else {
                Cond::no("Accepted", "NotAllowedByListeners", "no")
            }],
        }
    }

    #[test]
    fn route_parents_keep_other_controllers_entries_and_settle() {
        let theirs = json!({"parentRef": {"name": "other-gw"}, "controllerName": "example.com/gw",
            "conditions": [{"type": "Accepted", "status": "True"}]});
        let current = json!({"parents": [theirs.clone()]});
        let want = RouteStatus {
            observed_generation: Some(3),
            parents: vec![ours("gw", true)],
        };
        let parents = route_parents(Some(&want), &current, "T1").expect("a write");
        let list = parents.as_array().unwrap();
        assert_eq!(list.len(), 2);
        assert_eq!(
            list[0], theirs,
            "another controller's entry is kept first, as it was"
        );
        assert_eq!(list[1]["controllerName"], CONTROLLER_NAME);
        assert_eq!(list[1]["parentRef"], json!({"name": "gw"}));
        assert_eq!(list[1]["conditions"][0]["observedGeneration"], 3);
        assert_eq!(list[1]["conditions"][0]["lastTransitionTime"], "T1");
        // Written, then seen again: nothing to write, even at a later time.
        let written = json!({ "parents": parents });
        assert_eq!(route_parents(Some(&want), &written, "T2"), None);
        // The condition flips: a write, with a new transition time.
        let flipped = RouteStatus {
            observed_generation: Some(3),
            parents: vec![ours("gw", false)],
        };
        let again = route_parents(Some(&flipped), &written, "T3").unwrap();
        assert_eq!(again[1]["conditions"][0]["lastTransitionTime"], "T3");
        // The route is no longer Weir's: only our entry goes.
        assert_eq!(route_parents(None, &written, "T4"), Some(json!([theirs])));
        // Never Weir's: nothing to write.
        assert_eq!(route_parents(None, &current, "T5"), None);
        assert_eq!(route_parents(None, &Value::Null, "T5"), None);
    }

    #[test]
    fn class_and_gateway_status_settle_once_written() {
        let class = ClassStatus {
            observed_generation: Some(1),
            conditions: vec![Cond::yes("Accepted", "Accepted")],
            supported_features: vec!["HTTPRoute", "Gateway"],
        };
        let doc = class_status(&class, &Value::Null, "T1").unwrap();
        assert_eq!(
            doc["supportedFeatures"],
            json!([{"name": "Gateway"}, {"name": "HTTPRoute"}])
        );
        assert_eq!(class_status(&class, &doc, "T2"), None);

        let gw = GatewayStatus {
            observed_generation: Some(2),
            conditions: vec![Cond::yes("Programmed", "Programmed")],
            listeners: vec![],
        };
        let addrs = [json!({"type": "IPAddress", "value": "10.0.0.1"})];
        let doc = gateway_status(&gw, Some(&addrs), &Value::Null, "T1").unwrap();
        assert_eq!(doc["addresses"], json!(addrs));
        assert_eq!(gateway_status(&gw, Some(&addrs), &doc, "T2"), None);
        // A new address is written; no addresses known leaves the written ones alone.
        let other = [json!({"type": "Hostname", "value": "lb.example"})];
        assert!(gateway_status(&gw, Some(&other), &doc, "T3").is_some());
        assert_eq!(gateway_status(&gw, None, &doc, "T3"), None);
    }
}
