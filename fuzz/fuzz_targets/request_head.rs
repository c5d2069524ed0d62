//! The client request-head parser (server/h1/head.rs) against httparse.
//! The input format and the oracle: `weir_proxy::fuzzing::fuzz_request_head`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| weir_proxy::fuzzing::fuzz_request_head(data));
