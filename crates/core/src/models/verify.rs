//! Integrity: sha256 of files, and checks of installed files against their record or the
//! manifest's pinned checksums. A file hashed once is not hashed again while the filesystem
//! says it is unchanged (size, mtime, ctime, inode): every process that loads a model would
//! otherwise read its 75 MB (model and runtime) before its first search.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::catalogue::InstalledFile;
use super::manifest::FileSpec;
use crate::error::{Error, Result};

/// sha256 and size of a file.
pub fn sha256_file(path: &Path) -> Result<(String, u64)> {
    let mut file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut total = 0u64;
    loop {
        let n = file.read(&mut buf).map_err(|e| Error::io(path, e))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        total += n as u64;
    }
    Ok((hex(&hasher.finalize()), total))
}

pub(super) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub(crate) fn check_file(
    path: &Path,
    sha256: Option<&str>,
    bytes: Option<u64>,
    fix: &str,
) -> Result<()> {
    let bad = |problem: String| Error::ModelFileBad {
        path: path.to_path_buf(),
        problem,
        fix: fix.to_string(),
    };
    let meta = std::fs::metadata(path).map_err(|_| bad("missing".into()))?;
    if let Some(bytes) = bytes {
        if meta.len() != bytes {
            return Err(bad(format!(
                "{} bytes, not the {bytes} it was installed with (truncated or replaced)",
                meta.len()
            )));
        }
    }
    if let Some(expected) = sha256 {
        let stamp = Stamp::of(&meta);
        if hashed_before(path, &stamp).is_some_and(|h| h.eq_ignore_ascii_case(expected)) {
            return Ok(());
        }
        let (found, _) = sha256_file(path)?;
        if !found.eq_ignore_ascii_case(expected) {
            return Err(bad(format!(
                "corrupt (sha256 {found}, expected {expected})"
            )));
        }
        remember_hash(path, &stamp, &found);
    }
    Ok(())
}

/// The record, in a models folder, of the files below it already hashed.
const HASHED_RECORD: &str = ".verified.json";

/// What the filesystem says of a file. If none of it changed, neither did the bytes: a write
/// moves the ctime, which only root can set back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Stamp {
    len: u64,
    mtime_ns: i128,
    ctime_ns: i128,
    inode: u64,
    device: u64,
}

impl Stamp {
    fn of(meta: &std::fs::Metadata) -> Stamp {
        #[cfg(unix)]
        {
            use std::os::unix::fs::MetadataExt;
            let ns = |secs: i64, nanos: i64| i128::from(secs) * 1_000_000_000 + i128::from(nanos);
            Stamp {
                len: meta.len(),
                mtime_ns: ns(meta.mtime(), meta.mtime_nsec()),
                ctime_ns: ns(meta.ctime(), meta.ctime_nsec()),
                inode: meta.ino(),
                device: meta.dev(),
            }
        }
        #[cfg(not(unix))]
        {
            let mtime_ns = meta
                .modified()
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_nanos() as i128);
            Stamp {
                len: meta.len(),
                mtime_ns,
                ctime_ns: 0,
                inode: 0,
                device: 0,
            }
        }
    }
}

/// One hashed file.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Hashed {
    stamp: Stamp,
    sha256: String,
}

/// Where the record of `file` is: the models folder above the model's own folder.
fn record_of(file: &Path) -> Option<PathBuf> {
    Some(file.parent()?.parent()?.join(HASHED_RECORD))
}

fn read_hashed(record: &Path) -> BTreeMap<String, Hashed> {
    std::fs::read(record)
        .ok()
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .unwrap_or_default()
}

/// The sha256 `file` had when it was last hashed, if the filesystem says it is unchanged.
fn hashed_before(file: &Path, stamp: &Stamp) -> Option<String> {
    let record = read_hashed(&record_of(file)?);
    let known = record.get(&file.to_string_lossy().into_owned())?;
    (known.stamp == *stamp).then(|| known.sha256.clone())
}

/// Notes that `file`, as `stamp` describes it, hashed to `sha256`. Best effort: a folder that
/// cannot be written (a system install) only means hashing again next time.
fn remember_hash(file: &Path, stamp: &Stamp, sha256: &str) {
    let Some(record) = record_of(file) else {
        return;
    };
    let mut hashed = read_hashed(&record);
    hashed.insert(
        file.to_string_lossy().into_owned(),
        Hashed {
            stamp: stamp.clone(),
            sha256: sha256.to_string(),
        },
    );
    write_record(&record, &hashed);
}

/// Writes a record of the models folder as JSON, whole or not at all (through a temporary
/// file). Best effort: the records only save work, so a folder that cannot be written (a
/// system install) means doing that work again next time.
pub(crate) fn write_record(record: &Path, value: &impl Serialize) {
    let tmp = record.with_extension(format!("tmp{}", std::process::id()));
    let written = serde_json::to_vec_pretty(value)
        .map_err(std::io::Error::other)
        .and_then(|json| std::fs::write(&tmp, json))
        .and_then(|()| std::fs::rename(&tmp, record));
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
}

/// Like [`check_file`], once per path and process (the runtime library is large and every
/// session would otherwise hash it again).
pub(super) fn check_file_cached(path: &Path, sha256: Option<&str>, fix: &str) -> Result<()> {
    static CHECKED: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());
    if CHECKED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .any(|p| p == path)
    {
        return Ok(());
    }
    check_file(path, sha256, None, fix)?;
    CHECKED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(path.to_path_buf());
    Ok(())
}

pub(super) fn verified(path: &Path, spec: &FileSpec) -> Result<InstalledFile> {
    let (sha256, bytes) = sha256_file(path)?;
    if let Some(expected) = &spec.sha256 {
        if &sha256 != expected {
            return Err(Error::ModelFileBad {
                path: path.to_path_buf(),
                problem: format!("corrupt after download (sha256 {sha256}, expected {expected})"),
                fix: "retry the fetch".into(),
            });
        }
    }
    Ok(InstalledFile {
        path: spec.path.clone(),
        bytes,
        sha256,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unchanged_file_is_not_hashed_again_and_a_rewritten_one_is() {
        let models = tempfile::tempdir().unwrap();
        let dir = models.path().join("some-model");
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("model.onnx");
        std::fs::write(&file, b"the weights").unwrap();
        let (sha, bytes) = sha256_file(&file).unwrap();
        check_file(&file, Some(&sha), Some(bytes), "fix").unwrap();
        let stamp = Stamp::of(&std::fs::metadata(&file).unwrap());
        assert_eq!(hashed_before(&file, &stamp).as_deref(), Some(sha.as_str()));
        assert!(models.path().join(HASHED_RECORD).is_file());

        // The same size and the same mtime, other bytes: the ctime gives it away.
        let mtime = std::fs::metadata(&file).unwrap().modified().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::write(&file, b"the WEIGHTS").unwrap();
        std::fs::File::options()
            .write(true)
            .open(&file)
            .unwrap()
            .set_modified(mtime)
            .unwrap();
        let e = check_file(&file, Some(&sha), Some(bytes), "fix").unwrap_err();
        assert!(e.to_string().contains("corrupt"), "{e}");
    }
}
