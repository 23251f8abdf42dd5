//! Walking a source folder: which files exist, which are left out and why.
//!
//! Uses the `ignore` crate: `.gitignore`/`.ignore` are respected even outside a git repository,
//! symlinks are followed (a loop is reported, not followed forever), hidden entries are
//! recorded as skipped rather than silently dropped, and include/exclude globs are overrides.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use ignore::overrides::{Override, OverrideBuilder};
use ignore::WalkBuilder;

use crate::error::{Error, Result};

/// One entry the walk found.
#[derive(Debug, Clone)]
pub(crate) enum WalkItem {
    /// A regular file to consider.
    File(FileStat),
    /// Left out on purpose (hidden, not a regular file, too large).
    Skipped {
        stat: FileStat,
        reason: &'static str,
        message: String,
    },
    /// Could not be walked (unreadable folder, symlink loop, vanished).
    Failed {
        path: PathBuf,
        reason: &'static str,
        message: String,
    },
}

impl WalkItem {
    pub(crate) fn path(&self) -> &Path {
        match self {
            WalkItem::File(s) | WalkItem::Skipped { stat: s, .. } => &s.path,
            WalkItem::Failed { path, .. } => path,
        }
    }
}

/// Size, modification time and inode of a file.
#[derive(Debug, Clone)]
pub(crate) struct FileStat {
    pub path: PathBuf,
    pub size: u64,
    pub mtime_ns: i64,
    /// The inode number where the platform has one: a file renamed over another keeps its
    /// own size and mtime, which may equal the old file's, but never its inode.
    pub inode: Option<i64>,
}

impl FileStat {
    pub(crate) fn of(path: &Path, meta: &std::fs::Metadata) -> FileStat {
        let mtime_ns = meta
            .modified()
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map(|d| d.as_nanos() as i64)
            .unwrap_or(0);
        FileStat {
            path: path.to_path_buf(),
            size: meta.len(),
            mtime_ns,
            inode: inode(meta),
        }
    }
}

/// Builds a source's matchers, rejecting a bad glob by name: the excludes as ignore-style
/// overrides, the includes as a separate whitelist. (An include cannot be an override: the
/// `ignore` crate lets a whitelist override beat `.gitignore`, and an include must not.)
pub(crate) fn overrides(
    root: &Path,
    include: &[String],
    exclude: &[String],
) -> Result<(Override, Option<Override>)> {
    let includes = if include.is_empty() {
        None
    } else {
        let mut builder = OverrideBuilder::new(root);
        for glob in include {
            builder.add(glob).map_err(|e| Error::InvalidGlob {
                glob: glob.clone(),
                reason: e.to_string(),
            })?;
        }
        Some(builder.build().map_err(|e| Error::InvalidGlob {
            glob: include.join(", "),
            reason: e.to_string(),
        })?)
    };
    let mut builder = OverrideBuilder::new(root);
    for glob in exclude {
        builder
            .add(&format!("!{glob}"))
            .map_err(|e| Error::InvalidGlob {
                glob: glob.clone(),
                reason: e.to_string(),
            })?;
    }
    let excludes = builder.build().map_err(|e| Error::InvalidGlob {
        glob: exclude.join(", "),
        reason: e.to_string(),
    })?;
    Ok((excludes, includes))
}

#[cfg(unix)]
fn inode(meta: &std::fs::Metadata) -> Option<i64> {
    use std::os::unix::fs::MetadataExt;
    Some(meta.ino() as i64)
}

#[cfg(not(unix))]
fn inode(_meta: &std::fs::Metadata) -> Option<i64> {
    None
}

fn is_hidden(path: &Path) -> bool {
    path.file_name()
        .map(|n| n.as_encoded_bytes().first() == Some(&b'.'))
        .unwrap_or(false)
}

/// Walks the source `root`, limited to `scopes` (the root itself, or files and folders inside
/// it that changed). The walk always starts at the root and descends only along the way to a
/// scope, so the same rules apply to a scope as in a full scan: a change inside a hidden,
/// excluded or gitignored folder is ignored as the full scan would ignore it.
pub(crate) fn walk(
    root: &Path,
    scopes: &[PathBuf],
    include: &[String],
    exclude: &[String],
    max_file_size: u64,
) -> Result<Vec<WalkItem>> {
    let (excludes, includes) = overrides(root, include, exclude)?;
    // Hidden entries are found here and recorded, so `quarry status` can say why a dotfile is
    // absent; the walk does not descend into them.
    let hidden: Arc<Mutex<Vec<PathBuf>>> = Arc::default();
    let hidden_seen = hidden.clone();
    let scopes_owned = scopes.to_vec();
    let mut builder = WalkBuilder::new(root);
    builder
        .hidden(false)
        .follow_links(true)
        .require_git(false)
        .git_global(false)
        .overrides(excludes)
        .filter_entry(move |entry| {
            let path = entry.path();
            let in_scope = scopes_owned.iter().any(|s| path.starts_with(s));
            if !in_scope && !scopes_owned.iter().any(|s| s.starts_with(path)) {
                return false; // neither inside a scope nor on the way to one
            }
            if entry.depth() > 0 && is_hidden(path) {
                if in_scope {
                    if let Ok(mut h) = hidden_seen.lock() {
                        h.push(path.to_path_buf());
                    }
                }
                return false;
            }
            true
        });
    let mut items = Vec::new();
    for result in builder.build() {
        match result {
            Ok(entry) => {
                let path = entry.path();
                let Some(file_type) = entry.file_type() else {
                    continue;
                };
                if file_type.is_dir() {
                    continue;
                }
                if includes
                    .as_ref()
                    .is_some_and(|inc| !inc.matched(path, false).is_whitelist())
                {
                    continue;
                }
                let meta = match entry.metadata() {
                    Ok(m) => m,
                    Err(e) => {
                        items.push(walk_failure(path.to_path_buf(), &e));
                        continue;
                    }
                };
                let stat = FileStat::of(path, &meta);
                if !file_type.is_file() {
                    items.push(WalkItem::Skipped {
                        stat,
                        reason: "not_regular_file",
                        message: "not a regular file (FIFO, socket or device)".into(),
                    });
                } else if meta.len() > max_file_size {
                    items.push(WalkItem::Skipped {
                        message: format!(
                            "{} MiB is over the {} MiB limit",
                            meta.len() >> 20,
                            max_file_size >> 20
                        ),
                        stat,
                        reason: "too_large",
                    });
                } else {
                    items.push(WalkItem::File(stat));
                }
            }
            Err(err) => {
                let path = error_path(&err).unwrap_or_else(|| root.to_path_buf());
                items.push(walk_failure(path, &err));
            }
        }
    }
    let hidden = std::mem::take(&mut *hidden.lock().unwrap_or_else(|p| p.into_inner()));
    for path in hidden {
        let stat = std::fs::symlink_metadata(&path)
            .map(|m| FileStat::of(&path, &m))
            .unwrap_or(FileStat {
                path: path.clone(),
                size: 0,
                mtime_ns: 0,
                inode: None,
            });
        items.push(WalkItem::Skipped {
            stat,
            reason: "hidden",
            message: "hidden (name starts with a dot)".into(),
        });
    }
    Ok(items)
}

fn walk_failure(path: PathBuf, err: &ignore::Error) -> WalkItem {
    let (reason, message) = if is_loop(err) {
        ("symlink_loop", format!("symbolic link loop: {err}"))
    } else {
        match err.io_error().map(|e| e.kind()) {
            Some(std::io::ErrorKind::PermissionDenied) => {
                ("unreadable", format!("permission denied: {err}"))
            }
            Some(std::io::ErrorKind::NotFound) => {
                ("vanished", format!("disappeared during the walk: {err}"))
            }
            _ => ("walk_error", err.to_string()),
        }
    };
    WalkItem::Failed {
        path,
        reason,
        message,
    }
}

fn is_loop(err: &ignore::Error) -> bool {
    match err {
        ignore::Error::Loop { .. } => true,
        ignore::Error::WithPath { err, .. }
        | ignore::Error::WithDepth { err, .. }
        | ignore::Error::WithLineNumber { err, .. } => is_loop(err),
        _ => false,
    }
}

fn error_path(err: &ignore::Error) -> Option<PathBuf> {
    match err {
        ignore::Error::WithPath { path, .. } => Some(path.clone()),
        ignore::Error::Loop { child, .. } => Some(child.clone()),
        ignore::Error::WithDepth { err, .. } | ignore::Error::WithLineNumber { err, .. } => {
            error_path(err)
        }
        _ => None,
    }
}
