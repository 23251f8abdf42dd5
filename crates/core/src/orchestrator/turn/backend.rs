//! Opening the backend a mode names, and falling back to the extractive answer when it cannot
//! be opened.

use std::sync::{Arc, Mutex, OnceLock};

use super::setup::Turn;
use super::{OpenBackend, TurnEvent};
use crate::llm::embedded::{EmbeddedBackend, EmbeddedConfig};
use crate::llm::openai::{OpenAiBackend, OpenAiConfig};
use crate::llm::speed::{self, Choice, AUTO};
use crate::llm::ChatBackend;
use crate::models::Models;
use crate::orchestrator::config::BackendConfig;
use crate::Result;

/// Opens the backend a mode names; `None` for extractive.
pub fn open_backend(
    models: &Models,
    config: &BackendConfig,
) -> Result<Option<Arc<dyn ChatBackend>>> {
    open_backend_with_key(models, config, None)
}

/// [`open_backend`], an OpenAI-compatible server given `api_key` (which a caller keeps in
/// the OS keyring, say) instead of the one in the variable its configuration names.
pub fn open_backend_with_key(
    models: &Models,
    config: &BackendConfig,
    api_key: Option<&str>,
) -> Result<Option<Arc<dyn ChatBackend>>> {
    Ok(match config {
        BackendConfig::Extractive => None,
        BackendConfig::Embedded { model, threads } => {
            let mut cfg = EmbeddedConfig::named(models, model)?;
            cfg.threads = *threads;
            Some(EmbeddedBackend::shared(cfg)? as Arc<dyn ChatBackend>)
        }
        BackendConfig::Openai {
            base_url,
            model,
            api_key_env,
            grammar,
        } => {
            let mut cfg = OpenAiConfig::openai(base_url, model).with_grammar(*grammar);
            let from_env = || {
                api_key_env
                    .as_deref()
                    .and_then(crate::environment::configured_secret)
            };
            if let Some(key) = api_key.map(str::to_string).or_else(from_env) {
                cfg = cfg.with_api_key(key);
            }
            Some(shared_http(cfg)?)
        }
        BackendConfig::Ollama { base_url, model } => {
            Some(shared_http(OpenAiConfig::ollama(base_url, model))?)
        }
    })
}

/// `config` with an embedded model of [`AUTO`] replaced by the model it stands for now, and
/// the choice (`None` when nothing was chosen).
pub fn resolve_auto(models: &Models, config: BackendConfig) -> (BackendConfig, Option<Choice>) {
    match config {
        BackendConfig::Embedded { model, threads } if model == AUTO => {
            let choice = speed::choose(models);
            let config = BackendConfig::Embedded {
                model: choice.model.clone(),
                threads,
            };
            (config, Some(choice))
        }
        other => (other, None),
    }
}

type HttpBackend = (OpenAiConfig, Arc<OpenAiBackend>);

/// One HTTP backend per configuration for the life of the process, so what it learned (a
/// server that refuses tools) holds for every later turn.
fn shared_http(config: OpenAiConfig) -> Result<Arc<dyn ChatBackend>> {
    static BACKENDS: OnceLock<Mutex<Vec<HttpBackend>>> = OnceLock::new();
    let mut backends = BACKENDS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    if let Some((_, b)) = backends.iter().find(|(c, _)| *c == config) {
        return Ok(b.clone());
    }
    let backend = Arc::new(OpenAiBackend::new(config.clone())?);
    backends.push((config, backend.clone()));
    Ok(backend)
}

impl Turn<'_> {
    /// The turn's backend; one that cannot be opened is a notice, and the answer extractive.
    pub(super) fn open_backend_or_notice(
        &mut self,
        open: &OpenBackend<'_>,
        config: &BackendConfig,
        on_event: &mut dyn FnMut(TurnEvent<'_>),
    ) -> Result<Option<Arc<dyn ChatBackend>>> {
        announce_loading(self.ctx.models, config, on_event);
        match open(config) {
            Ok(backend) => Ok(backend),
            Err(e) => {
                let notice = format!(
                    "{} is not available ({e}); answering extractively from the evidence",
                    config.describe()
                );
                self.notice(&notice, on_event)?;
                Ok(None)
            }
        }
    }
}

/// Says that the embedded model is about to load (a few seconds the first time), with its
/// size, so a window can show it instead of a silent wait.
fn announce_loading(
    models: &Models,
    config: &BackendConfig,
    on_event: &mut dyn FnMut(TurnEvent<'_>),
) {
    let BackendConfig::Embedded { model, .. } = config else {
        return;
    };
    let Ok(cfg) = EmbeddedConfig::named(models, model) else {
        return; // opening it fails with the reason
    };
    if !EmbeddedBackend::is_shared(&cfg.model_path) {
        let bytes = std::fs::metadata(&cfg.model_path).map_or(0, |m| m.len());
        on_event(TurnEvent::Loading {
            model: &cfg.model_id,
            bytes,
        });
    }
}
