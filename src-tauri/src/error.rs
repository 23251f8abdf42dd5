//! The one error type commands return: quarry-core's code, kind and message, as the UI shows
//! them. The shell's own failures (a dialog, the opener) use codes of their own, listed in
//! [`ShellError`], with a kind chosen the same way core chooses one.

use quarry_core::ErrorKind;
use serde::Serialize;

/// A failed command, serialised as `{code, kind, message}`.
#[derive(Debug, Clone, Serialize, specta::Type)]
pub struct CommandError {
    pub code: String,
    pub kind: ErrorKind,
    pub message: String,
}

/// Failures that only the desktop shell has.
#[derive(Debug, Clone, Copy)]
pub enum ShellError {
    /// A result whose chunk left the index.
    ChunkNotFound,
    /// An indexed file that is gone from disk.
    FileMissing,
    /// The opener could not run.
    OpenFailed,
    /// The user said no in a native dialog.
    Cancelled,
    /// `desktop-settings.json` that does not parse, or a setting out of range.
    InvalidSettings,
}

impl ShellError {
    fn code_and_kind(self) -> (&'static str, ErrorKind) {
        match self {
            ShellError::ChunkNotFound => ("chunk_not_found", ErrorKind::NotFound),
            ShellError::FileMissing => ("file_missing", ErrorKind::NotFound),
            ShellError::OpenFailed => ("open_failed", ErrorKind::Unavailable),
            ShellError::Cancelled => ("cancelled", ErrorKind::InvalidInput),
            ShellError::InvalidSettings => ("invalid_settings", ErrorKind::InvalidInput),
        }
    }

    /// This failure, with what happened.
    pub fn with(self, message: impl Into<String>) -> CommandError {
        let (code, kind) = self.code_and_kind();
        CommandError {
            code: code.to_string(),
            kind,
            message: message.into(),
        }
    }
}

impl CommandError {
    /// A bug in the shell (a task that panicked, a dialog that broke).
    pub fn internal(message: impl Into<String>) -> Self {
        quarry_core::Error::Internal(message.into()).into()
    }
}

impl From<quarry_core::Error> for CommandError {
    fn from(e: quarry_core::Error) -> Self {
        CommandError {
            code: e.code().to_string(),
            kind: e.kind(),
            message: e.to_string(),
        }
    }
}

pub type CommandResult<T> = Result<T, CommandError>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn core_errors_keep_their_code_and_kind() {
        let busy: CommandError = quarry_core::Error::WriterBusy {
            data_dir: "/lib".into(),
            holder: "pid 7 (quarry index --watch)".into(),
        }
        .into();
        let json = serde_json::to_value(&busy).unwrap();
        assert_eq!(json["code"], "writer_busy");
        assert_eq!(json["kind"], "unavailable");
        assert!(json["message"].as_str().unwrap().contains("pid 7"));
    }

    #[test]
    fn shell_errors_carry_a_kind() {
        let json = serde_json::to_value(ShellError::FileMissing.with("gone")).unwrap();
        assert_eq!(json["code"], "file_missing");
        assert_eq!(json["kind"], "not_found");
        let io: CommandError =
            quarry_core::Error::io("/x/desktop-settings.json", std::io::Error::other("denied"))
                .into();
        assert_eq!(io.code, "io_error");
    }
}
