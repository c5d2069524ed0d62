//! TLS ClientHellos (proxy/src/tls/client_hello.rs): arbitrary bytes as the start of a
//! connection to the TLS listener, where passthrough reads the server name.
//! The oracle: `weir_proxy::fuzzing::fuzz_client_hello`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| weir_proxy::fuzzing::fuzz_client_hello(data));
