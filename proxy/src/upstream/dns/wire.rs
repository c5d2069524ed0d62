//! The DNS message format, as far as a stub resolver needs it (RFC 1035): encoding an `A` or
//! `AAAA` query, and reading the addresses of a response, following CNAMEs.
//!
//! Pure and total: any bytes give an answer or an error, never a panic; name-compression
//! pointers must point backwards and are followed a bounded number of times, so a message
//! cannot make the parser loop.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Record type `A` (an IPv4 address).
pub const TYPE_A: u16 = 1;
/// Record type `CNAME` (an alias).
pub const TYPE_CNAME: u16 = 5;
/// Record type `AAAA` (an IPv6 address).
pub const TYPE_AAAA: u16 = 28;
/// Class `IN`.
const CLASS_IN: u16 = 1;

/// Largest encoded name (RFC 1035 §2.3.4).
const MAX_NAME: usize = 255;
/// Compression pointers followed within one name: real messages need one or two; the bound
/// (with pointers only going backwards) keeps hostile messages cheap.
const MAX_JUMPS: usize = 32;
/// CNAMEs followed from the question's name: resolvers give up far sooner on real chains.
const MAX_CNAMES: usize = 16;

const FLAG_QR: u16 = 0x8000;
const FLAG_TC: u16 = 0x0200;
const FLAG_RD: u16 = 0x0100;
const RCODE_NXDOMAIN: u8 = 3;

/// What a well-formed response to our question says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// The addresses of the asked type that the name (or the end of its CNAME chain) has, with
    /// the smallest TTL of the records used (`None` when there were none); empty is NODATA.
    Records {
        /// The addresses, in the order of the answer section.
        addrs: Vec<IpAddr>,
        /// Seconds, the minimum over the CNAMEs and address records used.
        ttl: Option<u32>,
    },
    /// The name does not exist (RCODE 3).
    NxDomain,
    /// The answer did not fit (TC): ask again over TCP.
    Truncated,
}

/// Why a message is not an answer to our question.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// Cut short, a bad label or pointer, or a record running past the end.
    #[error("malformed DNS response")]
    Malformed,
    /// Another query's id: a late answer or a spoofing attempt, to be ignored.
    #[error("DNS response with another id")]
    WrongId,
    /// Not a response to the name, type and class asked (or not a response at all).
    #[error("DNS response to another question")]
    WrongQuestion,
    /// The server failed (SERVFAIL, REFUSED…): another server may do better.
    #[error("DNS server answered RCODE {0}")]
    Rcode(u8),
}

/// An `A` or `AAAA` query (recursion desired) for `name`, a host name without the trailing
/// dot; `None` when it is not a valid DNS name (an empty or over-long label, too long).
pub fn encode_query(id: u16, name: &str, qtype: u16) -> Option<Vec<u8>> {
    let name = name.strip_suffix('.').unwrap_or(name);
    if name.is_empty() || name.len() + 2 > MAX_NAME {
        return None;
    }
    let mut out = Vec::with_capacity(12 + name.len() + 6);
    out.extend_from_slice(&id.to_be_bytes());
    out.extend_from_slice(&FLAG_RD.to_be_bytes());
    // One question, no other sections.
    out.extend_from_slice(&[0, 1, 0, 0, 0, 0, 0, 0]);
    for label in name.split('.') {
        if label.is_empty() || label.len() > 63 {
            return None;
        }
        out.push(label.len() as u8);
        out.extend_from_slice(label.as_bytes());
    }
    out.push(0);
    out.extend_from_slice(&qtype.to_be_bytes());
    out.extend_from_slice(&CLASS_IN.to_be_bytes());
    Some(out)
}

/// Reads the response `msg` to the query `id` for `name` and `qtype` (`A` or `AAAA`).
pub fn parse_response(msg: &[u8], id: u16, name: &str, qtype: u16) -> Result<Answer, ParseError> {
    let header = msg.get(..12).ok_or(ParseError::Malformed)?;
    let u16_at = |i: usize| u16::from_be_bytes([header[i], header[i + 1]]);
    if u16_at(0) != id {
        return Err(ParseError::WrongId);
    }
    let flags = u16_at(2);
    // A response (QR) to a standard query (opcode 0).
    if flags & FLAG_QR == 0 || (flags >> 11) & 0xF != 0 {
        return Err(ParseError::WrongQuestion);
    }
    if flags & FLAG_TC != 0 {
        // The rest may be cut anywhere; TCP gives the whole answer.
        return Ok(Answer::Truncated);
    }
    let (qdcount, ancount) = (u16_at(4), u16_at(6));
    let rcode = (flags & 0xF) as u8;
    if qdcount != 1 {
        // A server that refuses or cannot read a query may leave the question out (REFUSED,
        // FORMERR…): it failed all the same, and another server may do better.
        if qdcount == 0 && rcode != 0 && rcode != RCODE_NXDOMAIN {
            return Err(ParseError::Rcode(rcode));
        }
        return Err(ParseError::WrongQuestion);
    }
    let (qname, mut pos) = read_name(msg, 12)?;
    let qfields = msg.get(pos..pos + 4).ok_or(ParseError::Malformed)?;
    pos += 4;
    let want = name.strip_suffix('.').unwrap_or(name);
    if !qname.eq_ignore_ascii_case(want.as_bytes())
        || u16::from_be_bytes([qfields[0], qfields[1]]) != qtype
        || u16::from_be_bytes([qfields[2], qfields[3]]) != CLASS_IN
    {
        return Err(ParseError::WrongQuestion);
    }
    match rcode {
        0 => {}
        RCODE_NXDOMAIN => return Ok(Answer::NxDomain),
        rcode => return Err(ParseError::Rcode(rcode)),
    }

    let mut records = Vec::new();
    for _ in 0..ancount {
        let (owner, next) = read_name(msg, pos)?;
        let fixed = msg.get(next..next + 10).ok_or(ParseError::Malformed)?;
        let rtype = u16::from_be_bytes([fixed[0], fixed[1]]);
        let class = u16::from_be_bytes([fixed[2], fixed[3]]);
        let ttl = u32::from_be_bytes([fixed[4], fixed[5], fixed[6], fixed[7]]);
        let rdlen = usize::from(u16::from_be_bytes([fixed[8], fixed[9]]));
        let start = next + 10;
        let end = start + rdlen;
        if end > msg.len() {
            return Err(ParseError::Malformed);
        }
        pos = end;
        if class == CLASS_IN {
            records.push(Record {
                owner,
                rtype,
                // RFC 2181 §8: a TTL with the top bit set is read as zero.
                ttl: if ttl > i32::MAX as u32 { 0 } else { ttl },
                start,
                end,
            });
        }
    }

    // From the question's name along its CNAME chain, to the first name that has addresses.
    let mut current = qname;
    let mut ttl: Option<u32> = None;
    let min = |t: Option<u32>, r: u32| Some(t.map_or(r, |t| t.min(r)));
    for _ in 0..=MAX_CNAMES {
        let mut addrs = Vec::new();
        let mut addr_ttl = ttl;
        for r in records
            .iter()
            .filter(|r| r.rtype == qtype && r.owner.eq_ignore_ascii_case(&current))
        {
            let data = &msg[r.start..r.end];
            let addr = match (qtype, data.len()) {
                (TYPE_A, 4) => IpAddr::V4(Ipv4Addr::new(data[0], data[1], data[2], data[3])),
                (TYPE_AAAA, 16) => {
                    let mut b = [0u8; 16];
                    b.copy_from_slice(data);
                    IpAddr::V6(Ipv6Addr::from(b))
                }
                _ => return Err(ParseError::Malformed),
            };
            addrs.push(addr);
            addr_ttl = min(addr_ttl, r.ttl);
        }
        if !addrs.is_empty() {
            return Ok(Answer::Records {
                addrs,
                ttl: addr_ttl,
            });
        }
        let Some(alias) = records
            .iter()
            .find(|r| r.rtype == TYPE_CNAME && r.owner.eq_ignore_ascii_case(&current))
        else {
            break;
        };
        let (target, _) = read_name(msg, alias.start)?;
        ttl = min(ttl, alias.ttl);
        current = target;
    }
    Ok(Answer::Records {
        addrs: Vec::new(),
        ttl,
    })
}

/// A resource record of the answer section: its owner name and where its data is.
struct Record {
    owner: Vec<u8>,
    rtype: u16,
    ttl: u32,
    start: usize,
    end: usize,
}

/// The name at `pos` as dotted text (no trailing dot; empty for the root), and where the
/// bytes after it start.
fn read_name(msg: &[u8], mut pos: usize) -> Result<(Vec<u8>, usize), ParseError> {
    let mut name = Vec::new();
    // Where the name ends in the message: after its first pointer, if any.
    let mut after = None;
    let mut jumps = 0;
    loop {
        let len = *msg.get(pos).ok_or(ParseError::Malformed)?;
        match len & 0xC0 {
            0x00 if len == 0 => {
                return Ok((name, after.unwrap_or(pos + 1)));
            }
            0x00 => {
                let label = msg
                    .get(pos + 1..pos + 1 + usize::from(len))
                    .ok_or(ParseError::Malformed)?;
                if !name.is_empty() {
                    name.push(b'.');
                }
                name.extend_from_slice(label);
                if name.len() + 2 > MAX_NAME {
                    return Err(ParseError::Malformed);
                }
                pos += 1 + usize::from(len);
            }
            0xC0 => {
                let low = *msg.get(pos + 1).ok_or(ParseError::Malformed)?;
                let target = usize::from(u16::from_be_bytes([len & 0x3F, low]));
                // Only backwards (RFC 1035: "a prior occurrence"), which rules out loops;
                // the count bounds the work all the same.
                jumps += 1;
                if target >= pos || jumps > MAX_JUMPS {
                    return Err(ParseError::Malformed);
                }
                after.get_or_insert(pos + 2);
                pos = target;
            }
            // 0x40 and 0x80: extended label types, obsolete and never in answers.
            _ => return Err(ParseError::Malformed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: u16 = 0xBEEF;

    /// A response header: id, flags, and the four section counts.
    fn header(id: u16, flags: u16, qd: u16, an: u16) -> Vec<u8> {
        let mut m = Vec::new();
        for v in [id, flags, qd, an, 0, 0] {
            m.extend_from_slice(&v.to_be_bytes());
        }
        m
    }

    /// `name` as labels.
    fn name(n: &str) -> Vec<u8> {
        let mut out = Vec::new();
        for l in n.split('.').filter(|l| !l.is_empty()) {
            out.push(l.len() as u8);
            out.extend_from_slice(l.as_bytes());
        }
        out.push(0);
        out
    }

    fn question(m: &mut Vec<u8>, n: &str, qtype: u16) {
        m.extend(name(n));
        m.extend_from_slice(&qtype.to_be_bytes());
        m.extend_from_slice(&1u16.to_be_bytes());
    }

    /// A record: owner (already encoded), type, TTL, data.
    fn record(m: &mut Vec<u8>, owner: &[u8], rtype: u16, ttl: u32, data: &[u8]) {
        m.extend_from_slice(owner);
        m.extend_from_slice(&rtype.to_be_bytes());
        m.extend_from_slice(&1u16.to_be_bytes());
        m.extend_from_slice(&ttl.to_be_bytes());
        m.extend_from_slice(&(data.len() as u16).to_be_bytes());
        m.extend_from_slice(data);
    }

    /// A pointer to offset `at`.
    fn ptr(at: u16) -> Vec<u8> {
        (0xC000 | at).to_be_bytes().to_vec()
    }

    fn ips(list: &[&str]) -> Vec<IpAddr> {
        list.iter().map(|s| s.parse().unwrap()).collect()
    }

    #[test]
    fn encodes_a_query_byte_for_byte() {
        let q = encode_query(0x1234, "app.weir.test", TYPE_A).unwrap();
        let mut want = vec![0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
        want.extend(b"\x03app\x04weir\x04test\x00\x00\x01\x00\x01");
        assert_eq!(q, want);
        // A trailing dot is the same name; AAAA is type 28.
        let q6 = encode_query(7, "app.weir.test.", TYPE_AAAA).unwrap();
        assert_eq!(&q6[q6.len() - 4..], b"\x00\x1c\x00\x01");
        assert_eq!(q6[12..q6.len() - 4], want[12..want.len() - 4]);
    }

    #[test]
    fn refuses_names_that_are_not_dns_names() {
        assert_eq!(encode_query(1, "", TYPE_A), None);
        assert_eq!(encode_query(1, "a..b", TYPE_A), None);
        assert_eq!(encode_query(1, &"x".repeat(64), TYPE_A), None);
        let long = vec!["abcdefghi"; 26].join(".");
        assert_eq!(encode_query(1, &long, TYPE_A), None);
        assert!(encode_query(1, &"x".repeat(63), TYPE_A).is_some());
    }

    #[test]
    fn reads_every_address_with_the_smallest_ttl() {
        let mut m = header(ID, 0x8180, 1, 2);
        question(&mut m, "app.weir.test", TYPE_A);
        // Owners by pointer to the question's name (offset 12).
        record(&mut m, &ptr(12), TYPE_A, 30, &[10, 0, 0, 1]);
        record(&mut m, &ptr(12), TYPE_A, 7, &[10, 0, 0, 2]);
        assert_eq!(
            parse_response(&m, ID, "App.Weir.Test.", TYPE_A),
            Ok(Answer::Records {
                addrs: ips(&["10.0.0.1", "10.0.0.2"]),
                ttl: Some(7)
            })
        );
    }

    #[test]
    fn reads_aaaa_records() {
        let mut m = header(ID, 0x8180, 1, 1);
        question(&mut m, "v6.test", TYPE_AAAA);
        let mut v6 = [0u8; 16];
        v6[0] = 0xfd;
        v6[15] = 1;
        record(&mut m, &name("v6.test"), TYPE_AAAA, 60, &v6);
        assert_eq!(
            parse_response(&m, ID, "v6.test", TYPE_AAAA),
            Ok(Answer::Records {
                addrs: ips(&["fd00::1"]),
                ttl: Some(60)
            })
        );
    }

    #[test]
    fn follows_a_cname_chain_with_compressed_names() {
        let mut m = header(ID, 0x8180, 1, 4);
        question(&mut m, "www.example.test", TYPE_A);
        // www.example.test CNAME edge.cdn.test; edge.cdn.test CNAME node.cdn.test (its data
        // a label and a pointer into the previous record's data); node.cdn.test A.
        let first_data = m.len() + 2 + 10;
        let mut edge = vec![4];
        edge.extend(b"edge");
        edge.extend(name("cdn.test"));
        record(&mut m, &ptr(12), TYPE_CNAME, 300, &edge);
        // "cdn.test" inside the first CNAME's data.
        let cdn = (first_data + 5) as u16;
        let mut node = vec![4];
        node.extend(b"node");
        node.extend(ptr(cdn));
        record(&mut m, &ptr(first_data as u16), TYPE_CNAME, 120, &node);
        // A record of another name, not on the chain: ignored.
        record(&mut m, &name("other.test"), TYPE_A, 1, &[9, 9, 9, 9]);
        let mut owner = vec![4];
        owner.extend(b"node");
        owner.extend(ptr(cdn));
        record(&mut m, &owner, TYPE_A, 600, &[192, 0, 2, 1]);
        assert_eq!(
            parse_response(&m, ID, "www.example.test", TYPE_A),
            Ok(Answer::Records {
                addrs: ips(&["192.0.2.1"]),
                ttl: Some(120)
            })
        );
    }

    #[test]
    fn a_cname_without_addresses_is_nodata_and_a_cname_loop_ends() {
        let mut m = header(ID, 0x8180, 1, 2);
        question(&mut m, "a.test", TYPE_A);
        record(&mut m, &name("a.test"), TYPE_CNAME, 50, &name("b.test"));
        record(&mut m, &name("b.test"), TYPE_CNAME, 40, &name("a.test"));
        assert_eq!(
            parse_response(&m, ID, "a.test", TYPE_A),
            Ok(Answer::Records {
                addrs: vec![],
                ttl: Some(40)
            })
        );
        let mut empty = header(ID, 0x8180, 1, 0);
        question(&mut empty, "a.test", TYPE_A);
        assert_eq!(
            parse_response(&empty, ID, "a.test", TYPE_A),
            Ok(Answer::Records {
                addrs: vec![],
                ttl: None
            })
        );
    }

    #[test]
    fn nxdomain_truncation_and_server_failures() {
        let mut nx = header(ID, 0x8183, 1, 0);
        question(&mut nx, "gone.test", TYPE_A);
        assert_eq!(
            parse_response(&nx, ID, "gone.test", TYPE_A),
            Ok(Answer::NxDomain)
        );
        // TC: whatever follows is not read (here, nothing).
        let tc = header(ID, 0x8380, 1, 3);
        assert_eq!(
            parse_response(&tc, ID, "gone.test", TYPE_A),
            Ok(Answer::Truncated)
        );
        let mut servfail = header(ID, 0x8182, 1, 0);
        question(&mut servfail, "gone.test", TYPE_A);
        assert_eq!(
            parse_response(&servfail, ID, "gone.test", TYPE_A),
            Err(ParseError::Rcode(2))
        );
        // REFUSED and FORMERR with the header alone: the server failed all the same.
        for rcode in [5u16, 1] {
            let bare = header(ID, 0x8180 | rcode, 0, 0);
            assert_eq!(
                parse_response(&bare, ID, "gone.test", TYPE_A),
                Err(ParseError::Rcode(rcode as u8))
            );
        }
        // But not a success or NXDOMAIN without the question, nor another id's refusal.
        for flags in [0x8180, 0x8183] {
            assert_eq!(
                parse_response(&header(ID, flags, 0, 0), ID, "gone.test", TYPE_A),
                Err(ParseError::WrongQuestion)
            );
        }
        assert_eq!(
            parse_response(&header(ID ^ 1, 0x8185, 0, 0), ID, "gone.test", TYPE_A),
            Err(ParseError::WrongId)
        );
    }

    #[test]
    fn answers_to_another_question_are_refused() {
        let mut m = header(ID, 0x8180, 1, 1);
        question(&mut m, "app.test", TYPE_A);
        record(&mut m, &ptr(12), TYPE_A, 5, &[10, 0, 0, 1]);
        let check = |msg: &[u8], name: &str, qtype: u16| parse_response(msg, ID, name, qtype);
        assert_eq!(
            parse_response(&m, ID ^ 1, "app.test", TYPE_A),
            Err(ParseError::WrongId)
        );
        assert_eq!(
            check(&m, "evil.test", TYPE_A),
            Err(ParseError::WrongQuestion)
        );
        assert_eq!(
            check(&m, "app.test", TYPE_AAAA),
            Err(ParseError::WrongQuestion)
        );
        // A query (QR clear) is not an answer.
        let mut q = m.clone();
        q[2] &= 0x7F;
        assert_eq!(
            check(&q, "app.test", TYPE_A),
            Err(ParseError::WrongQuestion)
        );
        // An A record of the wrong length.
        let mut bad = header(ID, 0x8180, 1, 1);
        question(&mut bad, "app.test", TYPE_A);
        record(&mut bad, &ptr(12), TYPE_A, 5, &[10, 0, 0]);
        assert_eq!(check(&bad, "app.test", TYPE_A), Err(ParseError::Malformed));
    }

    #[test]
    fn pointer_loops_and_forward_pointers_are_malformed() {
        // The question's name is a pointer to itself.
        let mut m = header(ID, 0x8180, 1, 0);
        m.extend(ptr(12));
        m.extend_from_slice(&[0, 1, 0, 1]);
        assert_eq!(
            parse_response(&m, ID, "x", TYPE_A),
            Err(ParseError::Malformed)
        );
        // A record owner pointing forward to a pointer back to it: a two-step loop.
        let mut m = header(ID, 0x8180, 1, 1);
        question(&mut m, "a.test", TYPE_A);
        let at = m.len() as u16;
        m.extend(ptr(at + 2));
        m.extend(ptr(at));
        m.extend_from_slice(&[0, 1, 0, 1, 0, 0, 0, 1, 0, 4, 1, 2, 3, 4]);
        assert_eq!(
            parse_response(&m, ID, "a.test", TYPE_A),
            Err(ParseError::Malformed)
        );
    }

    #[test]
    fn every_cut_of_a_good_response_is_an_error_not_a_panic() {
        let mut m = header(ID, 0x8180, 1, 2);
        question(&mut m, "app.weir.test", TYPE_A);
        record(&mut m, &ptr(12), TYPE_CNAME, 30, &name("b.weir.test"));
        record(&mut m, &name("b.weir.test"), TYPE_A, 30, &[10, 0, 0, 1]);
        assert!(matches!(
            parse_response(&m, ID, "app.weir.test", TYPE_A),
            Ok(Answer::Records { .. })
        ));
        for cut in 0..m.len() {
            assert!(
                parse_response(&m[..cut], ID, "app.weir.test", TYPE_A).is_err(),
                "cut at {cut}"
            );
        }
        // And every single-byte change parses to something or fails, without panicking.
        for i in 0..m.len() {
            for b in [0u8, 0x3F, 0x40, 0xC0, 0xFF] {
                let mut x = m.clone();
                x[i] = b;
                let _ = parse_response(&x, ID, "app.weir.test", TYPE_A);
            }
        }
    }
}
