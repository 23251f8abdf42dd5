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

/// The graph to load and whether it is the optimised copy or the int8 rewrite: either may be
/// dropped for the installed file if ONNX Runtime refuses it.
pub(super) struct Graph {
    pub bytes: Vec<u8>,
    pub optimised: bool,
    pub rewritten: bool,
}

/// The installed model file as it is.
pub(super) fn installed_graph(model: &InstalledModel) -> Result<Vec<u8>> {
    let path = model.file("model.onnx");
    std::fs::read(&path).map_err(|e| Error::io(&path, e))
}

/// The installed graph with its int8-stored weights multiplied in int8 where it has any (see
/// `int8_matmul`) and `QUARRY_EMBED_INT8` does not say otherwise, else as installed.
pub(super) fn original(model: &InstalledModel) -> Result<Graph> {
    let bytes = installed_graph(model)?;
    let int8 = crate::environment::embed_int8_products();
    Ok(
        match int8.then(|| super::int8_matmul::rewrite(&bytes)).flatten() {
            Some((rewritten, products)) => {
                tracing::debug!(model = %model.id, products, "int8 products");
                Graph {
                    bytes: rewritten,
                    optimised: false,
                    rewritten: true,
                }
            }
            None => Graph {
                bytes,
                optimised: false,
                rewritten: false,
            },
        },
    )
}

/// The model's graph to load: the optimised copy for this CPU and runtime when one is there
/// and intact, else the original with its int8-stored weights multiplied in int8 (see
/// `int8_matmul`; making the copy on the way, best effort).
pub(super) fn model_bytes(
    model: &InstalledModel,
    env: &Environment,
    runtime: &Path,
    models_dir: &Path,
) -> Result<Graph> {
    let int8 = crate::environment::embed_int8_products();
    let original = || original(model);
    let Some(source) = model.files.iter().find(|f| f.path == "model.onnx") else {
        return original();
    };
    let key = blake3::hash(
        format!(
            "{}\n{}\n{}{}",
            crate::models::cpu_model(),
            runtime.display(),
            source.sha256,
            if int8 { "\nint8 products 1" } else { "" }
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
                rewritten: int8,
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
