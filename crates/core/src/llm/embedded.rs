//! The embedded backend: a GGUF chat model run in-process by llama.cpp, so the assistant
//! needs no server. The default model is SmolLM2-135M-Instruct (see `models/manifest.json`);
//! any GGUF file works the same way.
//!
//! Output can be constrained by a GBNF grammar (or a JSON schema turned into one). Tool calls
//! are always constrained: with tools in the request, the model must emit either
//! `{"answer": "..."}` or `{"call": NAME, "input": {...}}` where the input follows that
//! tool's schema, with every string length-limited, so a small model cannot produce a call
//! that does not parse.

use std::num::NonZeroU32;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use llama_cpp_2::context::params::LlamaContextParams;
use llama_cpp_2::context::session::{LlamaStateSeqFlags, SeqState};
use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::llama_backend::LlamaBackend;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::model::{LlamaChatMessage, LlamaModel};
use llama_cpp_2::sampling::LlamaSampler;
use llama_cpp_2::token::LlamaToken;
use serde_json::{json, Value};

mod judge;

pub use judge::Judgement;

use super::device::{self, Placement, Preference};
use super::{
    BackendInfo, Cancel, ChatBackend, ChatMessage, ChatRequest, ChatResponse, Constraint, Role,
    StreamEvent, ThreadUse, ToolCall, ToolSpec, Usage, CANCELLED,
};
use crate::models::{ModelKind, Models};
use crate::{Error, Result};

/// The environment a process embedding llama.cpp should start with: idle OpenMP threads sleep
/// instead of spinning (with as many busy threads as cores they starve each other and the rest
/// of the app). libgomp reads it before `main`, so it cannot be set later in the process.
pub const PASSIVE_OPENMP: (&str, &str) = ("OMP_WAIT_POLICY", "PASSIVE");

/// The file name of a chat model inside its installed folder.
pub const MODEL_FILE: &str = "model.gguf";
/// Longest string the tool-call grammar lets the model write where a schema sets no limit.
pub const MAX_GENERATED_STRING: u64 = 200;
const DEFAULT_CONTEXT_TOKENS: u32 = 4096;
const BATCH_TOKENS: usize = 512;

/// How to load a model.
#[derive(Debug, Clone)]
pub struct EmbeddedConfig {
    /// The GGUF file.
    pub model_path: PathBuf,
    /// Its name in reports (the catalogue id, or the file name).
    pub model_id: String,
    /// Threads for the prompt and for generation; `None`: generation on all cores but one, the
    /// prompt on every core while no background lane computes (see [`crate::cores`]).
    pub threads: Option<usize>,
    /// Context window in tokens (capped at what the model was trained with).
    pub context_tokens: u32,
}

impl EmbeddedConfig {
    /// A config for a GGUF file, named after it.
    pub fn for_file(path: &Path) -> EmbeddedConfig {
        EmbeddedConfig {
            model_path: path.to_path_buf(),
            model_id: path
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_else(|| "model".into()),
            threads: None,
            context_tokens: DEFAULT_CONTEXT_TOKENS,
        }
    }

    /// A config for what a user names a model by: a GGUF path (anything ending in `.gguf` or
    /// holding a `/`), [`super::speed::AUTO`] (the most accurate model this machine affords),
    /// else an installed chat model's id.
    pub fn named(models: &Models, model: &str) -> Result<EmbeddedConfig> {
        if EmbeddedConfig::names_a_file(model) {
            Ok(EmbeddedConfig::for_file(Path::new(model)))
        } else if model == super::speed::AUTO {
            EmbeddedConfig::installed(models, &super::speed::choose(models).model)
        } else {
            EmbeddedConfig::installed(models, model)
        }
    }

    /// Whether a user's model name is a GGUF path rather than an id.
    pub fn names_a_file(model: &str) -> bool {
        model.ends_with(".gguf") || model.contains('/')
    }

    /// A config for an installed chat model (checked against its install record first).
    pub fn installed(models: &Models, id: &str) -> Result<EmbeddedConfig> {
        let model = models.find_kind(id, ModelKind::Llm)?;
        model.verify()?;
        Ok(EmbeddedConfig {
            model_path: model.file(MODEL_FILE),
            model_id: model.id.clone(),
            threads: None,
            context_tokens: DEFAULT_CONTEXT_TOKENS,
        })
    }
}

/// The default thread count: every core but one (generation on all cores competes with the
/// UI and the indexer), at least one.
pub fn default_threads() -> usize {
    crate::cores::all_but_one()
}

/// The threads a request reads its prompt and generates on, decided when it starts: the
/// prompt is one short burst that every core speeds up, unless a background lane is computing
/// (then the two would halve each other); generation is long and token by token, so it leaves
/// a core to the rest of the machine. `configured` (a mode's `threads`) sets both.
fn thread_use(configured: Option<usize>, generation: usize) -> ThreadUse {
    ThreadUse {
        prompt: configured.map_or_else(crate::cores::for_burst, |t| t.max(1)),
        generation,
    }
}

/// The tracing target llama.cpp's own log arrives under (`llama-cpp-2` forwards it), for log
/// filters that keep its loader chatter out of the way.
pub const LOG_TARGET: &str = "llama-cpp-2";

/// llama.cpp's process-wide backend: it can be initialised only once.
pub(super) fn llama_backend() -> Result<&'static LlamaBackend> {
    static BACKEND: OnceLock<std::result::Result<LlamaBackend, String>> = OnceLock::new();
    BACKEND
        .get_or_init(|| {
            // OpenMP workers spin while waiting unless OMP_WAIT_POLICY=PASSIVE; libgomp reads
            // it once, before `main`, so a binary sets it by re-executing itself
            // (see `PASSIVE_OPENMP` and the CLI's `main`).
            if !crate::environment::omp_wait_policy_set() {
                tracing::debug!("OMP_WAIT_POLICY is not set: OpenMP threads will spin while idle");
            }
            llama_cpp_2::send_logs_to_tracing(llama_cpp_2::LogOptions::default());
            LlamaBackend::init().map_err(|e| e.to_string())
        })
        .as_ref()
        .map_err(|e| Error::LlmFailed {
            backend: "embedded".into(),
            message: format!("cannot start llama.cpp: {e}"),
        })
}

/// A loaded GGUF model.
pub struct EmbeddedBackend {
    config: EmbeddedConfig,
    model: LlamaModel,
    /// The GPU it was loaded on, or the CPU, and why.
    placement: Placement,
    threads: usize,
    /// One generation at a time: creating contexts from one model in parallel is unsound in
    /// llama.cpp, and two generations on two cores would only halve each other's speed.
    busy: Mutex<()>,
    /// The ticket of the latest request to judge relevance: a judging that a newer one waits
    /// behind stops starting passages, so deep searches typed one after another do not queue
    /// for the model (see `judge_relevance`).
    judging: AtomicU64,
    /// The last system prompt's evaluated state: the next request that starts with the same
    /// system prompt (every turn of a mode does) evaluates only what follows it.
    system_prefix: Mutex<Option<SystemPrefix>>,
}

/// A prompt's leading system message, evaluated once.
struct SystemPrefix {
    tokens: Vec<LlamaToken>,
    n_ctx: u32,
    state: SeqState,
}

/// A system message shorter than this is cheaper to evaluate again than to restore.
const MIN_CACHED_PREFIX: usize = 16;

impl EmbeddedBackend {
    /// Loads the model (memory-mapped; a few hundred ms for the default model).
    pub fn load(config: EmbeddedConfig) -> Result<EmbeddedBackend> {
        let failed = |message: String| Error::LlmFailed {
            backend: format!("embedded ({})", config.model_path.display()),
            message,
        };
        if !config.model_path.is_file() {
            return Err(failed("the model file does not exist".into()));
        }
        let mut head = [0u8; 4];
        std::fs::File::open(&config.model_path)
            .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut head))
            .map_err(|e| failed(e.to_string()))?;
        if &head != b"GGUF" {
            return Err(failed("not a GGUF file".into()));
        }
        let backend = llama_backend()?;
        let bytes = std::fs::metadata(&config.model_path).map_or(0, |m| m.len());
        let placement = device::place(&Preference::from_env(), &device::accelerators()?, bytes)?;
        let (model, placement) = load_placed(backend, &config.model_path, placement)
            .map_err(|e| failed(format!("llama.cpp cannot load it: {e}")))?;
        tracing::info!(model = %config.model_id, device = %placement.label(), why = %placement.why, "chat model loaded");
        let threads = config.threads.unwrap_or_else(default_threads).max(1);
        Ok(EmbeddedBackend {
            config,
            model,
            placement,
            threads,
            busy: Mutex::new(()),
            judging: AtomicU64::new(0),
            system_prefix: Mutex::new(None),
        })
    }

    /// Loads once per process and model file, then shares it (the app and the CLI's REPL keep
    /// one model for every turn).
    pub fn shared(config: EmbeddedConfig) -> Result<Arc<EmbeddedBackend>> {
        let mut loaded = shared_models();
        if let Some(b) = loaded
            .iter()
            .find(|b| b.config.model_path == config.model_path)
        {
            return Ok(b.clone());
        }
        let backend = Arc::new(EmbeddedBackend::load(config)?);
        loaded.push(backend.clone());
        Ok(backend)
    }

    /// Releases every model [`EmbeddedBackend::shared`] holds (a turn still answering keeps
    /// its own until it is done), so an idle app gives their memory back; returns how many.
    /// The next turn loads its model again.
    pub fn release_shared() -> usize {
        let released = std::mem::take(&mut *shared_models());
        let count = released.len();
        drop(released);
        crate::memory::return_freed_memory();
        count
    }

    /// The models [`EmbeddedBackend::shared`] holds now: (id, file size in bytes).
    pub fn shared_now() -> Vec<(String, u64)> {
        shared_models()
            .iter()
            .map(|b| (b.config.model_id.clone(), b.model_bytes()))
            .collect()
    }

    /// Whether [`EmbeddedBackend::shared`] has the model at `path` loaded already.
    pub fn is_shared(path: &Path) -> bool {
        shared_models().iter().any(|b| b.config.model_path == path)
    }

    /// Where [`EmbeddedBackend::shared`] loaded the model at `path`, if it did.
    pub fn shared_placement(path: &Path) -> Option<Placement> {
        shared_models()
            .iter()
            .find(|b| b.config.model_path == path)
            .map(|b| b.placement.clone())
    }

    /// The model's name in reports.
    pub fn model_id(&self) -> &str {
        &self.config.model_id
    }

    /// Where the model runs.
    pub fn placement(&self) -> &Placement {
        &self.placement
    }

    /// The generation thread count.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// The model's size on disk in bytes, as llama.cpp reports it.
    pub fn model_bytes(&self) -> u64 {
        self.model.size()
    }

    fn failed(&self, message: impl Into<String>) -> Error {
        Error::LlmFailed {
            backend: format!("embedded ({})", self.config.model_id),
            message: message.into(),
        }
    }

    /// The prompt in the model's own chat template, and the messages it was made of.
    fn prompt(&self, request: &ChatRequest) -> Result<(Vec<LlamaChatMessage>, String)> {
        let mut messages: Vec<ChatMessage> = request.messages.clone();
        if !request.tools.is_empty() {
            let listing = tool_instructions(&request.tools, request.require_tool);
            match messages.first_mut() {
                Some(m) if m.role == Role::System => {
                    m.content.push_str("\n\n");
                    m.content.push_str(&listing);
                }
                _ => messages.insert(0, ChatMessage::system(listing)),
            }
        }
        let chat: Vec<LlamaChatMessage> = messages
            .iter()
            .map(|m| {
                let content = if m.tool_calls.is_empty() {
                    m.content.clone()
                } else {
                    // A past tool call is shown the way the grammar makes the model write it.
                    let calls: Vec<String> = m
                        .tool_calls
                        .iter()
                        .map(|c| {
                            let arguments: Value =
                                serde_json::from_str(&c.arguments).unwrap_or(json!({}));
                            json!({"call": c.name, "input": arguments}).to_string()
                        })
                        .collect();
                    calls.join("\n")
                };
                LlamaChatMessage::new(m.role.as_str().to_string(), content)
                    .map_err(|e| self.failed(format!("a message cannot be passed on: {e}")))
            })
            .collect::<Result<_>>()?;
        let prompt = self.render(&chat, true)?;
        Ok((chat, prompt))
    }

    /// `chat` in the model's own template, ending with the assistant's turn opened or not.
    fn render(&self, chat: &[LlamaChatMessage], open_answer: bool) -> Result<String> {
        let template = self
            .model
            .chat_template(None)
            .map_err(|e| self.failed(format!("the model has no chat template: {e}")))?;
        self.model
            .apply_chat_template(&template, chat, open_answer)
            .map_err(|e| self.failed(format!("cannot apply the chat template: {e}")))
    }

    fn tokenize(&self, text: &str) -> Vec<LlamaToken> {
        self.model.vocab().tokenize(text.as_bytes(), false, true)
    }

    /// The tokens of the prompt's leading system message, when the prompt starts with it as
    /// rendered alone (templates that merge the system message into the first user turn do
    /// not, and get no cache).
    fn system_tokens(
        &self,
        system: &LlamaChatMessage,
        tokens: &[LlamaToken],
    ) -> Option<Vec<LlamaToken>> {
        let system = self.render(std::slice::from_ref(system), false).ok()?;
        let system = self.tokenize(&system);
        // The prompt must go on past it: the last token's logits are sampled from.
        (system.len() >= MIN_CACHED_PREFIX
            && system.len() < tokens.len()
            && tokens.starts_with(&system))
        .then_some(system)
    }

    /// Evaluates the prompt, restoring the system message's state when the last request had
    /// the same one and keeping it for the next one otherwise; returns the position after the
    /// prompt and how many of its tokens came from the cache.
    fn evaluate_with_prefix(
        &self,
        ctx: &mut LlamaContext<'_>,
        batch: &mut LlamaBatch<'_>,
        system: Option<&LlamaChatMessage>,
        tokens: &[LlamaToken],
        n_ctx: u32,
    ) -> Result<(i32, usize)> {
        let Some(system) = system.and_then(|m| self.system_tokens(m, tokens)) else {
            return Ok((self.evaluate_prompt(ctx, batch, tokens, 0)?, 0));
        };
        let mut cached = self.system_prefix.lock().unwrap_or_else(|e| e.into_inner());
        let restored = match cached
            .as_ref()
            .filter(|c| c.n_ctx == n_ctx && c.tokens == system)
        {
            Some(c) => match ctx.state_seq_set(&c.state, 0) {
                Ok(()) => true,
                Err(_) => {
                    // Whatever part of it went in is cleared; the prompt is evaluated afresh.
                    let _ = ctx.clear_kv_cache_seq(Some(0), None, None);
                    false
                }
            },
            None => false,
        };
        if !restored {
            self.evaluate_prompt(ctx, batch, &system, 0)?;
            // Kept only if it can be read back; a failure just means no cache next time.
            *cached = ctx
                .state_seq_get(0, LlamaStateSeqFlags::empty())
                .ok()
                .map(|state| SystemPrefix {
                    tokens: system.clone(),
                    n_ctx,
                    state,
                });
        }
        let position = self.evaluate_prompt(ctx, batch, tokens, system.len())?;
        Ok((position, if restored { system.len() } else { 0 }))
    }

    fn grammar(&self, request: &ChatRequest) -> Result<Option<String>> {
        if !request.tools.is_empty() {
            return tool_call_grammar(&request.tools, request.require_tool).map(Some);
        }
        match &request.constraint {
            None => Ok(None),
            Some(Constraint::Grammar(g)) => Ok(Some(g.clone())),
            Some(Constraint::JsonSchema(schema)) => schema_grammar(schema).map(Some),
        }
    }
}

/// How tools are offered to a model that cannot call them natively.
fn tool_instructions(tools: &[ToolSpec], require_tool: bool) -> String {
    let mut text = String::from(if require_tool {
        "Call one of these tools. Reply with JSON only: {\"call\": NAME, \"input\": {...}}.\n"
    } else {
        "You can call these tools. Reply with JSON only: {\"call\": NAME, \"input\": {...}} \
         to call one, or {\"answer\": TEXT} to answer.\n"
    });
    for t in tools {
        text.push_str(&format!(
            "- {}: {} Arguments: {}\n",
            t.name, t.description, t.parameters
        ));
    }
    text
}

/// Adds `maxLength` to every string schema that has none, so generation always ends.
pub fn limit_strings(schema: &mut Value, max: u64) {
    match schema {
        Value::Object(map) => {
            if map.get("type").and_then(Value::as_str) == Some("string")
                && !map.contains_key("maxLength")
                && !map.contains_key("enum")
                && !map.contains_key("const")
            {
                map.insert("maxLength".into(), json!(max));
            }
            if map.get("type").and_then(Value::as_str) == Some("array")
                && !map.contains_key("maxItems")
            {
                map.insert("maxItems".into(), json!(8));
            }
            for v in map.values_mut() {
                limit_strings(v, max);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|v| limit_strings(v, max)),
        _ => {}
    }
}

/// A GBNF grammar for a JSON schema (strings length-limited).
pub fn schema_grammar(schema: &Value) -> Result<String> {
    let mut schema = schema.clone();
    limit_strings(&mut schema, MAX_GENERATED_STRING);
    llama_cpp_2::json_schema_to_grammar(&schema.to_string()).map_err(|e| Error::LlmFailed {
        backend: "embedded".into(),
        message: format!("cannot turn the JSON schema into a grammar: {e}"),
    })
}

/// The schema of one embedded-model turn when tools are offered: an answer, or one call whose
/// arguments follow the tool's own schema.
pub fn tool_turn_schema(tools: &[ToolSpec], require_tool: bool) -> Value {
    let mut choices = Vec::new();
    if !require_tool {
        choices.push(json!({
            "type": "object",
            "properties": {"answer": {"type": "string", "minLength": 1}},
            "required": ["answer"],
            "additionalProperties": false,
        }));
    }
    for t in tools {
        choices.push(json!({
            "type": "object",
            "properties": {"call": {"const": t.name}, "input": t.parameters},
            "required": ["call", "input"],
            "additionalProperties": false,
        }));
    }
    json!({"oneOf": choices})
}

fn tool_call_grammar(tools: &[ToolSpec], require_tool: bool) -> Result<String> {
    schema_grammar(&tool_turn_schema(tools, require_tool))
}

/// Reads a tool turn written under [`tool_turn_schema`].
fn parse_tool_turn(text: &str) -> (String, Vec<ToolCall>) {
    match serde_json::from_str::<Value>(text.trim()) {
        Ok(v) if v.get("call").is_some() => {
            let call = ToolCall {
                id: "call_0".into(),
                name: v["call"].as_str().unwrap_or_default().to_string(),
                arguments: v.get("input").cloned().unwrap_or(json!({})).to_string(),
            };
            (String::new(), vec![call])
        }
        Ok(v) => (v["answer"].as_str().unwrap_or(text).to_string(), Vec::new()),
        // Only when generation stopped at the token limit mid-JSON.
        Err(_) => (text.to_string(), Vec::new()),
    }
}

impl ChatBackend for EmbeddedBackend {
    fn info(&self) -> BackendInfo {
        BackendInfo {
            kind: "embedded",
            model: self.config.model_id.clone(),
            location: self.config.model_path.display().to_string(),
            supports_tools: true,
            supports_grammar: true,
            device: Some(self.placement.label()),
        }
    }

    fn chat(
        &self,
        request: &ChatRequest,
        on_event: &mut dyn FnMut(StreamEvent<'_>),
    ) -> Result<ChatResponse> {
        let started = Instant::now();
        let _busy = self.busy.lock().unwrap_or_else(|e| e.into_inner());
        let backend = llama_backend()?;
        let (messages, prompt) = self.prompt(request)?;
        let leads_with_system = request
            .messages
            .first()
            .is_some_and(|m| m.role == Role::System)
            || !request.tools.is_empty();
        let grammar = self.grammar(request)?;
        let tokens = self.tokenize(&prompt);
        let n_ctx = self.context_size(tokens.len(), request)?;
        let threads = thread_use(self.config.threads, self.threads);
        let mut ctx = self.new_context(backend, n_ctx, threads)?;
        let mut sampler = self.sampler(grammar.as_deref(), request.temperature)?;
        let mut batch = LlamaBatch::new(BATCH_TOKENS, 1);
        let (position, cached_prompt_tokens) = self.evaluate_with_prefix(
            &mut ctx,
            &mut batch,
            leads_with_system.then_some(&messages[0]),
            &tokens,
            n_ctx,
        )?;
        let max_new = request.max_tokens.min(n_ctx as usize - tokens.len()).max(1);
        let streams_text = request.tools.is_empty();
        let generated = self.generate(
            Decoding {
                ctx: &mut ctx,
                batch: &mut batch,
                sampler: &mut sampler,
                position,
            },
            max_new,
            started,
            &request.cancel,
            &mut |piece| {
                if streams_text {
                    on_event(StreamEvent::Token(piece));
                }
            },
        )?;
        let (content, tool_calls) = split_tool_calls(request, generated.text, on_event);
        Ok(ChatResponse {
            content,
            finish_reason: if tool_calls.is_empty() {
                generated.finish.into()
            } else {
                "tool_calls".into()
            },
            tool_calls,
            usage: Usage {
                prompt_tokens: tokens.len(),
                completion_tokens: generated.tokens,
                cached_prompt_tokens,
            },
            first_token_ms: generated.first_token_ms,
            total_ms: started.elapsed().as_millis() as u64,
            notices: Vec::new(),
            threads: Some(threads),
        })
    }
}

/// Loads the model where `placement` says; when a GPU cannot take it (its driver fails, its
/// memory runs out), on the CPU, saying why.
fn load_placed(
    backend: &LlamaBackend,
    path: &Path,
    placement: Placement,
) -> std::result::Result<(LlamaModel, Placement), String> {
    // An empty device list: no GPU takes a layer, a buffer or a context's backend (with the
    // list unset llama.cpp would still start every GPU and keep the weights in its pinned
    // host memory instead of the memory-mapped file).
    let on_cpu = || -> std::result::Result<LlamaModel, String> {
        let params = LlamaModelParams::default()
            .with_devices(&[])
            .map_err(|e| e.to_string())?;
        LlamaModel::load_from_file(backend, path, &params).map_err(|e| e.to_string())
    };
    let Some(gpu) = &placement.device else {
        return on_cpu().map(|m| (m, placement));
    };
    // llama.cpp's default layer count is every layer.
    let on_gpu = LlamaModelParams::default()
        .with_devices(&[gpu.index])
        .map_err(|e| e.to_string())
        .and_then(|params| {
            LlamaModel::load_from_file(backend, path, &params).map_err(|e| e.to_string())
        });
    match on_gpu {
        Ok(model) => Ok((model, placement)),
        Err(failure) => {
            tracing::warn!(device = %gpu.name, error = %failure, "the GPU cannot take the chat model; loading it on the CPU");
            let why = format!("{} could not load it ({failure})", gpu.name);
            on_cpu().map(|m| (m, Placement::cpu(why)))
        }
    }
}

/// The models [`EmbeddedBackend::shared`] loaded, for the life of the process.
fn shared_models() -> std::sync::MutexGuard<'static, Vec<Arc<EmbeddedBackend>>> {
    static LOADED: OnceLock<Mutex<Vec<Arc<EmbeddedBackend>>>> = OnceLock::new();
    LOADED
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

/// The state generation advances token by token.
struct Decoding<'a, 'c> {
    ctx: &'a mut LlamaContext<'c>,
    batch: &'a mut LlamaBatch<'c>,
    sampler: &'a mut LlamaSampler,
    /// The position of the next token in the context.
    position: i32,
}

/// What generation produced.
struct Generated {
    text: String,
    tokens: usize,
    first_token_ms: Option<u64>,
    /// `stop` (end of generation), `length` (the token limit) or [`CANCELLED`].
    finish: &'static str,
}

impl EmbeddedBackend {
    /// The context size for this request: the configured size within what the model was
    /// trained on; an error when the prompt leaves no room to answer.
    fn context_size(&self, prompt_tokens: usize, request: &ChatRequest) -> Result<u32> {
        let n_ctx = self
            .config
            .context_tokens
            .min(self.model.n_ctx_train().max(512));
        if prompt_tokens + request.max_tokens.min(64) > n_ctx as usize {
            return Err(self.failed(format!(
                "the prompt is {prompt_tokens} tokens, more than the {n_ctx}-token context allows"
            )));
        }
        Ok(n_ctx)
    }

    fn new_context<'m>(
        &'m self,
        backend: &'m LlamaBackend,
        n_ctx: u32,
        threads: ThreadUse,
    ) -> Result<LlamaContext<'m>> {
        let count = |n: usize| i32::try_from(n).unwrap_or(1);
        let params = LlamaContextParams::default()
            .with_n_ctx(NonZeroU32::new(n_ctx))
            .with_n_batch(BATCH_TOKENS as u32)
            .with_n_threads(count(threads.generation))
            .with_n_threads_batch(count(threads.prompt));
        // On the CPU, nothing of the model's work goes to a GPU either (llama.cpp would send
        // a long prompt's products to one that did not take the weights).
        let on_gpu = self.placement.device.is_some();
        let params = params.with_offload_kqv(on_gpu).with_op_offload(on_gpu);
        self.model
            .new_context(backend, params)
            .map_err(|e| self.failed(format!("cannot create a context: {e}")))
    }

    /// The sampler chain: the grammar first (when there is one), a repetition penalty, then
    /// greedy or temperature sampling.
    fn sampler(&self, grammar: Option<&str>, temperature: f32) -> Result<LlamaSampler> {
        let mut chain = Vec::new();
        if let Some(g) = grammar {
            chain.push(
                LlamaSampler::grammar(&self.model, g, "root")
                    .map_err(|e| self.failed(format!("the grammar does not load: {e}")))?,
            );
        }
        // Small models loop on greedy decoding ("x.x.x.x"); a mild penalty on recent
        // tokens breaks the loops without changing what a grammar allows.
        chain.push(LlamaSampler::penalties(
            self.model.n_vocab(),
            64,
            1.15,
            0.0,
            0.0,
        ));
        if temperature <= 0.0 {
            chain.push(LlamaSampler::greedy());
        } else {
            chain.push(LlamaSampler::top_k(40));
            chain.push(LlamaSampler::top_p(0.95, 1));
            chain.push(LlamaSampler::temp(temperature));
            chain.push(LlamaSampler::dist(0x5eed));
        }
        Ok(LlamaSampler::chain_simple(chain))
    }

    /// Feeds `tokens` from `from` on in batches (the ones before are in the context already);
    /// returns the position after them.
    fn evaluate_prompt(
        &self,
        ctx: &mut LlamaContext<'_>,
        batch: &mut LlamaBatch<'_>,
        tokens: &[LlamaToken],
        from: usize,
    ) -> Result<i32> {
        let mut position = from as i32;
        for piece in tokens[from..].chunks(BATCH_TOKENS) {
            batch.clear();
            for (i, token) in piece.iter().enumerate() {
                let last = position as usize + i + 1 == tokens.len();
                batch
                    .add(*token, position + i as i32, &[0], last)
                    .map_err(|e| self.failed(e.to_string()))?;
            }
            ctx.decode(batch)
                .map_err(|e| self.failed(format!("prompt evaluation failed: {e}")))?;
            position += piece.len() as i32;
        }
        Ok(position)
    }

    /// Samples up to `max_new` tokens, handing each decoded piece of text to `on_piece`.
    fn generate(
        &self,
        decoding: Decoding<'_, '_>,
        max_new: usize,
        started: Instant,
        cancel: &Cancel,
        on_piece: &mut dyn FnMut(&str),
    ) -> Result<Generated> {
        let Decoding {
            ctx,
            batch,
            sampler,
            mut position,
        } = decoding;
        let vocab = self.model.vocab();
        let mut decoder = encoding_rs::UTF_8.new_decoder();
        let mut piece_bytes = Vec::new();
        let mut out = Generated {
            text: String::new(),
            tokens: 0,
            first_token_ms: None,
            finish: "length",
        };
        while out.tokens < max_new {
            if cancel.is_cancelled() {
                out.finish = CANCELLED;
                break;
            }
            // `sample` also accepts the token into every sampler of the chain (the grammar
            // included); accepting it a second time would abort inside llama.cpp.
            let token = sampler.sample(ctx, batch.n_tokens() - 1);
            if out.first_token_ms.is_none() {
                out.first_token_ms = Some(started.elapsed().as_millis() as u64);
            }
            if vocab.is_eog(token) {
                out.finish = "stop";
                break;
            }
            out.tokens += 1;
            piece_bytes.clear();
            vocab.token_to_piece_into(token, &mut piece_bytes, false, None);
            let mut piece = String::with_capacity(piece_bytes.len() + 4);
            let _ = decoder.decode_to_string(&piece_bytes, &mut piece, false);
            if !piece.is_empty() {
                on_piece(&piece);
                out.text.push_str(&piece);
            }
            batch.clear();
            batch
                .add(token, position, &[0], true)
                .map_err(|e| self.failed(e.to_string()))?;
            position += 1;
            ctx.decode(batch)
                .map_err(|e| self.failed(format!("generation failed: {e}")))?;
        }
        Ok(out)
    }
}

/// With tools offered, the text is a tool turn: its calls are parsed out and streamed as
/// deltas (the text was not streamed token by token); without tools it is the answer.
fn split_tool_calls(
    request: &ChatRequest,
    text: String,
    on_event: &mut dyn FnMut(StreamEvent<'_>),
) -> (String, Vec<ToolCall>) {
    if request.tools.is_empty() {
        return (text, Vec::new());
    }
    let (content, calls) = parse_tool_turn(&text);
    if calls.is_empty() {
        on_event(StreamEvent::Token(&content));
    }
    for (i, c) in calls.iter().enumerate() {
        on_event(StreamEvent::ToolCallDelta {
            index: i,
            name: Some(&c.name),
            arguments: &c.arguments,
        });
    }
    (content, calls)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_prompt_leaves_a_core_to_a_busy_lane_unless_threads_are_configured() {
        let lane = crate::cores::LaneBusy::begin();
        let busy = thread_use(None, default_threads());
        assert_eq!(busy.prompt, crate::cores::all_but_one());
        assert_eq!(busy.generation, default_threads());
        assert_eq!(
            thread_use(Some(2), 2).prompt,
            2,
            "a mode's threads are kept"
        );
        drop(lane);
    }

    #[test]
    fn strings_get_length_limits_and_enums_do_not() {
        let mut schema = json!({"type": "object", "properties": {
            "q": {"type": "string"},
            "kind": {"type": "string", "enum": ["a", "b"]},
            "refs": {"type": "array", "items": {"type": "string", "maxLength": 80}},
        }});
        limit_strings(&mut schema, 400);
        assert_eq!(schema["properties"]["q"]["maxLength"], 400);
        assert!(schema["properties"]["kind"].get("maxLength").is_none());
        assert_eq!(schema["properties"]["refs"]["items"]["maxLength"], 80);
        assert_eq!(schema["properties"]["refs"]["maxItems"], 8);
    }

    #[test]
    fn a_tool_turn_reads_back_as_a_call_or_an_answer() {
        let (content, calls) =
            parse_tool_turn(r#"{"call": "knowledge_search", "input": {"query": "pumps"}}"#);
        assert!(content.is_empty());
        assert_eq!(calls[0].name, "knowledge_search");
        assert_eq!(calls[0].arguments, r#"{"query":"pumps"}"#);
        let (content, calls) = parse_tool_turn(r#"{"answer": "It is 4 bar."}"#);
        assert_eq!(content, "It is 4 bar.");
        assert!(calls.is_empty());
    }

    #[test]
    fn the_tool_grammar_compiles_from_schemas() {
        let tools = vec![ToolSpec {
            name: "knowledge_search".into(),
            description: "Search.".into(),
            parameters: json!({"type": "object", "properties": {"query": {"type": "string"}},
                "required": ["query"], "additionalProperties": false}),
        }];
        let grammar = tool_call_grammar(&tools, false).unwrap();
        assert!(grammar.contains("root ::="), "{grammar}");
        assert!(grammar.contains("knowledge_search"), "{grammar}");
    }
}
