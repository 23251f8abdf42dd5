//! The one ONNX Runtime environment of the process, loaded from the pinned shared library.

use std::path::Path;
use std::sync::OnceLock;

use ort::environment::Environment;

use crate::error::{Error, Result};
use crate::models::{fix_command, RUNTIME_ID};

static ENVIRONMENT: OnceLock<std::result::Result<Environment, String>> = OnceLock::new();

/// The shared environment, created on first use from `library`. ONNX Runtime allows one per
/// process, so a later call with another path gets the first one.
pub fn environment(library: &Path) -> Result<Environment> {
    ENVIRONMENT
        .get_or_init(|| {
            let builder = ort::init_from(library)
                .map_err(|e| format!("cannot load `{}`: {e}", library.display()))?;
            builder
                .with_name("quarry")
                .build()
                .map_err(|e| format!("cannot start it from `{}`: {e}", library.display()))
        })
        .clone()
        .map_err(|reason| Error::RuntimeUnavailable {
            reason,
            fix: fix_command(RUNTIME_ID),
        })
}
