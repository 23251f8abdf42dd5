//! The one error type commands return: quarry-core's code and message, as the UI shows them.

use serde::Serialize;

/// A failed command, serialised as `{code, message}`.
#[derive(Debug, Serialize)]
pub struct CommandError {
    pub code: String,
    pub message: String,
}

impl CommandError {
    pub fn new(code: &str, message: impl Into<String>) -> Self {
        CommandError {
            code: code.to_string(),
            message: message.into(),
        }
    }
}

impl From<quarry_core::Error> for CommandError {
    fn from(e: quarry_core::Error) -> Self {
        CommandError::new(e.code(), e.to_string())
    }
}

pub type CommandResult<T> = Result<T, CommandError>;
