//! Drafts and applied revisions. A draft is edited freely; `apply` checks it, snapshots the
//! direct evidence tools it names, and records an immutable revision with who applied it and
//! when. Chats run an applied revision, and a conversation keeps the revision it started with.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::config::{OrchestratorConfig, DEFAULT_CONFIG};
use crate::names::{Name, NameKind};
use crate::pipeline::ResolvedPipeline;
use crate::store::{self, now_unix, Store};
use crate::tools::ToolDefinition;
use crate::{Error, Result};

/// An applied revision.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AppliedRevision {
    /// The configuration's name.
    pub name: String,
    /// 1, 2, …
    pub revision: i64,
    /// The configuration as applied.
    pub config: OrchestratorConfig,
    /// The direct evidence tools as they were when applied, by slug.
    pub tools: BTreeMap<String, ToolDefinition>,
    /// The modes' pipelines as they were when applied (their newest saved versions), by name:
    /// saving a pipeline later changes running chats only through a new revision.
    pub pipelines: BTreeMap<String, ResolvedPipeline>,
    /// Who applied it.
    pub applied_by: String,
    /// When (Unix seconds).
    pub applied_at: i64,
}

/// What a revision freezes besides its configuration.
#[derive(Serialize, Deserialize)]
struct Snapshot {
    tools: BTreeMap<String, ToolDefinition>,
    pipelines: BTreeMap<String, ResolvedPipeline>,
}

/// A revision in a listing.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "specta", derive(specta::Type))]
pub struct RevisionSummary {
    /// 1, 2, …
    pub revision: i64,
    /// Who applied it.
    pub applied_by: String,
    /// When (Unix seconds).
    pub applied_at: i64,
    /// Its modes.
    pub modes: Vec<String>,
}

fn not_found(name: &str) -> Error {
    Error::InvalidSetting {
        field: "orchestrator".into(),
        reason: format!("no configuration named `{name}` (the seeded one is `{DEFAULT_CONFIG}`)"),
    }
}

/// Installs the seeded configuration, applied as revision 1, on first use.
pub(crate) fn ensure_seeded(store: &Store) -> Result<()> {
    if store.orchestrator_config_exists(DEFAULT_CONFIG)? {
        return Ok(());
    }
    let now = now_unix();
    let seed = OrchestratorConfig::seed();
    if store.insert_orchestrator_config_if_absent(DEFAULT_CONFIG, &seed.to_json(), now)? {
        apply_draft(store, DEFAULT_CONFIG, "seed")?;
    }
    Ok(())
}

fn config_row(store: &Store, name: &str) -> Result<(i64, OrchestratorConfig)> {
    ensure_seeded(store)?;
    parse_config_row(name, store.orchestrator_config(name)?)
}

/// A configuration's id and parsed draft, from its row (read inside a transaction when
/// applying).
fn parse_config_row(name: &str, row: Option<(i64, String)>) -> Result<(i64, OrchestratorConfig)> {
    let (id, draft) = row.ok_or_else(|| not_found(name))?;
    Ok((id, OrchestratorConfig::parse(&draft)?))
}

/// Every configuration's name (the seeded one at least).
pub(crate) fn names(store: &Store) -> Result<Vec<String>> {
    ensure_seeded(store)?;
    store.orchestrator_config_names()
}

/// A configuration's draft.
pub(crate) fn draft(store: &Store, name: &str) -> Result<OrchestratorConfig> {
    config_row(store, name).map(|(_, c)| c)
}

/// Replaces (or creates) a draft; it is checked, but takes effect only when applied.
pub(crate) fn set_draft(store: &Store, name: &str, config: &OrchestratorConfig) -> Result<()> {
    ensure_seeded(store)?;
    Name::parse(NameKind::Configuration, name).map_err(|bad| Error::InvalidSetting {
        field: "name".into(),
        reason: bad.to_string(),
    })?;
    config.validate()?;
    let now = now_unix();
    store.upsert_orchestrator_draft(name, &config.to_json(), now)
}

/// Problems that stop a draft from being applied: unknown pipelines, direct tools that are
/// missing or not action tools.
pub(crate) fn problems(store: &Store, config: &OrchestratorConfig) -> Vec<String> {
    let mut problems = Vec::new();
    for mode in &config.modes {
        if let Some(p) = &mode.pipeline {
            if let Err(e) = crate::pipeline::resolve(store, p, false) {
                problems.push(format!("mode `{}`: {e}", mode.name));
            }
        }
        for slug in &mode.direct_tools {
            match crate::tools::get(store, slug) {
                Ok(t) => problems.extend(t.direct_evidence_problems().into_iter().map(|why| {
                    format!(
                        "mode `{}`: `{slug}` cannot be a direct evidence tool: {why}",
                        mode.name
                    )
                })),
                Err(_) => problems.push(format!(
                    "mode `{}`: direct tool `{slug}` does not exist",
                    mode.name
                )),
            }
        }
    }
    problems
}

/// Applies the draft as a new revision.
pub(crate) fn apply(store: &Store, name: &str, applied_by: &str) -> Result<AppliedRevision> {
    ensure_seeded(store)?;
    apply_draft(store, name, applied_by)
}

fn apply_draft(store: &Store, name: &str, applied_by: &str) -> Result<AppliedRevision> {
    let tx = store.write()?;
    let (id, config) = parse_config_row(name, store::orchestrator_config_in(&tx, name)?)?;
    config.validate()?;
    let problems = problems(store, &config);
    if !problems.is_empty() {
        return Err(Error::OrchestratorNotReady(format!(
            "configuration `{name}` cannot be applied: {}",
            problems.join("; ")
        )));
    }
    let mut tools = BTreeMap::new();
    let mut pipelines = BTreeMap::new();
    for mode in &config.modes {
        for slug in &mode.direct_tools {
            tools.insert(slug.clone(), crate::tools::get(store, slug)?);
        }
        if let Some(p) = &mode.pipeline {
            pipelines.insert(p.clone(), crate::pipeline::resolve(store, p, false)?);
        }
    }
    let revision = store::next_orchestrator_revision(&tx, id)?;
    let applied = AppliedRevision {
        name: name.into(),
        revision,
        config,
        tools,
        pipelines,
        applied_by: applied_by.into(),
        applied_at: now_unix(),
    };
    store_revision(&tx, id, &applied)?;
    tx.commit()?;
    Ok(applied)
}

/// Stores `applied` as revision `applied.revision` of configuration `id`, with its snapshot
/// of tools and pipelines.
fn store_revision(tx: &store::Tx<'_>, id: i64, applied: &AppliedRevision) -> Result<()> {
    let snapshot = Snapshot {
        tools: applied.tools.clone(),
        pipelines: applied.pipelines.clone(),
    };
    store::insert_orchestrator_revision(
        tx,
        id,
        applied.revision,
        &applied.config.to_json(),
        &serde_json::to_string(&snapshot).expect("a snapshot serializes"),
        &applied.applied_by,
        applied.applied_at,
    )
}

/// A new revision of each configuration whose newest revision runs a pipeline at the version
/// just before one an amendment of the seeds saved (`authors`: who those versions say saved
/// them), running that version instead. The configuration and direct tools stay as the newest
/// revision had them: a draft's unapplied edits stay unapplied, and a pipeline version somebody
/// saved is still taken up only when they apply. Nothing to follow: nothing written.
/// Done once per seeds revision (`meta.seeds_followed`), not at every start: it reads every
/// configuration's newest revision.
pub(crate) fn follow_amended_pipelines(
    store: &Store,
    authors: &[&str],
    seeds_revision: u32,
) -> Result<()> {
    let followed = store
        .meta(FOLLOWED_SEEDS)?
        .and_then(|v| v.parse::<u32>().ok());
    if followed.is_some_and(|f| f >= seeds_revision) {
        return Ok(());
    }
    for name in store.orchestrator_config_names()? {
        let latest = match revision(store, &name, None) {
            Ok(latest) => latest,
            Err(Error::OrchestratorNotReady(_)) => continue, // never applied
            Err(e) => return Err(e),
        };
        let mut pipelines = latest.pipelines.clone();
        let mut followed: Option<String> = None;
        for (pipeline, running) in pipelines.iter_mut() {
            // A pipeline deleted since is the revision's readiness problem, not this one's.
            let Some(saved) = crate::pipeline::show(store, pipeline)
                .ok()
                .and_then(|view| view.saved)
            else {
                continue;
            };
            if authors.contains(&saved.saved_by.as_str())
                && running.version == Some(saved.version - 1)
            {
                *running = crate::pipeline::resolve(store, pipeline, false)?;
                followed = Some(saved.saved_by);
            }
        }
        if let Some(applied_by) = followed {
            insert_revision_of(store, &latest, pipelines, &applied_by)?;
        }
    }
    store.set_meta(FOLLOWED_SEEDS, &seeds_revision.to_string())
}

/// The `meta` key holding the seeds revision whose amended pipelines the chat follows.
const FOLLOWED_SEEDS: &str = "seeds_followed";

/// Records `latest`'s configuration and tools with `pipelines` as the next revision.
fn insert_revision_of(
    store: &Store,
    latest: &AppliedRevision,
    pipelines: BTreeMap<String, ResolvedPipeline>,
    applied_by: &str,
) -> Result<()> {
    let tx = store.write()?;
    let (id, _) = parse_config_row(
        &latest.name,
        store::orchestrator_config_in(&tx, &latest.name)?,
    )?;
    let next = store::next_orchestrator_revision(&tx, id)?;
    if next != latest.revision + 1 {
        return Ok(()); // another process applied one meanwhile
    }
    let followed = AppliedRevision {
        revision: next,
        pipelines,
        applied_by: applied_by.into(),
        applied_at: now_unix(),
        ..latest.clone()
    };
    store_revision(&tx, id, &followed)?;
    tx.commit()?;
    Ok(())
}

/// A revision (`None`: the newest).
pub(crate) fn revision(
    store: &Store,
    name: &str,
    revision: Option<i64>,
) -> Result<AppliedRevision> {
    let (id, _) = config_row(store, name)?;
    let row = store
        .orchestrator_revision(id, revision)?
        .ok_or_else(|| match revision {
            Some(n) => Error::InvalidSetting {
                field: "revision".into(),
                reason: format!("configuration `{name}` has no revision {n}"),
            },
            None => Error::OrchestratorNotReady(format!(
                "configuration `{name}` has never been applied (run `quarry orchestrator apply {name}`)"
            )),
        })?;
    let revision_no = row.revision;
    let snapshot: Snapshot = serde_json::from_str(&row.snapshot).map_err(|e| {
        Error::Internal(format!(
            "revision {revision_no} of `{name}` has a bad snapshot: {e}"
        ))
    })?;
    Ok(AppliedRevision {
        name: name.into(),
        revision: revision_no,
        config: OrchestratorConfig::parse(&row.definition)?,
        tools: snapshot.tools,
        pipelines: snapshot.pipelines,
        applied_by: row.applied_by,
        applied_at: row.applied_at,
    })
}

/// Every revision of a configuration, newest first.
pub(crate) fn revisions(store: &Store, name: &str) -> Result<Vec<RevisionSummary>> {
    let (id, _) = config_row(store, name)?;
    let mut out = Vec::new();
    for row in store.orchestrator_revisions(id)? {
        let modes = OrchestratorConfig::parse(&row.definition)
            .map(|c| c.modes.into_iter().map(|m| m.name).collect())
            .unwrap_or_default();
        out.push(RevisionSummary {
            revision: row.revision,
            applied_by: row.applied_by,
            applied_at: row.applied_at,
            modes,
        });
    }
    Ok(out)
}
