//! The library's face for the assistant and for searching on someone's behalf: chat turns,
//! the caller's conversations, the orchestrator's configurations, and scoped search. Thin
//! methods over [`crate::orchestrator`], so the CLI and the desktop shell call one API.
//!
//! Authorization is decided here, not by the callers: every conversation read is checked
//! against its owner, a search is scoped by the caller's key, and applying a configuration
//! is audited.

use std::time::Instant;

use serde_json::{json, Value};

use crate::audit;
use crate::auth::{Principal, PrincipalKind};
use crate::error::{Error, Result};
use crate::ids::DocumentId;
use crate::llm::ToolSpec;
use crate::orchestrator::{
    self, conversation, revisions, AgentCall, AgentDocument, AppliedRevision, ChatOptions,
    Conversation, EvidenceItem, OrchestratorConfig, PipelineCalls, RevisionSummary, StoredMessage,
    TraceEvent, TurnEvent, TurnResult,
};
use crate::pipeline::{self, ActionCall, PipelineRun, ResolvedPipeline, RunOptions};
use crate::retrieve::{SearchRequest, SearchResults};
use crate::tools::ToolDefinition;
use crate::Library;

impl PipelineCalls for Library {
    fn run_pipeline(
        &self,
        pipeline: &ResolvedPipeline,
        query: &str,
        principal: &Principal,
        options: &RunOptions,
    ) -> Result<PipelineRun> {
        // Audited like `quarry pipeline run`: a chat's searches are runs too.
        let started = std::time::Instant::now();
        let result = self.evidence_key().and_then(|key| {
            pipeline::run_resolved(
                &self.engine_context(&key),
                pipeline,
                query,
                principal,
                options,
            )
        });
        self.audit_pipeline_run(&pipeline.name, query, principal, options, started, &result)?;
        result
    }

    fn call_action(
        &self,
        tool: &ToolDefinition,
        arguments: &Value,
        principal: &Principal,
        pipeline: Option<&ResolvedPipeline>,
        conversation: &str,
    ) -> Result<ActionCall> {
        let key = self.evidence_key()?;
        let ctx = self.engine_context(&key);
        pipeline::call_action(&ctx, tool, arguments, principal, pipeline, conversation)
    }
}

impl Library {
    // ---- search --------------------------------------------------------------------------

    /// Searches as `principal`: the administrator sees every collection, anyone else only the
    /// collections their key's scope allows (whatever scope the request carried).
    pub fn search_as(
        &self,
        principal: &Principal,
        mut request: SearchRequest,
    ) -> Result<SearchResults> {
        if principal.kind != PrincipalKind::Administrator {
            request.scope = Some(principal.scope.clone());
        }
        self.search(&request)
    }

    // ---- chat ----------------------------------------------------------------------------

    /// Runs one chat turn as `options.principal` (see [`orchestrator::chat`]).
    pub fn chat(
        &self,
        question: &str,
        options: &ChatOptions,
        on_event: &mut dyn FnMut(TurnEvent<'_>),
    ) -> Result<TurnResult> {
        let key = self.evidence_key()?;
        orchestrator::chat(
            &self.engine_context(&key),
            self,
            question,
            options,
            on_event,
        )
    }

    /// `principal`'s conversations, newest first.
    pub fn conversations(&self, principal: &Principal) -> Result<Vec<Conversation>> {
        conversation::list(self.store(), principal)
    }

    /// A conversation of `principal` (another caller's is
    /// [`crate::Error::ConversationNotFound`]).
    pub fn conversation(&self, principal: &Principal, id: &str) -> Result<Conversation> {
        conversation::get(self.store(), principal, id)
    }

    /// Renames a conversation of `principal`.
    pub fn rename_conversation(
        &self,
        principal: &Principal,
        id: &str,
        title: &str,
    ) -> Result<Conversation> {
        conversation::rename(self.store(), principal, id, title)
    }

    /// Deletes a conversation of `principal` with everything recorded in it.
    pub fn delete_conversation(&self, principal: &Principal, id: &str) -> Result<()> {
        conversation::delete(self.store(), principal, id)
    }

    /// Takes back the last turn of a conversation of `principal` and returns its question
    /// (to regenerate the answer, or to edit the question and send it again).
    pub fn take_back_last_turn(&self, principal: &Principal, id: &str) -> Result<String> {
        conversation::take_back_last_turn(self.store(), principal, id)
    }

    /// The messages of a conversation of `principal`, in order.
    pub fn conversation_messages(
        &self,
        principal: &Principal,
        id: &str,
    ) -> Result<Vec<StoredMessage>> {
        conversation::messages(self.store(), principal, id)
    }

    /// The evidence ledger of a conversation of `principal`, by number.
    pub fn conversation_evidence(
        &self,
        principal: &Principal,
        id: &str,
    ) -> Result<Vec<EvidenceItem>> {
        conversation::evidence(self.store(), principal, id)
    }

    /// The recorded events of a conversation of `principal` (of one turn, when given).
    pub fn conversation_trace(
        &self,
        principal: &Principal,
        id: &str,
        turn: Option<i64>,
    ) -> Result<Vec<TraceEvent>> {
        conversation::trace(self.store(), principal, id, turn)
    }

    // ---- outside agents (MCP clients) ----------------------------------------------------

    /// Starts an outside agent's session as `principal` in `mode` of `config` (see
    /// [`orchestrator::start_agent_session`]); `client` names the agent in the trace and the
    /// audit log.
    pub fn start_agent_session(
        &self,
        principal: &Principal,
        config: Option<&str>,
        mode: &str,
        client: &str,
    ) -> Result<Conversation> {
        let key = self.evidence_key()?;
        orchestrator::start_agent_session(
            &self.engine_context(&key),
            principal,
            config,
            mode,
            client,
        )
    }

    /// The tools a session's mode offers `principal`.
    pub fn agent_tools(&self, principal: &Principal, session: &str) -> Result<Vec<ToolSpec>> {
        let key = self.evidence_key()?;
        orchestrator::agent_tools(&self.engine_context(&key), self, principal, session)
    }

    /// Calls a tool for an outside agent (one turn of its session), and writes an audit record
    /// naming the tool and the client (bounded by [`orchestrator::client_label`]), a refused or
    /// failed call too.
    pub fn agent_call(
        &self,
        principal: &Principal,
        session: &str,
        client: &str,
        tool: &str,
        arguments: &Value,
    ) -> Result<AgentCall> {
        let started = Instant::now();
        let key = self.evidence_key()?;
        let result = orchestrator::agent_call(
            &self.engine_context(&key),
            self,
            principal,
            session,
            client,
            tool,
            arguments,
        );
        // A refused or failed call is audited as an error, in the words the client read
        // without the prefixes the audit's own words repeat.
        let failure = result
            .as_ref()
            .ok()
            .filter(|call| call.is_error)
            .map(|call| {
                let reason = call.text.trim_start_matches("Error: ");
                crate::Error::ToolFailed {
                    tool: tool.to_string(),
                    reason: reason
                        .strip_prefix(&format!("tool `{tool}` failed: "))
                        .unwrap_or(reason)
                        .to_string(),
                }
            });
        let outcome = match (&result, &failure) {
            (Err(e), _) | (Ok(_), Some(e)) => Err(e),
            (Ok(_), None) => Ok(()),
        };
        let context = format!(
            "client {}, session {session}",
            orchestrator::client_label(client)
        );
        let detail = match &result {
            Ok(call) if call.is_error => format!("{context}, turn {}", call.turn),
            Ok(call) => format!(
                "{context}, turn {}: {} passages admitted",
                call.turn,
                call.admitted.len()
            ),
            Err(_) => context,
        };
        audit::record(
            self.store(),
            &principal.label,
            "mcp.call",
            tool,
            arguments,
            outcome,
            Some(&detail),
            started.elapsed().as_millis() as i64,
        )?;
        result
    }

    /// The documents cited in a session so far.
    pub fn agent_documents(
        &self,
        principal: &Principal,
        session: &str,
    ) -> Result<Vec<AgentDocument>> {
        let key = self.evidence_key()?;
        orchestrator::cited_documents(&self.engine_context(&key), principal, session)
    }

    /// A whole document cited in the session, within the caller's scope (audited as
    /// `mcp.read`; see [`orchestrator::read_document`]).
    pub fn agent_document(
        &self,
        principal: &Principal,
        session: &str,
        client: &str,
        document: DocumentId,
    ) -> Result<AgentDocument> {
        let started = Instant::now();
        let key = self.evidence_key()?;
        let result =
            orchestrator::read_document(&self.engine_context(&key), principal, session, document);
        audit::record(
            self.store(),
            &principal.label,
            "mcp.read",
            &format!("quarry://doc/{document}"),
            &json!({ "document": document }),
            result.as_ref().map(|_| ()),
            Some(&format!(
                "client {}, session {session}",
                orchestrator::client_label(client)
            )),
            started.elapsed().as_millis() as i64,
        )?;
        result
    }

    // ---- orchestrator configurations -----------------------------------------------------

    /// Every orchestrator configuration's name.
    pub fn orchestrator_configs(&self) -> Result<Vec<String>> {
        revisions::names(self.store())
    }

    /// A configuration's draft.
    pub fn orchestrator_draft(&self, name: &str) -> Result<OrchestratorConfig> {
        revisions::draft(self.store(), name)
    }

    /// Replaces (or creates) a draft; it is checked, but takes effect only when applied.
    pub fn set_orchestrator_draft(&self, name: &str, config: &OrchestratorConfig) -> Result<()> {
        revisions::set_draft(self.store(), name, config)
    }

    /// What stops a configuration from being applied (unknown pipelines, direct tools that
    /// are missing or not action tools).
    pub fn orchestrator_problems(&self, config: &OrchestratorConfig) -> Vec<String> {
        let mut problems = revisions::problems(self.store(), config);
        problems.extend(self.unready_pipelines(config));
        problems
    }

    /// The blocking readiness problems of the saved pipelines a configuration's modes run: a
    /// revision that applied them would fail every chat that searches.
    fn unready_pipelines(&self, config: &OrchestratorConfig) -> Vec<String> {
        let mut problems = Vec::new();
        for mode in &config.modes {
            let Some(name) = &mode.pipeline else {
                continue;
            };
            // A pipeline that does not resolve is already one of `revisions::problems`.
            let Ok(blocking) = self.check_pipeline(name, false, &Principal::administrator()) else {
                continue;
            };
            problems.extend(
                blocking
                    .into_iter()
                    .filter(|p| p.severity == pipeline::Severity::Blocking)
                    .map(|p| {
                        format!(
                            "mode `{}`: pipeline `{name}` is not ready: {}",
                            mode.name, p.message
                        )
                    }),
            );
        }
        problems
    }

    /// An applied revision of a configuration (`None`: the newest).
    pub fn orchestrator_revision(
        &self,
        name: &str,
        revision: Option<i64>,
    ) -> Result<AppliedRevision> {
        revisions::revision(self.store(), name, revision)
    }

    /// Every applied revision of a configuration, newest first.
    pub fn orchestrator_revisions(&self, name: &str) -> Result<Vec<RevisionSummary>> {
        revisions::revisions(self.store(), name)
    }

    /// Applies a configuration's draft as a new revision, by `principal`, and writes an audit
    /// record (a refused apply too) naming the revision it made.
    pub fn apply_orchestrator(&self, name: &str, principal: &Principal) -> Result<AppliedRevision> {
        let started = Instant::now();
        let result = self.orchestrator_draft(name).and_then(|draft| {
            let unready = self.unready_pipelines(&draft);
            if unready.is_empty() {
                revisions::apply(self.store(), name, &principal.label)
            } else {
                Err(Error::OrchestratorNotReady(format!(
                    "configuration `{name}` cannot be applied: {}",
                    unready.join("; ")
                )))
            }
        });
        let detail = result
            .as_ref()
            .ok()
            .map(|applied| format!("revision {}", applied.revision));
        audit::record(
            self.store(),
            &principal.label,
            "orchestrator.apply",
            name,
            &json!({ "config": name }),
            result.as_ref().map(|_| ()),
            detail.as_deref(),
            started.elapsed().as_millis() as i64,
        )?;
        result
    }
}

#[cfg(test)]
mod tests {
    use crate::auth::{Principal, PrincipalKind, Scope};
    use crate::{IndexOptions, Library, SearchMode, SearchRequest};

    #[test]
    fn search_as_scopes_everyone_but_the_administrator_whatever_the_request_says() {
        let data = tempfile::tempdir().unwrap();
        let docs = tempfile::tempdir().unwrap();
        let mut library = Library::open(data.path()).unwrap();
        for name in ["garden", "kitchen"] {
            let dir = docs.path().join(name);
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(
                dir.join("notes.md"),
                format!("# {name}\n\nSpores in the {name}."),
            )
            .unwrap();
            library
                .create_collection(name, "internal", "english")
                .unwrap();
            library.add_source(&dir, name, &[], &[]).unwrap();
        }
        library
            .writer()
            .unwrap()
            .index_all(&IndexOptions::default(), &|_| {})
            .unwrap();
        let collections_hit = |principal: &Principal, request: SearchRequest| {
            let mut names: Vec<String> = library
                .search_as(principal, request)
                .unwrap()
                .hits
                .into_iter()
                .map(|h| h.collection)
                .collect();
            names.sort();
            names
        };
        let spores = || SearchRequest::new("spores").with_mode(SearchMode::Lexical);
        let reader = Principal {
            kind: PrincipalKind::Personal,
            id: "key:1".into(),
            label: "reader".into(),
            scope: Scope {
                collections: Some(vec!["garden".into()]),
                sensitivity_ceiling: "internal".into(),
            },
        };

        assert_eq!(collections_hit(&reader, spores()), vec!["garden"]);
        // A request that claims a wider scope does not widen the caller's.
        let mut claimed = spores();
        claimed.scope = Some(Scope {
            collections: None,
            sensitivity_ceiling: "restricted".into(),
        });
        assert_eq!(collections_hit(&reader, claimed), vec!["garden"]);
        assert_eq!(
            collections_hit(&Principal::administrator(), spores()),
            vec!["garden", "kitchen"]
        );
    }
}
