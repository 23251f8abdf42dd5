//! The vetoable `before:tool.result` hook and its gates: every tool result passes them before
//! the model sees it, in a fixed order — the tool filter (per profile), content safety
//! (secrets and credentials redacted or the result vetoed), then output length.

use std::collections::BTreeMap;

use regex::Regex;
use serde::{Deserialize, Serialize};

use super::fit::fit_json;
use crate::{Error, Result};

/// What a gate does with a match.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GateAction {
    /// Replace the matched text (content safety) or cut the result (output length).
    Redact,
    /// Cut the result to the limit (output length; same as `redact`).
    Truncate,
    /// Refuse the whole result: the model sees that it was withheld.
    Veto,
}

/// `nexus.gate.content_safety`: patterns of secrets and credentials.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContentSafety {
    /// Redact or veto.
    pub action: GateAction,
    /// Regular expressions (Rust `regex` syntax).
    pub patterns: Vec<String>,
}

/// `nexus.gate.output_length`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutputLength {
    /// Longest result in characters.
    pub max_chars: usize,
    /// Truncate or veto.
    pub action: GateAction,
}

/// The gates of a configuration.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GateConfig {
    /// Secret and credential patterns.
    #[serde(default)]
    pub content_safety: Option<ContentSafety>,
    /// Result size.
    #[serde(default)]
    pub output_length: Option<OutputLength>,
    /// `nexus.gate.tool_filter`: per profile, the tools it may call (`*`: all). A profile not
    /// listed may call every tool.
    #[serde(default)]
    pub tool_filter: BTreeMap<String, Vec<String>>,
}

/// The gates, by the name the trace gives them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Gate {
    /// `nexus.gate.tool_filter`.
    ToolFilter,
    /// `nexus.gate.content_safety`.
    ContentSafety,
    /// `nexus.gate.output_length`.
    OutputLength,
}

/// What a gate decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Let through unchanged.
    Pass,
    /// Secrets replaced.
    Redact,
    /// Cut to the limit.
    Truncate,
    /// Withheld.
    Veto,
}

/// One gate's verdict on one result, for the trace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GateDecision {
    /// Which gate.
    pub gate: Gate,
    /// What it decided.
    pub decision: Verdict,
    /// Why, when not `pass`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
}

impl GateDecision {
    pub(crate) fn new(gate: Gate, decision: Verdict, reason: String) -> GateDecision {
        GateDecision {
            gate,
            decision,
            reason,
        }
    }

    fn pass(gate: Gate) -> GateDecision {
        GateDecision::new(gate, Verdict::Pass, String::new())
    }

    /// Whether the gate let the result through unchanged.
    pub fn passed(&self) -> bool {
        self.decision == Verdict::Pass
    }

    /// Whether the gate withheld the result.
    pub fn vetoed(&self) -> bool {
        self.decision == Verdict::Veto
    }
}

/// A result after the gates.
#[derive(Debug, Clone)]
pub struct Gated {
    /// What the model will see.
    pub text: String,
    /// Whether a gate vetoed it.
    pub vetoed: bool,
    /// Every gate's verdict.
    pub decisions: Vec<GateDecision>,
}

/// Compiled gates.
#[derive(Debug, Clone)]
pub struct Gates {
    config: GateConfig,
    secrets: Vec<Regex>,
}

impl GateConfig {
    /// Checks the patterns compile and the limits make sense, naming the field.
    pub fn validate(&self) -> Result<()> {
        Gates::compile(self).map(|_| ())
    }
}

impl Gates {
    /// Compiles a configuration's gates.
    pub fn compile(config: &GateConfig) -> Result<Gates> {
        let mut secrets = Vec::new();
        if let Some(cs) = &config.content_safety {
            for (i, p) in cs.patterns.iter().enumerate() {
                secrets.push(Regex::new(p).map_err(|e| Error::InvalidSetting {
                    field: format!("gates.content_safety.patterns[{i}]"),
                    reason: e.to_string(),
                })?);
            }
            if cs.action == GateAction::Truncate {
                return Err(Error::InvalidSetting {
                    field: "gates.content_safety.action".into(),
                    reason: "is `redact` or `veto`".into(),
                });
            }
        }
        if let Some(ol) = &config.output_length {
            if ol.max_chars < 200 {
                return Err(Error::InvalidSetting {
                    field: "gates.output_length.max_chars".into(),
                    reason: "must be at least 200".into(),
                });
            }
        }
        Ok(Gates {
            config: config.clone(),
            secrets,
        })
    }

    /// The output length a result is cut to (none when results are not cut: no limit, or a
    /// veto).
    pub fn truncates_at(&self) -> Option<usize> {
        self.config
            .output_length
            .as_ref()
            .filter(|ol| ol.action != GateAction::Veto)
            .map(|ol| ol.max_chars)
    }

    /// The tool filter: may `profile` call `tool`?
    pub fn allows_tool(&self, profile: &str, tool: &str) -> GateDecision {
        match self.config.tool_filter.get(profile) {
            Some(allowed) if !allowed.iter().any(|t| t == "*" || t == tool) => GateDecision::new(
                Gate::ToolFilter,
                Verdict::Veto,
                format!("profile `{profile}` may not call `{tool}`"),
            ),
            _ => GateDecision::pass(Gate::ToolFilter),
        }
    }

    /// Runs content safety and output length over one text (a tool result, or a piece of
    /// evidence shown to the model).
    pub fn before_tool_result(&self, text: &str) -> Gated {
        let mut decisions = Vec::new();
        let mut text = text.to_string();
        if let Some(cs) = &self.config.content_safety {
            let hits: usize = self
                .secrets
                .iter()
                .map(|re| re.find_iter(&text).count())
                .sum();
            if hits == 0 {
                decisions.push(GateDecision::pass(Gate::ContentSafety));
            } else if cs.action == GateAction::Veto {
                decisions.push(GateDecision::new(
                    Gate::ContentSafety,
                    Verdict::Veto,
                    format!("{hits} secret or credential match(es)"),
                ));
                return Gated {
                    text: "Error: the result was withheld by the content safety gate (it looked like it contained credentials)".into(),
                    vetoed: true,
                    decisions,
                };
            } else {
                for re in &self.secrets {
                    text = re.replace_all(&text, "[REDACTED]").into_owned();
                }
                decisions.push(GateDecision::new(
                    Gate::ContentSafety,
                    Verdict::Redact,
                    format!("{hits} secret or credential match(es) redacted"),
                ));
            }
        }
        if let Some(ol) = &self.config.output_length {
            let chars = text.chars().count();
            if chars <= ol.max_chars {
                decisions.push(GateDecision::pass(Gate::OutputLength));
            } else if ol.action == GateAction::Veto {
                decisions.push(GateDecision::new(
                    Gate::OutputLength,
                    Verdict::Veto,
                    format!("{chars} characters, limit {}", ol.max_chars),
                ));
                return Gated {
                    text: format!(
                        "Error: the result was withheld: {chars} characters is over the {}-character limit",
                        ol.max_chars
                    ),
                    vetoed: true,
                    decisions,
                };
            } else {
                text = cut_to(&text, ol.max_chars);
                decisions.push(GateDecision::new(
                    Gate::OutputLength,
                    Verdict::Truncate,
                    format!("cut from {chars} to {} characters", ol.max_chars),
                ));
            }
        }
        Gated {
            text,
            vetoed: false,
            decisions,
        }
    }
}

/// A result cut to `max_chars`: JSON stays JSON (whole items of its longest list go), other
/// text is cut and marked.
fn cut_to(text: &str, max_chars: usize) -> String {
    match serde_json::from_str::<serde_json::Value>(text) {
        Ok(value @ (serde_json::Value::Object(_) | serde_json::Value::Array(_))) => {
            fit_json(value, max_chars, serde_json::Value::to_string).text
        }
        _ => text.chars().take(max_chars).collect::<String>() + " …[truncated]",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::orchestrator::OrchestratorConfig;

    fn seeded() -> Gates {
        Gates::compile(&OrchestratorConfig::seed().gates).unwrap()
    }

    #[test]
    fn secrets_are_redacted_and_clean_text_passes() {
        let g = seeded();
        let out = g.before_tool_result("The pump runs at 4 bar. api_key = sk-abcdefghijklmnopqrstuvwx and AKIAABCDEFGHIJKLMNOP.");
        assert!(!out.vetoed);
        assert!(out.text.contains("4 bar"));
        assert!(!out.text.contains("sk-abc"), "{}", out.text);
        assert!(!out.text.contains("AKIAABCDEFGHIJKLMNOP"), "{}", out.text);
        assert_eq!(out.decisions[0].decision, Verdict::Redact);
        let clean = g.before_tool_result("Ferns reproduce by spores.");
        assert_eq!(clean.text, "Ferns reproduce by spores.");
        assert!(clean.decisions.iter().all(GateDecision::passed));
    }

    #[test]
    fn a_veto_withholds_the_whole_result() {
        let mut config = OrchestratorConfig::seed().gates;
        config.content_safety.as_mut().unwrap().action = GateAction::Veto;
        let g = Gates::compile(&config).unwrap();
        let out = g.before_tool_result(
            "-----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY-----",
        );
        assert!(out.vetoed);
        assert!(!out.text.contains("MIIE"));
    }

    #[test]
    fn long_results_are_cut_or_vetoed() {
        let mut config = GateConfig {
            output_length: Some(OutputLength {
                max_chars: 300,
                action: GateAction::Truncate,
            }),
            ..Default::default()
        };
        let long = "x".repeat(1000);
        let out = Gates::compile(&config).unwrap().before_tool_result(&long);
        assert!(out.text.starts_with(&"x".repeat(300)) && out.text.ends_with("[truncated]"));
        let passages = serde_json::json!({"evidence": (0..10).map(|i| serde_json::json!({"cite": i, "content": "y".repeat(80)})).collect::<Vec<_>>()}).to_string();
        let out = Gates::compile(&config)
            .unwrap()
            .before_tool_result(&passages);
        let kept: serde_json::Value =
            serde_json::from_str(&out.text).expect("a cut JSON result is still JSON");
        assert!(
            out.text.chars().count() <= 300 && kept["evidence"][0]["cite"] == 0,
            "{}",
            out.text
        );
        config.output_length.as_mut().unwrap().action = GateAction::Veto;
        assert!(
            Gates::compile(&config)
                .unwrap()
                .before_tool_result(&long)
                .vetoed
        );
    }

    #[test]
    fn the_tool_filter_is_per_profile() {
        let g = seeded();
        assert!(g.allows_tool("default", "fetch_neighbors").passed());
        assert!(g.allows_tool("restricted", "knowledge_search").passed());
        assert!(g.allows_tool("restricted", "fetch_neighbors").vetoed());
        assert!(g.allows_tool("unlisted", "anything").passed());
        // The trace keeps the names it always had.
        assert_eq!(
            serde_json::to_value(g.allows_tool("restricted", "fetch_neighbors")).unwrap(),
            serde_json::json!({"gate": "tool_filter", "decision": "veto",
                               "reason": "profile `restricted` may not call `fetch_neighbors`"})
        );
    }

    #[test]
    fn bad_patterns_name_their_field() {
        let config = GateConfig {
            content_safety: Some(ContentSafety {
                action: GateAction::Redact,
                patterns: vec!["ok".into(), "(unclosed".into()],
            }),
            ..Default::default()
        };
        let e = config.validate().unwrap_err().to_string();
        assert!(e.contains("gates.content_safety.patterns[1]"), "{e}");
    }
}
