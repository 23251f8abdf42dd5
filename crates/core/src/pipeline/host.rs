//! The host side of a code-tool call: the governed `ctx` operations, checked against the
//! tool's evidence manifest and the caller's authorization, and the checks on what comes back.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::{json, Value};

use super::candidate::{
    Candidate, DocumentPage, FoundDocument, Neighbors, PageChunk, SourceDocument,
};
use super::issued::IssuedText;
use super::reading;
use crate::auth::PrincipalKind;
use crate::context::EngineContext;
use crate::error::{Error, Result};
use crate::evidence::{Claims, EvidenceLedger, EvidenceSession, RefKind};
use crate::ids::{ChunkId, DocumentId, RevisionId};
use crate::retrieve::SearchRequest;
use crate::store::ChunkRecord;
use crate::tools::{schema, CallError, ToolDefinition, ToolType};

/// Largest page any fetch operation returns, whatever a tool asks for.
const MAX_PAGE_CHUNKS: i64 = 32;
/// `fetch_neighbors`' hard maximum radius. A tool caps it lower with its own setting (the
/// seeded tool's `max_radius`, 4 by default, at most this); the host answers with the radius
/// it used.
pub const MAX_NEIGHBOR_RADIUS: i64 = 16;
const MAX_HTTP_BODY: u64 = 1024 * 1024;

/// What a tool call may reach: the engine, the caller's evidence session, the pipeline's
/// retrieval tools and collections.
pub struct ToolEnvironment<'a> {
    /// The store, executor, models and retrieval the call runs over.
    pub engine: EngineContext<'a>,
    /// The caller and run.
    pub session: &'a EvidenceSession,
    /// The default retrieval tool (`ctx.search` without `retrieval=`).
    pub retrieval: Option<&'a ToolDefinition>,
    /// Other retrieval tools `ctx.search(..., retrieval=slug)` may use.
    pub capabilities: Vec<&'a ToolDefinition>,
    /// Collections to search (empty: all the caller may read).
    pub collections: Vec<String>,
}

/// One ctx operation, as the trace shows it.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "specta", derive(specta::Type))]
pub struct CtxCall {
    /// The operation.
    pub operation: String,
    /// Microseconds.
    pub took_us: u64,
    /// `None` when it succeeded, else why it was refused or failed.
    pub error: Option<String>,
}

/// A finished code-tool call.
#[derive(Debug, Clone, Serialize)]
pub struct ToolCallReport {
    /// The validated output.
    pub output: Value,
    /// What the tool printed or logged.
    pub logs: Vec<String>,
    /// Its ctx operations in order.
    pub ctx_calls: Vec<CtxCall>,
    /// Wall time, microseconds.
    pub took_us: u64,
    /// Action tools: what the library's operations (and the input) gave the tool, which is all
    /// it may show a model (`issued::visible_output`).
    #[serde(skip)]
    pub issued: IssuedText,
}

/// A `ctx` answer as the JSON the tool receives.
fn answer(value: impl Serialize) -> std::result::Result<Value, String> {
    serde_json::to_value(value).map_err(|e| e.to_string())
}

/// Runs a code tool: input checked (action tools), the call made with every ctx operation
/// governed, the output checked against the stored output schema.
pub fn call_code_tool(
    env: &ToolEnvironment<'_>,
    tool: &ToolDefinition,
    input: &Value,
) -> Result<ToolCallReport> {
    let started = Instant::now();
    let derived = tool.derived.as_ref().ok_or_else(|| Error::ToolFailed {
        tool: tool.slug.clone(),
        reason: "it has not been validated (save it again with Python available)".into(),
    })?;
    let source = tool.source.as_deref().ok_or_else(|| Error::ToolFailed {
        tool: tool.slug.clone(),
        reason: "it has no source".into(),
    })?;
    let mut input = input.clone();
    if let Some(input_schema) = &derived.input_schema {
        input = schema::with_defaults(&input, input_schema);
        input = schema::with_reference_spelling(&input, input_schema);
        schema::validate(&input, input_schema).map_err(|e| Error::ToolFailed {
            tool: tool.slug.clone(),
            reason: format!("invalid input: {e}"),
        })?;
    }
    let mut ctx_calls = Vec::new();
    // What an action tool may show a model is what it was given (only they are shown).
    let records_issued = tool.tool_type == ToolType::Action;
    let mut issued = IssuedText::default();
    if records_issued {
        issued.record_all(&input);
    }
    let limits = tool.limits();
    let outcome = {
        let mut handler = |operation: &str, args: &Value, kwargs: &Value| {
            let t = Instant::now();
            let result = governed(env, tool, operation, args, kwargs);
            if let (Ok(answer), true) = (&result, records_issued) {
                issued.record(operation, answer);
            }
            ctx_calls.push(CtxCall {
                operation: operation.into(),
                took_us: t.elapsed().as_micros() as u64,
                error: result.as_ref().err().cloned(),
            });
            result
        };
        // One pool of workers per tool and caller: nothing a call leaves behind reaches another.
        let owner = format!("{}#{}", derived.source_hash, env.session.principal.id);
        env.engine.executor.call(
            &owner,
            env.session.principal.kind == PrincipalKind::Administrator,
            source,
            &derived.source_hash,
            &input,
            &tool.effective_settings(),
            limits.timeout_ms,
            limits.memory_mb,
            &mut handler,
        )?
    };
    let outcome = outcome.map_err(|e| call_failure(tool, e))?;
    schema::validate(&outcome.output, &derived.output_schema).map_err(|e| Error::ToolFailed {
        tool: tool.slug.clone(),
        reason: format!("its output does not fit its output schema: {e}"),
    })?;
    Ok(ToolCallReport {
        output: outcome.output,
        logs: outcome.logs,
        ctx_calls,
        took_us: started.elapsed().as_micros() as u64,
        issued,
    })
}

/// A failed call as the engine's error, in words a tool author can act on.
fn call_failure(tool: &ToolDefinition, e: CallError) -> Error {
    let failed = |reason: String| Error::ToolFailed {
        tool: tool.slug.clone(),
        reason,
    };
    match e {
        CallError::Sandbox(m) => failed(format!(
            "refused by the sandbox: {}",
            m.trim_start_matches("sandbox: ")
        )),
        CallError::Exception(m, Some(line)) => failed(format!("raised at line {line}: {m}")),
        CallError::Exception(m, None) => failed(format!("raised: {m}")),
        CallError::Memory(mb) => failed(format!("ran past its memory limit of {mb} MB")),
        CallError::Ctx(m) => failed(format!("a ctx operation was refused: {m}")),
        CallError::Worker(m) => failed(m),
        CallError::Timeout(ms) => Error::ToolTimeout {
            tool: tool.slug.clone(),
            timeout_ms: ms,
        },
    }
}

/// Revalidates every reference an action tool returned and admits its chunks to `ledger`.
/// Text beside references stays only when it is theirs (their passages, or the committed page
/// Quarry gave with them) and every one of them was admitted; otherwise it becomes the
/// admitted chunks' own text (or nothing), so a tool cannot put words next to a valid
/// reference.
pub(crate) fn admit_returned_refs(
    env: &ToolEnvironment<'_>,
    tool: &str,
    value: &mut Value,
    issued: &IssuedText,
    ledger: &mut EvidenceLedger,
) {
    let store = env.engine.store;
    let admit = |reference: &str, ledger: &mut EvidenceLedger| -> Option<String> {
        env.session
            .admit_chunk(store, reference, None, tool, ledger)
            .map(|entry| entry.text.clone())
    };
    match value {
        Value::Object(map) => {
            let mut references: Option<Vec<String>> = None;
            if let Some(Value::String(reference)) = map.get("evidence_ref") {
                references = Some(vec![reference.clone()]);
            }
            if let Some(Value::Array(list)) = map.get("evidence_refs") {
                references = Some(
                    list.iter()
                        .filter_map(|r| r.as_str().map(String::from))
                        .collect(),
                );
            }
            for name in schema::SOURCE_REF_NAMES {
                if let Some(Value::String(reference)) = map.get(name) {
                    if let Err(e) = env.session.open_source(store, reference) {
                        ledger.reject(reference, tool, e.to_string());
                    }
                }
            }
            if let Some(references) = references {
                let texts: Vec<String> =
                    references.iter().filter_map(|r| admit(r, ledger)).collect();
                let all_admitted = texts.len() == references.len();
                if let Some(text) = map.get_mut("text") {
                    let theirs = text
                        .as_str()
                        .is_some_and(|t| issued.belongs_to(t, &references, &texts));
                    if !(all_admitted && theirs) {
                        *text = Value::String(texts.join("\n\n"));
                    }
                }
            }
            for (key, item) in map.iter_mut() {
                if !matches!(
                    key.as_str(),
                    "evidence_ref" | "evidence_refs" | "source_ref" | "sourceRef" | "text"
                ) {
                    admit_returned_refs(env, tool, item, issued, ledger);
                }
            }
        }
        Value::Array(items) => {
            for item in items {
                admit_returned_refs(env, tool, item, issued, ledger);
            }
        }
        _ => {}
    }
}

fn arg<'v>(args: &'v Value, kwargs: &'v Value, index: usize, name: &str) -> Option<&'v Value> {
    kwargs
        .get(name)
        .or_else(|| args.get(index))
        .filter(|v| !v.is_null())
}

fn str_arg(
    args: &Value,
    kwargs: &Value,
    index: usize,
    name: &str,
) -> std::result::Result<String, String> {
    arg(args, kwargs, index, name)
        .and_then(Value::as_str)
        .map(String::from)
        .ok_or_else(|| format!("`{name}` (a string) is required"))
}

fn int_arg(
    args: &Value,
    kwargs: &Value,
    index: usize,
    name: &str,
    default: i64,
) -> std::result::Result<i64, String> {
    match arg(args, kwargs, index, name) {
        None => Ok(default),
        Some(v) => v
            .as_i64()
            .ok_or_else(|| format!("`{name}` must be an integer")),
    }
}

/// One ctx operation: manifest first, then the operation as the caller.
fn governed(
    env: &ToolEnvironment<'_>,
    tool: &ToolDefinition,
    operation: &str,
    args: &Value,
    kwargs: &Value,
) -> std::result::Result<Value, String> {
    let manifest = tool
        .derived
        .as_ref()
        .map(|d| d.manifest.as_slice())
        .unwrap_or_default();
    if !manifest.iter().any(|m| m == operation) {
        return Err(format!(
            "ctx.{operation} is not declared in this tool's evidence manifest (declared: {})",
            if manifest.is_empty() {
                "none".to_string()
            } else {
                manifest.join(", ")
            }
        ));
    }
    match operation {
        "search" => op_search(env, args, kwargs),
        "search_documents" => op_search_documents(env, args, kwargs),
        "fetch_document_chunks" => op_fetch_document_chunks(env, args, kwargs),
        "fetch_source_document" => op_fetch_source_document(env, args, kwargs),
        "fetch_neighbors" => op_fetch_neighbors(env, args, kwargs),
        "http_get" => op_http_get(tool, args, kwargs),
        "llm" => op_llm(env, tool, args, kwargs),
        other => Err(format!("unknown ctx operation `{other}`")),
    }
}

fn retrieval_tool<'a>(
    env: &'a ToolEnvironment<'_>,
    slug: Option<&str>,
) -> std::result::Result<&'a ToolDefinition, String> {
    match slug {
        None => env
            .retrieval
            .ok_or_else(|| "no default retrieval tool in this context".to_string()),
        Some(slug) => env
            .retrieval
            .into_iter()
            .chain(env.capabilities.iter().copied())
            .find(|t| t.slug == slug)
            .ok_or_else(|| format!("retrieval tool `{slug}` is not a capability of this pipeline")),
    }
}

fn search_as_caller(
    env: &ToolEnvironment<'_>,
    tool: &ToolDefinition,
    query: &str,
    limit: usize,
    one_per_document: bool,
) -> std::result::Result<Vec<(ChunkRecord, f32, String)>, String> {
    let mut settings = tool.retrieval_settings().map_err(|e| e.to_string())?;
    settings.limit = limit;
    if one_per_document {
        settings.max_per_document = 1;
    }
    let mut request = SearchRequest::new(query);
    request.settings = settings;
    request.collections = env.collections.clone();
    request.scope = Some(env.session.principal.scope.clone());
    let results = env
        .engine
        .retrieval
        .search(&request)
        .map_err(|e| e.to_string())?;
    let ids: Vec<ChunkId> = results.hits.iter().map(|h| h.chunk_id).collect();
    let chunks: HashMap<ChunkId, ChunkRecord> = env
        .engine
        .store
        .chunks_by_id(&ids)
        .map_err(|e| e.to_string())?
        .into_iter()
        .map(|c| (c.id, c))
        .collect();
    Ok(results
        .hits
        .into_iter()
        .filter_map(|h| {
            chunks
                .get(&h.chunk_id)
                .map(|c| (c.clone(), h.score, h.snippet.text))
        })
        .collect())
}

fn op_search(
    env: &ToolEnvironment<'_>,
    args: &Value,
    kwargs: &Value,
) -> std::result::Result<Value, String> {
    let query = str_arg(args, kwargs, 0, "query")?;
    let top_k = int_arg(args, kwargs, 1, "top_k", 10)?.clamp(1, 50) as usize;
    let retrieval = arg(args, kwargs, 2, "retrieval").and_then(Value::as_str);
    let tool = retrieval_tool(env, retrieval)?;
    let hits = search_as_caller(env, tool, &query, top_k, false)?;
    let found: Vec<Candidate> = hits
        .iter()
        .enumerate()
        .map(|(i, (chunk, score, snippet))| {
            Candidate::issue(env.session, chunk, i + 1, *score, snippet)
        })
        .collect();
    answer(found)
}

fn op_search_documents(
    env: &ToolEnvironment<'_>,
    args: &Value,
    kwargs: &Value,
) -> std::result::Result<Value, String> {
    let query = str_arg(args, kwargs, 0, "query")?;
    let limit = int_arg(args, kwargs, 1, "limit", 10)?.clamp(1, 50) as usize;
    let tool = retrieval_tool(env, None)?;
    let hits = search_as_caller(env, tool, &query, limit, true)?;
    let found: Vec<FoundDocument> = hits
        .iter()
        .map(|(chunk, score, snippet)| FoundDocument::issue(env.session, chunk, *score, snippet))
        .collect();
    answer(found)
}

/// Chunks of one document revision from `start`, at most `limit` (+1 to tell if more remain).
fn chunks_from(
    env: &ToolEnvironment<'_>,
    document_id: DocumentId,
    revision_id: RevisionId,
    start: i64,
    limit: i64,
) -> std::result::Result<Vec<ChunkRecord>, String> {
    env.engine
        .store
        .chunks_of_revision_from(document_id, revision_id, start, limit)
        // The tool sees SQLite's own message, without the "database error: " prefix.
        .map_err(|e| match e {
            Error::Sqlite(e) => e.to_string(),
            e => e.to_string(),
        })
}

/// The source a paging call names, checked.
fn open_source(
    env: &ToolEnvironment<'_>,
    args: &Value,
    kwargs: &Value,
) -> std::result::Result<Claims, String> {
    // The manual's spelling is accepted as a keyword too.
    let source_ref = match kwargs
        .get(schema::SOURCE_REF_NAMES[0])
        .and_then(Value::as_str)
    {
        Some(given) => given.to_string(),
        None => str_arg(args, kwargs, 0, "source_ref")?,
    };
    env.session
        .open_source(env.engine.store, &source_ref)
        .map_err(|e| e.to_string())
}

/// Where in `source` a paging call starts: its cursor of `kind`, or the beginning.
fn cursor_position(
    env: &ToolEnvironment<'_>,
    args: &Value,
    kwargs: &Value,
    kind: RefKind,
    source: &Claims,
) -> std::result::Result<i64, String> {
    match arg(args, kwargs, 1, "cursor").and_then(Value::as_str) {
        None => Ok(0),
        Some(cursor) => env
            .session
            .open_cursor(cursor, kind, source)
            .map_err(|e| e.to_string()),
    }
}

fn open_page(
    env: &ToolEnvironment<'_>,
    args: &Value,
    kwargs: &Value,
) -> std::result::Result<(Claims, i64), String> {
    let source = open_source(env, args, kwargs)?;
    let start = cursor_position(env, args, kwargs, RefKind::Cursor, &source)?;
    Ok((source, start))
}

fn op_fetch_document_chunks(
    env: &ToolEnvironment<'_>,
    args: &Value,
    kwargs: &Value,
) -> std::result::Result<Value, String> {
    let (source, start) = open_page(env, args, kwargs)?;
    let limit = int_arg(args, kwargs, 2, "limit", 8)?.clamp(1, MAX_PAGE_CHUNKS);
    let mut chunks = chunks_from(
        env,
        source.document_id,
        source.revision_id,
        start,
        limit + 1,
    )?;
    let cursor = if chunks.len() as i64 > limit {
        chunks.truncate(limit as usize);
        let next = chunks.last().map_or(start, |c| c.ordinal + 1);
        Some(
            env.session
                .issue_cursor(source.document_id, source.revision_id, next),
        )
    } else {
        None
    };
    answer(DocumentPage {
        chunks: chunks
            .iter()
            .map(|c| PageChunk::issue(env.session, c))
            .collect(),
        cursor,
    })
}

/// A page of the revision's reader text (the file's own text, or its blocks joined with their
/// structure), cut by byte range, with references to the chunks it shows and a reading cursor
/// when more remains. A revision indexed before reader texts were kept is read by joining its
/// chunks instead.
fn op_fetch_source_document(
    env: &ToolEnvironment<'_>,
    args: &Value,
    kwargs: &Value,
) -> std::result::Result<Value, String> {
    let source = open_source(env, args, kwargs)?;
    let max_chars = int_arg(args, kwargs, 2, "max_chars", 4000)?.clamp(200, 20_000) as usize;
    let text = env
        .engine
        .store
        .reader_text(source.revision_id)
        .map_err(|e| e.to_string())?;
    match text.filter(|t| !t.is_empty()) {
        Some(text) => read_page(env, args, kwargs, &source, &text, max_chars),
        None => joined_chunks_page(env, args, kwargs, &source, max_chars),
    }
}

fn read_page(
    env: &ToolEnvironment<'_>,
    args: &Value,
    kwargs: &Value,
    source: &Claims,
    text: &str,
    max_chars: usize,
) -> std::result::Result<Value, String> {
    let start = cursor_position(env, args, kwargs, RefKind::TextCursor, source)?;
    let start = usize::try_from(start)
        .ok()
        .filter(|&s| s < text.len() && text.is_char_boundary(s))
        .ok_or("the cursor is outside the document")?;
    let end = reading::page_end(text, start, max_chars);
    let shown = env
        .engine
        .store
        .chunks_in_reader_range(
            source.document_id,
            source.revision_id,
            (start as u64, end as u64),
            MAX_PAGE_CHUNKS,
        )
        .map_err(|e| e.to_string())?;
    let document = env
        .engine
        .store
        .document_by_id(source.document_id)
        .map_err(|e| e.to_string())?
        .ok_or("the document is no longer in the library")?;
    answer(SourceDocument {
        cursor: (end < text.len()).then(|| {
            env.session
                .issue_text_cursor(source.document_id, source.revision_id, end as u64)
        }),
        evidence_refs: shown.iter().map(|c| env.session.issue_chunk(c)).collect(),
        path: document.path.display().to_string(),
        text: text[start..end].to_string(),
        title: document.title.unwrap_or_default(),
    })
}

/// The page for a revision without a reader text: its chunks joined, a chunk cursor on.
fn joined_chunks_page(
    env: &ToolEnvironment<'_>,
    args: &Value,
    kwargs: &Value,
    source: &Claims,
    max_chars: usize,
) -> std::result::Result<Value, String> {
    let start = cursor_position(env, args, kwargs, RefKind::Cursor, source)?;
    let chunks = chunks_from(
        env,
        source.document_id,
        source.revision_id,
        start,
        MAX_PAGE_CHUNKS + 1,
    )?;
    let mut text = String::new();
    let mut refs = Vec::new();
    let mut taken = 0;
    for chunk in &chunks {
        if taken > 0 && text.chars().count() + chunk.text.chars().count() > max_chars {
            break;
        }
        if taken == MAX_PAGE_CHUNKS as usize {
            break;
        }
        if !text.is_empty() {
            text.push_str("\n\n");
        }
        text.push_str(&chunk.text);
        refs.push(env.session.issue_chunk(chunk));
        taken += 1;
    }
    let cursor = chunks.get(taken).map(|next| {
        env.session
            .issue_cursor(source.document_id, source.revision_id, next.ordinal)
    });
    let first = chunks.first();
    answer(SourceDocument {
        cursor,
        evidence_refs: refs,
        path: first
            .map(|c| c.path.display().to_string())
            .unwrap_or_default(),
        text,
        title: first.and_then(|c| c.title.clone()).unwrap_or_default(),
    })
}

fn op_fetch_neighbors(
    env: &ToolEnvironment<'_>,
    args: &Value,
    kwargs: &Value,
) -> std::result::Result<Value, String> {
    let reference = str_arg(args, kwargs, 0, "evidence_ref")?;
    let radius = int_arg(args, kwargs, 1, "radius", 1)?.clamp(1, MAX_NEIGHBOR_RADIUS);
    let entry = env
        .session
        .revalidate_chunk(env.engine.store, &reference, None, "fetch_neighbors")
        .map_err(|e| e.to_string())?;
    let start = (entry.ordinal - radius).max(0);
    let chunks = chunks_from(
        env,
        entry.document_id,
        entry.revision_id,
        start,
        entry.ordinal + radius - start + 1,
    )?;
    answer(Neighbors {
        chunks: chunks
            .iter()
            .filter(|c| c.id != entry.chunk_id)
            .map(|c| PageChunk::issue(env.session, c))
            .collect(),
        radius,
    })
}

/// `scheme://host[:port]` of a URL.
fn origin_of(url: &str) -> Option<String> {
    let (scheme, rest) = url.split_once("://")?;
    if scheme != "http" && scheme != "https" {
        return None;
    }
    let authority = rest.split(['/', '?', '#']).next()?;
    if authority.is_empty() || authority.contains('@') {
        return None;
    }
    Some(format!("{scheme}://{}", authority.to_ascii_lowercase()))
}

fn op_http_get(
    tool: &ToolDefinition,
    args: &Value,
    kwargs: &Value,
) -> std::result::Result<Value, String> {
    let url = str_arg(args, kwargs, 0, "url")?;
    let origin = origin_of(&url).ok_or_else(|| format!("`{url}` is not an http(s) URL"))?;
    let allowed = tool.egress.as_deref().unwrap_or_default();
    if !allowed.iter().any(|a| a.to_ascii_lowercase() == origin) {
        return Err(format!(
            "egress to {origin} is refused: it is not in this tool's allowlist ({})",
            if allowed.is_empty() {
                "empty".to_string()
            } else {
                allowed.join(", ")
            }
        ));
    }
    // No redirects: one could lead outside the allowlist.
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(10)))
        .max_redirects(0)
        .http_status_as_error(false)
        .build()
        .into();
    let mut response = agent
        .get(&url)
        .call()
        .map_err(|e| format!("GET {url} failed: {e}"))?;
    let status = response.status().as_u16();
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let body = response
        .body_mut()
        .with_config()
        .limit(MAX_HTTP_BODY)
        .read_to_string()
        .map_err(|e| format!("reading {url} failed: {e}"))?;
    Ok(json!({"status": status, "content_type": content_type, "body": body}))
}

/// Longest completion `ctx.llm` may ask for.
const MAX_TOOL_LLM_TOKENS: u64 = 256;

/// `ctx.llm(prompt, system=None, max_tokens=128, json_schema=None)`: one completion from the
/// tool's own model (an installed chat model id or a GGUF path) on the embedded backend.
/// Returns `{"text", "json"?, "tokens"}`; with `json_schema` the output is grammar-constrained
/// and parsed.
fn op_llm(
    env: &ToolEnvironment<'_>,
    tool: &ToolDefinition,
    args: &Value,
    kwargs: &Value,
) -> std::result::Result<Value, String> {
    use crate::llm::embedded::{EmbeddedBackend, EmbeddedConfig};
    use crate::llm::{ChatBackend, ChatMessage, ChatRequest, Constraint};

    let prompt = str_arg(args, kwargs, 0, "prompt")?;
    let model = tool
        .model
        .as_deref()
        .ok_or("this tool has no model selected (set `model` on the tool)")?;
    let config = EmbeddedConfig::named(env.engine.models, model).map_err(|e| e.to_string())?;
    let backend = EmbeddedBackend::shared(config).map_err(|e| e.to_string())?;
    let mut messages = Vec::new();
    if let Some(system) = kwargs.get("system").and_then(Value::as_str) {
        messages.push(ChatMessage::system(system));
    }
    messages.push(ChatMessage::user(prompt));
    let mut request = ChatRequest::new(messages);
    request.max_tokens = kwargs
        .get("max_tokens")
        .and_then(Value::as_u64)
        .unwrap_or(128)
        .clamp(1, MAX_TOOL_LLM_TOKENS) as usize;
    let schema = kwargs.get("json_schema").filter(|v| v.is_object()).cloned();
    if let Some(schema) = &schema {
        request.constraint = Some(Constraint::JsonSchema(schema.clone()));
    }
    let response = backend
        .chat(&request, &mut |_| {})
        .map_err(|e| e.to_string())?;
    let mut out = serde_json::json!({
        "text": response.content,
        "tokens": response.usage.completion_tokens,
    });
    if schema.is_some() {
        out["json"] = serde_json::from_str(&response.content).unwrap_or(Value::Null);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::origin_of;

    #[test]
    fn origins_ignore_paths_and_refuse_userinfo() {
        assert_eq!(
            origin_of("http://127.0.0.1:8080/a?b").as_deref(),
            Some("http://127.0.0.1:8080")
        );
        assert_eq!(
            origin_of("https://Example.com").as_deref(),
            Some("https://example.com")
        );
        assert_eq!(origin_of("http://good.com@evil.com/"), None);
        assert_eq!(origin_of("file:///etc/passwd"), None);
    }
}
