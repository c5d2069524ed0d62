//! Leader election on a coordination.k8s.io Lease, so only one replica writes Ingress status.
//!
//! The holder renews every [`RENEW`]; another replica takes over once the lease has not been
//! renewed for [`LEASE`]. Writes carry the resourceVersion read, so two replicas racing for
//! an expired lease cannot both win.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};

const LEASE: Duration = Duration::from_secs(15);
const RENEW: Duration = Duration::from_secs(2);

/// Whether this replica leads, updated by [`run`].
#[derive(Debug, Default)]
pub struct Leadership(AtomicBool);

impl Leadership {
    /// Whether this replica currently holds the lease.
    pub fn is_leader(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

fn lease_spec(identity: &str, acquired: Option<MicroTime>, transitions: i32) -> LeaseSpec {
    let now = MicroTime(Timestamp::now());
    LeaseSpec {
        holder_identity: Some(identity.to_string()),
        lease_duration_seconds: Some(LEASE.as_secs() as i32),
        acquire_time: Some(acquired.unwrap_or_else(|| now.clone())),
        renew_time: Some(now),
        lease_transitions: Some(transitions),
        ..Default::default()
    }
}

/// One round: create, renew or take over the lease; returns whether we hold it.
async fn round(api: &Api<Lease>, name: &str, identity: &str) -> Result<bool, kube::Error> {
    let Some(mut lease) = api.get_opt(name).await? else {
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            spec: Some(lease_spec(identity, None, 0)),
        };
        api.create(&PostParams::default(), &lease).await?;
        return Ok(true);
    };
    let spec = lease.spec.clone().unwrap_or_default();
    let holder = spec.holder_identity.as_deref().unwrap_or("");
    let duration = SignedDuration::from_secs(
        spec.lease_duration_seconds
            .unwrap_or(LEASE.as_secs() as i32) as i64,
    );
    let expired = spec
        .renew_time
        .as_ref()
        .is_none_or(|t| t.0 + duration < Timestamp::now());
    let transitions = spec.lease_transitions.unwrap_or(0);
    let new_spec = if holder == identity {
        lease_spec(identity, spec.acquire_time.clone(), transitions)
    } else if expired || holder.is_empty() {
        lease_spec(identity, None, transitions + 1)
    } else {
        return Ok(false);
    };
    lease.spec = Some(new_spec);
    // replace() sends our resourceVersion: a concurrent writer makes this fail with 409.
    api.replace(name, &PostParams::default(), &lease).await?;
    Ok(true)
}

/// Gives the lease up if this replica holds it, so that a standby takes over at its next round
/// instead of waiting for the lease to expire (client-go's `ReleaseOnCancel`). Returns whether
/// there was anything to release.
///
/// A renewal already in flight when the campaign stopped can still land first and make our
/// write fail with 409 Conflict: then the lease is read again and the release retried.
pub async fn release(
    client: Client,
    namespace: &str,
    name: &str,
    identity: &str,
) -> Result<bool, kube::Error> {
    let api: Api<Lease> = Api::namespaced(client, namespace);
    let mut attempt = 0;
    loop {
        attempt += 1;
        let Some(mut lease) = api.get_opt(name).await? else {
            return Ok(false);
        };
        let spec = lease.spec.get_or_insert_with(Default::default);
        if spec.holder_identity.as_deref() != Some(identity) {
            return Ok(false);
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(MicroTime(Timestamp::now()));
        match api.replace(name, &PostParams::default(), &lease).await {
            Ok(_) => return Ok(true),
            Err(kube::Error::Api(e)) if e.code == 409 && attempt < 3 => continue,
            Err(e) => return Err(e),
        }
    }
}

/// Campaigns for (and keeps) the lease `namespace/name` forever.
pub async fn run(
    client: Client,
    namespace: String,
    name: String,
    identity: String,
    leadership: Arc<Leadership>,
) {
    let api: Api<Lease> = Api::namespaced(client, &namespace);
    loop {
        let now_leader = match round(&api, &name, &identity).await {
            Ok(v) => v,
            Err(e) => {
                tracing::debug!(error = %e, "lease round failed");
                false
            }
        };
        if now_leader != leadership.is_leader() {
            tracing::info!(leader = now_leader, lease = %format!("{namespace}/{name}"), %identity, "leadership changed");
        }
        leadership.0.store(now_leader, Ordering::Release);
        tokio::time::sleep(RENEW).await;
    }
}
