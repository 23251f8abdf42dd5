//! An optimised copy of an ONNX model, made once per CPU model, runtime and model: ONNX
//! Runtime's level-3 graph optimisation of MiniLM takes about 65 ms of every session's start (a
//! one-shot search pays it in full), and an already optimised graph has little left to rewrite.
//! The copy may use this CPU's instructions (ONNX Runtime warns of that when it writes one),
//! hence the key. Copies live in the models folder's `optimized/`, beside (never inside) the
//! model folders, which stay as installed. It is checked like an installed file: its sha256, noted when it was made, is
//! compared through the kept record of unchanged files, and anything amiss means the original.

use std::path::Path;

use ort::environment::Environment;
use ort::session::builder::GraphOptimizationLevel;
use ort::session::Session;

use crate::error::{Error, Result};
use crate::models::InstalledModel;

/// The graph to load and whether it is the optimised copy.
pub(super) struct Graph {
    pub bytes: Vec<u8>,
    pub optimised: bool,
}

/// The model's graph to load: the optimised copy for this CPU and runtime when one is there
/// and intact, else the original (making the copy on the way, best effort).
pub(super) fn model_bytes(
    model: &InstalledModel,
    env: &Environment,
    runtime: &Path,
    models_dir: &Path,
) -> Result<Graph> {
    let original_path = model.file("model.onnx");
    let original = || {
        std::fs::read(&original_path)
            .map(|bytes| Graph {
                bytes,
                optimised: false,
            })
            .map_err(|e| Error::io(&original_path, e))
    };
    let Some(source) = model.files.iter().find(|f| f.path == "model.onnx") else {
        return original();
    };
    let key = blake3::hash(
        format!(
            "{}\n{}\n{}",
            crate::models::cpu_model(),
            runtime.display(),
            source.sha256
        )
        .as_bytes(),
    )
    .to_hex();
    let dir = models_dir.join(OPTIMIZED_DIR);
    let copy = dir.join(format!("{}-{}.onnx", model.id, &key[..16]));
    let noted = copy.with_extension("sha256");
    if let Ok(sha256) = std::fs::read_to_string(&noted) {
        let intact = crate::models::check_file(&copy, Some(sha256.trim()), None, "").is_ok();
        if let (true, Ok(bytes)) = (intact, std::fs::read(&copy)) {
            return Ok(Graph {
                bytes,
                optimised: true,
            });
        }
    }
    let graph = original()?;
    if let Err(e) = make(env, &graph.bytes, &copy, &noted) {
        tracing::warn!(model = %model.id, "no optimised copy of the model: {e}");
    }
    Ok(graph)
}

/// Removes the optimised copies of `model` (one ONNX Runtime could not load).
pub(super) fn forget(model: &InstalledModel, models_dir: &Path) {
    let prefix = format!("{}-", model.id);
    if let Ok(entries) = std::fs::read_dir(models_dir.join(OPTIMIZED_DIR)) {
        for entry in entries.flatten() {
            if entry.file_name().to_string_lossy().starts_with(&prefix) {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }
}

/// The folder of optimised copies, in a models folder.
pub const OPTIMIZED_DIR: &str = "optimized";

/// Writes the optimised graph of `onnx` to `copy` and its sha256 to `noted`.
fn make(env: &Environment, onnx: &[u8], copy: &Path, noted: &Path) -> Result<()> {
    let failed = |what: &str, e: &dyn std::fmt::Display| Error::InvalidModel {
        path: copy.to_path_buf(),
        reason: format!("{what}: {e}"),
    };
    if let Some(dir) = copy.parent() {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    }
    // Two sessions may make the copy at once, in this process or another.
    static MADE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let tmp = copy.with_extension(format!(
        "tmp{}-{}",
        std::process::id(),
        MADE.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    let written = Session::builder(env)
        .map_err(|e| failed("session", &e))
        .and_then(|b| {
            b.with_optimization_level(GraphOptimizationLevel::Level3)
                .map_err(|e| failed("optimisation level", &e))
        })
        .and_then(|b| {
            b.with_optimized_model_path(&tmp)
                .map_err(|e| failed("optimised model path", &e))
        })
        .and_then(|mut b| {
            b.commit_from_memory(onnx)
                .map_err(|e| failed("optimisation", &e))
        })
        .and_then(|_session| crate::models::sha256_file(&tmp))
        .and_then(|(sha256, _)| {
            std::fs::rename(&tmp, copy).map_err(|e| Error::io(copy, e))?;
            std::fs::write(noted, sha256).map_err(|e| Error::io(noted, e))
        });
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}
