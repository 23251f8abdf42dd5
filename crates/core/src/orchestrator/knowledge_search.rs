//! `knowledge_search`: the LLM-facing semantic search tool of the plugin manual.
//!
//! The manual's plugin, mapped onto Quarry: a namespace is a collection, the
//! `embeddings.provider` is the library's embedder for the model that embedded the collections,
//! and a `vector.query` is one nearest-neighbour query on that model's vector table, partitioned
//! by collection. On top of the manual, every call is filtered by the caller's authorization: a
//! collection outside the caller's [`Scope`](crate::auth::Scope) behaves exactly like a missing
//! one, and every result is admitted as evidence through a host-issued reference, so the text the
//! LLM reads is the text in SQLite.
//!
//! Boot ([`KnowledgeSearch::boot`]) checks the configuration once; [`KnowledgeSearch::call`]
//! answers one tool call and never fails for the LLM's mistakes: those become an error result
//! the LLM reads (`Error: "query argument required"`). Gates and the `tool.invoke` /
//! `tool.result` events are the orchestrator's, around the call.
//!
//! One documented departure: an allow-list entry `"*"` means every collection the caller may
//! read, so a fresh install's seeded configuration works before the user names collections.

use std::collections::HashSet;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::context::EngineContext;
use crate::error::{Error, Result};
use crate::evidence::{EvidenceSession, LedgerEntry};
use crate::ids::{ChunkId, CollectionId};
use crate::llm::ToolSpec;
use crate::names::{Name, NameKind};
use crate::retrieve::{
    query_collection, RetrievalSettings, SearchMode, SearchRequest, VectorContext,
};
use crate::store::{Collection, Store, VectorTable};

/// The allow-list entry that stands for every collection (a Quarry departure; see the module doc).
pub const ALL_NAMESPACES: &str = "*";
/// `top_k` when the configuration gives none (the manual's default).
pub const DEFAULT_TOP_K: usize = 5;
/// The largest `top_k` accepted (the manual's `maxTopK`).
pub const MAX_TOP_K: usize = 50;
/// The longest query the tool's schema admits, in characters.
pub const MAX_QUERY_CHARS: usize = 500;
/// The tool's name when the configuration gives none.
pub const DEFAULT_TOOL_NAME: &str = "knowledge_search";

/// The manual's boot error, verbatim.
pub const NO_NAMESPACES_AT_BOOT: &str =
    "at least one namespace must be configured under 'namespaces' at boot";
/// The manual's error for a call without a query, verbatim.
pub const QUERY_REQUIRED: &str = "query argument required";
/// The manual's error when the allow-list filtered out every name the LLM passed, verbatim.
pub const NO_VALID_NAMESPACES: &str = "no valid namespaces selected";

/// The tool's configuration (the manual's `nexus.tool.knowledge_search` block).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct KnowledgeSearchConfig {
    /// The allow-list: collections the tool may search. Required and non-empty (an unset list
    /// deserializes as empty, and boot refuses both alike). `"*"` means every collection.
    #[serde(default)]
    pub namespaces: Vec<String>,
    /// Collections searched when the LLM names none; empty means the whole allow-list. Must
    /// be a subset of `namespaces` (anything is, when `namespaces` holds `"*"`).
    #[serde(default)]
    pub default_namespaces: Vec<String>,
    /// Results per call, and the `K` of each per-collection query (1 to [`MAX_TOP_K`]).
    #[serde(default = "default_top_k")]
    pub top_k: usize,
    /// Whether each result carries the `metadata` map beside its structured fields.
    #[serde(default = "default_include_metadata")]
    pub include_metadata: bool,
    /// The name the LLM sees (`[A-Za-z0-9_-]`, 1 to 64 characters).
    #[serde(default = "default_tool_name")]
    pub tool_name: String,
}

fn default_top_k() -> usize {
    DEFAULT_TOP_K
}

fn default_include_metadata() -> bool {
    true
}

fn default_tool_name() -> String {
    DEFAULT_TOOL_NAME.into()
}

impl KnowledgeSearchConfig {
    /// A configuration with this allow-list and every other key at its default.
    pub fn new(namespaces: Vec<String>) -> KnowledgeSearchConfig {
        KnowledgeSearchConfig {
            namespaces,
            default_namespaces: Vec::new(),
            top_k: DEFAULT_TOP_K,
            include_metadata: true,
            tool_name: default_tool_name(),
        }
    }
}

/// The booted tool: a checked configuration.
#[derive(Debug, Clone)]
pub struct KnowledgeSearch {
    config: KnowledgeSearchConfig,
    /// The allow-list holds `"*"`.
    all: bool,
    /// Searched when the LLM names none (the allow-list when the configuration gives none).
    defaults: Vec<String>,
}

/// What one call produced: what the LLM reads, and what the host keeps.
#[derive(Debug, Clone, Serialize)]
pub struct KnowledgeSearchOutcome {
    /// The manual's JSON (`{"query", "results": [...]}`), or `{"error": <message>}`.
    pub output: Value,
    /// Exactly what the LLM sees: the JSON text, or `Error: "<message>"`.
    pub text: String,
    /// Whether this is an error result.
    pub is_error: bool,
    /// The admitted evidence, one entry per result, in result order.
    pub entries: Vec<LedgerEntry>,
    /// Per-collection failures and other things the host should know (not shown to the LLM).
    pub warnings: Vec<String>,
    /// The collections searched: the resolved set, before per-collection failures.
    pub namespaces: Vec<String>,
}

impl KnowledgeSearchOutcome {
    /// An error result.
    ///
    /// How the manual is read: its error list gives the message (`query argument required`,
    /// "in tool output" saying where it appears) and its behaviour list what the LLM sees,
    /// `Error: "query argument required"`: the message quoted after `Error: `. Every error
    /// result is written that way, with JSON string quoting so a message with quotes in it
    /// stays one string.
    fn error(message: String, warnings: Vec<String>, namespaces: Vec<String>) -> Self {
        let quoted = serde_json::to_string(&message).unwrap_or_else(|_| format!("\"{message}\""));
        KnowledgeSearchOutcome {
            output: json!({ "error": message }),
            text: format!("Error: {quoted}"),
            is_error: true,
            entries: Vec::new(),
            warnings,
            namespaces,
        }
    }
}

/// The output, in the manual's field order (a `Value` would sort the keys).
#[derive(Serialize)]
struct Output<'a> {
    query: &'a str,
    results: Vec<ResultItem>,
}

/// [`Output`] read back from its JSON, to be written again in the manual's order.
#[derive(Serialize, Deserialize)]
struct OwnedOutput {
    query: String,
    results: Vec<ResultItem>,
}

/// The manual's JSON text of an output that went through a `Value` (whose keys are sorted):
/// fields in the manual's order again.
pub(crate) fn manual_text(output: &Value) -> String {
    serde_json::from_value::<OwnedOutput>(output.clone())
        .ok()
        .and_then(|o| serde_json::to_string(&o).ok())
        .unwrap_or_else(|| output.to_string())
}

#[derive(Serialize, Deserialize)]
struct ResultItem {
    rank: usize,
    namespace: String,
    similarity: f64,
    source: String,
    chunk_idx: String,
    content: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    metadata: Option<Metadata>,
}

#[derive(Serialize, Deserialize)]
struct Metadata {
    source: String,
    chunk_idx: String,
    chunk_size: String,
}

/// One nearest-neighbour hit before the merge.
struct Candidate {
    chunk_id: ChunkId,
    similarity: f32,
    namespace: String,
}

fn invalid(field: &str, reason: impl Into<String>) -> Error {
    Error::InvalidSetting {
        field: format!("knowledge_search.{field}"),
        reason: reason.into(),
    }
}

/// The collection-name rule of the store, so a typo such as `"kb, docs"` fails at boot
/// instead of silently never matching.
fn check_name(field: &str, name: &str) -> Result<()> {
    Name::parse(NameKind::Collection, name)
        .map_err(|bad| invalid(field, format!("{bad}; nor is it `*`")))?;
    Ok(())
}

fn dedup(names: &[String]) -> Vec<String> {
    let mut seen = HashSet::new();
    names
        .iter()
        .filter(|n| seen.insert(n.as_str()))
        .cloned()
        .collect()
}

fn round4(x: f32) -> f64 {
    (f64::from(x) * 1e4).round() / 1e4
}

impl KnowledgeSearch {
    /// Checks the configuration: the manual refuses an empty or unset allow-list (with its
    /// own message, as [`Error::OrchestratorNotReady`]); `top_k`, `default_namespaces` and
    /// `tool_name` are checked too, each error naming its field.
    pub fn boot(config: KnowledgeSearchConfig) -> Result<KnowledgeSearch> {
        if config.namespaces.is_empty() {
            return Err(Error::OrchestratorNotReady(NO_NAMESPACES_AT_BOOT.into()));
        }
        for (i, name) in config.namespaces.iter().enumerate() {
            if name != ALL_NAMESPACES {
                check_name(&format!("namespaces[{i}]"), name)?;
            }
        }
        let all = config.namespaces.iter().any(|n| n == ALL_NAMESPACES);
        for (i, name) in config.default_namespaces.iter().enumerate() {
            let field = format!("default_namespaces[{i}]");
            if name == ALL_NAMESPACES {
                if !all {
                    return Err(invalid(
                        &field,
                        "`*` is only allowed when `namespaces` holds `*`",
                    ));
                }
                continue;
            }
            check_name(&field, name)?;
            if !all && !config.namespaces.contains(name) {
                return Err(invalid(
                    &field,
                    format!(
                        "`{name}` is not in the allow-list `namespaces` ({})",
                        config.namespaces.join(", ")
                    ),
                ));
            }
        }
        if !(1..=MAX_TOP_K).contains(&config.top_k) {
            return Err(invalid("top_k", format!("must be 1 to {MAX_TOP_K}")));
        }
        if let Err(bad) = Name::parse(NameKind::Function, &config.tool_name) {
            return Err(invalid("tool_name", bad.to_string()));
        }
        let defaults = if config.default_namespaces.is_empty() {
            dedup(&config.namespaces)
        } else {
            dedup(&config.default_namespaces)
        };
        Ok(KnowledgeSearch {
            all,
            defaults,
            config,
        })
    }

    /// The configuration it was booted with.
    pub fn config(&self) -> &KnowledgeSearchConfig {
        &self.config
    }

    /// The name the LLM calls it by.
    pub fn name(&self) -> &str {
        &self.config.tool_name
    }

    /// The function the LLM sees. `namespaces` lists the allow-list as an `enum` (left out when
    /// the allow-list is `"*"`, whose names are only known at call time).
    pub fn tool_spec(&self) -> ToolSpec {
        let explicit: Vec<String> = dedup(&self.config.namespaces)
            .into_iter()
            .filter(|n| n != ALL_NAMESPACES)
            .collect();
        let defaults = if self.defaults.iter().any(|n| n == ALL_NAMESPACES) {
            "all of them".to_string()
        } else {
            self.defaults.join(", ")
        };
        let collections = if self.all {
            "all the user's collections".to_string()
        } else {
            explicit.join(", ")
        };
        let mut items = json!({ "type": "string" });
        if !self.all {
            items["enum"] = json!(explicit);
        }
        ToolSpec {
            name: self.config.tool_name.clone(),
            description: format!(
                "Search the configured knowledge base (the user's own indexed documents) by \
                 meaning and return the most similar passages, best first, with their file \
                 paths. Use it for factual questions about the user's documents; cite sources \
                 by file path. Collections: {collections}; searched when none are named: \
                 {defaults}. Returns up to {} passages.",
                self.config.top_k
            ),
            parameters: json!({
                "type": "object",
                "properties": {
                    "query": {
                        "type": "string",
                        "minLength": 1,
                        "maxLength": MAX_QUERY_CHARS,
                        "description": "What to look for, phrased as you would a search."
                    },
                    "namespaces": {
                        "type": "array",
                        "items": items,
                        "description": format!(
                            "Collections to search; leave out to search the defaults ({defaults})."
                        )
                    }
                },
                "required": ["query"],
                "additionalProperties": false
            }),
        }
    }

    /// Answers one tool call as `session`'s caller: the manual's six steps, filtered by the
    /// caller's authorization, every result admitted as evidence. Never fails: an LLM mistake
    /// or an embedding failure is an error result, a collection that cannot answer a warning.
    pub fn call(
        &self,
        ctx: &EngineContext<'_>,
        session: &EvidenceSession,
        arguments: &Value,
    ) -> KnowledgeSearchOutcome {
        let mut warnings = Vec::new();

        // 1. Trim and validate the query.
        let Some(query) = arguments
            .get("query")
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|q| !q.is_empty())
        else {
            return KnowledgeSearchOutcome::error(QUERY_REQUIRED.into(), warnings, Vec::new());
        };

        // 2. Resolve the namespace set.
        let scope = &session.principal.scope;
        let collections = match ctx.store.collections() {
            Ok(c) => c,
            Err(e) => {
                // Not the LLM's fault and nothing to search: say so rather than pretend.
                let message = format!("list collections: {e}");
                tracing::warn!(tool = %self.name(), "knowledge_search: {message}");
                return KnowledgeSearchOutcome::error(message, warnings, Vec::new());
            }
        };
        let namespaces = match self.namespaces(arguments, &collections, scope, &mut warnings) {
            Ok(names) => names,
            Err(message) => return KnowledgeSearchOutcome::error(message, warnings, Vec::new()),
        };
        if namespaces.is_empty() {
            // Only an allow-list of "*" gets here, for a caller who may read no collection:
            // nothing to search, and no reason to load a model.
            warnings.push("no collection to search: the caller may read none".into());
            return self.finish(query, Vec::new(), Vec::new(), warnings, namespaces);
        }

        // 3 to 5. Embed, query each namespace, merge.
        let candidates =
            match self.nearest(ctx, query, &namespaces, &collections, scope, &mut warnings) {
                Ok(candidates) => candidates,
                Err(message) => {
                    return KnowledgeSearchOutcome::error(message, warnings, namespaces)
                }
            };
        let (results, entries) = self.admit(
            ctx.store,
            session,
            &candidates,
            self.config.top_k,
            &mut warnings,
        );

        // 6. Format as JSON.
        self.finish(query, results, entries, warnings, namespaces)
    }

    /// The manual's step 2 with its host-side warnings: the namespaces to search, or the
    /// manual's error when the allow-list filtered out every name the LLM passed.
    fn namespaces(
        &self,
        arguments: &Value,
        collections: &[Collection],
        scope: &crate::auth::Scope,
        warnings: &mut Vec<String>,
    ) -> std::result::Result<Vec<String>, String> {
        let resolved = self.resolve(arguments.get("namespaces"), collections, scope);
        // Host-side only: the manual drops such names without telling the LLM.
        for name in &resolved.dropped {
            warnings.push(format!(
                "namespace `{name}` is not in the allow-list; dropped"
            ));
        }
        if resolved.all_filtered {
            return Err(NO_VALID_NAMESPACES.into());
        }
        Ok(resolved.names)
    }

    /// The manual's steps 3 to 5, the tool's vector search: the query embedded once, one
    /// nearest-neighbour query per namespace ([`nearest_in_namespace`]), the hits merged best
    /// first. Only a failed embedding is an error; a namespace that cannot answer is a warning.
    fn nearest(
        &self,
        ctx: &EngineContext<'_>,
        query: &str,
        namespaces: &[String],
        collections: &[Collection],
        scope: &crate::auth::Scope,
        warnings: &mut Vec<String>,
    ) -> std::result::Result<Vec<Candidate>, String> {
        // The collections that can be searched at all, by name: a missing collection and one
        // the caller may not read get the same words, so a warning does not tell which exist.
        let readable = |name: &str| {
            collections
                .iter()
                .find(|c| c.name == name)
                .filter(|c| scope.allows(c))
        };

        // 3. Embed the query once, with the model of the first collection that has one (each
        // collection records the model that embedded it), else the default.
        let model = namespaces
            .iter()
            .filter_map(|n| readable(n))
            .find_map(|c| c.embedding_model.clone())
            .unwrap_or_else(|| crate::models::default_embedding_model().to_string());
        let vector = ctx.retrieval.embed_query(&model, query).map_err(|e| {
            let message = format!("embed query: {e}");
            tracing::warn!(tool = %self.name(), model = %model, "knowledge_search: {message}");
            message
        })?;

        // 4. One vector query per namespace, the same vector and K for each. Per-namespace
        // failures are warnings: partial results are better than zero.
        let k = self.config.top_k;
        let mut candidates = Vec::new();
        let mut waiting = Vec::new();
        for name in namespaces {
            match nearest_in_namespace(ctx, readable(name), name, &model, &vector, k) {
                Ok(NamespaceAnswer { hits, note }) => {
                    if let Some(note) = note {
                        warnings.push(note);
                        waiting.push(name.clone());
                    }
                    candidates.extend(hits.into_iter().map(|(chunk_id, similarity)| Candidate {
                        chunk_id,
                        similarity,
                        namespace: name.clone(),
                    }));
                }
                Err(why) => {
                    tracing::warn!(
                        tool = %self.name(),
                        namespace = %name,
                        "knowledge_search: namespace query failed: {why}"
                    );
                    warnings.push(format!("namespace `{name}`: {why}"));
                }
            }
        }
        embed_word_matches_first(ctx, query, waiting, scope);

        // 5. Merge, best first (ties by chunk id, so the order is stable); `admit` stops at k.
        candidates.sort_by(|a, b| {
            b.similarity
                .total_cmp(&a.similarity)
                .then(a.chunk_id.cmp(&b.chunk_id))
        });
        Ok(candidates)
    }

    /// The manual's step 6: the output as a value and as the text the LLM reads (compact:
    /// whitespace is context the small local models cannot spare).
    fn finish(
        &self,
        query: &str,
        results: Vec<ResultItem>,
        entries: Vec<LedgerEntry>,
        warnings: Vec<String>,
        namespaces: Vec<String>,
    ) -> KnowledgeSearchOutcome {
        let output = Output { query, results };
        match (
            serde_json::to_string(&output),
            serde_json::to_value(&output),
        ) {
            (Ok(text), Ok(value)) => KnowledgeSearchOutcome {
                output: value,
                text,
                is_error: false,
                entries,
                warnings,
                namespaces,
            },
            (Err(e), _) | (_, Err(e)) => {
                KnowledgeSearchOutcome::error(format!("format: {e}"), warnings, namespaces)
            }
        }
    }

    /// The manual's step 2: the LLM's names ∩ the allow-list, or the defaults when it named
    /// none (argument absent, null or an empty list). With `"*"` the allow-list is every
    /// collection the caller may read, so an unknown name is filtered out like any other.
    fn resolve(
        &self,
        requested: Option<&Value>,
        collections: &[Collection],
        scope: &crate::auth::Scope,
    ) -> Resolved {
        let wildcard = || {
            collections
                .iter()
                .filter(|c| scope.allows(c))
                .map(|c| c.name.clone())
                .collect::<Vec<_>>()
        };
        // "Did not specify" is an absent, null or empty argument (or an empty string); anything
        // else is a list of names to intersect, a non-string item counting as a name that is
        // not in the allow-list.
        let name_of = |v: &Value| match v {
            Value::String(s) => s.trim().to_string(),
            other => other.to_string(),
        };
        let named: Vec<String> = match requested {
            None | Some(Value::Null) => Vec::new(),
            // A lenient reading of a single name given as a string.
            Some(Value::String(s)) if s.trim().is_empty() => Vec::new(),
            Some(Value::Array(items)) => items.iter().map(name_of).collect(),
            Some(other) => vec![name_of(other)],
        };
        if named.is_empty() {
            let names = if self.defaults.iter().any(|n| n == ALL_NAMESPACES) {
                wildcard()
            } else {
                self.defaults.clone()
            };
            return Resolved {
                names: dedup(&names),
                dropped: Vec::new(),
                all_filtered: false,
            };
        }
        let allowed: Vec<String> = if self.all {
            wildcard()
        } else {
            self.config.namespaces.clone()
        };
        let (kept, dropped): (Vec<String>, Vec<String>) =
            named.into_iter().partition(|n| allowed.contains(n));
        Resolved {
            all_filtered: kept.is_empty(),
            names: dedup(&kept),
            dropped: dedup(&dropped),
        }
    }

    /// Takes the merged candidates in order, admits each as evidence (a reference issued to
    /// this session, then revalidated against SQLite, whose text becomes `content`), and stops
    /// at `k` results. A candidate that cannot be admitted is dropped with a warning.
    fn admit(
        &self,
        store: &Store,
        session: &EvidenceSession,
        candidates: &[Candidate],
        k: usize,
        warnings: &mut Vec<String>,
    ) -> (Vec<ResultItem>, Vec<LedgerEntry>) {
        let mut results = Vec::new();
        let mut entries: Vec<LedgerEntry> = Vec::new();
        for candidate in candidates {
            if results.len() == k {
                break;
            }
            let chunk = match store.chunks_by_id(&[candidate.chunk_id]) {
                Ok(mut found) if !found.is_empty() => found.remove(0),
                Ok(_) => {
                    // Deleted since its vector was read.
                    warnings.push(format!(
                        "chunk {} is no longer indexed; dropped",
                        candidate.chunk_id
                    ));
                    continue;
                }
                Err(e) => {
                    warnings.push(format!("chunk {}: {e}; dropped", candidate.chunk_id));
                    continue;
                }
            };
            let reference = session.issue_chunk(&chunk);
            let entry = match session.revalidate_chunk(
                store,
                &reference,
                Some(candidate.similarity),
                self.name(),
            ) {
                Ok(entry) => entry,
                Err(e) => {
                    tracing::warn!(tool = %self.name(), chunk = candidate.chunk_id.0, "knowledge_search: {e}");
                    warnings.push(format!("chunk {}: {e}; dropped", candidate.chunk_id));
                    continue;
                }
            };
            let source = entry.path.to_string_lossy().into_owned();
            let chunk_idx = entry.ordinal.to_string();
            let metadata = self.config.include_metadata.then(|| Metadata {
                source: source.clone(),
                chunk_idx: chunk_idx.clone(),
                chunk_size: entry.text.chars().count().to_string(),
            });
            results.push(ResultItem {
                rank: results.len() + 1,
                namespace: candidate.namespace.clone(),
                similarity: round4(candidate.similarity),
                source,
                chunk_idx,
                content: entry.text.clone(),
                metadata,
            });
            entries.push(entry);
        }
        (results, entries)
    }
}

/// The manual's `vector.query` for one namespace: its nearest chunks to `vector`, or why it
/// cannot answer. The whole vector-search path of the tool is here, so it can later share one
/// path with [`crate::retrieve`].
fn nearest_in_namespace(
    ctx: &EngineContext<'_>,
    collection: Option<&Collection>,
    name: &str,
    model: &str,
    vector: &[f32],
    k: usize,
) -> std::result::Result<NamespaceAnswer, String> {
    let collection =
        collection.ok_or_else(|| Error::CollectionNotFound(name.to_string()).to_string())?;
    let sign_index = |t: &VectorTable, c: CollectionId| ctx.retrieval.sign_index(t, c);
    let vectors = VectorContext {
        store: ctx.store,
        sign_index: &sign_index,
    };
    // The same approximate pass as search (sign bits, then exact rescoring), so a large
    // collection answers as fast here as in the search box.
    let breadth = RetrievalSettings::default().ann_breadth;
    match query_collection(vectors, collection, model, vector, k, breadth) {
        Ok(Ok(found)) => Ok(NamespaceAnswer {
            hits: found.hits,
            note: found
                .partial
                .map(|issue| format!("namespace `{name}`: {}", issue.message)),
        }),
        // Nothing embedded there yet: an empty answer with the note, so its word matches queue.
        Ok(Err(issue)) if issue.component == "vectors_incomplete" => Ok(NamespaceAnswer {
            hits: Vec::new(),
            note: Some(format!("namespace `{name}`: {}", issue.message)),
        }),
        Ok(Err(issue)) => Err(issue.message),
        Err(e) => Err(e.to_string()),
    }
}

/// What one namespace's vector query found.
struct NamespaceAnswer {
    /// `(chunk id, cosine similarity)`, best first.
    hits: Vec<(ChunkId, f32)>,
    /// Set when it answers only in part, or not at all, because its vectors are still being
    /// made.
    note: Option<String>,
}

/// A namespace still being embedded answers only from its embedded chunks, and the assistant
/// asks by meaning. So the documents there that match the query's words are queued to be
/// embedded first: a plain full-text search does that for what it finds (`retrieve::search`),
/// and the assistant's next search by meaning can reach them. A hint, so it never fails the call.
fn embed_word_matches_first(
    ctx: &EngineContext<'_>,
    query: &str,
    waiting: Vec<String>,
    scope: &crate::auth::Scope,
) {
    if waiting.is_empty() {
        return;
    }
    let mut request = SearchRequest::new(query).with_mode(SearchMode::Lexical);
    request.collections = waiting;
    request.scope = Some(scope.clone());
    if let Err(e) = ctx.retrieval.search(&request) {
        tracing::debug!("knowledge_search: could not queue word matches for vectors: {e}");
    }
}

/// The outcome of step 2.
struct Resolved {
    /// The collections to search, in the order given, each once.
    names: Vec<String>,
    /// The LLM's names that the allow-list dropped.
    dropped: Vec<String>,
    /// The LLM named collections and the allow-list dropped every one.
    all_filtered: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(namespaces: &[&str]) -> KnowledgeSearchConfig {
        KnowledgeSearchConfig::new(namespaces.iter().map(|s| s.to_string()).collect())
    }

    #[test]
    fn boot_checks_each_field_by_name() {
        let field = |c: KnowledgeSearchConfig| match KnowledgeSearch::boot(c).unwrap_err() {
            Error::InvalidSetting { field, .. } => field,
            other => panic!("{other}"),
        };
        let mut c = config(&["kb"]);
        c.top_k = 0;
        assert_eq!(field(c), "knowledge_search.top_k");
        let mut c = config(&["kb"]);
        c.top_k = MAX_TOP_K + 1;
        assert_eq!(field(c), "knowledge_search.top_k");
        let mut c = config(&["kb"]);
        c.default_namespaces = vec!["docs".into()];
        assert_eq!(field(c), "knowledge_search.default_namespaces[0]");
        let mut c = config(&["kb"]);
        c.default_namespaces = vec!["*".into()];
        assert_eq!(field(c), "knowledge_search.default_namespaces[0]");
        let mut c = config(&["kb"]);
        c.tool_name = "knowledge search".into();
        assert_eq!(field(c), "knowledge_search.tool_name");
        let mut c = config(&["kb"]);
        c.tool_name = "x".repeat(65);
        assert_eq!(field(c), "knowledge_search.tool_name");
        assert_eq!(
            field(config(&["kb", "kb, docs"])),
            "knowledge_search.namespaces[1]"
        );
        // With "*" any default is a subset.
        let mut c = config(&["*"]);
        c.default_namespaces = vec!["anything".into()];
        assert!(KnowledgeSearch::boot(c).is_ok());
    }

    #[test]
    fn defaults_are_the_allow_list_when_unset() {
        let tool = KnowledgeSearch::boot(config(&["kb", "docs", "kb"])).unwrap();
        assert_eq!(tool.defaults, vec!["kb".to_string(), "docs".to_string()]);
    }

    #[test]
    fn error_text_quotes_the_message() {
        let e = KnowledgeSearchOutcome::error("say \"hi\"".into(), Vec::new(), Vec::new());
        assert_eq!(e.text, r#"Error: "say \"hi\"""#);
        assert_eq!(e.output, json!({"error": "say \"hi\""}));
    }
}
