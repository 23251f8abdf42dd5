//! (query, passage) → relevance with an installed cross-encoder, through fastembed.

use std::sync::Mutex;

use fastembed::{OnnxSource, RerankInitOptionsUserDefined, TextRerank, UserDefinedRerankingModel};

use super::embedder::{ort_threads, tokenizer_files};
use super::runtime::environment;
use crate::error::{Error, Result};
use crate::models::{InstalledModel, ModelKind, Models};

/// A loaded cross-encoder. One inference at a time.
pub struct Reranker {
    model: InstalledModel,
    session: Mutex<TextRerank>,
}

impl std::fmt::Debug for Reranker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reranker")
            .field("model", &self.model.id)
            .finish()
    }
}

impl Reranker {
    /// Loads and checks the installed reranker `id`.
    pub fn load(models: &Models, id: &str, threads: Option<usize>) -> Result<Reranker> {
        let model = models.find_kind(id, ModelKind::Reranker)?;
        model.verify()?;
        let request = super::device::Request::from_env()?;
        let runtime = models.runtime_library()?;
        let env = environment(&runtime)?;
        let onnx_path = model.file("model.onnx");
        let (session, placement) =
            super::device::make_on_device(request, &runtime, |providers, _gpu| {
                let user_model = UserDefinedRerankingModel::new(
                    OnnxSource::File(onnx_path.clone()),
                    tokenizer_files(&model)?,
                );
                let options = RerankInitOptionsUserDefined::new()
                    .with_environment(env.clone())
                    .with_execution_providers(providers)
                    .with_max_length(model.max_tokens)
                    .with_intra_threads(ort_threads(threads));
                TextRerank::try_new_from_user_defined(user_model, options).map_err(|e| {
                    Error::InvalidModel {
                        path: onnx_path.clone(),
                        reason: format!("ONNX Runtime cannot load it as a cross-encoder: {e}"),
                    }
                })
            })?;
        tracing::debug!(model = %model.id, device = %placement.label(), "{}", placement.why);
        Ok(Reranker {
            model,
            session: Mutex::new(session),
        })
    }

    /// The model's id.
    pub fn id(&self) -> &str {
        &self.model.id
    }

    /// One score per passage, in the passages' order (higher is more relevant).
    pub fn score(&self, query: &str, passages: &[&str]) -> Result<Vec<f32>> {
        if passages.is_empty() {
            return Ok(Vec::new());
        }
        let results = self
            .session
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .rerank(query, passages, false, Some(16))
            .map_err(|e| Error::Inference {
                model: self.model.id.clone(),
                reason: e.to_string(),
            })?;
        let mut scores = vec![f32::NEG_INFINITY; passages.len()];
        for r in results {
            if let Some(slot) = scores.get_mut(r.index) {
                *slot = r.score;
            }
        }
        Ok(scores)
    }
}
