//! `correlation-id`: make sure every request carries an id header, generated when the client
//! sent none (Kong's schema: `header_name`, `generator` = `uuid` | `uuid#counter`,
//! `echo_downstream`).

use std::cell::{Cell, RefCell};
use std::sync::Arc;

use http::{HeaderName, HeaderValue};
use serde::Deserialize;

use super::{parse_config, Flow, Handled, Plugin, PluginError, RequestHead, ResponseHead, Simple};
use crate::pipeline::RequestCtx;

pub(super) const FACTORY: Simple = Simple {
    name: "correlation-id",
    priority: 100_001,
    build,
};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Conf {
    #[serde(default = "default_header")]
    header_name: String,
    #[serde(default)]
    generator: Generator,
    #[serde(default)]
    echo_downstream: bool,
}

fn default_header() -> String {
    "Weir-Request-ID".into()
}

#[derive(Deserialize, Default, Clone, Copy)]
enum Generator {
    #[serde(rename = "uuid")]
    Uuid,
    #[default]
    #[serde(rename = "uuid#counter")]
    UuidCounter,
}

struct CorrelationId {
    header: HeaderName,
    generator: Generator,
    echo: bool,
}

fn build(config: &serde_json::Value) -> Result<Arc<dyn Plugin>, String> {
    let conf: Conf = parse_config(config)?;
    let header = HeaderName::from_bytes(conf.header_name.as_bytes()).map_err(|_| {
        format!(
            "header_name: {:?} is not a valid header name",
            conf.header_name
        )
    })?;
    Ok(Arc::new(CorrelationId {
        header,
        generator: conf.generator,
        echo: conf.echo_downstream,
    }))
}

thread_local! {
    /// `uuid#counter`: one random uuid per worker thread, then a counter, as in Kong.
    static WORKER_UUID: RefCell<String> = RefCell::new(uuid::Uuid::new_v4().to_string());
    static COUNTER: Cell<u64> = const { Cell::new(0) };
}

fn generate(g: Generator) -> HeaderValue {
    let s = match g {
        Generator::Uuid => uuid::Uuid::new_v4().to_string(),
        Generator::UuidCounter => {
            let n = COUNTER.with(|c| {
                let n = c.get() + 1;
                c.set(n);
                n
            });
            WORKER_UUID.with(|u| format!("{}#{n}", u.borrow()))
        }
    };
    HeaderValue::from_str(&s).expect("uuids are valid header values")
}

impl Plugin for CorrelationId {
    fn access<'a>(&'a self, ctx: &'a mut RequestCtx, req: &'a mut RequestHead) -> Handled<'a> {
        let id = match req.headers.get(&self.header) {
            Some(v) if !v.is_empty() => v.clone(),
            _ => {
                let v = generate(self.generator);
                req.headers.insert(self.header.clone(), v.clone());
                v
            }
        };
        // Kept once, for the echo and the access log.
        ctx.correlation_id = Some(id);
        Flow::Continue.into()
    }

    fn header_filter(
        &self,
        ctx: &mut RequestCtx,
        resp: &mut ResponseHead,
    ) -> Result<(), PluginError> {
        if self.echo {
            if let Some(v) = &ctx.correlation_id {
                resp.headers.insert(self.header.clone(), v.clone());
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generators() {
        let a = generate(Generator::UuidCounter);
        let b = generate(Generator::UuidCounter);
        let (ua, na) = a.to_str().unwrap().split_once('#').unwrap();
        let (ub, nb) = b.to_str().unwrap().split_once('#').unwrap();
        assert_eq!(ua, ub);
        assert_eq!(nb.parse::<u64>().unwrap(), na.parse::<u64>().unwrap() + 1);
        let u = generate(Generator::Uuid);
        assert_eq!(u.len(), 36);
        assert!(build(&serde_json::json!({"generator": "tracker"})).is_err());
        assert!(build(&serde_json::json!({"header_name": "bad header"})).is_err());
    }
}
