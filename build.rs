//! Stamps the `weir` binary with the commit it was built from and when, for `weir version`.
//!
//! The commit comes from `WEIR_GIT_COMMIT` when set (the Dockerfile passes it: a build context
//! has no `.git`), else from `git rev-parse HEAD`, else "unknown". The date is
//! `SOURCE_DATE_EPOCH` when set (reproducible builds: the release workflow sets it to the
//! commit's time), else the time this script ran, which is when the commit last changed.

use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

fn main() {
    println!("cargo:rerun-if-env-changed=WEIR_GIT_COMMIT");
    println!("cargo:rerun-if-env-changed=SOURCE_DATE_EPOCH");
    // A new commit moves HEAD or the branch it names (loose or packed).
    for path in [".git/HEAD", ".git/packed-refs"] {
        println!("cargo:rerun-if-changed={path}");
    }
    if let Ok(head) = std::fs::read_to_string(".git/HEAD") {
        if let Some(branch) = head.trim().strip_prefix("ref: ") {
            println!("cargo:rerun-if-changed=.git/{branch}");
        }
    }

    let commit = std::env::var("WEIR_GIT_COMMIT")
        .ok()
        .filter(|c| !c.is_empty())
        .or_else(git_head)
        .unwrap_or_else(|| "unknown".into());
    let epoch = std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .unwrap_or_else(|| {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs())
        });
    let rustc = Command::new(std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into()))
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|v| v.split_whitespace().nth(1).map(str::to_owned))
        .unwrap_or_else(|| "unknown".into());

    println!("cargo:rustc-env=WEIR_COMMIT={commit}");
    let short = &commit[..commit.len().min(12)];
    println!("cargo:rustc-env=WEIR_COMMIT_SHORT={short}");
    println!("cargo:rustc-env=WEIR_BUILD_DATE={}", rfc3339(epoch));
    println!("cargo:rustc-env=WEIR_RUSTC={rustc}");
    println!(
        "cargo:rustc-env=WEIR_TARGET={}",
        std::env::var("TARGET").unwrap_or_default()
    );
}

fn git_head() -> Option<String> {
    let out = Command::new("git")
        .args(["rev-parse", "HEAD"])
        .output()
        .ok()?;
    let commit = String::from_utf8(out.stdout).ok()?.trim().to_owned();
    (out.status.success() && !commit.is_empty()).then_some(commit)
}

/// `2026-12-02T18:40:00Z` from seconds since the epoch (UTC; the days-to-civil conversion of
/// H. Hinnant's "chrono-Compatible Low-Level Date Algorithms"), to need no date crate here.
fn rfc3339(epoch: u64) -> String {
    let (days, secs) = (epoch / 86_400, epoch % 86_400);
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        secs / 3_600,
        secs / 60 % 60,
        secs % 60
    )
}
