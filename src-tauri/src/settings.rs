//! The desktop app's own preferences, in `desktop-settings.json` in the data directory.

use std::path::{Path, PathBuf};

use quarry_core::orchestrator::BackendConfig;
use quarry_core::SearchMode;
use serde::{Deserialize, Serialize};

use crate::error::{CommandResult, ShellError};

/// Light, dark, or whatever the desktop uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default, specta::Type)]
#[serde(rename_all = "snake_case")]
pub enum Theme {
    #[default]
    System,
    Light,
    Dark,
}

/// What the user chose.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, specta::Type)]
#[serde(default, deny_unknown_fields)]
pub struct Settings {
    pub theme: Theme,
    /// The search view's mode when the app starts.
    pub search_mode: SearchMode,
    /// Opens a result at its line: words with `{path}`, `{line}`, `{page}` placeholders
    /// (e.g. `code --goto {path}:{line}`). Empty: the system opener.
    pub open_command: String,
    /// Where the assistant's answers come from (`None`: each mode's own backend). An API key
    /// is never stored here: a server's configuration names the variable that holds it.
    pub chat_backend: Option<BackendConfig>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            theme: Theme::System,
            search_mode: SearchMode::Hybrid,
            open_command: String::new(),
            chat_backend: None,
        }
    }
}

pub fn settings_path(data_dir: &Path) -> PathBuf {
    data_dir.join("desktop-settings.json")
}

/// Reads the settings; a missing file means the defaults, a broken one is an error naming it.
pub fn load(data_dir: &Path) -> CommandResult<Settings> {
    let path = settings_path(data_dir);
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Settings::default()),
        Err(e) => return Err(quarry_core::Error::io(&path, e).into()),
    };
    serde_json::from_str(&text).map_err(|e| {
        ShellError::InvalidSettings.with(format!(
            "{} is not valid settings ({e}); fix or delete it",
            path.display()
        ))
    })
}

/// Checks and writes the settings (atomically: a crash leaves the old file).
pub fn save(data_dir: &Path, settings: &Settings) -> CommandResult<Settings> {
    if !settings.open_command.trim().is_empty() && !settings.open_command.contains("{path}") {
        return Err(ShellError::InvalidSettings
            .with("open_command must contain {path} (e.g. `code --goto {path}:{line}`)"));
    }
    let path = settings_path(data_dir);
    let tmp = path.with_extension("json.tmp");
    let json = serde_json::to_string_pretty(settings).expect("settings serialise");
    std::fs::write(&tmp, json)
        .and_then(|()| std::fs::rename(&tmp, &path))
        .map_err(|e| quarry_core::Error::io(&path, e))?;
    Ok(settings.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_file_gives_defaults_and_saved_settings_read_back() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(load(dir.path()).unwrap(), Settings::default());
        let chosen = Settings {
            theme: Theme::Dark,
            search_mode: SearchMode::Lexical,
            open_command: "code --goto {path}:{line}".into(),
            chat_backend: Some(BackendConfig::Extractive),
        };
        save(dir.path(), &chosen).unwrap();
        assert_eq!(load(dir.path()).unwrap(), chosen);
    }

    #[test]
    fn a_broken_file_is_named_and_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(settings_path(dir.path()), "{\"theme\": \"purple\"}").unwrap();
        let error = load(dir.path()).unwrap_err();
        assert_eq!(error.code, "invalid_settings");
        assert!(
            error.message.contains("desktop-settings.json"),
            "{}",
            error.message
        );
        assert_eq!(
            std::fs::read_to_string(settings_path(dir.path())).unwrap(),
            "{\"theme\": \"purple\"}"
        );
    }

    #[test]
    fn an_open_command_without_a_path_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let bad = Settings {
            open_command: "code --goto".into(),
            ..Settings::default()
        };
        assert!(save(dir.path(), &bad)
            .unwrap_err()
            .message
            .contains("{path}"));
        assert!(!settings_path(dir.path()).exists());
    }
}
