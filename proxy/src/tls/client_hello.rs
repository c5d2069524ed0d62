//! The server name (SNI) of a TLS ClientHello, read from the bytes a client sent first,
//! without consuming them: what TLS passthrough routes on before deciding whether Weir
//! terminates the connection or hands it, untouched, to a backend.
//!
//! Hand-written because rustls only reads a ClientHello while taking the connection over;
//! the parser is small, bounded, allocation-free and fuzzed (`fuzz/fuzz_targets/sni.rs`).

/// The most bytes read while looking for the server name: a ClientHello spread over more is
/// terminated by Weir as any other connection.
pub const MAX_HELLO: usize = 16 * 1024;

/// What the first bytes of a connection say.
#[derive(Debug, PartialEq, Eq)]
pub enum Hello<'a> {
    /// More bytes are needed to tell.
    Incomplete,
    /// A ClientHello naming this server (as sent: ASCII, any case).
    Sni(&'a str),
    /// A ClientHello without a server name, or one whose name is not usable.
    NoSni,
    /// Not a TLS ClientHello.
    NotTls,
}

/// Reads the server name from the start of a connection (one or more TLS records holding a
/// ClientHello).
pub fn server_name(buf: &[u8]) -> Hello<'_> {
    // The handshake message may be split over records; only its first `MAX_HELLO` bytes are
    // looked at, in the first record (the common case, and all that passthrough needs: the
    // extensions come before any split in practice). A split before the SNI reads as
    // `Incomplete` until `MAX_HELLO`, then the caller terminates.
    if buf.is_empty() {
        return Hello::Incomplete;
    }
    if buf[0] != 0x16 {
        return Hello::NotTls;
    }
    if buf.len() < 5 {
        return Hello::Incomplete;
    }
    if buf[1] != 0x03 {
        return Hello::NotTls;
    }
    let record_len = usize::from(u16::from_be_bytes([buf[3], buf[4]]));
    let Some(record) = buf.get(5..5 + record_len) else {
        return Hello::Incomplete;
    };
    let mut r = Reader(record);
    match r.u8() {
        Some(0x01) => {}
        Some(_) => return Hello::NotTls,
        None => return Hello::Incomplete,
    }
    let Some(hello_len) = r.u24() else {
        return Hello::Incomplete;
    };
    // Only the part of the ClientHello in this record is parsed.
    let body = r.rest();
    let body = &body[..body.len().min(hello_len)];
    match parse_hello(body) {
        Some(Hello::Sni(name)) => Hello::Sni(name),
        // Anything else is final only once the whole message was there.
        _ if body.len() < hello_len => Hello::Incomplete,
        Some(found) => found,
        None => Hello::NoSni,
    }
}

/// The server name in a ClientHello body; `None` when the bytes end first.
fn parse_hello(body: &[u8]) -> Option<Hello<'_>> {
    let mut r = Reader(body);
    r.skip(2 + 32)?; // legacy_version, random
    let session = r.u8()?;
    r.skip(usize::from(session))?;
    let suites = r.u16()?;
    r.skip(usize::from(suites))?;
    let compression = r.u8()?;
    r.skip(usize::from(compression))?;
    if r.0.is_empty() {
        return Some(Hello::NoSni);
    }
    let ext_len = r.u16()?;
    let mut exts = Reader(r.take(usize::from(ext_len))?);
    while !exts.0.is_empty() {
        let kind = exts.u16()?;
        let len = exts.u16()?;
        let data = exts.take(usize::from(len))?;
        if kind != 0 {
            continue;
        }
        // server_name: a list of (type, name); the host_name entry (type 0) is the one.
        let mut list = Reader(data);
        let list_len = list.u16()?;
        let mut names = Reader(list.take(usize::from(list_len))?);
        while !names.0.is_empty() {
            let name_type = names.u8()?;
            let len = names.u16()?;
            let name = names.take(usize::from(len))?;
            if name_type == 0 {
                return Some(match std::str::from_utf8(name) {
                    Ok(n) if valid_name(n) => Hello::Sni(n),
                    _ => Hello::NoSni,
                });
            }
        }
        return Some(Hello::NoSni);
    }
    Some(Hello::NoSni)
}

/// A DNS name as SNI carries it: letters, digits, `-`, `_` and `.`, at most 253 bytes.
fn valid_name(n: &str) -> bool {
    !n.is_empty()
        && n.len() <= 253
        && n.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// A cursor over bytes; every read is bounds-checked.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }

    fn skip(&mut self, n: usize) -> Option<()> {
        self.take(n).map(drop)
    }

    fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }

    fn u16(&mut self) -> Option<u16> {
        self.take(2).map(|b| u16::from_be_bytes([b[0], b[1]]))
    }

    fn u24(&mut self) -> Option<usize> {
        self.take(3)
            .map(|b| (usize::from(b[0]) << 16) | (usize::from(b[1]) << 8) | usize::from(b[2]))
    }

    fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ClientHello as rustls writes it for `name` (or without SNI).
    fn rustls_hello(name: Option<&str>) -> Vec<u8> {
        use std::sync::Arc;
        let mut roots = rustls::RootCertStore::empty();
        let _ = &mut roots;
        let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
        config.enable_sni = name.is_some();
        let server =
            rustls::pki_types::ServerName::try_from(name.unwrap_or("x.example").to_string())
                .unwrap();
        let mut conn = rustls::ClientConnection::new(Arc::new(config), server).unwrap();
        let mut out = Vec::new();
        conn.write_tls(&mut out).unwrap();
        out
    }

    #[test]
    fn a_real_client_hello_names_its_server() {
        let hello = rustls_hello(Some("shop.example.com"));
        assert_eq!(server_name(&hello), Hello::Sni("shop.example.com"));
        // Every prefix is incomplete, never a wrong answer.
        for cut in 0..hello.len() {
            let got = server_name(&hello[..cut]);
            assert_eq!(got, Hello::Incomplete, "cut at {cut}");
        }
        assert_eq!(server_name(&rustls_hello(None)), Hello::NoSni);
    }

    #[test]
    fn other_bytes_are_not_tls() {
        assert_eq!(server_name(b"GET / HTTP/1.1\r\n"), Hello::NotTls);
        assert_eq!(server_name(b"PRI * HTTP/2.0"), Hello::NotTls);
        // A handshake record of another message type.
        assert_eq!(server_name(&[0x16, 3, 1, 0, 4, 2, 0, 0, 0]), Hello::NotTls);
        // A record claiming a ClientHello with nothing after: no name.
        assert_eq!(server_name(&[0x16, 3, 1, 0, 4, 1, 0, 0, 0]), Hello::NoSni);
    }
}
