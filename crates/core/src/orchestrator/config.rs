//! An orchestrator configuration: the system prompt, the modes (backend, pipeline, direct
//! evidence tools, `knowledge_search`, budgets) and the gates. Stored as JSON; a draft is
//! edited freely and only an applied revision is used by chats.

use serde::{Deserialize, Serialize};

use super::gates::GateConfig;
use super::knowledge_search::{KnowledgeSearch, KnowledgeSearchConfig};
use crate::names::{Name, NameKind};
use crate::{Error, Result};

/// The configuration a fresh library starts with.
pub const DEFAULT_CONFIG: &str = "default";
const SEED_JSON: &str = include_str!("../../../../seeds/orchestrator.json");

/// A whole configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OrchestratorConfig {
    /// Instructions every mode starts from.
    pub system_prompt: String,
    /// The mode a new conversation uses unless told otherwise.
    pub default_mode: String,
    /// The modes.
    pub modes: Vec<Mode>,
    /// `before:tool.result` gates.
    #[serde(default)]
    pub gates: GateConfig,
}

/// Who chooses the tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolChoice {
    /// The orchestrator runs the pipeline (or `knowledge_search`) first and the model writes
    /// the answer from the admitted evidence: right for small models.
    Orchestrator,
    /// The model calls the tools itself, round by round (a capable model).
    Model,
}

/// Where answers come from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
#[cfg_attr(feature = "specta", derive(specta::Type))]
pub enum BackendConfig {
    /// The in-process llama.cpp model: an installed model id or a path to a GGUF file.
    Embedded {
        /// Model id (see `quarry models list`) or GGUF path.
        model: String,
        /// Threads (`None`: all cores but one).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        threads: Option<usize>,
    },
    /// An OpenAI-compatible server (`.../v1`).
    Openai {
        /// Base URL, e.g. `http://127.0.0.1:8080/v1`.
        base_url: String,
        /// Model name.
        model: String,
        /// The environment variable holding the API key (keys are never stored).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        api_key_env: Option<String>,
        /// Send GBNF grammars (llama.cpp's server honours them; others may refuse the field).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        grammar: bool,
    },
    /// Ollama's native API.
    Ollama {
        /// Base URL, e.g. `http://127.0.0.1:11434`.
        base_url: String,
        /// Model name.
        model: String,
    },
    /// No LLM: the best passages, highlighted and cited.
    Extractive,
}

impl BackendConfig {
    /// One line for listings.
    pub fn describe(&self) -> String {
        match self {
            BackendConfig::Embedded { model, .. } => format!("embedded {model}"),
            BackendConfig::Openai {
                base_url, model, ..
            } => format!("openai {model} at {base_url}"),
            BackendConfig::Ollama { base_url, model } => format!("ollama {model} at {base_url}"),
            BackendConfig::Extractive => "extractive (no LLM)".into(),
        }
    }

    /// A backend written on one line: `extractive`, `embedded` (the default chat model),
    /// `embedded:MODEL` (an installed id or a GGUF path), `openai:BASE_URL[#MODEL]` or
    /// `ollama:BASE_URL#MODEL`.
    pub fn parse_spec(spec: &str) -> std::result::Result<BackendConfig, String> {
        let (kind, rest) = spec.split_once(':').unwrap_or((spec, ""));
        let (url, model) = match rest.rsplit_once('#') {
            Some((url, model)) => (url.to_string(), Some(model.to_string())),
            None => (rest.to_string(), None),
        };
        match (kind, rest.is_empty()) {
            ("extractive", true) => Ok(BackendConfig::Extractive),
            ("embedded", _) => Ok(BackendConfig::Embedded {
                model: if rest.is_empty() {
                    crate::models::default_llm_model().to_string()
                } else {
                    rest.to_string()
                },
                threads: None,
            }),
            ("openai", false) => Ok(BackendConfig::Openai {
                base_url: url,
                model: model.unwrap_or_else(|| "default".into()),
                api_key_env: None,
                grammar: false,
            }),
            ("ollama", false) => match model {
                Some(model) => Ok(BackendConfig::Ollama {
                    base_url: url,
                    model,
                }),
                None => Err(format!("`{spec}`: ollama needs a model: ollama:URL#MODEL")),
            },
            _ => Err(format!(
                "`{spec}`: a backend is extractive, embedded[:MODEL], openai:URL[#MODEL] or ollama:URL#MODEL"
            )),
        }
    }
}

/// Limits of one turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Budget {
    /// Model rounds (each may call tools).
    pub rounds: usize,
    /// Tool calls in the whole turn.
    pub tool_calls: usize,
    /// Query streams a pipeline run may use (caps the pipeline's own budget).
    pub query_variants: usize,
    /// Evidence put in front of the model, in tokens (about four characters each).
    pub evidence_tokens: usize,
    /// Most tokens the answer may have.
    pub answer_tokens: usize,
}

impl Default for Budget {
    fn default() -> Self {
        Budget {
            rounds: 4,
            tool_calls: 8,
            query_variants: 4,
            evidence_tokens: 1200,
            answer_tokens: 256,
        }
    }
}

/// A mode.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Mode {
    /// Its name.
    pub name: String,
    /// One line for people.
    #[serde(default)]
    pub description: String,
    /// The LLM.
    pub backend: BackendConfig,
    /// Who chooses tools.
    pub tool_choice: ToolChoice,
    /// The pipeline run for evidence (`run_pipeline`); `None`: none.
    #[serde(default)]
    pub pipeline: Option<String>,
    /// `knowledge_search`, when attached.
    #[serde(default)]
    pub knowledge_search: Option<KnowledgeSearchConfig>,
    /// Action tools callable once a qualifying pipeline has completed in the conversation.
    #[serde(default)]
    pub direct_tools: Vec<String>,
    /// Limits.
    #[serde(default)]
    pub budget: Budget,
    /// The gate profile (`tool_filter` entry) this mode runs under.
    #[serde(default = "default_profile")]
    pub profile: String,
}

fn default_profile() -> String {
    "default".into()
}

impl OrchestratorConfig {
    /// The seeded configuration.
    pub fn seed() -> OrchestratorConfig {
        serde_json::from_str(SEED_JSON).expect("seeds/orchestrator.json is valid (tested)")
    }

    /// Parses JSON text, naming the field at fault.
    pub fn parse(text: &str) -> Result<OrchestratorConfig> {
        serde_json::from_str(text).map_err(|e| Error::InvalidSetting {
            field: "orchestrator".into(),
            reason: format!("line {} column {}: {e}", e.line(), e.column()),
        })
    }

    /// A mode by name.
    pub fn mode(&self, name: &str) -> Result<&Mode> {
        self.modes
            .iter()
            .find(|m| m.name == name)
            .ok_or_else(|| Error::InvalidSetting {
                field: "mode".into(),
                reason: format!(
                    "no mode `{name}`; modes: {}",
                    self.modes
                        .iter()
                        .map(|m| m.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            })
    }

    /// Checks what can be checked without the library: mode names, budgets, gate patterns,
    /// and every `knowledge_search` boots (its allow-list is required).
    pub fn validate(&self) -> Result<()> {
        let invalid = |field: String, reason: String| Error::InvalidSetting { field, reason };
        if self.modes.is_empty() {
            return Err(invalid(
                "modes".into(),
                "at least one mode is needed".into(),
            ));
        }
        for (i, mode) in self.modes.iter().enumerate() {
            let at = |f: &str| format!("modes[{i}].{f}");
            if let Err(bad) = Name::parse(NameKind::Mode, &mode.name) {
                return Err(invalid(at("name"), bad.to_string()));
            }
            if self.modes[..i].iter().any(|m| m.name == mode.name) {
                return Err(invalid(
                    at("name"),
                    format!("`{}` is used twice", mode.name),
                ));
            }
            let b = mode.budget;
            for (field, value) in [
                ("budget.rounds", b.rounds),
                ("budget.tool_calls", b.tool_calls),
                ("budget.query_variants", b.query_variants),
                ("budget.evidence_tokens", b.evidence_tokens),
                ("budget.answer_tokens", b.answer_tokens),
            ] {
                if value == 0 {
                    return Err(invalid(at(field), "must be at least 1".into()));
                }
            }
            if let Some(ks) = &mode.knowledge_search {
                KnowledgeSearch::boot(ks.clone())?;
            }
            if mode.pipeline.is_none() && mode.knowledge_search.is_none() {
                return Err(invalid(
                    at("pipeline"),
                    "a mode needs a pipeline or knowledge_search to find evidence".into(),
                ));
            }
            if let BackendConfig::Openai { base_url, .. } | BackendConfig::Ollama { base_url, .. } =
                &mode.backend
            {
                if !(base_url.starts_with("http://") || base_url.starts_with("https://")) {
                    return Err(invalid(
                        at("backend.base_url"),
                        "must start with http:// or https://".into(),
                    ));
                }
            }
        }
        self.mode(&self.default_mode)
            .map_err(|e| invalid("default_mode".into(), e.to_string()))?;
        self.gates.validate()?;
        Ok(())
    }

    /// Canonical JSON text.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a config serializes")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backends_written_on_one_line() {
        assert_eq!(
            BackendConfig::parse_spec("extractive"),
            Ok(BackendConfig::Extractive)
        );
        assert_eq!(
            BackendConfig::parse_spec("embedded:/m/q.gguf"),
            Ok(BackendConfig::Embedded {
                model: "/m/q.gguf".into(),
                threads: None
            })
        );
        assert!(matches!(
            BackendConfig::parse_spec("embedded"),
            Ok(BackendConfig::Embedded { model, .. }) if model == crate::models::default_llm_model()
        ));
        assert_eq!(
            BackendConfig::parse_spec("openai:http://127.0.0.1:8080/v1#qwen"),
            Ok(BackendConfig::Openai {
                base_url: "http://127.0.0.1:8080/v1".into(),
                model: "qwen".into(),
                api_key_env: None,
                grammar: false
            })
        );
        assert!(BackendConfig::parse_spec("ollama:http://127.0.0.1:11434")
            .unwrap_err()
            .contains("needs a model"));
        assert!(BackendConfig::parse_spec("gpt")
            .unwrap_err()
            .contains("extractive, embedded"));
    }

    #[test]
    fn the_seed_is_valid() {
        let seed = OrchestratorConfig::seed();
        seed.validate().unwrap();
        assert_eq!(OrchestratorConfig::parse(&seed.to_json()).unwrap(), seed);
    }

    #[test]
    fn bad_configs_name_their_field() {
        let mut c = OrchestratorConfig::seed();
        c.modes[0].budget.rounds = 0;
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("modes[0].budget.rounds"), "{e}");
        let mut c = OrchestratorConfig::seed();
        c.default_mode = "nope".into();
        assert!(c
            .validate()
            .unwrap_err()
            .to_string()
            .contains("default_mode"));
        let e = OrchestratorConfig::parse(r#"{"system_prompt": "x", "modes": [], "bogus": 1}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("bogus") || e.contains("default_mode"), "{e}");
    }

    #[test]
    fn an_empty_allow_list_fails_at_boot_with_the_manuals_words() {
        let mut c = OrchestratorConfig::seed();
        let mode = c
            .modes
            .iter_mut()
            .find(|m| m.knowledge_search.is_some())
            .expect("the seed attaches knowledge_search somewhere");
        mode.knowledge_search.as_mut().unwrap().namespaces.clear();
        assert_eq!(
            c.validate().unwrap_err().to_string(),
            "at least one namespace must be configured under 'namespaces' at boot"
        );
    }
}
