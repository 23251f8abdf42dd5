//! The library's single-writer lock: a file lock on `writer.lock` that says who holds it.
//!
//! The OS releases it when the holder dies (even by `kill -9`), so a crash never leaves a
//! library locked.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// Held while a process writes the library.
pub(crate) struct WriterLock {
    _file: File,
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
        Ok(WriterLock { _file: file })
    }
}
