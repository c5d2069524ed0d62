//! Path normalisation and routing (router/): idempotence, re-encoded paths route alike.
//! The input format and the oracle: `weir_proxy::fuzzing::fuzz_path`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| weir_proxy::fuzzing::fuzz_path(data));
