//! The Redis reply parser (redis/resp.rs) and command encoder: incremental parsing agrees with
//! whole parsing, our encoding round-trips. The oracle: `weir_proxy::fuzzing::fuzz_resp`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| weir_proxy::fuzzing::fuzz_resp(data));
