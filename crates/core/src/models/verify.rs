//! Integrity: sha256 of files, and checks of installed files against their record or the
//! manifest's pinned checksums.

use std::io::Read;
use std::path::{Path, PathBuf};

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

pub(super) fn check_file(
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
        let (found, _) = sha256_file(path)?;
        if !found.eq_ignore_ascii_case(expected) {
            return Err(bad(format!(
                "corrupt (sha256 {found}, expected {expected})"
            )));
        }
    }
    Ok(())
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
