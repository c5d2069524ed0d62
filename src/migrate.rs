//! `weir migrate`: what an ingress-nginx setup becomes in Weir, before the switch.
//!
//! Reads Ingresses (with the IngressClasses and Secrets the translation needs) from a folder
//! of manifests or from a cluster, and prints for each Ingress every ingress-nginx annotation
//! as applied, applied with a difference, unsupported or invalid. `--emit DIR` writes the
//! Weir-native objects (the Ingress with `weir.dev/*` annotations, generated Plugins, Upstream
//! and configuration Secret, extra redirect Ingresses); the exit code is 1 when something
//! would not carry over, so a pipeline can gate on it. `--to gateway-api` converts further, to
//! the Gateway API: a Gateway per namespace and HTTPRoutes, with Weir Plugins attached by
//! `ExtensionRef` (see `weir_controller::to_gateway_api`).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use clap::{Args, ValueEnum};
use weir_controller::nginx::{self, Converted, Report, Status};
use weir_controller::{Key, Store};

/// `weir migrate`'s arguments.
#[derive(Args)]
pub struct MigrateArgs {
    /// Folder of manifests (read recursively); without it, the cluster of `--kubeconfig`.
    dir: Option<PathBuf>,
    /// Read the Ingresses from the cluster this kubeconfig file names (its current context).
    #[arg(long, conflicts_with = "dir")]
    kubeconfig: Option<PathBuf>,
    /// Write the Weir-native objects, one file per Ingress, into this folder.
    #[arg(long)]
    emit: Option<PathBuf>,
    /// Report format.
    #[arg(long, value_enum, default_value = "text")]
    output: Output,
    /// The ingress-nginx annotation prefix (its `--annotations-prefix`).
    #[arg(long, default_value = nginx::DEFAULT_PREFIX)]
    annotations_prefix: String,
    /// Only Ingresses of these classes (repeatable or comma-separated): those naming one, and
    /// those naming none when one of them is the default IngressClass. Without it, every
    /// Ingress the conversion applies to.
    #[arg(long, value_delimiter = ',')]
    ingress_class: Vec<String>,
    /// What to convert to: Weir-native Ingresses, or the Gateway API (a Gateway per
    /// namespace, HTTPRoutes, and the Weir Plugins they attach by ExtensionRef).
    #[arg(long, value_enum, default_value = "weir")]
    to: Target,
}

/// Conversion targets.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Target {
    /// Ingresses with `weir.dev/*` annotations.
    Weir,
    /// Gateway API objects.
    GatewayApi,
}

/// Report formats.
#[derive(Clone, Copy, ValueEnum)]
enum Output {
    /// One line per annotation.
    Text,
    /// One JSON document.
    Json,
}

/// Runs the command; the exit code: 0 when everything carries over, 1 when something would
/// not, 2 when the Ingresses could not be read.
pub fn run(args: MigrateArgs) -> i32 {
    match migrate(&args) {
        Ok(true) => 0,
        Ok(false) => 1,
        Err(e) => {
            eprintln!("weir migrate: {e:#}");
            2
        }
    }
}

fn migrate(args: &MigrateArgs) -> anyhow::Result<bool> {
    let store = match (&args.dir, &args.kubeconfig) {
        (Some(dir), _) => read_dir(dir)?,
        (None, Some(kubeconfig)) => read_cluster(kubeconfig)?,
        (None, None) => anyhow::bail!("give a folder of manifests or --kubeconfig FILE"),
    };
    let opts = nginx::Options {
        prefix: args.annotations_prefix.trim_end_matches('/').to_string(),
    };
    let mut results: Vec<(Report, Converted)> = Vec::new();
    for (key, ing) in &store.ingresses {
        let wanted =
            args.ingress_class.is_empty() || nginx::of_class(ing, &store, &args.ingress_class);
        if wanted && nginx::applies(ing, &store, &opts) {
            let (converted, report) = nginx::convert_ingress(key, ing, &store, &opts);
            results.push((report, converted));
        }
    }
    if args.to == Target::GatewayApi {
        return gateway_api(args, &store, &results);
    }
    if let Some(dir) = &args.emit {
        emit(dir, &results)?;
    }
    let all_carry_over = results.iter().all(|(r, _)| r.carries_over());
    let text = match args.output {
        Output::Text => text_report(&results),
        Output::Json => {
            let doc = json_report(&results);
            serde_json::to_string_pretty(&doc)? + "\n"
        }
    };
    print!("{text}");
    Ok(all_carry_over)
}

/// `--to gateway-api`: the report of both steps, and with `--emit` a `gateway.yaml` (the
/// GatewayClass and a Gateway per namespace) and one file per Ingress (its HTTPRoutes and the
/// Weir objects they use).
fn gateway_api(
    args: &MigrateArgs,
    store: &Store,
    results: &[(Report, Converted)],
) -> anyhow::Result<bool> {
    use weir_controller::to_gateway_api as gw;
    let mut all = true;
    let mut tls: std::collections::BTreeMap<String, Vec<(String, String)>> = Default::default();
    let mut out = String::new();
    let mut docs: Vec<serde_json::Value> = Vec::new();
    for (report, converted) in results {
        let Some(native) = converted.ingresses.first() else {
            continue;
        };
        let mut g = gw::convert(&report.ingress, native, store);
        for extra in converted.ingresses.iter().skip(1) {
            g.outcomes.push(gw::Outcome {
                what: format!("Ingress {}", extra.metadata.name.as_deref().unwrap_or("")),
                carried: false,
                note: "a generated redirect Ingress; it stays an Ingress".into(),
            });
        }
        all &= report.carries_over() && g.carries_over();
        tls.entry(report.ingress.namespace.clone())
            .or_default()
            .extend(g.tls.iter().cloned());
        let _ = writeln!(out, "Ingress {}", report.ingress);
        for o in &report.outcomes {
            let note = if o.note.is_empty() {
                o.value.trim()
            } else {
                o.note.as_str()
            };
            let _ = writeln!(
                out,
                "  nginx {:<12} {}: {note}",
                o.status.as_str(),
                o.annotation
            );
        }
        for o in &g.outcomes {
            let status = if o.carried { "carried" } else { "not carried" };
            let _ = writeln!(out, "  gateway-api {status:<12} {}: {}", o.what, o.note);
        }
        for r in &g.routes {
            let _ = writeln!(
                out,
                "  gateway-api: HTTPRoute {}",
                r["metadata"]["name"].as_str().unwrap_or("")
            );
        }
        out.push('\n');
        docs.push(serde_json::json!({
            "ingress": report.ingress.to_string(),
            "carries_over": report.carries_over() && g.carries_over(),
            "outcomes": g.outcomes,
            "routes": g.routes.iter().map(|r| r["metadata"]["name"].clone()).collect::<Vec<_>>(),
        }));
        if let Some(dir) = &args.emit {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
            let Key { namespace, name } = &report.ingress;
            let mut text = format!(
                "# Gateway API objects for Ingress {}, written by weir migrate --to gateway-api.\n",
                report.ingress
            );
            let weir_objects = converted
                .manifests()
                .into_iter()
                .filter(|m| m["kind"] != "Ingress");
            for m in g.routes.iter().cloned().chain(weir_objects) {
                text.push_str("---\n");
                text.push_str(&serde_yaml::to_string(&m)?);
            }
            let path = dir.join(format!("{namespace}-{name}.yaml"));
            std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
        }
    }
    if let Some(dir) = &args.emit {
        let mut text = String::from(
            "# The GatewayClass and Gateways, written by weir migrate --to gateway-api.\n",
        );
        let class = gw::gateway_class();
        let gateways = tls.iter().map(|(ns, t)| gw::gateway(ns, t));
        for m in std::iter::once(class).chain(gateways) {
            text.push_str("---\n");
            text.push_str(&serde_yaml::to_string(&m)?);
        }
        let path = dir.join("gateway.yaml");
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    match args.output {
        Output::Text => {
            let carry = docs.iter().filter(|d| d["carries_over"] == true).count();
            let _ = writeln!(
                out,
                "{} Ingresses: {carry} carry over to the Gateway API, {} do not",
                docs.len(),
                docs.len() - carry
            );
            print!("{out}");
        }
        Output::Json => {
            let doc = serde_json::json!({"ingresses": docs, "carries_over": all});
            print!("{}", serde_json::to_string_pretty(&doc)? + "\n");
        }
    }
    Ok(all)
}

fn read_dir(dir: &Path) -> anyhow::Result<Store> {
    anyhow::ensure!(dir.is_dir(), "{} is not a folder", dir.display());
    let mut m = weir_controller::manifests::ManifestDir::new(dir);
    let scan = m.scan();
    if let Some((path, e)) = scan.errors.first() {
        anyhow::bail!("{}: {e}", path.display());
    }
    Ok(m.store())
}

fn read_cluster(kubeconfig: &Path) -> anyhow::Result<Store> {
    use k8s_openapi::api::core::v1::Secret;
    use k8s_openapi::api::networking::v1::{Ingress, IngressClass};
    use kube::api::{Api, ListParams};
    use weir_controller::store::Object;

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let file = kube::config::Kubeconfig::read_from(kubeconfig)
            .with_context(|| format!("reading {}", kubeconfig.display()))?;
        let config =
            kube::Config::from_custom_kubeconfig(file, &kube::config::KubeConfigOptions::default())
                .await
                .context("using the kubeconfig")?;
        let client = kube::Client::try_from(config).context("connecting to the Kubernetes API")?;
        let mut store = Store::default();
        let lp = ListParams::default();
        for i in Api::<Ingress>::all(client.clone())
            .list(&lp)
            .await
            .context("listing Ingresses")?
        {
            store.insert(Object::Ingress(i));
        }
        for c in Api::<IngressClass>::all(client.clone())
            .list(&lp)
            .await
            .context("listing IngressClasses")?
        {
            store.insert(Object::IngressClass(c));
        }
        // The Secrets auth-secret and proxy-ssl-secret name, read as Weir would read them in
        // the cluster: labelled weir.dev/credential, or of type kubernetes.io/tls.
        let labelled = ListParams::default().labels(weir_crds::CREDENTIAL_LABEL);
        let tls = ListParams::default().fields("type=kubernetes.io/tls");
        for lp in [labelled, tls] {
            for s in Api::<Secret>::all(client.clone())
                .list(&lp)
                .await
                .context("listing Secrets")?
            {
                store.insert(Object::Secret(s));
            }
        }
        Ok(store)
    })
}

fn emit(dir: &Path, results: &[(Report, Converted)]) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    for (report, converted) in results {
        let Key { namespace, name } = &report.ingress;
        let path = dir.join(format!("{namespace}-{name}.yaml"));
        let mut text = format!(
            "# Weir-native objects for Ingress {}, written by weir migrate.\n",
            report.ingress
        );
        for m in converted.manifests() {
            text.push_str("---\n");
            text.push_str(&serde_yaml::to_string(&m)?);
        }
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// What the Ingress becomes, in short: its `weir.dev/*` annotations and generated objects.
fn native_summary(c: &Converted) -> (Vec<(String, String)>, Vec<String>) {
    let annotations = c
        .ingresses
        .first()
        .and_then(|i| i.metadata.annotations.clone())
        .unwrap_or_default()
        .into_iter()
        .filter(|(k, _)| k.starts_with(weir_crds::annotations::PREFIX))
        .collect();
    let mut objects: Vec<String> = Vec::new();
    for p in &c.plugins {
        objects.push(format!(
            "Plugin {} ({})",
            p.metadata.name.as_deref().unwrap_or(""),
            p.spec.plugin
        ));
    }
    for u in &c.upstreams {
        objects.push(format!(
            "Upstream {}",
            u.metadata.name.as_deref().unwrap_or("")
        ));
    }
    for s in &c.secrets {
        objects.push(format!(
            "Secret {}",
            s.metadata.name.as_deref().unwrap_or("")
        ));
    }
    for i in c.ingresses.iter().skip(1) {
        objects.push(format!(
            "Ingress {}",
            i.metadata.name.as_deref().unwrap_or("")
        ));
    }
    (annotations, objects)
}

fn text_report(results: &[(Report, Converted)]) -> String {
    let mut out = String::new();
    let mut counts = [0usize; 4];
    for (r, c) in results {
        let _ = writeln!(out, "Ingress {}", r.ingress);
        for o in &r.outcomes {
            counts[o.status as usize] += 1;
            let _ = write!(
                out,
                "  {:<12} {}: {}",
                o.status.as_str(),
                o.annotation,
                o.value.trim()
            );
            if !o.note.is_empty() {
                let _ = write!(out, " — {}", o.note);
            }
            out.push('\n');
        }
        if r.outcomes.is_empty() {
            out.push_str("  (no ingress-nginx annotations; served as ingress-nginx would)\n");
        }
        if let Some(why) = &r.disabled {
            let _ = writeln!(out, "  => its paths answer 503: {why}");
        }
        let (annotations, objects) = native_summary(c);
        for (k, v) in annotations {
            let _ = writeln!(out, "  weir: {k}: {v}");
        }
        for o in objects {
            let _ = writeln!(out, "  weir: {o}");
        }
        out.push('\n');
    }
    let carry = results.iter().filter(|(r, _)| r.carries_over()).count();
    let _ = writeln!(
        out,
        "{} Ingresses: {} carry over, {} do not; annotations: {} applied, {} differ, {} unsupported, {} invalid",
        results.len(),
        carry,
        results.len() - carry,
        counts[Status::Applied as usize],
        counts[Status::Differs as usize],
        counts[Status::Unsupported as usize],
        counts[Status::Invalid as usize],
    );
    out
}

fn json_report(results: &[(Report, Converted)]) -> serde_json::Value {
    let ingresses: Vec<serde_json::Value> = results
        .iter()
        .map(|(r, c)| {
            let mut v = serde_json::to_value(r).unwrap_or_default();
            let (annotations, objects) = native_summary(c);
            v["carries_over"] = r.carries_over().into();
            v["weir"] = serde_json::json!({
                "annotations": annotations.into_iter().collect::<std::collections::BTreeMap<_, _>>(),
                "objects": objects,
            });
            v
        })
        .collect();
    let carry = results.iter().all(|(r, _)| r.carries_over());
    serde_json::json!({"ingresses": ingresses, "carries_over": carry})
}
