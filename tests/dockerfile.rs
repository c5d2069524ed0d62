//! The Dockerfile's build stage, run outside a container: its base images cannot be pulled
//! here, so this test runs the stage's own lines (the same commands, the same flags) on this
//! machine (Debian 12, the builder image's release) and checks what the image would hold.
//!
//! The build context is what `.dockerignore` lets through, `COPY` copies from it, `ARG`s become
//! the environment, and each `RUN` runs with `sh -c` in a fresh directory standing for
//! `WORKDIR`. Two release builds with fat LTO from nothing: about 15 minutes on 2 cores, so the
//! test is ignored by default; `scripts/test.sh --image` runs it.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

const COMMIT: &str = "0123456789abcdef0123456789abcdef01234567";
/// 2026-12-02T18:40:00Z.
const EPOCH: &str = "1796236800";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// One instruction of a Dockerfile, continuation lines joined and comments dropped.
#[derive(Debug)]
struct Instruction {
    keyword: String,
    args: String,
}

fn instructions(dockerfile: &str) -> Vec<Instruction> {
    let mut out = Vec::new();
    let mut current = String::new();
    for line in dockerfile.lines() {
        let t = line.trim();
        if t.starts_with('#') || (t.is_empty() && current.is_empty()) {
            continue;
        }
        match t.strip_suffix('\\') {
            Some(head) => {
                current.push_str(head);
                current.push(' ');
            }
            None => {
                current.push_str(t);
                let (keyword, args) = current.split_once(' ').unwrap_or((&current, ""));
                out.push(Instruction {
                    keyword: keyword.to_ascii_uppercase(),
                    args: args.trim().to_string(),
                });
                current.clear();
            }
        }
    }
    out
}

/// `FROM … AS name` stages: name → instructions after the `FROM`.
fn stages(all: Vec<Instruction>) -> BTreeMap<String, Vec<Instruction>> {
    let mut out: BTreeMap<String, Vec<Instruction>> = BTreeMap::new();
    let mut name = String::new();
    for (n, i) in all.into_iter().enumerate() {
        if i.keyword == "FROM" {
            let words: Vec<&str> = i.args.split_whitespace().collect();
            name = match words.as_slice() {
                [_, as_, stage] if as_.eq_ignore_ascii_case("as") => stage.to_string(),
                _ => format!("#{n}"),
            };
            out.entry(name.clone()).or_default();
        } else if !name.is_empty() {
            out.get_mut(&name).unwrap().push(i);
        }
    }
    out
}

/// Whether `.dockerignore` lets `path` (relative, `/`-separated) into the build context: the
/// last pattern that matches decides, `!` lets in, a pattern matches the path and everything
/// under it, `*` matches every path.
fn in_context(rules: &[(bool, String)], path: &str) -> bool {
    let mut included = true;
    for (allow, pattern) in rules {
        let pattern = pattern.trim_end_matches('/');
        if pattern == "*" || path == pattern || path.starts_with(&format!("{pattern}/")) {
            included = *allow;
        }
    }
    included
}

fn copy_tree(rules: &[(bool, String)], from: &Path, rel: &str, to: &Path) {
    if !in_context(rules, rel) {
        return;
    }
    if from.is_dir() {
        std::fs::create_dir_all(to).unwrap();
        for entry in std::fs::read_dir(from).unwrap() {
            let entry = entry.unwrap();
            let name = entry.file_name().into_string().unwrap();
            copy_tree(
                rules,
                &entry.path(),
                &format!("{rel}/{name}"),
                &to.join(&name),
            );
        }
    } else {
        std::fs::copy(from, to).unwrap_or_else(|e| panic!("COPY {rel}: {e}"));
    }
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Section names of an ELF file (`readelf -S`).
fn sections(file: &Path) -> Vec<String> {
    run(Command::new("readelf").args(["-S", "--wide"]).arg(file))
        .lines()
        .filter_map(|l| {
            let l = l.trim_start();
            l.starts_with('[')
                .then(|| l.split_once(']').map(|(_, r)| r.trim_start()))
                .flatten()
                .and_then(|r| r.split_whitespace().next())
                .filter(|n| n.starts_with('.'))
                .map(str::to_owned)
        })
        .collect()
}

/// CRC-32 (IEEE 802.3, reflected) as `.gnu_debuglink` records it.
fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = (crc >> 1) ^ (0xEDB8_8320 & (crc & 1).wrapping_neg());
        }
    }
    !crc
}

#[test]
fn crc32_is_the_ieee_one() {
    assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
}

#[test]
fn the_dockerfile_parses_into_the_stages_the_test_runs() {
    let stages = stages(instructions(
        &std::fs::read_to_string(root().join("Dockerfile")).unwrap(),
    ));
    let build = &stages["build"];
    let runs = build.iter().filter(|i| i.keyword == "RUN").count();
    assert_eq!(runs, 2, "{build:#?}");
    assert!(stages.contains_key("debug-info"), "{:?}", stages.keys());
    let copies: Vec<&str> = build
        .iter()
        .filter(|i| i.keyword == "COPY")
        .map(|i| i.args.as_str())
        .collect();
    assert!(copies.contains(&"build.rs build.rs"), "{copies:?}");
}

#[test]
#[ignore = "two fat-LTO release builds (about 15 minutes); scripts/test.sh --image runs it"]
fn the_build_stage_makes_a_stripped_binary_with_a_debug_link() {
    let dockerfile = std::fs::read_to_string(root().join("Dockerfile")).unwrap();
    let rules: Vec<(bool, String)> = std::fs::read_to_string(root().join(".dockerignore"))
        .unwrap()
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| match l.strip_prefix('!') {
            Some(p) => (true, p.to_string()),
            None => (false, l.to_string()),
        })
        .collect();
    let stages = stages(instructions(&dockerfile));
    let work = common::temp_dir("dockerfile");

    // The container's environment: no cargo settings of the test run leak in.
    let mut env: BTreeMap<String, String> = std::env::vars()
        .filter(|(k, _)| {
            k == "CARGO_HOME"
                || k == "RUSTUP_HOME"
                || !(k.starts_with("CARGO_") || k.starts_with("RUST"))
        })
        .collect();
    let workdir = work.join("src");
    std::fs::create_dir_all(&workdir).unwrap();
    for i in &stages["build"] {
        match i.keyword.as_str() {
            "WORKDIR" => assert_eq!(i.args, "/src", "the test maps only WORKDIR /src"),
            "ARG" => {
                let (name, default) = i.args.split_once('=').unwrap_or((&i.args, ""));
                let value = match name {
                    "WEIR_GIT_COMMIT" => COMMIT.to_string(),
                    "SOURCE_DATE_EPOCH" => EPOCH.to_string(),
                    _ => default.to_string(),
                };
                env.insert(name.to_string(), value);
            }
            "COPY" => {
                let parts: Vec<&str> = i.args.split_whitespace().collect();
                let (dest, sources) = parts.split_last().unwrap();
                // Docker's rules: a directory's contents go to DEST; a file goes into DEST
                // when DEST ends with `/` (or is `.`, or several sources are given), else
                // becomes DEST.
                let into_dir = dest.ends_with('/') || *dest == "." || sources.len() > 1;
                for source in sources {
                    let from = root().join(source);
                    let to = if from.is_dir() || !into_dir {
                        workdir.join(dest)
                    } else {
                        workdir
                            .join(dest)
                            .join(Path::new(source).file_name().unwrap())
                    };
                    std::fs::create_dir_all(to.parent().unwrap()).unwrap();
                    assert!(
                        in_context(&rules, source),
                        "COPY {source}: .dockerignore keeps it out of the context"
                    );
                    copy_tree(&rules, &root().join(source), source, &to);
                }
            }
            "RUN" => {
                eprintln!("RUN {}", i.args);
                let status = Command::new("sh")
                    .arg("-c")
                    .arg(&i.args)
                    .current_dir(&workdir)
                    .env_clear()
                    .envs(&env)
                    .status()
                    .unwrap();
                assert!(status.success(), "RUN {} failed: {status}", i.args);
            }
            other => panic!("the build stage has {other}, which this test does not run"),
        }
    }

    // What the later stages copy out of the build stage exists.
    for (name, stage) in &stages {
        for i in stage.iter().filter(|i| i.args.starts_with("--from=build ")) {
            let source = i.args.split_whitespace().nth(1).unwrap();
            let path = match source.strip_prefix("/src/") {
                Some(rel) => workdir.join(rel),
                None => PathBuf::from(source), // the builder's own files, such as /usr/bin/sleep
            };
            assert!(
                path.is_file(),
                "stage {name}: COPY --from=build {source}: missing"
            );
        }
    }

    let weir = workdir.join("out/weir");
    let debug = workdir.join("out/weir.debug");
    assert_eq!(
        run(Command::new(&weir).arg("crds")),
        std::fs::read_to_string(root().join("crds/weir.dev.yaml")).unwrap(),
        "`weir crds` of the image's binary"
    );
    let version: serde_json::Value =
        serde_json::from_str(&run(Command::new(&weir).args(["version", "-o", "json"]))).unwrap();
    assert_eq!(version["commit"], COMMIT, "{version}");
    assert_eq!(version["buildDate"], "2026-12-02T18:40:00Z", "{version}");
    assert_eq!(version["version"], env!("CARGO_PKG_VERSION"), "{version}");

    // Stripped of line tables, symbols kept, linked to its debug file by name and CRC.
    let stripped = sections(&weir);
    // (.debug_gdb_scripts is not debug information: rustc's pointer to gdb's pretty-printers.)
    let debug_info = |s: &&String| s.starts_with(".debug_") && *s != ".debug_gdb_scripts";
    assert!(!stripped.iter().any(|s| debug_info(&s)), "{stripped:?}");
    assert!(stripped.contains(&".symtab".to_string()), "{stripped:?}");
    let link = work.join("debuglink");
    run(Command::new("objcopy")
        .arg(format!("--dump-section=.gnu_debuglink={}", link.display()))
        .arg(&weir)
        .arg(work.join("scratch")));
    let link = std::fs::read(&link).unwrap();
    let name_end = link.iter().position(|&b| b == 0).unwrap();
    assert_eq!(&link[..name_end], b"weir.debug");
    let crc = u32::from_le_bytes(link[link.len() - 4..].try_into().unwrap());
    assert_eq!(
        crc,
        crc32(&std::fs::read(&debug).unwrap()),
        "debug link CRC"
    );
    let debug_sections = sections(&debug);
    assert!(
        debug_sections.contains(&".debug_line".to_string()),
        "{debug_sections:?}"
    );
    let full = std::fs::metadata(workdir.join("target/release/weir"))
        .unwrap()
        .len();
    let small = std::fs::metadata(&weir).unwrap().len();
    eprintln!("target/release/weir {full} bytes, out/weir {small} bytes");
    assert!(small * 2 < full, "stripped {small} bytes of {full}");

    // WEIR_DOCKERFILE_OUT=PATH keeps the image's binary (benchmarks compare it with others).
    if let Some(keep) = std::env::var_os("WEIR_DOCKERFILE_OUT") {
        std::fs::copy(&weir, keep).unwrap();
    }
    let _ = std::fs::remove_dir_all(&work);
}
