//! Text → vector with an installed embedding model, through fastembed on ONNX Runtime.

use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};

use fastembed::{
    InitOptionsUserDefined, Pooling, QuantizationMode, TextEmbedding, TokenizerFiles,
    UserDefinedEmbeddingModel,
};

use super::runtime::environment;
use crate::error::{Error, Result};
use crate::models::{InstalledModel, ModelKind, Models};

/// How many recent query vectors are kept (a query costs a model run; the GUI repeats them).
const QUERY_CACHE_ENTRIES: usize = 512;

/// Texts per model run. Measured with MiniLM int8 on 2 cores (`quarry bench embed --batch`):
/// 50.6 chunks/s one at a time, 29.7 in pairs, 22.4 in eights, 17.2 in 32s: padding every text
/// to the longest of its batch, and attention's quadratic cost on it, outweigh what batching
/// saves. Running one at a time also quantises each passage's activations alone, exactly as a
/// query is. `QUARRY_EMBED_MODEL_BATCH` overrides it.
fn model_batch() -> usize {
    crate::environment::embed_model_batch().unwrap_or(1)
}

/// A loaded embedding model. Cheap to share (`Arc`); one inference at a time.
pub struct Embedder {
    model: InstalledModel,
    dimension: usize,
    session: Mutex<TextEmbedding>,
    query_cache: Mutex<lru::LruCache<String, Arc<[f32]>>>,
}

impl std::fmt::Debug for Embedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Embedder")
            .field("model", &self.model.id)
            .field("dimension", &self.dimension)
            .finish()
    }
}

/// Reads the tokenizer set fastembed expects from a model folder.
pub(crate) fn tokenizer_files(model: &InstalledModel) -> Result<TokenizerFiles> {
    let read = |name: &str| {
        let path = model.file(name);
        std::fs::read(&path).map_err(|_| Error::ModelFileBad {
            path,
            problem: "missing".into(),
            fix: model.fix_command(),
        })
    };
    Ok(TokenizerFiles {
        tokenizer_file: read("tokenizer.json")?,
        config_file: read("config.json")?,
        special_tokens_map_file: read("special_tokens_map.json")?,
        tokenizer_config_file: read("tokenizer_config.json")?,
    })
}

/// ONNX Runtime threads: `QUARRY_ORT_THREADS`, else every core.
pub(crate) fn ort_threads(requested: Option<usize>) -> usize {
    requested
        .filter(|n| *n > 0)
        .or_else(crate::environment::ort_threads)
        .unwrap_or_else(|| {
            std::thread::available_parallelism()
                .map(NonZeroUsize::get)
                .unwrap_or(2)
        })
}

impl Embedder {
    /// Loads and checks the installed model `id` (files verified against their sha256).
    pub fn load(models: &Models, id: &str, threads: Option<usize>) -> Result<Embedder> {
        let model = models.find_kind(id, ModelKind::Embedding)?;
        model.verify()?;
        let dimension = model.dimension.ok_or_else(|| Error::InvalidModel {
            path: model.dir.clone(),
            reason: "its record has no dimension".into(),
        })?;
        let env = environment(&models.runtime_library()?)?;
        let onnx_path = model.file("model.onnx");
        let onnx = std::fs::read(&onnx_path).map_err(|e| Error::io(&onnx_path, e))?;
        let pooling = match model.pooling.as_deref() {
            Some("cls") => Pooling::Cls,
            _ => Pooling::Mean,
        };
        // Batches are formed by the caller; fastembed refuses to split a batch for dynamically
        // quantised models, so it is told "none" and given one batch at a time.
        let user_model = UserDefinedEmbeddingModel::new(onnx, tokenizer_files(&model)?)
            .with_pooling(pooling)
            .with_quantization(QuantizationMode::None);
        let options = InitOptionsUserDefined::new()
            .with_environment(env)
            .with_max_length(model.max_tokens)
            .with_intra_threads(ort_threads(threads));
        let session =
            TextEmbedding::try_new_from_user_defined(user_model, options).map_err(|e| {
                Error::InvalidModel {
                    path: onnx_path.clone(),
                    reason: format!("ONNX Runtime cannot load it: {e}"),
                }
            })?;
        Ok(Embedder {
            model,
            dimension,
            session: Mutex::new(session),
            query_cache: Mutex::new(lru::LruCache::new(
                NonZeroUsize::new(QUERY_CACHE_ENTRIES).expect("non-zero"),
            )),
        })
    }

    /// The model's id.
    pub fn id(&self) -> &str {
        &self.model.id
    }

    /// Vector size.
    pub fn dimension(&self) -> usize {
        self.dimension
    }

    /// Embeds texts (in model runs of [`model_batch`] texts); every vector has unit length (so
    /// dot product = cosine).
    pub fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let mut session = self.session.lock().unwrap_or_else(|e| e.into_inner());
        let mut vectors = Vec::with_capacity(texts.len());
        for group in texts.chunks(model_batch()) {
            vectors.extend(session.embed(group, Some(group.len())).map_err(|e| {
                Error::Inference {
                    model: self.model.id.clone(),
                    reason: e.to_string(),
                }
            })?);
        }
        drop(session);
        vectors
            .into_iter()
            .map(|v| {
                if v.len() != self.dimension {
                    return Err(Error::Inference {
                        model: self.model.id.clone(),
                        reason: format!(
                            "it produced {} numbers per text, its record says {}",
                            v.len(),
                            self.dimension
                        ),
                    });
                }
                Ok(normalized(v))
            })
            .collect()
    }

    /// Embeds a query, from the cache when it was asked recently.
    pub fn embed_query(&self, text: &str) -> Result<Arc<[f32]>> {
        if let Some(hit) = self
            .query_cache
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(text)
        {
            return Ok(hit.clone());
        }
        let vector: Arc<[f32]> = self
            .embed(&[text])?
            .pop()
            .ok_or_else(|| Error::Internal("no vector for the query".into()))?
            .into();
        self.query_cache
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .put(text.to_string(), vector.clone());
        Ok(vector)
    }
}

/// Scales to unit length (a zero vector stays zero).
pub fn normalized(mut v: Vec<f32>) -> Vec<f32> {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        v.iter_mut().for_each(|x| *x /= norm);
    }
    v
}
