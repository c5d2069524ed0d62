//! Writing back to the cluster (leader only): a Warning Event per problem, `Accepted` and
//! `Programmed` conditions on Weir's resources, Ingress `status.loadBalancer`, and the Gateway
//! API's status (`gateway`). Every write
//! is skipped when the object already says the same, so watching our own writes settles.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::networking::v1::{Ingress, IngressLoadBalancerIngress};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use kube::runtime::events::{Event as KubeEvent, EventType, Recorder};
use kube::{Api, Client, Resource};
use weir_crds::{ClusterPlugin, Consumer, Plugin, ResourceStatus, Upstream};

use crate::problem::ObjectRef;
use crate::store::{Key, Kind, Store};
use crate::translate::Translation;

mod gateway;

/// Where Ingress status addresses come from.
#[derive(Debug, Clone, Default)]
pub enum Publish {
    /// Nothing is written.
    #[default]
    Nothing,
    /// Fixed IPs or host names (`--publish-status-address`).
    Addresses(Vec<String>),
    /// The load-balancer status of a Service (`--publish-service`).
    Service(Key),
}

/// Writes events and status.
pub struct Reporter {
    client: Client,
    recorder: Recorder,
    published: BTreeSet<String>,
    publish: Publish,
}

fn api_version_kind(kind: Kind) -> (&'static str, &'static str) {
    match kind {
        Kind::Ingress => ("networking.k8s.io/v1", "Ingress"),
        Kind::IngressClass => ("networking.k8s.io/v1", "IngressClass"),
        Kind::Service => ("v1", "Service"),
        Kind::EndpointSlice => ("discovery.k8s.io/v1", "EndpointSlice"),
        Kind::Secret => ("v1", "Secret"),
        Kind::Plugin => ("weir.dev/v1alpha1", "Plugin"),
        Kind::ClusterPlugin => ("weir.dev/v1alpha1", "ClusterPlugin"),
        Kind::Upstream => ("weir.dev/v1alpha1", "Upstream"),
        Kind::Consumer => ("weir.dev/v1alpha1", "Consumer"),
        Kind::Namespace => ("v1", "Namespace"),
        Kind::GatewayClass => ("gateway.networking.k8s.io/v1", "GatewayClass"),
        Kind::Gateway => ("gateway.networking.k8s.io/v1", "Gateway"),
        Kind::HTTPRoute => ("gateway.networking.k8s.io/v1", "HTTPRoute"),
        Kind::GRPCRoute => ("gateway.networking.k8s.io/v1", "GRPCRoute"),
        Kind::TLSRoute => ("gateway.networking.k8s.io/v1", "TLSRoute"),
        Kind::BackendTLSPolicy => ("gateway.networking.k8s.io/v1", "BackendTLSPolicy"),
        Kind::ConfigMap => ("v1", "ConfigMap"),
        Kind::ReferenceGrant => ("gateway.networking.k8s.io/v1", "ReferenceGrant"),
    }
}

/// The uid of an object, when the store has it.
fn uid(store: &Store, o: &ObjectRef) -> Option<String> {
    let key = Key::new(o.namespace.clone().unwrap_or_default(), o.name.clone());
    let meta = match o.kind {
        Kind::Ingress => store.ingresses.get(&key).map(|x| &x.metadata),
        Kind::Service => store.services.get(&key).map(|x| &x.metadata),
        Kind::Secret => store.secrets.get(&key).map(|x| &x.metadata),
        Kind::Plugin => store.plugins.get(&key).map(|x| x.meta()),
        Kind::ClusterPlugin => store.cluster_plugins.get(&o.name).map(|x| x.meta()),
        Kind::Upstream => store.upstreams.get(&key).map(|x| x.meta()),
        Kind::Consumer => store.consumers.get(&key).map(|x| x.meta()),
        Kind::IngressClass => store.ingress_classes.get(&o.name).map(|x| &x.metadata),
        Kind::EndpointSlice => store.endpoint_slices.get(&key).map(|x| &x.metadata),
        Kind::Namespace => store.namespaces.get(&o.name).map(|x| &x.metadata),
        Kind::GatewayClass => store.gateway_classes.get(&o.name).map(|x| x.meta()),
        Kind::Gateway => store.gateways.get(&key).map(|x| x.meta()),
        Kind::HTTPRoute => store.http_routes.get(&key).map(|x| x.meta()),
        Kind::GRPCRoute => store.grpc_routes.get(&key).map(|x| x.meta()),
        Kind::TLSRoute => store.tls_routes.get(&key).map(|x| x.meta()),
        Kind::BackendTLSPolicy => store.backend_tls_policies.get(&key).map(|x| x.meta()),
        Kind::ConfigMap => store.config_maps.get(&key).map(|x| &x.metadata),
        Kind::ReferenceGrant => store.reference_grants.get(&key).map(|x| x.meta()),
    };
    meta.and_then(|m| m.uid.clone())
}

fn conditions(
    t: &Translation,
    o: &ObjectRef,
    generation: Option<i64>,
    old: &[Condition],
) -> Vec<Condition> {
    let problems: Vec<_> = t.problems_of(o).collect();
    let accepted = problems.is_empty();
    let (reason, message) = match problems.first() {
        None => ("Accepted".to_string(), String::new()),
        Some(p) => (
            p.reason.as_str().to_string(),
            problems
                .iter()
                .map(|p| format!("{}: {}", p.field, p.message))
                .collect::<Vec<_>>()
                .join("; "),
        ),
    };
    let status = if accepted { "True" } else { "False" };
    let make = |type_: &str, reason: &str, message: &str| {
        let previous = old.iter().find(|c| c.type_ == type_);
        let since = match previous {
            Some(c) if c.status == status => c.last_transition_time.clone(),
            _ => Time(Timestamp::now()),
        };
        Condition {
            type_: type_.into(),
            status: status.into(),
            reason: reason.into(),
            message: message.into(),
            observed_generation: generation,
            last_transition_time: since,
        }
    };
    vec![
        make("Accepted", &reason, &message),
        make(
            "Programmed",
            if accepted { "Programmed" } else { "Invalid" },
            if accepted {
                ""
            } else {
                "not in the routing table"
            },
        ),
    ]
}

fn same(a: &[Condition], b: &[Condition]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(x, y)| {
            (
                &x.type_,
                &x.status,
                &x.reason,
                &x.message,
                x.observed_generation,
            ) == (
                &y.type_,
                &y.status,
                &y.reason,
                &y.message,
                y.observed_generation,
            )
        })
}

impl Reporter {
    /// A reporter writing as `controller` (the Event reporting component).
    pub fn new(client: Client, controller: &str, instance: &str, publish: Publish) -> Reporter {
        let reporter = kube::runtime::events::Reporter {
            controller: controller.into(),
            instance: Some(instance.into()),
        };
        Reporter {
            recorder: Recorder::new(client.clone(), reporter),
            client,
            published: BTreeSet::new(),
            publish,
        }
    }

    /// Publishes what changed since the last call.
    pub async fn report(&mut self, t: &Translation, store: &Store) {
        self.events(t, store).await;
        self.conditions(t, store).await;
        self.ingress_status(t, store).await;
        self.gateway_api(t, store).await;
    }

    async fn events(&mut self, t: &Translation, store: &Store) {
        let now: BTreeSet<String> = t.problems.iter().map(|p| p.to_string()).collect();
        for p in &t.problems {
            if self.published.contains(&p.to_string()) {
                continue;
            }
            let (api_version, kind) = api_version_kind(p.object.kind);
            // A Gateway API kind read at another version than v1 is named at that one.
            let api_version = match store.served_versions.get(&p.object.kind) {
                Some(v) => format!("gateway.networking.k8s.io/{v}"),
                None => api_version.to_string(),
            };
            let reference = ObjectReference {
                api_version: Some(api_version),
                kind: Some(kind.into()),
                namespace: p.object.namespace.clone(),
                name: Some(p.object.name.clone()),
                uid: uid(store, &p.object),
                ..Default::default()
            };
            let event = KubeEvent {
                type_: EventType::Warning,
                reason: p.reason.as_str().into(),
                note: Some(
                    format!("{}: {}", p.field, p.message)
                        .chars()
                        .take(1000)
                        .collect(),
                ),
                action: "Translate".into(),
                secondary: None,
            };
            if let Err(e) = self.recorder.publish(&event, &reference).await {
                tracing::warn!(object = %p.object, error = %e, "publishing an event failed");
            }
        }
        self.published = now;
    }

    async fn conditions(&self, t: &Translation, store: &Store) {
        for o in &t.checked {
            let key = Key::new(o.namespace.clone().unwrap_or_default(), o.name.clone());
            let (generation, old) = match o.kind {
                Kind::Plugin => store
                    .plugins
                    .get(&key)
                    .map(|x| (x.metadata.generation, x.status.clone())),
                Kind::ClusterPlugin => store
                    .cluster_plugins
                    .get(&o.name)
                    .map(|x| (x.metadata.generation, x.status.clone())),
                Kind::Upstream => store
                    .upstreams
                    .get(&key)
                    .map(|x| (x.metadata.generation, x.status.clone())),
                Kind::Consumer => store
                    .consumers
                    .get(&key)
                    .map(|x| (x.metadata.generation, x.status.clone())),
                _ => None,
            }
            .unwrap_or_default();
            let old = old.unwrap_or_default().conditions;
            let new = conditions(t, o, generation, &old);
            if same(&old, &new) {
                continue;
            }
            let patch = serde_json::json!({ "status": ResourceStatus { conditions: new } });
            let pp = PatchParams::default();
            let ns = o.namespace.clone().unwrap_or_default();
            let result = match o.kind {
                Kind::Plugin => Api::<Plugin>::namespaced(self.client.clone(), &ns)
                    .patch_status(&o.name, &pp, &Patch::Merge(&patch))
                    .await
                    .map(drop),
                Kind::ClusterPlugin => Api::<ClusterPlugin>::all(self.client.clone())
                    .patch_status(&o.name, &pp, &Patch::Merge(&patch))
                    .await
                    .map(drop),
                Kind::Upstream => Api::<Upstream>::namespaced(self.client.clone(), &ns)
                    .patch_status(&o.name, &pp, &Patch::Merge(&patch))
                    .await
                    .map(drop),
                Kind::Consumer => Api::<Consumer>::namespaced(self.client.clone(), &ns)
                    .patch_status(&o.name, &pp, &Patch::Merge(&patch))
                    .await
                    .map(drop),
                _ => Ok(()),
            };
            if let Err(e) = result {
                tracing::warn!(object = %o, error = %e, "updating status conditions failed");
            }
        }
    }

    fn addresses(&self, store: &Store) -> Option<Vec<IngressLoadBalancerIngress>> {
        let one = |s: &str| {
            let is_ip = s.parse::<std::net::IpAddr>().is_ok();
            IngressLoadBalancerIngress {
                ip: is_ip.then(|| s.to_string()),
                hostname: (!is_ip).then(|| s.to_string()),
                ports: None,
            }
        };
        match &self.publish {
            Publish::Nothing => None,
            Publish::Addresses(list) => Some(list.iter().map(|s| one(s)).collect()),
            Publish::Service(key) => {
                let svc = store.services.get(key)?;
                let lb = svc
                    .status
                    .as_ref()?
                    .load_balancer
                    .as_ref()?
                    .ingress
                    .clone()
                    .unwrap_or_default();
                Some(
                    lb.into_iter()
                        .map(|i| IngressLoadBalancerIngress {
                            ip: i.ip,
                            hostname: i.hostname,
                            ports: None,
                        })
                        .collect(),
                )
            }
        }
    }

    async fn ingress_status(&self, t: &Translation, store: &Store) {
        let Some(desired) = self.addresses(store) else {
            return;
        };
        for key in &t.owned_ingresses {
            let Some(ing) = store.ingresses.get(key) else {
                continue;
            };
            let current = ing
                .status
                .as_ref()
                .and_then(|s| s.load_balancer.as_ref())
                .and_then(|l| l.ingress.clone())
                .unwrap_or_default();
            if current == desired {
                continue;
            }
            let patch = serde_json::json!({ "status": { "loadBalancer": { "ingress": desired } } });
            let api: Api<Ingress> = Api::namespaced(self.client.clone(), &key.namespace);
            match api
                .patch_status(&key.name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => tracing::info!(ingress = %key, "status updated"),
                Err(e) => {
                    tracing::warn!(ingress = %key, error = %e, "updating Ingress status failed")
                }
            }
        }
    }
}
