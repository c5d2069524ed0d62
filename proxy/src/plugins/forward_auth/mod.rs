//! `forward-auth`: external authorization, as Traefik's ForwardAuth and nginx's `auth_request`
//! (ingress-nginx's `auth-url`). Every request is first described to an auth service in a
//! body-less subrequest carrying the client's headers; a 2xx lets it through (with the
//! identity headers the service returned), a 401 or 403 refuses it (or a 401 redirects to a
//! sign-in page), and anything else, a timeout or a connection error is a 500. With
//! `set_cookies`, an allowing answer's `Set-Cookie` fields go on the client's answer.
//!
//! The subrequest goes through the upstream connection pool (per worker, keep-alive, HTTP/1.1,
//! TLS as for upstreams), so a request costs one round trip on a warm connection.

mod config;
mod rules;

use std::sync::Arc;

use http::{header, HeaderMap, HeaderValue, Method, Uri};
use http_body_util::BodyExt;
use tokio::time::Instant;

use super::{Flow, Handled, Plugin, PluginError, RequestHead, ResponseHead, Simple, Step};
use crate::pipeline::RequestCtx;
use crate::upstream::{self, Added, Alpn, PoolKey, TlsClient, TlsSettings, UpstreamBody};
use config::{SetCookies, Settings};
use rules::{Original, Verdict};

/// The kind: above every authentication plugin (`jwt` 1450, `key-auth` 1250, `basic-auth`
/// 1100), so the auth service sees the request as the client sent it and the consumer plugins
/// run on requests it let through; below `cors` (2000), whose preflights need no
/// authorization.
pub(super) const FACTORY: Simple = Simple {
    name: "forward-auth",
    priority: 1500,
    build,
};

/// Most bytes of an auth service's body read (and thrown away) so that its connection can
/// carry the next subrequest; a longer body closes the connection instead.
const MAX_DRAINED: usize = 64 * 1024;

/// Tries on pooled connections that the auth service may have closed as they were taken; the
/// last try is on a fresh connection.
const MAX_TRIES: usize = 3;

/// An instance: the checked configuration and the pool key of the auth service.
struct ForwardAuth {
    s: Settings,
    key: PoolKey,
}

fn build(config: &serde_json::Value) -> Result<Arc<dyn Plugin>, String> {
    let s = config::parse(config)?;
    let tls = if s.https {
        let client = TlsClient::new(TlsSettings {
            sni: None,
            verify: s.tls_verify,
            verify_depth: None,
            // Mozilla's roots, as for an upstream that names no CA.
            ca_pem: None,
            client_cert: None,
            alpn: Alpn::Http11,
            names: Vec::new(),
        })
        .map_err(|e| format!("url: {e}"))?;
        Some(Arc::new(client))
    } else {
        None
    };
    let key = PoolKey {
        target: s.target.as_str().into(),
        h2: false,
        tls,
    };
    Ok(Arc::new(ForwardAuth { s, key }))
}

/// The auth service's answer: its status and headers (the body is not used).
struct Answer {
    status: http::StatusCode,
    headers: HeaderMap,
}

impl ForwardAuth {
    /// Asks the auth service; the error is the reason, for the log (never the request's
    /// headers, which hold credentials).
    async fn ask(&self, method: Method, headers: HeaderMap) -> Result<Answer, String> {
        let deadline = Instant::now() + self.s.timeout;
        let (head, body) =
            match tokio::time::timeout_at(deadline, self.exchange(method, headers)).await {
                Ok(r) => r?,
                Err(_) => {
                    return Err(format!(
                        "no answer within {} ms",
                        self.s.timeout.as_millis()
                    ))
                }
            };
        // The body is read to its end (within the same deadline) so that the connection goes
        // back to the pool; the decision does not wait on it otherwise.
        let _ = tokio::time::timeout_at(deadline, drain(body)).await;
        Ok(Answer {
            status: head.status,
            headers: head.headers,
        })
    }

    /// Sends the subrequest on a pooled connection (or a new one) and reads the answer's head.
    async fn exchange(
        &self,
        method: Method,
        headers: HeaderMap,
    ) -> Result<(http::response::Parts, upstream::ResponseBody), String> {
        let mut tries = 0;
        loop {
            tries += 1;
            let conn = upstream::checkout(&self.key, self.s.timeout)
                .await
                .map_err(|e| e.to_string())?;
            let reused = conn.reused;
            let mut req = http::Request::new(UpstreamBody::empty());
            *req.method_mut() = method.clone();
            *req.uri_mut() = Uri::from(self.s.path_and_query.clone());
            *req.headers_mut() = headers.clone();
            match conn.send(req, &Added::default(), self.s.timeout).await {
                Ok(resp) => return Ok(resp.into_parts()),
                // A pooled connection the service closed as it was taken (its keep-alive
                // timeout crossing the request): the subrequest has no body and no effect,
                // so it goes again.
                Err(_) if reused && tries < MAX_TRIES => continue,
                Err(e) => return Err(e.error.to_string()),
            }
        }
    }
}

/// Reads a body to its end, up to [`MAX_DRAINED`] bytes (then drops it, closing its
/// connection).
async fn drain(mut body: upstream::ResponseBody) {
    let mut read = 0;
    while let Some(frame) = body.frame().await {
        match frame {
            Ok(f) => {
                read += f.data_ref().map_or(0, |d| d.len());
                if read > MAX_DRAINED {
                    return;
                }
            }
            Err(_) => return,
        }
    }
}

impl Plugin for ForwardAuth {
    /// Decides on what the client presents (for `acl`: who authentication found).
    fn access_rule(&self) -> Option<crate::pipeline::plugin::AccessRule> {
        Some(crate::pipeline::plugin::AccessRule::Credentials)
    }

    fn header_filter(
        &self,
        ctx: &mut RequestCtx,
        resp: &mut ResponseHead,
    ) -> Result<(), PluginError> {
        self.add_cookies(ctx, resp);
        Ok(())
    }

    fn access<'a>(&'a self, ctx: &'a mut RequestCtx, req: &'a mut RequestHead) -> Handled<'a> {
        let original = Original::of(req, ctx.client_ip, ctx.client_tls);
        let redirect = self.s.request_redirect.as_ref();
        let headers = rules::subrequest_headers(
            &req.headers,
            &self.s.host,
            &original,
            redirect,
            &self.s.headers,
        );
        let method = self
            .s
            .method
            .clone()
            .unwrap_or_else(|| original.method.clone());
        Step::wait(async move {
            let answer = self.ask(method, headers).await.map_err(|reason| {
                PluginError(format!("auth request to {}: {reason}", self.s.shown_url))
            })?;
            match rules::verdict(answer.status) {
                Verdict::Allow => {
                    rules::set_response_headers(
                        &mut req.headers,
                        &answer.headers,
                        &self.s.response_headers,
                    );
                    if self.s.set_cookies != SetCookies::Never {
                        let cookies: Vec<HeaderValue> = answer
                            .headers
                            .get_all(header::SET_COOKIE)
                            .iter()
                            .cloned()
                            .collect();
                        if !cookies.is_empty() {
                            ctx.slots.insert(AuthCookies(cookies));
                        }
                    }
                    Ok(Flow::Continue)
                }
                Verdict::Unexpected => Err(PluginError(format!(
                    "auth request to {}: unexpected status {} (only 2xx, 401 and 403 are \
                     understood)",
                    self.s.shown_url,
                    answer.status.as_u16()
                ))),
                refused => Ok(Flow::Respond(rules::refusal(
                    refused,
                    &answer.headers,
                    self.s.signin.as_ref(),
                    &original.url(),
                ))),
            }
        })
    }
}

impl ForwardAuth {
    /// `set_cookies`: the allowing answer's cookies on the client's answer.
    fn add_cookies(&self, ctx: &mut RequestCtx, resp: &mut ResponseHead) {
        let Some(AuthCookies(cookies)) = ctx.slots.get::<AuthCookies>() else {
            return;
        };
        if self.s.set_cookies == SetCookies::Always || rules::cookies_go_with(resp.status) {
            for c in cookies {
                resp.headers.append(header::SET_COOKIE, c.clone());
            }
        }
    }
}

/// The `Set-Cookie` fields of the auth service's allowing answer, kept for the client's.
#[derive(Clone)]
struct AuthCookies(Vec<HeaderValue>);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::EarlyResponse;
    use serde_json::json;
    use std::io::{Read, Write};
    use std::net::IpAddr;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Mutex;
    use std::time::Duration;

    fn plugin(config: serde_json::Value) -> Arc<dyn Plugin> {
        build(&config).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn the_factory_builds_plain_and_tls_instances() {
        assert_eq!(FACTORY.name, "forward-auth");
        assert_eq!(
            config::parse(&json!({"url": "http://a/"})).unwrap().timeout,
            Duration::from_secs(5)
        );
        plugin(json!({"url": "http://127.0.0.1:1/auth"}));
        plugin(json!({"url": "https://auth.example/auth"}));
        plugin(json!({"url": "https://auth.example/auth", "tls_verify": false}));
        let e = build(&json!({"url": "http://a/", "timeout": 0}))
            .err()
            .unwrap();
        assert!(e.starts_with("timeout:"), "{e}");
    }

    /// A one-thread HTTP/1.1 auth service on loopback: answers each request on a connection
    /// with `answer`, keeps connections open, and counts them.
    struct Service {
        port: u16,
        accepted: Arc<AtomicUsize>,
        heads: Arc<Mutex<Vec<String>>>,
    }

    fn service(answer: &'static str) -> Service {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let accepted = Arc::new(AtomicUsize::new(0));
        let heads = Arc::new(Mutex::new(Vec::new()));
        let (count, seen) = (accepted.clone(), heads.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut s) = stream else { return };
                count.fetch_add(1, Ordering::SeqCst);
                let seen = seen.clone();
                std::thread::spawn(move || {
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 4096];
                    loop {
                        while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                            let head: Vec<u8> = buf.drain(..end + 4).collect();
                            seen.lock()
                                .unwrap()
                                .push(String::from_utf8_lossy(&head).into_owned());
                            if s.write_all(answer.as_bytes()).is_err() {
                                return;
                            }
                        }
                        match s.read(&mut chunk) {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    }
                });
            }
        });
        Service {
            port,
            accepted,
            heads,
        }
    }

    fn request(uri: &str, headers: &[(&str, &str)]) -> RequestHead {
        let mut b = http::Request::builder().method("GET").uri(uri);
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        b.body(()).unwrap().into_parts().0
    }

    async fn run(
        p: &Arc<dyn Plugin>,
        req: &mut RequestHead,
    ) -> Result<Option<EarlyResponse>, PluginError> {
        let ip: IpAddr = "127.0.0.1".parse().unwrap();
        let mut ctx = RequestCtx::new(ip, 1, Arc::from(Vec::new()));
        let flow = match p.access(&mut ctx, req) {
            Step::Ready(r) => r,
            Step::Wait(f) => f.await,
        }?;
        Ok(match flow {
            Flow::Continue => None,
            Flow::Respond(r) => Some(r),
        })
    }

    #[tokio::test]
    async fn subrequests_reuse_pooled_connections() {
        let svc = service("HTTP/1.1 200 OK\r\nx-user: alice\r\ncontent-length: 5\r\n\r\nhello");
        let p = plugin(json!({
            "url": format!("http://127.0.0.1:{}/verify?app=1", svc.port),
            "response_headers": ["x-user"],
        }));
        for _ in 0..5 {
            let mut req = request("/a?b=1", &[("host", "shop"), ("x-user", "mallory")]);
            assert!(run(&p, &mut req).await.unwrap().is_none());
            assert_eq!(req.headers["x-user"], "alice");
        }
        assert_eq!(
            svc.accepted.load(Ordering::SeqCst),
            1,
            "one kept-alive connection"
        );
        let heads = svc.heads.lock().unwrap().clone();
        assert_eq!(heads.len(), 5);
        assert!(
            heads[0].starts_with("GET /verify?app=1 HTTP/1.1\r\n"),
            "{}",
            heads[0]
        );
        assert!(
            heads[0].contains(&format!("host: 127.0.0.1:{}\r\n", svc.port)),
            "{}",
            heads[0]
        );
        assert!(
            heads[0].contains("x-original-url: http://shop/a?b=1\r\n"),
            "{}",
            heads[0]
        );
    }

    #[tokio::test]
    async fn unexpected_answers_and_failures_are_errors() {
        let svc = service("HTTP/1.1 302 Found\r\nlocation: /x\r\ncontent-length: 0\r\n\r\n");
        let p = plugin(json!({"url": format!("http://127.0.0.1:{}/", svc.port)}));
        let e = run(&p, &mut request("/", &[])).await.err().unwrap();
        assert!(e.0.contains("unexpected status 302"), "{e}");

        let down = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = down.local_addr().unwrap().port();
        drop(down);
        let p = plugin(json!({"url": format!("http://127.0.0.1:{port}/a?token=s3cret")}));
        let e = run(&p, &mut request("/", &[("authorization", "Bearer secret")]))
            .await
            .err()
            .unwrap();
        assert!(
            e.0.starts_with(&format!("auth request to http://127.0.0.1:{port}/a:")),
            "{e}"
        );
        assert!(!e.0.contains("s3cret") && !e.0.contains("Bearer"), "{e}");

        // A service that accepts and never answers: the timeout.
        let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = silent.local_addr().unwrap().port();
        let p = plugin(json!({"url": format!("http://127.0.0.1:{port}/"), "timeout": 200}));
        let started = std::time::Instant::now();
        let e = run(&p, &mut request("/", &[])).await.err().unwrap();
        assert!(e.0.contains("no answer within 200 ms"), "{e}");
        assert!(started.elapsed() < Duration::from_secs(2));
        drop(silent);
    }
}
