//! API keys of the assistant's servers, kept out of the library's files: in the OS keyring
//! (the Secret Service on Linux, the Keychain, the Credential Manager) where there is one;
//! where there is none, in a file only this user can read, and the window says which.

use std::path::{Path, PathBuf};

use crate::error::CommandResult;

const SERVICE: &str = "quarry";

/// Where a key was kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeptIn {
    Keyring,
    /// A file readable by its owner only (no keyring on this system).
    File(PathBuf),
}

impl KeptIn {
    /// In words, for the window.
    pub fn describe(&self) -> String {
        match self {
            KeptIn::Keyring => "the API key is in the system keyring".into(),
            KeptIn::File(path) => format!(
                "no system keyring here: the API key is in {}, readable only by you",
                path.display()
            ),
        }
    }
}

/// The keyring's name for the key of the server at `base_url`.
fn account(base_url: &str) -> String {
    format!("chat backend {}", base_url.trim_end_matches('/'))
}

/// The fallback file of the server at `base_url`.
fn key_file(data_dir: &Path, base_url: &str) -> PathBuf {
    let name: String = account(base_url)
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    data_dir.join("secrets").join(format!("{name}.key"))
}

/// Keeps `key` for the server at `base_url`: in the keyring, else in an owner-only file.
pub fn store(data_dir: &Path, base_url: &str, key: &str) -> CommandResult<KeptIn> {
    let in_keyring =
        keyring::Entry::new(SERVICE, &account(base_url)).and_then(|entry| entry.set_password(key));
    match in_keyring {
        Ok(()) => {
            // A key kept before in a file, when there was no keyring, goes.
            let _ = std::fs::remove_file(key_file(data_dir, base_url));
            Ok(KeptIn::Keyring)
        }
        Err(e) => {
            tracing::info!(error = %e, "no usable keyring: keeping the API key in a file");
            let path = key_file(data_dir, base_url);
            write_owner_only(&path, key)?;
            Ok(KeptIn::File(path))
        }
    }
}

/// The key kept for the server at `base_url`, if any.
pub fn load(data_dir: &Path, base_url: &str) -> Option<String> {
    let from_keyring = keyring::Entry::new(SERVICE, &account(base_url))
        .and_then(|entry| entry.get_password())
        .ok();
    from_keyring.or_else(|| {
        std::fs::read_to_string(key_file(data_dir, base_url))
            .ok()
            .map(|k| k.trim().to_string())
    })
}

/// Writes `text` to `path`, created readable and writable by its owner only (its folder too).
fn write_owner_only(path: &Path, text: &str) -> CommandResult<()> {
    use std::io::Write;
    let io = |p: &Path, e| quarry_core::Error::io(p, e);
    let dir = path.parent().expect("a file in a folder");
    let mut folder = std::fs::DirBuilder::new();
    folder.recursive(true);
    let mut file = std::fs::OpenOptions::new();
    file.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
        folder.mode(0o700);
        file.mode(0o600);
    }
    folder.create(dir).map_err(|e| io(dir, e))?;
    file.open(path)
        .and_then(|mut f| f.write_all(text.as_bytes()))
        .map_err(|e| io(path, e))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_kept_in_the_keyring_or_an_owner_only_file_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("http://127.0.0.1:9/v1/test-{}", std::process::id());
        let kept = store(dir.path(), &url, "sk-test-secret").unwrap();
        assert_eq!(load(dir.path(), &url).as_deref(), Some("sk-test-secret"));
        match &kept {
            // CI has no Secret Service running: the file, owner-only, says so.
            KeptIn::File(path) => {
                assert!(path.starts_with(dir.path().join("secrets")));
                #[cfg(unix)]
                {
                    use std::os::unix::fs::PermissionsExt;
                    let mode =
                        |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
                    assert_eq!(mode(path), 0o600);
                    assert_eq!(mode(path.parent().unwrap()), 0o700);
                }
                assert!(kept.describe().contains("readable only by you"));
            }
            KeptIn::Keyring => {
                assert!(!key_file(dir.path(), &url).exists());
                let _ = keyring::Entry::new(SERVICE, &account(&url))
                    .and_then(|e| e.delete_credential());
            }
        }
        assert_eq!(load(dir.path(), "http://127.0.0.1:9/other"), None);
    }
}
