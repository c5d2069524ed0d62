//! The fuzz targets' invariants (`fuzz/`) as property tests, on inputs generated around the
//! interesting cases (valid messages, near-misses, limits), plus a replay of the committed fuzz
//! seeds: the oracles themselves are in `weir_proxy::fuzzing`.

use std::path::Path;

use proptest::prelude::*;
use proptest::sample::select;
use weir_proxy::config::PathKind;
use weir_proxy::fuzzing::{self, ESCAPED_SLASHES};

fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        // Shrinking a failure of these cheap checks must not take minutes.
        max_shrink_iters: 2048,
        // A failure prints its minimal input; regressions are kept as fuzz seeds instead.
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// One of `items` as bytes.
fn pick(items: &'static [&'static str]) -> impl Strategy<Value = Vec<u8>> {
    select(items).prop_map(|s| s.as_bytes().to_vec())
}

/// `bytes` with, by `edit`, nothing changed, a cut, or one byte replaced.
fn mutate(mut bytes: Vec<u8>, edit: (u8, usize, u8)) -> Vec<u8> {
    let (kind, at, byte) = edit;
    if bytes.is_empty() {
        return bytes;
    }
    let at = at % bytes.len();
    match kind % 4 {
        0 | 1 => {}
        2 => bytes.truncate(at),
        _ => bytes[at] = byte,
    }
    bytes
}

/// Mostly one of `common`, sometimes one of `odd`.
fn pick2(
    common: &'static [&'static str],
    odd: &'static [&'static str],
) -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![5 => pick(common), 1 => pick(odd)]
}

/// Nearly always one of `common`, rarely one of `odd`.
fn pick_rare(
    common: &'static [&'static str],
    odd: &'static [&'static str],
) -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![15 => pick(common), 1 => pick(odd)]
}

fn edit() -> impl Strategy<Value = (u8, usize, u8)> {
    (
        any::<u8>(),
        any::<usize>(),
        select(&b"\r\n :,\t\x00\x7fAz0\x80"[..]),
    )
}

fn eol() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![4 => Just(b"\r\n".to_vec()), 1 => Just(b"\n".to_vec())]
}

// --- Request heads -------------------------------------------------------------------------

fn request_header() -> impl Strategy<Value = (Vec<u8>, Vec<u8>)> {
    (
        pick2(
            &[
                "Host",
                "host",
                "Connection",
                "connection",
                "Content-Length",
                "X-Two",
                "x-two",
                "Cookie",
                "Accept",
            ],
            &[
                "Transfer-Encoding",
                "Upgrade",
                "Expect",
                "Bad Name",
                "",
                "x\u{e9}",
            ],
        ),
        pick2(
            &[
                "example.test",
                "close",
                "keep-alive, close",
                "keep-alive",
                "0",
                " 0 ",
                "a=1; b=2",
                "",
                "a\tb",
                "caf\u{e9}",
            ],
            &[
                "Upgrade",
                "keep-alive,upgrade",
                "00",
                "5",
                "chunked",
                "100-continue",
                "v\u{7f}",
                "a\rb",
            ],
        ),
    )
}

fn request() -> impl Strategy<Value = Vec<u8>> {
    (
        pick_rare(
            &["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"],
            &["HEAD", "CONNECT", "PRI", "M-SEARCH", "get", "G\u{e9}T", ""],
        ),
        pick_rare(
            &[
                "/",
                "/a/b?x=1",
                "*",
                "http://example.test/x",
                "HTTP://Example.test",
                "//x/../y",
                "/a;p=1/b",
                "/a\\b",
                "/caf\u{e9}",
            ],
            &[
                "/a#frag",
                "/%zz",
                "example.test:443",
                "/{x}",
                "http://[::1",
                "",
            ],
        ),
        pick_rare(
            &["HTTP/1.1"],
            &["HTTP/1.0", "HTTP/2.0", "HTTP/1.2", "http/1.1"],
        ),
        eol(),
        prop::collection::vec((request_header(), eol()), 0..6),
        pick(&["", "", "GET /next HTTP/1.1\r\n\r\n", "body"]),
    )
        .prop_map(|(method, target, version, eol, headers, after)| {
            message([method, target, version], eol, headers, after)
        })
}

/// A header line: (name, value) and the line's own end.
type HeaderLine = ((Vec<u8>, Vec<u8>), Vec<u8>);

/// An HTTP/1 message: the start line's three parts, header lines each with its own line end,
/// the empty line, and what follows.
fn message(start: [Vec<u8>; 3], eol: Vec<u8>, headers: Vec<HeaderLine>, tail: Vec<u8>) -> Vec<u8> {
    let [a, b, c] = start;
    let mut out = a;
    out.push(b' ');
    out.extend_from_slice(&b);
    out.push(b' ');
    out.extend_from_slice(&c);
    out.extend_from_slice(&eol);
    for ((name, value), line_end) in headers {
        out.extend_from_slice(&name);
        out.extend_from_slice(b": ");
        out.extend_from_slice(&value);
        out.extend_from_slice(&line_end);
    }
    out.extend_from_slice(&eol);
    out.extend_from_slice(&tail);
    out
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn prop_request_head_agrees_with_httparse(
        head in request(),
        edit in edit(),
        max_head in select(vec![0usize, 16, 40, 100, 1024, 65_535, 65_536, 1 << 20]),
        max_headers in prop_oneof![0usize..8, Just(100usize), 126usize..131],
    ) {
        fuzzing::check_request_head(&mutate(head, edit), max_head, max_headers);
    }

    #[test]
    fn prop_request_head_around_the_size_limits(
        head in request(),
        max_head in select(vec![1024usize, 65_535, 65_536]),
        around in select(vec![1024usize, 65_535, 65_536]),
        delta in 0usize..16,
    ) {
        let input = fuzzing::pad_head(&head, around + delta - 8);
        fuzzing::check_request_head(&input, max_head, 100);
    }
}

// --- The chunked coding --------------------------------------------------------------------

fn frames() -> impl Strategy<Value = Vec<Vec<u8>>> {
    prop::collection::vec(
        prop_oneof![
            1 => Just(Vec::new()),
            6 => prop::collection::vec(any::<u8>(), 1..40),
            1 => prop::collection::vec(select(&b"0\r\n;"[..]), 1..8),
        ],
        0..6,
    )
}

fn reads() -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(1usize..20, 0..4)
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn prop_chunked_roundtrip(
        frames in frames(),
        reads in reads(),
        style in 0u8..32,
        tail in pick(&["", "NEXT", "HTTP/1.1 200 OK\r\n\r\n", "\r\n", "0\r\n\r\n"]),
    ) {
        fuzzing::check_chunked_roundtrip(&frames, &reads, style, &tail);
    }

    #[test]
    fn prop_chunked_decoder_on_arbitrary_bytes(
        input in prop::collection::vec(select(&b"0123456789abcdefABCDEFxz;= \t\r\n\""[..]), 0..64),
        reads in reads(),
    ) {
        fuzzing::check_chunked_decode(&input, &reads);
    }

    #[test]
    fn prop_chunked_decoder_on_near_misses(
        frames in frames(),
        style in 0u8..32,
        edits in prop::collection::vec(edit(), 1..3),
        reads in reads(),
    ) {
        let mut input = fuzzing::encode_chunked_styled(&frames, style);
        for e in edits {
            input = mutate(input, e);
        }
        fuzzing::check_chunked_decode(&input, &reads);
    }

    #[test]
    fn prop_chunk_size_lines(
        len in prop_oneof![0usize..300, any::<usize>()],
        data in prop::collection::vec(any::<u8>(), 0..300),
    ) {
        fuzzing::check_chunk_size(len, &data);
    }
}

// --- Response heads ------------------------------------------------------------------------

/// A header, mostly a framing one with a value that fits it.
fn response_header() -> impl Strategy<Value = (Vec<u8>, Vec<u8>)> {
    type Words = &'static [&'static str];
    let values = |names: Words, common: Words, odd: Words| (pick(names), pick2(common, odd));
    prop_oneof![
        3 => values(
            &["Content-Length", "content-length"],
            &["5", "5, 5", "0", "1000000000000000000"],
            &["4, 5", "", "-1", "+4", "0x5", "00000000000000000001", "99999999999999999999"],
        ),
        3 => values(
            &["Transfer-Encoding"],
            &["chunked", "gzip, chunked", "chunked, gzip", "Chunked", "gzip"],
            &["chunked,", "", " , chunked"],
        ),
        2 => values(
            &["Connection"],
            &["close", "keep-alive", "Keep-Alive, close", "upgrade"],
            &["", ",,close"],
        ),
        2 => values(&["X-A", "Date", "Server"], &["a", "", "caf\u{e9}", "a\tb"], &["v\u{7f}"]),
        1 => (pick(&["Bad Name", "", "x\u{e9}", "X-A "]), pick(&["a", ""])),
    ]
}

fn response() -> impl Strategy<Value = Vec<u8>> {
    (
        pick_rare(
            &["HTTP/1.1", "HTTP/1.0"],
            &["HTTP/2", "HTTP/1.1 ", "HTTP/1.1\t"],
        ),
        pick_rare(
            &[
                "200", "200", "200", "200", "200", "204", "304", "100", "101", "404", "502",
            ],
            &["099", "999", "000", "1000", "20"],
        ),
        pick_rare(
            &[
                "OK",
                "",
                "Fine",
                "Not Found",
                "No Content",
                "caf\u{e9}",
                "a\tb",
            ],
            &["a\rb", "x\u{7f}"],
        ),
        eol(),
        prop::collection::vec((response_header(), eol()), 0..5),
        pick(&["", "hello", "5\r\nhello\r\n0\r\n\r\n"]),
    )
        .prop_map(|(version, code, reason, eol, headers, body)| {
            message([version, code, reason], eol, headers, body)
        })
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn prop_response_head_agrees_with_httparse(
        head in response(),
        edit in edit(),
        method in select(vec!["GET", "HEAD", "POST", "CONNECT"]),
    ) {
        let method = http::Method::from_bytes(method.as_bytes()).unwrap();
        fuzzing::check_response_head(&mutate(head, edit), &method);
    }

    #[test]
    fn prop_response_head_around_the_size_limit(head in response(), delta in 0usize..16) {
        let input = fuzzing::pad_head(&head, fuzzing::RESPONSE_MAX_HEAD_BYTES + delta - 8);
        fuzzing::check_response_head(&input, &http::Method::GET);
    }
}

// --- Path normalisation and routing --------------------------------------------------------

/// Pieces of paths: characters, escapes (unreserved, reserved, `%25`, malformed) and segments.
const PATH_PIECES: &[&str] = &[
    "/", "/", "/", "/", ".", ".", "..", "a", "b", "A", "~", "-", "_", "\u{e9}", ";", ";x=1", "=",
    "\\", "%", "2", "5", "%2e", "%2E", "%2f", "%2F", "%5c", "%5C", "%25", "%41", "%61", "%7e",
    "%C3%A9", "%20", "%3B", "%zz", "%a",
];

fn path_text(max: usize) -> impl Strategy<Value = String> {
    prop::collection::vec(select(PATH_PIECES), 0..max).prop_map(|p| p.concat())
}

proptest! {
    #![proptest_config(config(192))]

    #[test]
    fn prop_path_normalisation_and_routing(
        raw in prop_oneof![
            4 => path_text(16).prop_map(|p| format!("/{p}")),
            1 => path_text(8),
        ],
        merge_slashes in any::<bool>(),
        slashes in select(ESCAPED_SLASHES.to_vec()),
        rules in prop::collection::vec((any::<bool>(), path_text(6)), 0..4),
        regex in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let rules: Vec<(PathKind, String)> = rules
            .into_iter()
            .map(|(exact, p)| {
                let kind = if exact { PathKind::Exact } else { PathKind::Prefix };
                (kind, format!("/{p}"))
            })
            .collect();
        let rules: Vec<(PathKind, &str)> = rules.iter().map(|(k, p)| (*k, p.as_str())).collect();
        fuzzing::check_path(&raw, merge_slashes, slashes, &rules, regex, seed);
    }
}

// --- The committed fuzz seeds ----------------------------------------------------------------

/// Every seed in `fuzz/seeds/<target>/` (hand-made inputs and regressions the fuzzer found)
/// still passes its target.
#[test]
fn prop_fuzz_seeds_replay() {
    let seeds = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/seeds");
    type Target = fn(&[u8]);
    let targets: [(&str, Target); 6] = [
        ("request_head", fuzzing::fuzz_request_head),
        ("chunked", fuzzing::fuzz_chunked),
        ("response_head", fuzzing::fuzz_response_head),
        ("path_routing", fuzzing::fuzz_path),
        ("resp_reply", fuzzing::fuzz_resp),
        ("dns_response", fuzzing::fuzz_dns_response),
    ];
    let mut replayed = 0;
    for (target, run) in targets {
        let Ok(dir) = std::fs::read_dir(seeds.join(target)) else {
            // Outside a checkout (no fuzz/ at all) there is nothing to replay; in one, every
            // target has its seeds.
            assert!(
                !seeds.exists(),
                "no seeds for {target} under {}",
                seeds.display()
            );
            continue;
        };
        for entry in dir {
            let path = entry.unwrap().path();
            let data = std::fs::read(&path).unwrap();
            if let Err(e) = std::panic::catch_unwind(|| run(&data)) {
                let msg = e
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                panic!("{target} seed {} fails: {msg}", path.display());
            }
            replayed += 1;
        }
    }
    assert!(
        replayed > 0 || !seeds.exists(),
        "no seeds under {}",
        seeds.display()
    );
}
