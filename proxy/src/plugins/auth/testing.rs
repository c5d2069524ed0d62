//! What the tests of the authentication plugins share: a request context holding consumers, a
//! request head, running a plugin's `access`, and the checks of behaviours every
//! authentication plugin has (Kong's `anonymous` fallback, `run_on_preflight`).

use std::sync::Arc;

use http::Method;
use serde_json::{json, Value};

use crate::config::{Consumer, Credential};
use crate::consumers::Directory;
use crate::pipeline::RequestCtx;
use crate::plugins::{EarlyResponse, Flow, Plugin, RequestHead, Step};

/// The consumer `ns/<name>` of namespace `ns`, with username `<name>` and no groups.
pub fn consumer(name: &str, custom_id: Option<&str>, credentials: Vec<Credential>) -> Consumer {
    Consumer {
        id: format!("ns/{name}"),
        username: Some(name.into()),
        custom_id: custom_id.map(Into::into),
        namespace: Some("ns".into()),
        groups: vec![],
        credentials,
    }
}

/// `ns/guest`, without credentials: the `anonymous` consumer of the tests.
pub fn guest() -> Consumer {
    consumer("guest", None, vec![])
}

/// A request's context whose table holds `consumers`, its plugin seeing those of `scope`'s
/// namespace (`None`: all of them).
pub fn ctx(consumers: Vec<Consumer>, scope: Option<&str>) -> RequestCtx {
    let mut c = RequestCtx::new([127, 0, 0, 1].into(), 1, Arc::from(vec![]));
    c.directory = Some(Arc::new(Directory::new(&consumers, true)));
    c.consumer_scope = scope.map(Arc::from);
    c
}

/// A GET of `uri` with `headers`.
pub fn head(uri: &str, headers: &[(&str, &str)]) -> RequestHead {
    let mut b = http::Request::builder().uri(uri);
    for (n, v) in headers {
        b = b.header(*n, *v);
    }
    b.body(()).unwrap().into_parts().0
}

/// Runs `p`'s `access`: `None` when the request goes on, the answer when it is refused. A
/// plugin error, or waiting (no authentication plugin waits), fails the test.
pub fn run(p: &dyn Plugin, c: &mut RequestCtx, r: &mut RequestHead) -> Option<EarlyResponse> {
    match p.access(c, r) {
        Step::Ready(Ok(Flow::Continue)) => None,
        Step::Ready(Ok(Flow::Respond(e))) => Some(e),
        Step::Ready(Err(e)) => panic!("plugin error: {e}"),
        Step::Wait(_) => panic!("authentication plugins never wait"),
    }
}

/// An answer's JSON body.
pub fn body(e: &EarlyResponse) -> Value {
    serde_json::from_slice(&e.body).unwrap()
}

/// The `message` of an answer's JSON body.
pub fn message(e: &EarlyResponse) -> String {
    body(e)["message"].as_str().unwrap().to_string()
}

/// Kong's `anonymous` fallback, for the plugin `build` makes of a configuration, in contexts
/// made by `ctx` (which must hold `ns/guest`, [`guest`]): each request with the headers of
/// `refused` goes on as the anonymous consumer, named as such in the headers; a request already
/// authenticated by another plugin is left alone; an anonymous consumer that does not exist
/// fails closed. Returns the heads of the `refused` requests as they go upstream.
pub fn assert_anonymous_fallback(
    build: impl Fn(Value) -> Arc<dyn Plugin>,
    refused: &[Vec<(&str, &str)>],
    ctx: impl Fn() -> RequestCtx,
) -> Vec<RequestHead> {
    let p = build(json!({"anonymous": "guest"}));
    let mut heads = Vec::new();
    for h in refused {
        let (mut c, mut r) = (ctx(), head("/x", h));
        assert!(run(&*p, &mut c, &mut r).is_none(), "{h:?}");
        assert_eq!(c.consumer.as_deref(), Some("ns/guest"));
        assert_eq!(c.credential, None);
        assert_eq!(r.headers["x-anonymous-consumer"], "true");
        assert!(r.headers.get("x-credential-identifier").is_none());
        heads.push(r);
    }
    // Already authenticated by another plugin: nothing to do.
    let (mut c, mut r) = (ctx(), head("/x", &[]));
    c.credential = Some("other".into());
    assert!(run(&*p, &mut c, &mut r).is_none());
    assert!(c.consumer.is_none());
    // An anonymous consumer that does not exist fails closed.
    let p = build(json!({"anonymous": "nobody"}));
    let (mut c, mut r) = (ctx(), head("/x", &[]));
    assert!(matches!(p.access(&mut c, &mut r), Step::Ready(Err(_))));
    heads
}

/// `run_on_preflight: false` lets a CORS preflight (`OPTIONS`) through without a credential;
/// by default it is refused like any other request.
pub fn assert_preflight_switch(
    build: impl Fn(Value) -> Arc<dyn Plugin>,
    ctx: impl Fn() -> RequestCtx,
) {
    let preflight = || {
        let mut r = head("/x", &[]);
        r.method = Method::OPTIONS;
        r
    };
    let p = build(json!({"run_on_preflight": false}));
    assert!(run(&*p, &mut ctx(), &mut preflight()).is_none());
    let p = build(json!({}));
    assert_eq!(run(&*p, &mut ctx(), &mut preflight()).unwrap().status, 401);
}
