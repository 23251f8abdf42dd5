//! On-device models: the catalogue and installs ([`Models`]), embedding ([`Embedder`]) and
//! reranking ([`Reranker`]) on ONNX Runtime, loaded from the pinned shared library.

mod embedder;
mod manifest;
mod models;
mod rerank;
mod runtime;

pub use embedder::{normalized, Embedder};
pub use manifest::{
    default_embedding_model, default_llm_model, manifest, spec, ModelKind, ModelSpec,
};
pub use models::{
    fix_command, sha256_file, FetchProgress, InstalledFile, InstalledModel, ModelListing, Models,
    RECORD_FILE, REQUIRED_FILES, RUNTIME_ID,
};
pub use rerank::Reranker;
