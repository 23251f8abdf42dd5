//! The library's single-writer lock: a file lock on `writer.lock` that says who holds it.
//!
//! The OS releases it when the holder dies (even by `kill -9`), so a crash never leaves a
//! library locked.

use std::collections::HashSet;
use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};
use std::sync::{LazyLock, Mutex};

use crate::error::{Error, Result};

/// Held while a process writes the library.
pub(crate) struct WriterLock {
    _file: File,
    path: PathBuf,
}

impl WriterLock {
    /// Takes the lock, or says which process holds it.
    pub(crate) fn acquire(data_dir: &Path) -> Result<WriterLock> {
        let path = data_dir.join("writer.lock");
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| Error::io(&path, e))?;
        let mine = format!("pid {} ", std::process::id());
        if held_here().contains(&path) {
            // Another thread of this process writes (the desktop app's watcher): no point
            // waiting out a fork, say so at once.
            return Err(Error::WriterBusy {
                data_dir: data_dir.to_path_buf(),
                holder: format!("pid {} (this process)", std::process::id()),
            });
        }
        let started = std::time::Instant::now();
        loop {
            match file.try_lock() {
                Ok(()) => break,
                Err(TryLockError::WouldBlock) => {}
                Err(TryLockError::Error(e)) => return Err(Error::io(&path, e)),
            }
            let mut holder = String::new();
            let _ = file.rewind();
            let _ = file.read_to_string(&mut holder);
            // A child process forked by this one (a code-tool worker starting) shares the lock
            // until it execs, so a lock this process just released can look held by itself
            // for a moment: wait that out rather than report ourselves as the holder.
            if holder.starts_with(&mine) && started.elapsed() < std::time::Duration::from_secs(2) {
                std::thread::sleep(std::time::Duration::from_millis(10));
                continue;
            }
            {
                return Err(Error::WriterBusy {
                    data_dir: data_dir.to_path_buf(),
                    holder: if holder.trim().is_empty() {
                        "unknown process".into()
                    } else {
                        holder.trim().to_string()
                    },
                });
            }
        }
        let me = format!(
            "pid {} ({})",
            std::process::id(),
            std::env::args().collect::<Vec<_>>().join(" ")
        );
        let write = |file: &mut File| -> std::io::Result<()> {
            file.set_len(0)?;
            file.rewind()?;
            file.write_all(me.as_bytes())?;
            file.flush()
        };
        write(&mut file).map_err(|e| Error::io(PathBuf::from(&path), e))?;
        held_here().insert(path.clone());
        Ok(WriterLock { _file: file, path })
    }
}

/// The locks this process holds now, by lock-file path.
fn held_here() -> std::sync::MutexGuard<'static, HashSet<PathBuf>> {
    static HELD: LazyLock<Mutex<HashSet<PathBuf>>> = LazyLock::new(Default::default);
    HELD.lock().unwrap_or_else(|e| e.into_inner())
}

impl Drop for WriterLock {
    fn drop(&mut self) {
        held_here().remove(&self.path);
    }
}
