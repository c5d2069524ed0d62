//! ingress-nginx compatibility: an Ingress's `nginx.ingress.kubernetes.io/*` annotations turned
//! into Weir's own objects, and a report of what carried over.
//!
//! The conversion is a pure function from an Ingress (and the store, for Secrets and
//! IngressClasses) to Weir-native objects: the same Ingress with `weir.dev/*` annotations and
//! rewritten paths, generated `Plugin`s, an `Upstream`, a configuration `Secret`, and extra
//! Ingresses for redirects that need their own routes. The translator serves what the
//! conversion gives, and `weir migrate --emit` writes the very same objects, so a migrated
//! manifest set translates to the same routing table as the annotated originals.
//!
//! Every ingress-nginx annotation gets an [`Outcome`]: applied, applied with a difference
//! (named), not supported (why), or invalid. Nothing is ignored silently.

mod convert;
mod table;

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::networking::v1::Ingress;
use serde::Serialize;
use weir_crds::{Plugin, Upstream};

use crate::store::{Key, Kind, Store};

pub use convert::convert_ingress;

/// The `spec.controller` of ingress-nginx's IngressClasses.
pub const CONTROLLER: &str = "k8s.io/ingress-nginx";

/// ingress-nginx's default `--annotations-prefix`.
pub const DEFAULT_PREFIX: &str = "nginx.ingress.kubernetes.io";

/// Label on every object the conversion generates, naming where it came from.
pub const GENERATED_FROM: &str = "weir.dev/generated-from";

/// What the conversion needs to know.
#[derive(Debug, Clone)]
pub struct Options {
    /// The annotation prefix (`--annotations-prefix`), without the `/`; empty turns the
    /// conversion off.
    pub prefix: String,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            prefix: DEFAULT_PREFIX.into(),
        }
    }
}

/// What became of one annotation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Status {
    /// Applied with ingress-nginx's semantics.
    Applied,
    /// Applied, with a difference the note names.
    Differs,
    /// Not applied: Weir does not support it (the note says why).
    Unsupported,
    /// Not applied: its value is malformed (the note says how).
    Invalid,
}

impl Status {
    /// Whether the annotation's effect carries over to Weir.
    pub fn carries_over(self) -> bool {
        matches!(self, Status::Applied | Status::Differs)
    }

    /// The word used in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Applied => "applied",
            Status::Differs => "differs",
            Status::Unsupported => "unsupported",
            Status::Invalid => "invalid",
        }
    }
}

/// One annotation's outcome.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Outcome {
    /// The full annotation key.
    pub annotation: String,
    /// Its value.
    pub value: String,
    /// What became of it.
    pub status: Status,
    /// The difference, or why it was not applied; empty when applied as written.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub note: String,
}

/// Everything the conversion says about one Ingress.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Report {
    /// The Ingress.
    #[serde(serialize_with = "key_text")]
    pub ingress: Key,
    /// One per ingress-nginx annotation, in key order.
    pub outcomes: Vec<Outcome>,
    /// Why the Ingress's paths answer 503, when an annotation that was not applied makes
    /// them (`weir.dev/unsupported-annotations: disable`, or one that guards access).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disabled: Option<String>,
}

fn key_text<S: serde::Serializer>(k: &Key, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(k)
}

impl Report {
    /// Whether everything the Ingress asks for carries over.
    pub fn carries_over(&self) -> bool {
        self.disabled.is_none() && self.outcomes.iter().all(|o| o.status.carries_over())
    }
}

/// The Weir-native objects an Ingress becomes.
#[derive(Debug, Clone, Default)]
pub struct Converted {
    /// The Ingress itself first, then any extra Ingresses (redirects).
    pub ingresses: Vec<Ingress>,
    /// Generated Plugins.
    pub plugins: Vec<Plugin>,
    /// The generated Upstream, if the annotations set balancing, timeouts, retries or TLS.
    pub upstreams: Vec<Upstream>,
    /// Generated Secrets (plugin configurations holding credentials).
    pub secrets: Vec<Secret>,
}

impl Converted {
    /// Every object as a manifest (`apiVersion` and `kind` set), Ingresses first.
    pub fn manifests(&self) -> Vec<serde_json::Value> {
        fn with_kind(v: serde_json::Value, api: &str, kind: &str) -> serde_json::Value {
            let mut v = v;
            if let Some(m) = v.as_object_mut() {
                m.insert("apiVersion".into(), api.into());
                m.insert("kind".into(), kind.into());
                m.remove("status");
            }
            // What the API server set on the original is not part of the manifest.
            if let Some(meta) = v.get_mut("metadata").and_then(|m| m.as_object_mut()) {
                for k in [
                    "uid",
                    "resourceVersion",
                    "generation",
                    "creationTimestamp",
                    "managedFields",
                    "selfLink",
                ] {
                    meta.remove(k);
                }
                if let Some(a) = meta.get_mut("annotations").and_then(|a| a.as_object_mut()) {
                    a.remove("kubectl.kubernetes.io/last-applied-configuration");
                }
            }
            v
        }
        fn json<T: Serialize>(v: &T) -> serde_json::Value {
            serde_json::to_value(v).unwrap_or_default()
        }
        let mut out = Vec::new();
        for i in &self.ingresses {
            out.push(with_kind(json(i), "networking.k8s.io/v1", "Ingress"));
        }
        for p in &self.plugins {
            out.push(with_kind(json(p), "weir.dev/v1alpha1", "Plugin"));
        }
        for u in &self.upstreams {
            out.push(with_kind(json(u), "weir.dev/v1alpha1", "Upstream"));
        }
        for s in &self.secrets {
            out.push(with_kind(json(s), "v1", "Secret"));
        }
        out
    }
}

/// The conversion of a whole store.
#[derive(Debug, Default)]
pub struct Conversion {
    /// The store with converted Ingresses and the generated objects; `None` when no Ingress
    /// needed converting (the original store serves as is).
    pub store: Option<Store>,
    /// One per converted Ingress, in key order.
    pub reports: Vec<Report>,
    /// Generated objects (and extra Ingresses) → the Ingress they come from.
    pub generated: BTreeMap<(Kind, Key), Key>,
}

/// Whether an Ingress is one the conversion applies to: it carries an annotation under the
/// prefix, or its IngressClass is ingress-nginx's.
pub fn applies(ing: &Ingress, store: &Store, opts: &Options) -> bool {
    if opts.prefix.is_empty() {
        return false;
    }
    let prefix = format!("{}/", opts.prefix);
    let annotated = ing
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|m| m.keys().any(|k| k.starts_with(&prefix)));
    annotated || nginx_class(ing, store)
}

/// Whether the Ingress's class is an IngressClass of ingress-nginx.
pub fn nginx_class(ing: &Ingress, store: &Store) -> bool {
    class_name(ing)
        .and_then(|c| store.ingress_classes.get(c))
        .and_then(|ic| ic.spec.as_ref())
        .and_then(|s| s.controller.as_deref())
        == Some(CONTROLLER)
}

/// The class an Ingress names: the legacy `kubernetes.io/ingress.class` annotation, else
/// `spec.ingressClassName`.
pub fn class_name(ing: &Ingress) -> Option<&str> {
    ing.metadata
        .annotations
        .as_ref()
        .and_then(|m| m.get(weir_crds::annotations::INGRESS_CLASS))
        .map(String::as_str)
        .or_else(|| {
            ing.spec
                .as_ref()
                .and_then(|s| s.ingress_class_name.as_deref())
        })
}

/// Whether the Ingress is of one of `classes`: it names one, or it names none and one of them
/// is the cluster's default IngressClass.
pub fn of_class(ing: &Ingress, store: &Store, classes: &[String]) -> bool {
    match class_name(ing) {
        Some(c) => classes.iter().any(|x| x == c),
        None => classes.iter().any(|c| {
            store.ingress_classes.get(c).is_some_and(|ic| {
                ic.metadata
                    .annotations
                    .as_ref()
                    .and_then(|m| m.get(weir_crds::annotations::DEFAULT_CLASS))
                    .is_some_and(|v| v == "true")
            })
        }),
    }
}

/// Converts every Ingress the conversion applies to.
pub fn convert(store: &Store, opts: &Options) -> Conversion {
    let mut out = Conversion::default();
    let mut converted = Vec::new();
    for (key, ing) in &store.ingresses {
        if applies(ing, store, opts) {
            let (c, report) = convert_ingress(key, ing, store, opts);
            out.reports.push(report);
            converted.push((key.clone(), c));
        }
    }
    if converted.is_empty() {
        return out;
    }
    let mut s = store.clone();
    for (source, c) in converted {
        for (i, ing) in c.ingresses.into_iter().enumerate() {
            let k = Key::of(&ing);
            if i > 0 {
                out.generated
                    .insert((Kind::Ingress, k.clone()), source.clone());
            }
            s.ingresses.insert(k, ing);
        }
        for p in c.plugins {
            let k = Key::of(&p);
            out.generated
                .insert((Kind::Plugin, k.clone()), source.clone());
            s.plugins.insert(k, p);
        }
        for u in c.upstreams {
            let k = Key::of(&u);
            out.generated
                .insert((Kind::Upstream, k.clone()), source.clone());
            s.upstreams.insert(k, u);
        }
        for x in c.secrets {
            let k = Key::of(&x);
            out.generated
                .insert((Kind::Secret, k.clone()), source.clone());
            s.secrets.insert(k, x);
        }
    }
    out.store = Some(s);
    out
}
