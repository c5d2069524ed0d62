//! The upstream response-head parser (upstream/h1/head.rs) against httparse, and its framing.
//! The input format and the oracle: `weir_proxy::fuzzing::fuzz_response_head`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| weir_proxy::fuzzing::fuzz_response_head(data));
