//! How fast each installed chat model runs on this machine, and the most accurate one it can
//! afford. A grounded answer's first token waits for the model to read its prompt, so a
//! model's measured prompt speed predicts that wait. A mode whose embedded model is
//! [`AUTO`] answers with the most accurate installed model (by the catalogue's measured
//! share of right answers) whose predicted first token fits the budgets, and
//! never with one less accurate than the catalogue's default: with nothing measured, or on a
//! machine too slow for anything better, that is the default.
//!
//! Measured by `quarry models measure` (and the Models view's "Measure"), and after a chat
//! model is fetched; kept per CPU model and thread counts in [`RECORD`]. [`choose`] reads the
//! measurement at the threads a turn uses while the background lanes are idle (the prompt on
//! every core, generation on all but one); `quarry models measure --threads N` measures others.

use std::path::Path;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::device::{self, Preference};
use super::embedded::{default_threads, EmbeddedBackend, EmbeddedConfig};
use super::{ChatBackend, ChatMessage, ChatRequest};
use crate::models::{cpu_model, default_llm_model, manifest, ModelKind, Models};
use crate::Result;

/// The model name that asks for the automatic choice.
pub const AUTO: &str = "auto";

/// The record's file name, in the models folder.
pub const RECORD: &str = "chat-speed.json";

/// A grounded turn's prompt in tokens, at the median and at the ninetieth percentile: the
/// selected sentences, the instructions and the question (the system prompt is evaluated once
/// per process). From `quarry eval --chat tests/data/grounded-qa`: 1.5 s and 2.1 s to the
/// first token at 146 prompt tokens/s with the 0.5B model, 3.6 s and 4.6 s at 68 with the 1.5B.
pub const MEDIAN_PROMPT_TOKENS: usize = 230;
/// See [`MEDIAN_PROMPT_TOKENS`].
pub const SLOW_PROMPT_TOKENS: usize = 310;

/// What reading the prompt may take, at the median and the ninetieth percentile: a turn's
/// first-token goals (6 s and 9 s) less what retrieval and the sentence selection take before
/// it (up to about 1.5 s on two cores).
pub const MEDIAN_BUDGET_MS: f64 = 4500.0;
/// See [`MEDIAN_BUDGET_MS`].
pub const SLOW_BUDGET_MS: f64 = 7500.0;

/// Tokens generated when measuring, enough for a steady rate.
const GENERATED: u32 = 32;

/// One model's speed on one machine.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "specta", derive(specta::Type))]
pub struct ChatSpeed {
    /// The CPU model (`/proc/cpuinfo`'s model name).
    pub cpu: String,
    /// The chat model's id.
    pub model: String,
    /// Generation threads.
    pub threads: usize,
    /// Threads that read the prompt (records from before this field: every core).
    #[serde(default = "crate::cores::all")]
    pub prompt_threads: usize,
    /// Prompt tokens evaluated per second.
    pub prompt_tokens_per_sec: f64,
    /// Tokens generated per second.
    pub generation_tokens_per_sec: f64,
    /// Milliseconds to load the model.
    pub load_ms: u64,
    /// Where it ran (`CPU`, `Vulkan0 (…)`; records from before this field: the CPU).
    #[serde(default = "on_the_cpu")]
    pub device: String,
}

fn on_the_cpu() -> String {
    device::CPU.into()
}

impl ChatSpeed {
    /// Milliseconds to read a prompt of `tokens`.
    pub fn first_token_ms(&self, tokens: usize) -> f64 {
        tokens as f64 * 1000.0 / self.prompt_tokens_per_sec.max(1e-6)
    }

    /// Whether grounded prompts' first tokens fit the budgets.
    pub fn affordable(&self) -> bool {
        self.first_token_ms(MEDIAN_PROMPT_TOKENS) <= MEDIAN_BUDGET_MS
            && self.first_token_ms(SLOW_PROMPT_TOKENS) <= SLOW_BUDGET_MS
    }
}

/// The model [`AUTO`] stands for now, and why.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "specta", derive(specta::Type))]
pub struct Choice {
    /// The installed model's id.
    pub model: String,
    /// One line on why.
    pub why: String,
}

/// The predicted first tokens, in words.
pub fn first_tokens(speed: &ChatSpeed) -> String {
    format!(
        "first token about {:.1} s for a median prompt, {:.1} s for a slow one; budget {:.1} s and {:.1} s",
        speed.first_token_ms(MEDIAN_PROMPT_TOKENS) / 1000.0,
        speed.first_token_ms(SLOW_PROMPT_TOKENS) / 1000.0,
        MEDIAN_BUDGET_MS / 1000.0,
        SLOW_BUDGET_MS / 1000.0
    )
}

/// Loads the installed chat model `id` on its own (not shared: measuring every model must
/// not keep them all in memory), and times a typical prompt and a short generation, on
/// `threads` for both where given, else on the threads a turn uses now.
pub fn measure(models: &Models, id: &str, threads: Option<usize>) -> Result<ChatSpeed> {
    let mut config = EmbeddedConfig::installed(models, id)?;
    config.threads = threads;
    let started = Instant::now();
    let backend = EmbeddedBackend::load(config)?;
    let load_ms = started.elapsed().as_millis() as u64;
    // The weights are memory-mapped: the first tokens page them in, which is not the speed.
    backend.chat(
        &ChatRequest::new(vec![ChatMessage::user("Hi")]),
        &mut |_| {},
    )?;
    let sentence =
        "The XR-200 pump needs an inlet pressure of 4 bar and a service every 600 hours. ";
    // About 20 tokens a sentence: as long as a slow grounded prompt.
    let repeats = SLOW_PROMPT_TOKENS / 20;
    let mut prompt = f64::MAX;
    let mut generation: f64 = 0.0;
    let mut prompt_threads = crate::cores::all();
    for _ in 0..2 {
        let mut request = ChatRequest::new(vec![ChatMessage::user(format!(
            "{}\nWrite a short paragraph about pump maintenance.",
            sentence.repeat(repeats)
        ))]);
        request.max_tokens = GENERATED as usize;
        let response = backend.chat(&request, &mut |_| {})?;
        if let Some(used) = response.threads {
            prompt_threads = used.prompt;
        }
        let first_ms = response.first_token_ms.unwrap_or(response.total_ms) as f64;
        prompt = prompt.min(first_ms.max(1.0) / response.usage.prompt_tokens.max(1) as f64);
        let generating_ms = (response.total_ms as f64 - first_ms).max(1.0);
        generation =
            generation.max(response.usage.completion_tokens as f64 * 1000.0 / generating_ms);
    }
    Ok(ChatSpeed {
        cpu: cpu_model(),
        model: id.to_string(),
        threads: backend.threads(),
        prompt_threads,
        prompt_tokens_per_sec: 1000.0 / prompt,
        generation_tokens_per_sec: generation,
        load_ms,
        device: backend.placement().label(),
    })
}

/// Every measurement kept in `dir`; a record that cannot be read counts as none.
fn read_all(dir: &Path) -> Vec<ChatSpeed> {
    std::fs::read(dir.join(RECORD))
        .ok()
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .unwrap_or_default()
}

/// This machine's measurement of `model` at the default thread counts (the prompt on every
/// core, generation on all but one), if one was kept. Measured on the CPU and on a GPU, the
/// one where the model runs now (asked of llama.cpp only then: starting it loads the
/// machine's Vulkan drivers); `QUARRY_LLM_DEVICE=cpu` reads only the CPU's.
pub fn recorded(models: &Models, model: &str) -> Option<ChatSpeed> {
    let cpu = cpu_model();
    let (threads, prompt_threads) = (default_threads(), crate::cores::all());
    let mut found: Vec<ChatSpeed> = models
        .dirs()
        .iter()
        .flat_map(|d| read_all(d))
        .filter(|s| {
            s.cpu == cpu
                && s.model == model
                && s.threads == threads
                && s.prompt_threads == prompt_threads
        })
        .collect();
    if Preference::from_env() == Preference::Cpu {
        found.retain(|s| s.device == on_the_cpu());
    }
    if found.iter().any(|s| s.device != found[0].device) {
        let here = device::placement_of_installed(models, model)
            .and_then(|placed| placed.ok())
            .map_or_else(on_the_cpu, |p| p.label());
        if found.iter().any(|s| s.device == here) {
            found.retain(|s| s.device == here);
        }
    }
    found.pop()
}

/// Keeps `speed` in the install folder, replacing an older one for the same CPU, device,
/// model and threads. Best effort: a folder that cannot be written only means measuring again.
pub fn remember(models: &Models, speed: &ChatSpeed) {
    let dir = models.install_dir();
    let mut all = read_all(dir);
    all.retain(|s| {
        !(s.cpu == speed.cpu
            && s.device == speed.device
            && s.model == speed.model
            && s.threads == speed.threads
            && s.prompt_threads == speed.prompt_threads)
    });
    all.push(speed.clone());
    crate::models::write_record(&dir.join(RECORD), &all);
}

/// The catalogue's share of right answers for `model` (`None`: not measured).
fn accuracy(model: &str) -> Option<f64> {
    manifest()
        .models
        .iter()
        .find(|m| m.id == model)
        .and_then(|m| m.answers)
}

/// The model [`AUTO`] stands for: the most accurate installed chat model whose measured
/// speed affords the first-token budget, if it is more accurate than the default; else the
/// default.
pub fn choose(models: &Models) -> Choice {
    let installed: Vec<String> = models
        .installed()
        .into_iter()
        .filter(|m| m.kind == ModelKind::Llm)
        .map(|m| m.id)
        .collect();
    let speeds: Vec<ChatSpeed> = installed
        .iter()
        .filter_map(|id| recorded(models, id))
        .collect();
    choose_among(&installed, &speeds, default_llm_model(), accuracy)
}

/// [`choose`] over given models, measurements and accuracies.
fn choose_among(
    installed: &[String],
    speeds: &[ChatSpeed],
    default: &str,
    accuracy: impl Fn(&str) -> Option<f64>,
) -> Choice {
    let floor = accuracy(default).unwrap_or(0.0);
    let mut better: Vec<(&String, f64)> = installed
        .iter()
        .filter(|id| id.as_str() != default)
        .filter_map(|id| accuracy(id).filter(|a| *a > floor).map(|a| (id, a)))
        .collect();
    better.sort_by(|a, b| b.1.total_cmp(&a.1));
    let mut unmeasured = Vec::new();
    let mut too_slow = Vec::new();
    for (id, _) in better {
        match speeds.iter().find(|s| &s.model == id) {
            Some(speed) if speed.affordable() => {
                return Choice {
                    model: id.clone(),
                    why: format!(
                    "the most accurate installed model whose first token fits the budget here ({})",
                    first_tokens(speed)
                ),
                }
            }
            Some(speed) => too_slow.push(format!("{id}: {}", first_tokens(speed))),
            None => unmeasured.push(id.clone()),
        }
    }
    let mut why = "the default chat model".to_string();
    if !too_slow.is_empty() {
        why.push_str(&format!(
            "; a more accurate one is too slow here ({})",
            too_slow.join(", ")
        ));
    }
    if !unmeasured.is_empty() {
        why.push_str(&format!(
            "; not yet measured: {} (`quarry models measure`)",
            unmeasured.join(", ")
        ));
    }
    Choice {
        model: default.to_string(),
        why,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn speed(model: &str, prompt_tokens_per_sec: f64) -> ChatSpeed {
        ChatSpeed {
            cpu: "test".into(),
            model: model.into(),
            threads: 1,
            prompt_threads: 2,
            prompt_tokens_per_sec,
            generation_tokens_per_sec: 10.0,
            load_ms: 100,
            device: on_the_cpu(),
        }
    }

    fn accuracy(model: &str) -> Option<f64> {
        match model {
            "small" => Some(0.6),
            "big" => Some(0.75),
            "bigger" => Some(0.8),
            "tiny" => Some(0.3),
            _ => None,
        }
    }

    #[test]
    fn the_most_accurate_affordable_model_is_chosen_never_one_below_the_default() {
        let installed: Vec<String> = ["tiny", "small", "big", "bigger"].map(String::from).into();
        // 230 tokens in 4.5 s needs 51 tokens/s.
        let speeds = [
            speed("tiny", 2000.0),
            speed("small", 300.0),
            speed("big", 60.0),
            speed("bigger", 40.0),
        ];
        let choice = choose_among(&installed, &speeds, "small", accuracy);
        assert_eq!(choice.model, "big");
        assert!(
            choice
                .why
                .contains("first token about 3.8 s for a median prompt, 5.2 s for a slow one"),
            "{}",
            choice.why
        );

        // Nothing better affordable: the default, even where a faster, worse one is.
        let slow = [
            speed("tiny", 2000.0),
            speed("big", 46.0),
            speed("bigger", 40.0),
        ];
        let choice = choose_among(&installed, &slow, "small", accuracy);
        assert_eq!(choice.model, "small");
        assert!(
            choice
                .why
                .contains("too slow here (bigger: first token about 5.8 s"),
            "{}",
            choice.why
        );
        assert!(
            choice.why.contains(", big: first token about 5.0 s"),
            "{}",
            choice.why
        );

        // A better model never measured is not guessed at.
        let choice = choose_among(&installed, &[speed("big", 50.0)], "small", accuracy);
        assert_eq!(choice.model, "small");
        assert!(
            choice.why.contains("not yet measured: bigger"),
            "{}",
            choice.why
        );
    }

    #[test]
    fn measurements_are_kept_per_cpu_device_model_and_threads() {
        let dir = tempfile::tempdir().unwrap();
        let models = Models::at(vec![dir.path().to_path_buf()]);
        let mut mine = speed("small", 300.0);
        mine.cpu = cpu_model();
        mine.threads = default_threads();
        mine.prompt_threads = crate::cores::all();
        remember(&models, &mine);
        // Measured on other threads (`--threads 1`): kept beside it, never what `auto` reads.
        let mut one_thread = mine.clone();
        one_thread.prompt_threads = 1;
        one_thread.threads = 1;
        one_thread.prompt_tokens_per_sec = 100.0;
        if crate::cores::all() > 1 {
            remember(&models, &one_thread);
        }
        let mut other_cpu = mine.clone();
        other_cpu.cpu = "another CPU".into();
        remember(&models, &other_cpu);
        assert_eq!(recorded(&models, "small"), Some(mine.clone()));
        let mut again = mine.clone();
        again.prompt_tokens_per_sec = 320.0;
        remember(&models, &again);
        assert_eq!(recorded(&models, "small"), Some(again.clone()));
        // Measured on a GPU too: kept beside the CPU's, and `auto` reads the one of the device
        // the model runs on now (the CPU here: "small" is not installed).
        let mut on_gpu = again.clone();
        on_gpu.device = "Vulkan0 (Test GPU)".into();
        on_gpu.prompt_tokens_per_sec = 3_000.0;
        remember(&models, &on_gpu);
        assert_eq!(recorded(&models, "small"), Some(again.clone()));
        remember(&models, &again);
        assert_eq!(recorded(&models, "small"), Some(again));
        let kept = if crate::cores::all() > 1 { 4 } else { 3 };
        assert_eq!(read_all(dir.path()).len(), kept);
        assert!(recorded(&models, "big").is_none());
    }

    #[test]
    fn a_record_from_before_prompt_threads_reads_as_every_core() {
        let old = r#"[{"cpu":"c","model":"m","threads":1,"prompt_tokens_per_sec":146.0,"generation_tokens_per_sec":22.3,"load_ms":601}]"#;
        let speeds: Vec<ChatSpeed> = serde_json::from_str(old).unwrap();
        assert_eq!(speeds[0].prompt_threads, crate::cores::all());
    }
}
