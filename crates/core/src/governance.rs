//! The library's face for tools, pipelines, keys and the audit log: thin methods over
//! [`crate::tools`], [`crate::pipeline`], [`crate::auth`] and [`crate::audit`], so the CLI
//! and the desktop shell call one API. Test runs and pipeline runs are audited here. Those
//! modules take an [`EngineContext`] (or less), never the library.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use serde_json::{json, Value};

use crate::audit::{self, AuditFacets, AuditQuery, AuditRecord, AuditSummary, Retention};
use crate::auth::{self, ApiKey, CreatedKey, NewKey, Principal};
use crate::context::{EngineContext, Retrieval};
use crate::embed::Embedder;
use crate::error::{Error, Result};
use crate::evidence::{EvidenceKey, EvidenceSession, LedgerEntry};
use crate::ids::CollectionId;
use crate::models::ModelKind;
use crate::pipeline::{
    self, PipelineDefinition, PipelineRun, PipelineView, ReadinessProblem, ResolvedPipeline,
    RunOptions, SavedPipeline, ToolCallReport, ToolEnvironment,
};
use crate::pipeline::{TestInput, ToolTestReport};
use crate::retrieve::{RerankSettings, SearchRequest, SearchResults};
use crate::store::{SharedSignIndex, VectorTable};
use crate::tools::{
    self, Executor, SaveOptions, ToolCheck, ToolDefinition, ToolSummary, ToolType, ToolVersion,
};
use crate::Library;

impl Retrieval for Library {
    fn search(&self, request: &SearchRequest) -> Result<SearchResults> {
        Library::search(self, request)
    }

    fn embedder(&self, model: &str) -> Result<Arc<Embedder>> {
        Library::embedder(self, model)
    }

    fn sign_index(
        &self,
        table: &VectorTable,
        collection_id: CollectionId,
    ) -> Result<Option<SharedSignIndex>> {
        Library::sign_index(self, table, collection_id).map(Some)
    }
}

impl Library {
    /// The narrow context pipelines, tool tests, turns and evaluations run in, over this
    /// library and the evidence key it holds (see [`Library::evidence_key`]).
    pub fn engine_context<'a>(&'a self, evidence_key: &'a EvidenceKey) -> EngineContext<'a> {
        EngineContext {
            store: self.store(),
            models: self.models(),
            executor: self.executor(),
            evidence_key,
            retrieval: self,
        }
    }

    /// The code-tool executor.
    pub fn executor(&self) -> &Executor {
        &self.executor
    }

    /// The library's evidence key (created on first use).
    pub fn evidence_key(&self) -> Result<EvidenceKey> {
        if let Some(key) = self.evidence_key.get() {
            return Ok(key.clone());
        }
        let key = EvidenceKey::load_or_create(self.store())?;
        Ok(self.evidence_key.get_or_init(|| key).clone())
    }

    /// Revalidates a chunk reference `session` issued (its signature, caller, run, expiry and
    /// that the chunk is still indexed at the same revision) and returns the ledger entry it
    /// earns, with the text read from the library, never from the caller.
    pub fn revalidate_evidence(
        &self,
        session: &EvidenceSession,
        reference: &str,
        admitted_by: &str,
    ) -> Result<LedgerEntry> {
        session.revalidate_chunk(self.store(), reference, None, admitted_by)
    }

    // ---- tools ---------------------------------------------------------------------------

    /// Tools, optionally of one type and matching a search.
    pub fn tools(
        &self,
        tool_type: Option<ToolType>,
        search: Option<&str>,
    ) -> Result<Vec<ToolSummary>> {
        tools::list(self.store(), tool_type, search)
    }

    /// One tool.
    pub fn tool(&self, slug: &str) -> Result<ToolDefinition> {
        tools::get(self.store(), slug)
    }

    /// Creates a tool. Egress to this machine or its networks is refused (see
    /// [`Library::create_tool_with`]).
    pub fn create_tool(&self, tool: ToolDefinition) -> Result<ToolDefinition> {
        self.create_tool_with(tool, SaveOptions::default())
    }

    /// Creates a tool with what the administrator confirmed (egress to this machine or its
    /// networks, audited as `tool.private_egress`).
    pub fn create_tool_with(
        &self,
        tool: ToolDefinition,
        options: SaveOptions,
    ) -> Result<ToolDefinition> {
        let saved = tools::create(self.store(), &self.executor, tool, options)?;
        self.audit_private_egress(&saved, &[], options)?;
        Ok(saved)
    }

    /// Replaces a tool's definition (its type stays fixed). An egress origin on this machine or
    /// its networks is kept if the tool had it, and refused if new (see
    /// [`Library::update_tool_with`]).
    pub fn update_tool(&self, slug: &str, tool: ToolDefinition) -> Result<ToolDefinition> {
        self.update_tool_with(slug, tool, SaveOptions::default())
    }

    /// Replaces a tool's definition with what the administrator confirmed (new egress to this
    /// machine or its networks, audited as `tool.private_egress`).
    pub fn update_tool_with(
        &self,
        slug: &str,
        tool: ToolDefinition,
        options: SaveOptions,
    ) -> Result<ToolDefinition> {
        let before = self
            .tool(slug)
            .ok()
            .and_then(|t| t.egress)
            .unwrap_or_default();
        let saved = tools::update(self.store(), &self.executor, slug, tool, options)?;
        self.audit_private_egress(&saved, &before, options)?;
        Ok(saved)
    }

    /// Records a confirmed save's new origins on this machine or its networks.
    fn audit_private_egress(
        &self,
        tool: &ToolDefinition,
        before: &[String],
        options: SaveOptions,
    ) -> Result<()> {
        if !options.allow_private_egress {
            return Ok(());
        }
        let added: Vec<String> = tools::private_origins(tool.egress.as_deref().unwrap_or_default())
            .into_iter()
            .filter(|o| !before.iter().any(|b| b.eq_ignore_ascii_case(o)))
            .collect();
        if added.is_empty() {
            return Ok(());
        }
        audit::record(
            self.store(),
            &Principal::administrator().label,
            "tool.private_egress",
            &tool.slug,
            &json!({ "egress": added }),
            Ok(()),
            Some(&format!(
                "egress to this machine or its networks confirmed: {}",
                added.join(", ")
            )),
            0,
        )
        .map(|_| ())
    }

    /// Copies a tool under a new slug.
    pub fn duplicate_tool(
        &self,
        slug: &str,
        new_slug: &str,
        new_name: Option<&str>,
        new_type: Option<ToolType>,
    ) -> Result<ToolDefinition> {
        tools::duplicate(
            self.store(),
            &self.executor,
            slug,
            new_slug,
            new_name,
            new_type,
        )
    }

    /// Every saved version of a tool, newest first.
    pub fn tool_versions(&self, slug: &str) -> Result<Vec<ToolVersion>> {
        tools::versions(self.store(), slug)
    }

    /// Makes an older version the tool's definition again, as a new version.
    pub fn restore_tool_version(&self, slug: &str, version: i64) -> Result<ToolDefinition> {
        tools::restore(self.store(), &self.executor, slug, version)
    }

    /// Checks an unsaved definition as saving would, without storing it (the code editor's
    /// live check): egress origins the saved tool has pass, new ones on this machine or its
    /// networks are a problem.
    pub fn check_tool(&self, tool: ToolDefinition) -> Result<ToolCheck> {
        self.check_tool_with(tool, SaveOptions::default())
    }

    /// [`Library::check_tool`] as a save with `options` would check it (the desktop editor's
    /// live check while the administrator has confirmed private egress).
    pub fn check_tool_with(&self, tool: ToolDefinition, options: SaveOptions) -> Result<ToolCheck> {
        let confirmed = self
            .tool(&tool.slug)
            .ok()
            .and_then(|t| t.egress)
            .unwrap_or_default();
        tools::check(tool, &self.executor, &confirmed, options)
    }

    /// Deletes a tool no pipeline uses.
    pub fn delete_tool(&self, slug: &str) -> Result<()> {
        pipeline::delete_tool(self.store(), slug)
    }

    /// The export file for some tools.
    pub fn export_tools(&self, slugs: &[String]) -> Result<String> {
        tools::export(self.store(), slugs)
    }

    /// Imports an export file, all or nothing. Egress to this machine or its networks is
    /// refused (see [`Library::import_tools_with`]).
    pub fn import_tools(
        &self,
        bytes: &[u8],
        path: &Path,
        replace: bool,
    ) -> Result<Vec<ToolDefinition>> {
        self.import_tools_with(bytes, path, replace, SaveOptions::default())
    }

    /// Imports an export file with what the administrator confirmed (egress to this machine or
    /// its networks, audited as `tool.private_egress` per tool).
    pub fn import_tools_with(
        &self,
        bytes: &[u8],
        path: &Path,
        replace: bool,
        options: SaveOptions,
    ) -> Result<Vec<ToolDefinition>> {
        let imported = tools::import(self.store(), &self.executor, bytes, path, replace, options)?;
        // The import is the confirmation: every such origin it carries is recorded.
        for tool in &imported {
            self.audit_private_egress(tool, &[], options)?;
        }
        Ok(imported)
    }

    /// Tests a tool as `principal` (in a pipeline's context, and a conversation whose
    /// references it may use) and writes an audit record.
    pub fn test_tool(
        &self,
        slug: &str,
        input: &TestInput,
        principal: &Principal,
        pipeline: Option<&str>,
        conversation: Option<&str>,
    ) -> Result<ToolTestReport> {
        let started = Instant::now();
        let result = self.evidence_key().and_then(|key| {
            let engine = self.engine_context(&key);
            pipeline::run::test_tool(&engine, slug, input, principal, pipeline, conversation)
        });
        let input_json = match input {
            TestInput::Query(q) => json!({"query": q}),
            TestInput::Json(v) => v.clone(),
        };
        let context = result
            .as_ref()
            .ok()
            .and_then(|r| r.pipeline.clone())
            .or_else(|| pipeline.map(String::from))
            .map(|p| format!("pipeline context `{p}`"));
        let audit_id = audit::record(
            self.store(),
            &principal.label,
            "tool.test",
            slug,
            &input_json,
            result.as_ref().map(|_| ()),
            context.as_deref(),
            started.elapsed().as_millis() as i64,
        )?;
        result.map(|report| ToolTestReport {
            audit_id: Some(audit_id),
            ..report
        })
    }

    // ---- pipelines -----------------------------------------------------------------------

    /// Every pipeline's name.
    pub fn pipelines(&self) -> Result<Vec<String>> {
        pipeline::list(self.store())
    }

    /// A pipeline's draft and newest version.
    pub fn pipeline(&self, name: &str) -> Result<PipelineView> {
        pipeline::show(self.store(), name)
    }

    /// Creates a pipeline draft.
    pub fn create_pipeline(&self, name: &str, definition: &PipelineDefinition) -> Result<()> {
        pipeline::create(self.store(), name, definition)
    }

    /// Replaces a pipeline's draft.
    pub fn edit_pipeline(&self, name: &str, definition: &PipelineDefinition) -> Result<()> {
        pipeline::edit(self.store(), name, definition)
    }

    /// Saves a pipeline's draft as a new version, snapshotting its tools.
    pub fn save_pipeline(&self, name: &str, principal: &Principal) -> Result<SavedPipeline> {
        pipeline::save(self.store(), name, &principal.label)
    }

    /// Deletes a pipeline.
    pub fn delete_pipeline(&self, name: &str) -> Result<()> {
        pipeline::delete(self.store(), name)
    }

    /// The reranker a pipeline's retrieval tool uses (`None`: it does not rerank).
    pub fn pipeline_reranker(&self, name: &str) -> Result<Option<String>> {
        let Some(slug) = self.pipeline(name)?.draft.retrieval else {
            return Ok(None);
        };
        Ok(self
            .tool(&slug)?
            .retrieval_settings()?
            .rerank
            .map(|r| r.model))
    }

    /// Makes `model` (an installed reranker; `None`: none) the reranker of the pipeline's
    /// retrieval tool, and saves the pipeline as a new version so runs use it. The tool gets a
    /// new version too: every pipeline that uses it reranks the same way.
    pub fn set_pipeline_reranker(
        &self,
        name: &str,
        model: Option<&str>,
        principal: &Principal,
    ) -> Result<SavedPipeline> {
        if let Some(model) = model {
            self.models().find_kind(model, ModelKind::Reranker)?;
        }
        let slug = self
            .pipeline(name)?
            .draft
            .retrieval
            .ok_or_else(|| Error::InvalidSetting {
                field: "retrieval".into(),
                reason: format!("pipeline `{name}` has no retrieval tool to rerank"),
            })?;
        let mut tool = self.tool(&slug)?;
        let mut settings = tool.retrieval_settings()?;
        settings.rerank = model.map(|model| RerankSettings {
            model: model.to_string(),
            ..settings.rerank.clone().unwrap_or_default()
        });
        tool.settings = serde_json::to_value(&settings)
            .map_err(|e| Error::Internal(format!("retrieval settings: {e}")))?;
        self.update_tool(&slug, tool)?;
        self.save_pipeline(name, principal)
    }

    /// Readiness problems of a pipeline's saved version (or its draft) for `principal`.
    pub fn check_pipeline(
        &self,
        name: &str,
        draft: bool,
        principal: &Principal,
    ) -> Result<Vec<ReadinessProblem>> {
        let resolved = pipeline::resolve(self.store(), name, draft)?;
        Ok(pipeline::check(
            self.store(),
            self.models(),
            &self.executor,
            &resolved,
            principal,
        ))
    }

    /// The pipeline a run would use: its newest saved version, or the draft with the live
    /// tools.
    pub fn resolve_pipeline(&self, name: &str, draft: bool) -> Result<ResolvedPipeline> {
        pipeline::resolve(self.store(), name, draft)
    }

    /// The pipelines whose draft or newest saved version use a tool.
    pub fn pipelines_using_tool(&self, slug: &str) -> Result<Vec<String>> {
        pipeline::pipelines_using(self.store(), slug)
    }

    /// Runs a pipeline as `principal` and writes an audit record.
    pub fn run_pipeline(
        &self,
        name: &str,
        query: &str,
        principal: &Principal,
        options: &RunOptions,
    ) -> Result<PipelineRun> {
        let started = Instant::now();
        let result = self.evidence_key().and_then(|key| {
            pipeline::run(&self.engine_context(&key), name, query, principal, options)
        });
        self.audit_pipeline_run(name, query, principal, options, started, &result)?;
        result
    }

    /// The audit record of a pipeline run, from `quarry pipeline run`, the tester or a chat
    /// turn (which names its conversation).
    pub(crate) fn audit_pipeline_run(
        &self,
        name: &str,
        query: &str,
        principal: &Principal,
        options: &RunOptions,
        started: Instant,
        result: &Result<PipelineRun>,
    ) -> Result<()> {
        let detail = result.as_ref().ok().map(|r| {
            let admitted = format!("{} chunk(s) admitted", r.evidence.entries.len());
            match &options.conversation {
                Some(id) => format!("{admitted}; in conversation {id}"),
                None => admitted,
            }
        });
        audit::record(
            self.store(),
            &principal.label,
            "pipeline.run",
            name,
            &json!({"query": query, "draft": options.draft, "conversation": options.conversation}),
            result.as_ref().map(|_| ()),
            detail.as_deref(),
            started.elapsed().as_millis() as i64,
        )
        .map(|_| ())
    }

    /// One code-tool call outside any pipeline, as `session`'s caller, with `retrieval` as the
    /// tool's default retrieval (`ctx.search`) over every collection the caller may read. Not
    /// audited: it is for benchmarks and tests of the call itself.
    pub fn call_code_tool(
        &self,
        tool: &ToolDefinition,
        input: &Value,
        session: &EvidenceSession,
        retrieval: Option<&ToolDefinition>,
    ) -> Result<ToolCallReport> {
        let key = self.evidence_key()?;
        let env = ToolEnvironment {
            engine: self.engine_context(&key),
            session,
            retrieval,
            capabilities: Vec::new(),
            collections: Vec::new(),
        };
        pipeline::call_code_tool(&env, tool, input)
    }

    // ---- keys and audit ------------------------------------------------------------------

    /// Creates an API key (audited); the secret is in the result and nowhere else.
    pub fn create_key(&self, key: &NewKey) -> Result<CreatedKey> {
        let started = Instant::now();
        let created = auth::create_key(self.store(), key);
        let input = json!({"kind": key.kind, "user": key.user, "scope": key.scope});
        self.audit_key_change("key.create", &key.name, &input, &created, started)?;
        created
    }

    /// Every API key (never the secrets).
    pub fn keys(&self) -> Result<Vec<ApiKey>> {
        auth::keys(self.store())
    }

    /// Revokes a key (audited).
    pub fn revoke_key(&self, name: &str) -> Result<ApiKey> {
        let started = Instant::now();
        let revoked = auth::revoke_key(self.store(), name);
        self.audit_key_change("key.revoke", name, &json!({}), &revoked, started)?;
        revoked
    }

    /// Records a key change by the local administrator, the only one who can make it.
    fn audit_key_change<T>(
        &self,
        action: &str,
        name: &str,
        input: &serde_json::Value,
        result: &Result<T>,
        started: Instant,
    ) -> Result<()> {
        audit::record(
            self.store(),
            &Principal::administrator().label,
            action,
            name,
            input,
            result.as_ref().map(|_| ()),
            None,
            started.elapsed().as_millis() as i64,
        )
        .map(|_| ())
    }

    /// The principal a key secret stands for (a service key must name the user it acts for).
    /// A refused key is audited (by its public prefix, never the secret), as one record per
    /// minute however often it is presented.
    pub fn authenticate(&self, secret: &str, acting_for: Option<&str>) -> Result<Principal> {
        self.authenticate_from(secret, acting_for, None)
    }

    /// [`Library::authenticate`] for a key presented by `source` (a server's client, such as
    /// `127.0.0.1 over MCP HTTP`), which a refusal's audit record names.
    pub fn authenticate_from(
        &self,
        secret: &str,
        acting_for: Option<&str>,
        source: Option<&str>,
    ) -> Result<Principal> {
        let started = Instant::now();
        let result = auth::authenticate(self.store(), secret, acting_for);
        if let Err(e) = &result {
            let prefix: String = secret.chars().take(11).collect();
            audit::record_refused_sign_in(
                self.store(),
                source,
                if prefix.starts_with("qk_") {
                    &prefix
                } else {
                    "(not a Quarry key)"
                },
                &json!({"acting_for": acting_for}),
                e,
                started.elapsed().as_millis() as i64,
            )?;
        }
        result
    }

    /// The audit records `query` selects, newest first.
    pub fn audit(&self, query: &AuditQuery) -> Result<Vec<AuditRecord>> {
        audit::query(self.store(), query)
    }

    /// One audit record by id (a tool test's own, say); `None` once pruned.
    pub fn audit_record(&self, id: i64) -> Result<Option<AuditRecord>> {
        audit::record_by_id(self.store(), id)
    }

    /// The principals, actions and targets on record, to filter the audit by.
    pub fn audit_facets(&self) -> Result<AuditFacets> {
        audit::facets(self.store())
    }

    /// The audit log's size and what it keeps.
    pub fn audit_summary(&self) -> Result<AuditSummary> {
        audit::summary(self.store())
    }

    /// Sets what the audit log keeps and prunes it now; returns how many records went.
    pub fn set_audit_retention(&self, retention: &Retention) -> Result<u64> {
        audit::set_retention(self.store(), retention)
    }
}
