//! The chunked decoder (upstream/h1/chunked.rs) and encoder (wire.rs, upload.rs): round trips, arbitrary bytes, size lines.
//! The input format and the oracle: `weir_proxy::fuzzing::fuzz_chunked`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| weir_proxy::fuzzing::fuzz_chunked(data));
