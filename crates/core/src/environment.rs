//! Every environment variable quarry-core reads, in one place, so a newcomer (or a packager)
//! finds them all here and a test can see what the engine depends on. Each function reads its
//! variable when called: the CLI and tests set them before opening a library.
//!
//! | variable | what it does |
//! |---|---|
//! | `QUARRY_DATA_DIR` | the library's data directory (default: the platform's data dir) |
//! | `QUARRY_MODELS_DIR` | extra model folders, `:`-separated, searched before the data dir's |
//! | `ORT_DYLIB_PATH` | the ONNX Runtime library to load instead of the installed one |
//! | `QUARRY_ORT_THREADS` | ONNX Runtime threads per model (default: every core) |
//! | `QUARRY_EMBED_MODEL_BATCH` | most texts per embedding model run, length-sorted (default: this CPU's calibration, see `embed::calibration`) |
//! | `QUARRY_HF_ENDPOINT`, `HF_ENDPOINT` | the model hub's base URL |
//! | `HF_TOKEN` | a hub token, sent only to the hub's host |
//! | `QUARRY_PYTHON` | the Python that runs code tools and `pip download` (default `python3`) |
//! | `QUARRY_BWRAP` | bubblewrap's path, or `none` to turn the sandbox tier off |
//! | `QUARRY_UNCONFINED_CODE_TOOLS` | `admin`: where the OS cannot confine code tools (no user namespaces, seccomp or Landlock), the administrator may still run them |
//! | `OMP_WAIT_POLICY` | read to warn when llama.cpp's OpenMP threads will spin |
//! | `QUARRY_LLM_DEVICE` | where the embedded chat model runs: `auto` (the first GPU with room, else the CPU), `cpu`, or a device's name (`Vulkan0`); see `llm::device` |
//! | `QUARRY_EMBED_DEVICE` | where embedding and reranking models run: `auto` (the GPU through ONNX Runtime's CUDA execution provider when the installed runtime has it, else the CPU), `cpu`, `cuda` or `cuda:N`; see `embed::device` |
//! | `TESSDATA_PREFIX` | Tesseract's language data folder for OCR (default: Debian's and other usual places) |
//!
//! An OpenAI-compatible backend's API key is read from the variable its configuration names
//! ([`configured_secret`]), never stored in the library.

use std::ffi::OsString;
use std::path::PathBuf;

/// A variable's value, treating an empty one as unset.
fn non_empty(name: &str) -> Option<OsString> {
    std::env::var_os(name).filter(|v| !v.is_empty())
}

/// A variable parsed as a positive count.
fn positive_count(name: &str) -> Option<usize> {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .filter(|n| *n > 0)
}

/// `TESSDATA_PREFIX`: Tesseract's language data (the folder itself, or its parent).
pub fn tessdata_prefix() -> Option<PathBuf> {
    non_empty("TESSDATA_PREFIX").map(PathBuf::from)
}

/// `QUARRY_DATA_DIR`.
pub fn data_dir() -> Option<PathBuf> {
    non_empty("QUARRY_DATA_DIR").map(PathBuf::from)
}

/// `QUARRY_MODELS_DIR`, split like `PATH`.
pub fn models_dirs() -> Vec<PathBuf> {
    non_empty("QUARRY_MODELS_DIR")
        .map(|list| std::env::split_paths(&list).collect())
        .unwrap_or_default()
}

/// `ORT_DYLIB_PATH`.
pub fn ort_dylib_path() -> Option<PathBuf> {
    non_empty("ORT_DYLIB_PATH").map(PathBuf::from)
}

/// `QUARRY_ORT_THREADS`.
pub fn ort_threads() -> Option<usize> {
    positive_count("QUARRY_ORT_THREADS")
}

/// `QUARRY_EMBED_MODEL_BATCH`.
pub fn embed_model_batch() -> Option<usize> {
    positive_count("QUARRY_EMBED_MODEL_BATCH")
}

/// `QUARRY_EMBED_MEMORY_MIB`: the resident memory the embedding calibration keeps within.
pub fn embed_memory_mib() -> Option<u64> {
    positive_count("QUARRY_EMBED_MEMORY_MIB").map(|n| n as u64)
}

/// `QUARRY_EMBED_INT8=0` keeps an embedding model's int8-stored weights multiplied in f32, as
/// the model file says (see `embed::int8_matmul`); anything else, or unset, runs them in int8.
pub fn embed_int8_products() -> bool {
    std::env::var("QUARRY_EMBED_INT8").map_or(true, |v| v.trim() != "0")
}

/// The variable that places the embedded chat model (`llm::device`).
pub const LLM_DEVICE: &str = "QUARRY_LLM_DEVICE";

/// `QUARRY_LLM_DEVICE`, as set (`None`: unset).
pub fn llm_device() -> Option<String> {
    std::env::var(LLM_DEVICE).ok()
}

/// The environment variable that picks where embedding models run.
pub const EMBED_DEVICE: &str = "QUARRY_EMBED_DEVICE";

/// `QUARRY_EMBED_DEVICE`, as set (`None`: unset).
pub fn embed_device() -> Option<String> {
    std::env::var(EMBED_DEVICE).ok()
}

/// `QUARRY_EMBED_DEVICE` keeps embedding models on the CPU (`cpu`, any case).
pub fn embed_device_is_cpu() -> bool {
    embed_device().is_some_and(|v| v.trim().eq_ignore_ascii_case("cpu"))
}

/// `QUARRY_HF_ENDPOINT`, else `HF_ENDPOINT`.
pub fn hf_endpoint() -> Option<String> {
    ["QUARRY_HF_ENDPOINT", "HF_ENDPOINT"]
        .iter()
        .find_map(|name| std::env::var(name).ok().filter(|v| !v.is_empty()))
}

/// `HF_TOKEN`.
pub fn hf_token() -> Option<String> {
    std::env::var("HF_TOKEN")
        .ok()
        .filter(|v| !v.trim().is_empty())
}

/// The hub's variables by name (`QUARRY_HF_ENDPOINT`, `HF_ENDPOINT`, `HF_TOKEN`), for the
/// hub settings that tests build from a map instead; any other name reads as unset.
pub fn hub_variable(name: &str) -> Option<String> {
    match name {
        "QUARRY_HF_ENDPOINT" | "HF_ENDPOINT" | "HF_TOKEN" => std::env::var(name).ok(),
        _ => None,
    }
}

/// `QUARRY_PYTHON`.
pub fn python() -> Option<PathBuf> {
    non_empty("QUARRY_PYTHON").map(PathBuf::from)
}

/// What `QUARRY_BWRAP` says about bubblewrap.
pub enum BwrapSetting {
    /// Unset: look for `bwrap` on the `PATH`.
    Search,
    /// `none`: no sandbox tier.
    Off,
    /// This program.
    At(PathBuf),
}

/// `QUARRY_BWRAP`.
pub fn bwrap() -> BwrapSetting {
    match non_empty("QUARRY_BWRAP") {
        None => BwrapSetting::Search,
        Some(v) if v == "none" => BwrapSetting::Off,
        Some(v) => BwrapSetting::At(PathBuf::from(v)),
    }
}

/// Whether `QUARRY_UNCONFINED_CODE_TOOLS` is `admin`.
pub fn unconfined_code_tools_for_admin() -> bool {
    std::env::var("QUARRY_UNCONFINED_CODE_TOOLS").is_ok_and(|v| v.trim() == "admin")
}

/// A program on the `PATH`.
pub fn on_path(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(program))
            .find(|p| p.is_file())
    })
}

/// Whether `OMP_WAIT_POLICY` is set.
pub fn omp_wait_policy_set() -> bool {
    std::env::var_os("OMP_WAIT_POLICY").is_some()
}

/// The secret in the variable a configuration names (an API key), if set.
pub fn configured_secret(variable: &str) -> Option<String> {
    std::env::var(variable).ok()
}
