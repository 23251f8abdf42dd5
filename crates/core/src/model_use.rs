//! The library's face for models as a whole: who uses a model (collections, retrieval tools'
//! rerankers, orchestrator configurations' embedded backends), so one in use is never removed
//! from under them.

use std::path::PathBuf;

use crate::error::{Error, Result};
use crate::orchestrator::{BackendConfig, OrchestratorConfig};
use crate::tools::ToolType;
use crate::Library;

impl Library {
    /// Who uses the model `id`, in words: collections embedded (or being re-embedded) with
    /// it, retrieval tools that rerank with it, configurations whose modes answer with it
    /// (applied or drafted).
    pub fn model_users(&self, id: &str) -> Result<Vec<String>> {
        let mut users = Vec::new();
        for c in self.collections()? {
            if c.embedding_model.as_deref() == Some(id) {
                users.push(format!("collection `{}`", c.name));
            } else if c.pending_model.as_deref() == Some(id) {
                users.push(format!(
                    "collection `{}` (being re-embedded with it)",
                    c.name
                ));
            }
        }
        for summary in self.tools(Some(ToolType::Retrieval), None)? {
            let reranks = self
                .tool(&summary.slug)?
                .retrieval_settings()
                .ok()
                .and_then(|s| s.rerank)
                .is_some_and(|r| r.model == id);
            if reranks {
                users.push(format!("tool `{}` (its reranker)", summary.slug));
            }
        }
        // A mode answering with `auto` uses the model it stands for now.
        let auto = crate::llm::speed::choose(self.models()).model;
        for name in self.orchestrator_configs()? {
            let applied = self
                .orchestrator_revision(&name, None)
                .ok()
                .map(|r| r.config);
            let draft = self.orchestrator_draft(&name).ok();
            let modes: Vec<String> = [applied, draft]
                .iter()
                .flatten()
                .flat_map(|config| modes_answering_with(config, id, &auto))
                .collect();
            if let Some(mode) = modes.first() {
                users.push(format!(
                    "orchestrator configuration `{name}` (mode `{mode}`)"
                ));
            }
        }
        Ok(users)
    }

    /// Removes an installed model, unless something uses it ([`Error::ModelInUse`] names
    /// them); returns the folder removed.
    pub fn remove_model(&self, id: &str) -> Result<PathBuf> {
        self.models().find(id)?;
        let users = self.model_users(id)?;
        if !users.is_empty() {
            return Err(Error::ModelInUse {
                model: id.to_string(),
                users,
            });
        }
        self.models().remove(id)
    }
}

/// The modes of `config` whose embedded backend is the model `id` (or `auto`, standing for
/// the model `auto` now).
fn modes_answering_with(config: &OrchestratorConfig, id: &str, auto: &str) -> Vec<String> {
    let answers_with =
        |model: &str| model == id || (model == crate::llm::speed::AUTO && auto == id);
    config
        .modes
        .iter()
        .filter(
            |m| matches!(&m.backend, BackendConfig::Embedded { model, .. } if answers_with(model)),
        )
        .map(|m| m.name.clone())
        .collect()
}
