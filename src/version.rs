//! `weir version` and `weir --version`: what was built, from which commit, when.

use clap::{Args, ValueEnum};

/// The release version (Cargo.toml's workspace version, semver).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
/// The full commit id the binary was built from, or "unknown" (see build.rs).
pub const COMMIT: &str = env!("WEIR_COMMIT");
/// When the binary was built (RFC 3339, UTC; `SOURCE_DATE_EPOCH` when the build set it).
pub const BUILD_DATE: &str = env!("WEIR_BUILD_DATE");
/// The compiler's version.
pub const RUSTC: &str = env!("WEIR_RUSTC");
/// The target triple (`x86_64-unknown-linux-gnu`, `aarch64-unknown-linux-musl`…).
pub const TARGET: &str = env!("WEIR_TARGET");

/// The `--version` line after the name: `0.1.0 (commit 753a9fd1c2ab, built 2026-12-02T18:40:00Z)`.
pub const LINE: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("WEIR_COMMIT_SHORT"),
    ", built ",
    env!("WEIR_BUILD_DATE"),
    ")"
);

#[derive(Args)]
pub struct VersionArgs {
    /// Output format.
    #[arg(long, short, value_enum, default_value_t = Format::Text)]
    output: Format,
}

#[derive(Clone, Copy, ValueEnum)]
enum Format {
    Text,
    Json,
}

/// Prints the version, one field per line, or as one JSON object for scripts.
pub fn run(args: VersionArgs) {
    match args.output {
        Format::Text => println!(
            "weir {VERSION}\ncommit: {COMMIT}\nbuilt: {BUILD_DATE}\nrustc: {RUSTC}\ntarget: {TARGET}"
        ),
        Format::Json => println!(
            "{}",
            serde_json::json!({
                "version": VERSION,
                "commit": COMMIT,
                "buildDate": BUILD_DATE,
                "rustc": RUSTC,
                "target": TARGET,
            })
        ),
    }
}
