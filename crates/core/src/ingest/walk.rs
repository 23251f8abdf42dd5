//! Walking a source folder: which files exist, which are left out and why.
//!
//! Uses the `ignore` crate: `.gitignore`/`.ignore` are respected even outside a git repository,
//! symlinks are followed within the source folder (a loop is reported, not followed forever;
//! see [`LinkBounds`] for links that leave it), hidden entries are recorded as skipped rather
//! than silently dropped, and include/exclude globs are overrides.

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
    /// The device the file is on, with `inode` what the read checks it still opens (see
    /// `outcome::read_checked`): a file swapped for a link after the walk is not read.
    pub device: Option<u64>,
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
            device: device(meta),
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

#[cfg(unix)]
fn device(meta: &std::fs::Metadata) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    Some(meta.dev())
}

#[cfg(not(unix))]
fn device(_meta: &std::fs::Metadata) -> Option<u64> {
    None
}

/// Whether `path` is in a kernel pseudo-filesystem (`/proc`, `/sys`, debugfs…): its files are
/// views of the running system (another process's memory and environment, the kernel's
/// state), never documents, so no link leads there, whatever a source allows.
pub(crate) fn is_pseudo_filesystem(path: &Path) -> bool {
    const PSEUDO_ROOTS: &[&str] = &["/proc", "/sys", "/dev"];
    PSEUDO_ROOTS.iter().any(|root| path.starts_with(root)) || pseudo_filesystem_type(path)
}

/// The filesystem's magic number says it is a pseudo-filesystem (wherever it is mounted).
#[cfg(target_os = "linux")]
fn pseudo_filesystem_type(path: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    // From linux/magic.h: proc, sysfs, debugfs, tracefs, securityfs, cgroup, cgroup2, bpf,
    // devpts, configfs, pstore, efivarfs.
    const PSEUDO_MAGIC: &[i64] = &[
        0x9fa0,
        0x6265_6572,
        0x6462_6720,
        0x7472_6163,
        0x7363_6673,
        0x0027_e0eb,
        0x6367_7270,
        0xcafe_4a11,
        0x1cd1,
        0x6265_6570,
        0x6165_676c,
        0xde5e_81e4,
    ];
    let Ok(c_path) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    let mut fs: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: a valid NUL-terminated path and a zeroed statfs the call fills in.
    if unsafe { libc::statfs(c_path.as_ptr(), &mut fs) } != 0 {
        return false;
    }
    #[allow(clippy::unnecessary_cast)]
    PSEUDO_MAGIC.contains(&(fs.f_type as i64))
}

#[cfg(not(target_os = "linux"))]
fn pseudo_filesystem_type(_path: &Path) -> bool {
    false
}

/// Where a source's symbolic links may lead. A link is a way around a collection's boundary:
/// a link in a public folder to a file of a restricted one would publish it, and a link to the
/// library's data directory would index the library itself (and, watched, re-index it on every
/// write).
#[derive(Debug, Clone, Default)]
pub(crate) struct LinkBounds {
    /// The source's folder, canonical: links within it are always followed.
    pub root: PathBuf,
    /// Follow links that leave the folder (the source's `follow_links`).
    pub follow_outside: bool,
    /// Never reached through a link, even then: the library's data directory and the other
    /// sources' folders (canonical).
    pub forbidden: Vec<PathBuf>,
}

impl LinkBounds {
    /// Why the link at `link` is not followed, if it is not (a dangling link is left to the
    /// walk, which reports it).
    fn refusal(&self, link: &Path) -> Option<String> {
        let target = std::fs::canonicalize(link).ok()?;
        if is_pseudo_filesystem(&target) {
            return Some(format!(
                "symbolic link to {}, in a kernel pseudo-filesystem (/proc, /sys…), which is never read through a link",
                target.display()
            ));
        }
        if target.starts_with(&self.root) {
            return None;
        }
        if let Some(other) = self.forbidden.iter().find(|f| target.starts_with(f)) {
            return Some(format!(
                "symbolic link to {}, inside {} (the library's data or another source's folder), which is never read through a link",
                target.display(),
                other.display()
            ));
        }
        (!self.follow_outside).then(|| {
            format!(
                "symbolic link to {}, outside the source folder (a source can be allowed to follow such links)",
                target.display()
            )
        })
    }
}

/// Whether `path` (which may no longer exist) is inside `dir`, links resolved: the watcher
/// ignores the library's own files however their events are named.
pub(crate) fn resolves_inside(path: &Path, dir: &Path) -> bool {
    path.ancestors()
        .find_map(|p| std::fs::canonicalize(p).ok())
        .is_some_and(|real| real.starts_with(dir))
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
    links: &LinkBounds,
) -> Result<Vec<WalkItem>> {
    let (excludes, includes) = overrides(root, include, exclude)?;
    // Hidden entries and links that may not be followed are found here and recorded, so
    // `quarry status` can say why a file is absent; the walk does not descend into them.
    let hidden: Arc<Mutex<Vec<PathBuf>>> = Arc::default();
    let hidden_seen = hidden.clone();
    let refused: Arc<Mutex<Vec<(PathBuf, String)>>> = Arc::default();
    let refused_seen = refused.clone();
    let bounds = links.clone();
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
            if entry.depth() > 0 && entry.path_is_symlink() {
                if let Some(why) = bounds.refusal(path) {
                    if in_scope {
                        if let Ok(mut r) = refused_seen.lock() {
                            r.push((path.to_path_buf(), why));
                        }
                    }
                    return false;
                }
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
        items.push(WalkItem::Skipped {
            stat: link_stat(&path),
            reason: "hidden",
            message: "hidden (name starts with a dot)".into(),
        });
    }
    let refused = std::mem::take(&mut *refused.lock().unwrap_or_else(|p| p.into_inner()));
    for (path, message) in refused {
        items.push(WalkItem::Skipped {
            stat: link_stat(&path),
            reason: "symlink_outside",
            message,
        });
    }
    Ok(items)
}

/// The entry's own stat (a link's, not its target's).
fn link_stat(path: &Path) -> FileStat {
    std::fs::symlink_metadata(path)
        .map(|m| FileStat::of(path, &m))
        .unwrap_or(FileStat {
            path: path.to_path_buf(),
            size: 0,
            mtime_ns: 0,
            inode: None,
            device: None,
        })
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
