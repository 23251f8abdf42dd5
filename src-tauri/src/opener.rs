//! Opening a result's file at its place: a configured command (an editor that takes a line),
//! else the system opener. Only files the index holds are ever opened (callers pass a chunk).

use std::path::Path;
use std::process::Command;

use quarry_core::ChunkLocation;

use crate::error::{CommandResult, ShellError};

/// Tests replace the opener with this command (same placeholders as `open_command`), so that
/// no desktop application starts while they run. Debug builds only: a release build never
/// runs a program named by its environment.
#[cfg(debug_assertions)]
pub const TEST_OPENER_ENV: &str = "QUARRY_OPENER";

/// How a file gets opened.
pub enum Opener {
    /// Words of a command, with `{path}`, `{line}` and `{page}` filled in per word.
    Command(String),
    /// xdg-open and friends, through tauri-plugin-opener.
    System,
}

impl Opener {
    /// The opener the user's settings in `data_dir` choose. A broken settings file is an error
    /// naming it: opening with the system opener instead would hide that the user's command is
    /// being ignored.
    pub fn configured(data_dir: &Path) -> CommandResult<Opener> {
        Ok(Opener::choose(
            &crate::settings::load(data_dir)?.open_command,
        ))
    }

    /// The test hook if set, else the user's command, else the system opener.
    pub fn choose(open_command: &str) -> Opener {
        #[cfg(debug_assertions)]
        if let Ok(command) = std::env::var(TEST_OPENER_ENV) {
            if !command.trim().is_empty() {
                return Opener::Command(command);
            }
        }
        if open_command.trim().is_empty() {
            Opener::System
        } else {
            Opener::Command(open_command.to_string())
        }
    }
}

/// The argument list for `template`: split into words first, so a path with spaces stays one
/// argument, and never through a shell.
pub fn command_words(template: &str, path: &Path, location: &ChunkLocation) -> Vec<String> {
    let line = location.line_start.unwrap_or(1).to_string();
    let page = location.page.unwrap_or(1).to_string();
    let path = path.display().to_string();
    template
        .split_whitespace()
        .map(|word| {
            word.replace("{path}", &path)
                .replace("{line}", &line)
                .replace("{page}", &page)
        })
        .collect()
}

/// Runs the command without waiting for it (an editor may stay open); a thread reaps it.
pub fn spawn_command(words: &[String]) -> CommandResult<()> {
    let (program, args) = words
        .split_first()
        .ok_or_else(|| ShellError::OpenFailed.with("the open command is empty"))?;
    let mut child = Command::new(program).args(args).spawn().map_err(|e| {
        ShellError::OpenFailed.with(format!("cannot run `{program}` to open the file: {e}"))
    })?;
    std::thread::spawn(move || child.wait());
    Ok(())
}

/// "notes.md, line 12" or "paper.pdf, page 3".
pub fn describe(path: &Path, location: &ChunkLocation) -> String {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string());
    match (location.page, location.line_start) {
        (Some(page), _) => format!("{name}, page {page}"),
        (None, Some(line)) => format!("{name}, line {line}"),
        (None, None) => name,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_fill_whole_words_and_paths_with_spaces_stay_one_argument() {
        let location = ChunkLocation {
            page: None,
            line_start: Some(12),
            line_end: Some(20),
            byte_start: None,
            byte_end: None,
            ocr_confidence: None,
        };
        let words = command_words(
            "code --goto {path}:{line}",
            Path::new("/home/me/My Notes/a.md"),
            &location,
        );
        assert_eq!(words, vec!["code", "--goto", "/home/me/My Notes/a.md:12"]);
        assert_eq!(describe(Path::new("/x/a.md"), &location), "a.md, line 12");
    }

    #[test]
    fn a_broken_settings_file_is_an_error_not_the_system_opener() {
        let dir = tempfile::tempdir().unwrap();
        let settings = crate::settings::settings_path(dir.path());
        std::fs::write(&settings, "{\"open_command\": 7}").unwrap();
        let error = match Opener::configured(dir.path()) {
            Ok(_) => panic!("a broken settings file chose an opener"),
            Err(error) => error,
        };
        assert_eq!(error.code, "invalid_settings");
        assert!(
            error.message.contains("desktop-settings.json"),
            "{}",
            error.message
        );
    }

    #[test]
    fn a_missing_program_is_a_clear_error() {
        let error = spawn_command(&["/nonexistent/editor".into(), "a".into()]).unwrap_err();
        assert_eq!(error.code, "open_failed");
        assert!(
            error.message.contains("/nonexistent/editor"),
            "{}",
            error.message
        );
    }
}
