//! Embedding ([`Embedder`]) and reranking ([`Reranker`]) with installed models on ONNX
//! Runtime, loaded from the pinned shared library. The catalogue and installs are
//! [`crate::models`].

mod embedder;
mod rerank;
mod runtime;

pub use embedder::{normalized, Embedder};
pub use rerank::Reranker;

// The models API lived here before `crate::models`; these keep `embed::…` paths working.
#[doc(no_inline)]
pub use crate::models::{
    default_embedding_model, default_llm_model, fix_command, manifest, sha256_file, spec,
    FetchProgress, InstalledFile, InstalledModel, ModelKind, ModelListing, ModelSpec, Models,
    RECORD_FILE, REQUIRED_FILES, RUNTIME_ID,
};
