//! DNS responses (proxy/src/upstream/dns/wire.rs): arbitrary bytes as the answer to a query,
//! compression pointers and CNAME chains included; and our own queries read back.
//! The input format and the oracle: `weir_proxy::fuzzing::fuzz_dns_response`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| weir_proxy::fuzzing::fuzz_dns_response(data));
