//! Embedding models a server runs (llama-server `--embedding`, vLLM, text-embeddings-inference,
//! LM Studio, Ollama): registered like an install, as a folder whose record says where the
//! server is instead of listing files. The record keeps the server's vector for a probe text,
//! the model's identity: the embedder checks it before use, so a server that now runs another
//! model never adds its vectors to this one's.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::catalogue::{read_record, write_record, InstalledModel};
use super::import::check_import_id;
use super::install::{replace_dir, staging_dir};
use super::{ModelKind, Models};
use crate::error::{Error, Result};

/// Texts per request unless the registration says otherwise.
pub const DEFAULT_SERVED_BATCH: usize = 32;
/// Requests in flight at once unless the registration says otherwise.
pub const DEFAULT_SERVED_CONCURRENCY: usize = 2;

/// Where a served embedding model is and how to ask it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServedModel {
    /// The API base: `http://127.0.0.1:8080/v1` (OpenAI-compatible) or the server's root
    /// (`http://127.0.0.1:11434`, Ollama).
    pub url: String,
    /// The wire protocol.
    pub api: ServedApi,
    /// The model name sent with every request.
    pub model: String,
    /// The environment variable holding the API key, if the server wants one (the key itself
    /// is never written down).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_env: Option<String>,
    /// Texts per request.
    pub batch: usize,
    /// Requests in flight at once.
    pub concurrency: usize,
    /// The server's unit vector for a fixed probe text when the model was
    /// registered: its identity.
    #[serde(default)]
    pub probe: Vec<f32>,
}

/// The wire protocol of a served model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ServedApi {
    /// `POST {url}/embeddings`.
    Openai,
    /// Ollama's `POST {url}/api/embed`.
    Ollama,
}

impl Models {
    /// Installs the record of a served model whose server answered `probe` (a unit vector)
    /// for the probe text: its size becomes the model's dimension, the vector its identity.
    /// An id already installed is refused (its vectors are another model's). Asking the server
    /// is `quarry_core::register_served`'s part.
    pub(crate) fn install_served(
        &self,
        id: &str,
        served: ServedModel,
        probe: Vec<f32>,
    ) -> Result<InstalledModel> {
        let model = InstalledModel {
            id: id.to_string(),
            kind: ModelKind::Embedding,
            dimension: Some(probe.len()),
            pooling: None,
            // The server truncates to its own window (Ollama's `truncate`, llama-server's
            // batch size); chunks are cut well under 512 tokens.
            max_tokens: 512,
            origin: format!(
                "served:{} {} ({})",
                served.api.name(),
                served.url,
                served.model
            ),
            files: Vec::new(),
            served: Some(ServedModel { probe, ..served }),
            dir: PathBuf::new(),
        };
        let staging = staging_dir(self.install_dir(), id)?;
        write_record(&staging, &model)?;
        let target = self.install_dir().join(id);
        replace_dir(&staging, &target)?;
        read_record(&target)
    }

    /// Why `id` and `served` cannot be registered, if they cannot: an unusable id, one
    /// already installed, or a batch or concurrency of 0.
    pub(crate) fn check_served(&self, id: &str, served: &ServedModel) -> Result<()> {
        let invalid = |reason: String| Error::InvalidSetting {
            field: "id".into(),
            reason,
        };
        check_import_id(id).map_err(invalid)?;
        if self.find(id).is_ok() || self.install_dir().join(id).exists() {
            return Err(invalid(format!(
                "`{id}` is already installed; a new model needs a new id, so its vectors never \
                 mix with the old one's (or `quarry models remove {id}` first)"
            )));
        }
        if served.batch == 0 || served.concurrency == 0 {
            return Err(Error::InvalidSetting {
                field: if served.batch == 0 {
                    "batch"
                } else {
                    "concurrency"
                }
                .into(),
                reason: "must be at least 1".into(),
            });
        }
        Ok(())
    }
}

impl ServedApi {
    /// `openai` or `ollama`.
    pub fn name(self) -> &'static str {
        match self {
            ServedApi::Openai => "openai",
            ServedApi::Ollama => "ollama",
        }
    }
}
