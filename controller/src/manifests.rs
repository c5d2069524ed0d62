//! The manifest-folder source of standalone mode: every `*.yaml`, `*.yml` and `*.json` file of
//! a folder (recursively), multi-document, re-read when it changes. A file that does not parse
//! is reported and its previous good objects are kept.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use crate::store::{Object, Store};

#[derive(Debug)]
struct FileState {
    fingerprint: (SystemTime, u64),
    objects: Vec<Object>,
}

/// A folder of manifests and the last good objects of each file.
#[derive(Debug)]
pub struct ManifestDir {
    dir: PathBuf,
    files: BTreeMap<PathBuf, FileState>,
}

/// What a scan found.
#[derive(Debug, Default)]
pub struct Scan {
    /// Whether any file's objects changed (or a file appeared or went away).
    pub changed: bool,
    /// Files that could not be read or parsed: (path, error). Their previous objects are kept.
    pub errors: Vec<(PathBuf, String)>,
}

fn manifest_files(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name.starts_with('.') {
            continue; // editor swap files, hidden folders
        }
        if path.is_dir() {
            manifest_files(&path, out)?;
        } else if matches!(
            path.extension().and_then(|e| e.to_str()),
            Some("yaml" | "yml" | "json")
        ) {
            out.push(path);
        }
    }
    Ok(())
}

impl ManifestDir {
    /// A folder, not yet read.
    pub fn new(dir: impl Into<PathBuf>) -> ManifestDir {
        ManifestDir {
            dir: dir.into(),
            files: BTreeMap::new(),
        }
    }

    /// Re-reads the files that changed since the last scan.
    pub fn scan(&mut self) -> Scan {
        let mut scan = Scan::default();
        let mut paths = Vec::new();
        if let Err(e) = manifest_files(&self.dir, &mut paths) {
            scan.errors.push((self.dir.clone(), e.to_string()));
            return scan;
        }
        let before = self.files.len();
        self.files.retain(|p, _| paths.contains(p));
        scan.changed |= self.files.len() != before;
        for path in paths {
            let Ok(meta) = std::fs::metadata(&path) else {
                continue;
            };
            let fingerprint = (
                meta.modified().unwrap_or(SystemTime::UNIX_EPOCH),
                meta.len(),
            );
            if self
                .files
                .get(&path)
                .is_some_and(|f| f.fingerprint == fingerprint)
            {
                continue;
            }
            let parsed = std::fs::read_to_string(&path)
                .map_err(|e| e.to_string())
                .and_then(|t| Store::parse_manifests(&t));
            match parsed {
                Ok(objects) => {
                    self.files.insert(
                        path,
                        FileState {
                            fingerprint,
                            objects,
                        },
                    );
                    scan.changed = true;
                }
                Err(e) => {
                    // Keep the last good objects; remember the fingerprint so the error is
                    // reported once per change, not on every scan.
                    match self.files.get_mut(&path) {
                        Some(f) => f.fingerprint = fingerprint,
                        None => {
                            self.files.insert(
                                path.clone(),
                                FileState {
                                    fingerprint,
                                    objects: Vec::new(),
                                },
                            );
                        }
                    }
                    scan.errors.push((path, e));
                }
            }
        }
        scan
    }

    /// The objects of every file, later files overriding earlier ones with the same key.
    pub fn store(&self) -> Store {
        let mut s = Store::default();
        for f in self.files.values() {
            for o in &f.objects {
                s.insert(o.clone());
            }
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_last_good_state_of_a_broken_file() {
        let dir = std::env::temp_dir().join(format!("weir-manifests-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        let svc =
            |name: &str| format!("apiVersion: v1\nkind: Service\nmetadata: {{name: {name}}}\n");
        std::fs::write(dir.join("a.yaml"), svc("a")).unwrap();
        std::fs::write(dir.join("sub/b.yml"), svc("b")).unwrap();
        std::fs::write(dir.join("notes.txt"), "ignored").unwrap();
        let mut m = ManifestDir::new(&dir);
        let s = m.scan();
        assert!(s.changed && s.errors.is_empty());
        assert_eq!(m.store().services.len(), 2);
        assert!(!m.scan().changed, "nothing changed");

        std::fs::write(
            dir.join("a.yaml"),
            "apiVersion: v1\nkind: Service\nmetadata: {name: [broken\n",
        )
        .unwrap();
        let s = m.scan();
        assert_eq!(s.errors.len(), 1);
        assert_eq!(m.store().services.len(), 2, "a's last good state is kept");

        std::fs::remove_file(dir.join("sub/b.yml")).unwrap();
        assert!(m.scan().changed);
        assert_eq!(m.store().services.len(), 1);
        std::fs::remove_dir_all(dir).unwrap();
    }
}
