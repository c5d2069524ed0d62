//! A hand-written WebSocket client for the tests (RFC 6455 over HTTP/1.1, RFC 8441 over
//! HTTP/2), on any connection to the proxy.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::Empty;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadHalf, WriteHalf};

/// The longest any one step waits.
const STEP: Duration = Duration::from_secs(10);

/// A client connection, plain or TLS.
pub trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}
pub type Conn = Box<dyn Io>;

pub const TEXT: u8 = 0x1;
pub const BINARY: u8 = 0x2;
pub const CLOSE: u8 = 0x8;
pub const PING: u8 = 0x9;
pub const PONG: u8 = 0xA;

/// A hand-written WebSocket client (RFC 6455): masked frames out, unmasked frames in.
pub struct Ws {
    pub r: ReadHalf<Conn>,
    pub w: WriteHalf<Conn>,
    masks: u32,
}

/// One frame as received: opcode, FIN bit and payload.
#[derive(Debug, PartialEq)]
pub struct Frame {
    pub opcode: u8,
    pub fin: bool,
    pub payload: Vec<u8>,
}

impl Ws {
    /// Upgrades `conn` (to the proxy) to a WebSocket with `GET path`.
    pub async fn connect(mut conn: Conn, host: &str, path: &str) -> Ws {
        conn.write_all(
            format!(
                "GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: Upgrade\r\n\
                 Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\n\
                 Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
            )
            .as_bytes(),
        )
        .await
        .unwrap();
        // The head, byte by byte: what follows it is the first frame.
        let mut head = Vec::new();
        while !head.ends_with(b"\r\n\r\n") {
            let b = tokio::time::timeout(STEP, conn.read_u8())
                .await
                .expect("101 timed out")
                .expect("101 head");
            head.push(b);
        }
        let head = String::from_utf8(head).unwrap().to_ascii_lowercase();
        assert!(head.starts_with("http/1.1 101 "), "{head}");
        assert!(
            head.contains("\r\nsec-websocket-accept: s3pplmbitxaq9kygzzhzrbk+xoo=\r\n"),
            "{head}"
        );
        assert!(head.contains("\r\nupgrade: websocket\r\n"), "{head}");
        let (r, w) = tokio::io::split(conn);
        Ws { r, w, masks: 0 }
    }

    /// Opens a WebSocket over HTTP/2 on `conn` (RFC 8441: `CONNECT` with `:protocol:
    /// websocket`); `scheme` is `http` (h2c) or `https`.
    pub async fn connect_h2(conn: Conn, scheme: &str, host: &str, path: &str) -> Ws {
        let (mut send, driver) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(conn))
                .await
                .expect("h2 handshake");
        tokio::spawn(driver);
        // One plain request first: the server's SETTINGS (which enable extended CONNECT) are
        // then known to the client.
        let first = http::Request::get(format!("{scheme}://{host}/first"))
            .body(Empty::<Bytes>::new())
            .unwrap();
        let r = send.send_request(first).await.expect("first request");
        assert_eq!(r.status(), 200);
        let mut req = http::Request::builder()
            .method(http::Method::CONNECT)
            .version(http::Version::HTTP_2)
            .uri(format!("{scheme}://{host}{path}"))
            .header("sec-websocket-version", "13")
            .body(Empty::<Bytes>::new())
            .unwrap();
        req.extensions_mut()
            .insert(hyper::ext::Protocol::from_static("websocket"));
        let resp = tokio::time::timeout(STEP, send.send_request(req))
            .await
            .expect("CONNECT timed out")
            .expect("CONNECT");
        assert_eq!(resp.status(), 200, "{resp:?}");
        // The HTTP/1.1 handshake's headers stay between Weir and the upstream.
        for h in ["sec-websocket-accept", "upgrade", "connection"] {
            assert!(resp.headers().get(h).is_none(), "{h} in {resp:?}");
        }
        let tunnel = hyper::upgrade::on(resp).await.expect("upgraded stream");
        let conn: Conn = Box::new(TokioIo::new(tunnel));
        let (r, w) = tokio::io::split(conn);
        Ws { r, w, masks: 0 }
    }

    /// Sends one masked frame with FIN set.
    pub async fn send(&mut self, opcode: u8, payload: &[u8]) {
        let frame = self.frame(opcode, payload);
        tokio::time::timeout(STEP, self.w.write_all(&frame))
            .await
            .expect("write timed out")
            .unwrap();
    }

    pub fn frame(&mut self, opcode: u8, payload: &[u8]) -> Vec<u8> {
        self.masks += 1;
        let mask = (self.masks.wrapping_mul(2_654_435_761) | 1).to_be_bytes();
        let mut f = vec![0x80 | opcode];
        match payload.len() {
            n @ 0..=125 => f.push(0x80 | n as u8),
            n @ 126..=65535 => {
                f.push(0x80 | 126);
                f.extend_from_slice(&(n as u16).to_be_bytes());
            }
            n => {
                f.push(0x80 | 127);
                f.extend_from_slice(&(n as u64).to_be_bytes());
            }
        }
        f.extend_from_slice(&mask);
        f.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
        f
    }

    /// Reads one frame; server frames are never masked.
    pub async fn recv(&mut self) -> Frame {
        tokio::time::timeout(STEP, read_frame(&mut self.r))
            .await
            .expect("no frame for 10 s")
            .expect("frame")
    }

    /// Expects the peer to close the connection (after the closing handshake).
    pub async fn expect_eof(mut self) {
        let mut rest = Vec::new();
        let r = tokio::time::timeout(Duration::from_secs(5), self.r.read_to_end(&mut rest))
            .await
            .expect("connection still open 5 s after the closing handshake");
        assert!(
            matches!(r, Ok(0)),
            "want a clean end of the connection, got {r:?} after {rest:?}"
        );
    }
}

pub async fn read_frame<R: AsyncRead + Unpin>(r: &mut R) -> std::io::Result<Frame> {
    let mut h = [0u8; 2];
    r.read_exact(&mut h).await?;
    assert_eq!(h[1] & 0x80, 0, "a server frame is masked");
    let len = match h[1] & 0x7f {
        126 => r.read_u16().await? as usize,
        127 => r.read_u64().await? as usize,
        n => n as usize,
    };
    let mut payload = vec![0u8; len];
    r.read_exact(&mut payload).await?;
    Ok(Frame {
        opcode: h[0] & 0x0f,
        fin: h[0] & 0x80 != 0,
        payload,
    })
}

pub fn close_payload(code: u16, reason: &str) -> Vec<u8> {
    let mut p = code.to_be_bytes().to_vec();
    p.extend_from_slice(reason.as_bytes());
    p
}
