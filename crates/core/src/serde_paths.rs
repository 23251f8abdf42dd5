//! Paths in JSON: as strings, lossily for names that are not UTF-8 (JSON has no bytes). A leaf
//! every record type may use (`#[serde(serialize_with = "crate::serde_paths::path")]`).

use std::path::{Path, PathBuf};

/// Serialises a path as a string.
pub(crate) fn path<S: serde::Serializer>(path: &Path, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&path.to_string_lossy())
}

/// [`path`] for a list.
pub(crate) fn paths<S: serde::Serializer>(paths: &[PathBuf], s: S) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeSeq;
    let mut seq = s.serialize_seq(Some(paths.len()))?;
    for p in paths {
        seq.serialize_element(&p.to_string_lossy())?;
    }
    seq.end()
}

/// [`path`] for an optional path.
pub(crate) fn opt_path<S: serde::Serializer>(
    path: &Option<PathBuf>,
    s: S,
) -> Result<S::Ok, S::Error> {
    match path {
        Some(p) => s.serialize_some(&p.to_string_lossy()),
        None => s.serialize_none(),
    }
}
