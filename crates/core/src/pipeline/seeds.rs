//! Seeding a fresh library: the seeded tools and the `default` pipeline that uses them, in one
//! transaction. It lives in `pipeline`, which already depends on `tools`, so `tools` never
//! reaches back up.

use std::collections::BTreeMap;

use super::{insert_version, parse, Budget, PipelineDefinition, SavedPipeline, DEFAULT_PIPELINE};
use crate::error::Result;
use crate::store::{LatestPipelineVersion, Store, Tx};
use crate::tools::{self, Executor, ToolDefinition};

/// Installs the seeded tools and the default pipeline into a library that has never had them.
pub(crate) fn install_seeds(store: &Store, executor: &Executor) -> Result<()> {
    if store.meta("seeded")?.is_some() {
        if store.meta("seeds_underived")?.is_some() {
            derive_late(store, executor)?;
        }
        return amend_seeds(store);
    }
    let tools = tools::seeded_definitions(executor)?;
    let tx = store.write()?;
    // Another process may have seeded while we derived (read inside the write transaction).
    if store.meta("seeded")?.is_some() {
        return Ok(());
    }
    tools::insert_seeded(&tx, &tools)?;
    install_default_pipeline(&tx, &tools)?;
    // `Store::set_meta` runs on the connection `tx` holds, so inside this transaction.
    store.set_meta("seeded", "1")?;
    // The seeds hold every amendment already.
    store.set_meta(SEEDS_REVISION, &latest_revision().to_string())?;
    if tools
        .iter()
        .any(|t| t.tool_type.is_code() && t.derived.is_none())
    {
        store.set_meta("seeds_underived", "1")?;
    }
    tx.commit()?;
    Ok(())
}

/// The `meta` key holding the last [`Amendment`] a library has had.
const SEEDS_REVISION: &str = "seeds_revision";

/// A seeded tool's setting changed after libraries were seeded with the old value. A library
/// whose tool still holds the old value (nobody chose it) gets the new one, as a new version of
/// the tool and of each pipeline whose newest version holds the tool with it; a value somebody
/// set stays.
struct Amendment {
    revision: u32,
    slug: &'static str,
    setting: &'static str,
    was: i64,
    now: i64,
    /// Who the new versions say saved them.
    why: &'static str,
}

/// Who saved the pipeline versions the amendments made: the orchestrator's revisions follow
/// those versions (see `orchestrator::revisions::follow_amended_pipelines`).
pub(crate) fn amendment_authors() -> Vec<&'static str> {
    AMENDMENTS.iter().map(|a| a.why).collect()
}

const AMENDMENTS: &[Amendment] = &[Amendment {
    revision: 1,
    slug: "retrieve-hybrid-coverage",
    setting: "max_per_document",
    was: 2,
    now: 0,
    why: "quarry (more of the best page's passages for answers)",
}];

/// The newest amendment's revision.
pub(crate) fn latest_revision() -> u32 {
    AMENDMENTS.iter().map(|a| a.revision).max().unwrap_or(0)
}

/// Applies the amendments a library has not had yet, in one transaction.
fn amend_seeds(store: &Store) -> Result<()> {
    let had = || -> Result<u32> {
        Ok(store
            .meta(SEEDS_REVISION)?
            .and_then(|v| v.parse().ok())
            .unwrap_or(0))
    };
    if had()? >= latest_revision() {
        return Ok(());
    }
    let tx = store.write()?;
    // Another process may have amended meanwhile (read inside the write transaction).
    let had = had()?;
    for amendment in AMENDMENTS.iter().filter(|a| a.revision > had) {
        amend_tool(&tx, amendment)?;
        amend_snapshots(&tx, amendment)?;
    }
    store.set_meta(SEEDS_REVISION, &latest_revision().to_string())?;
    tx.commit()?;
    Ok(())
}

/// `tool` with the amendment's new value, when it holds the old one.
fn amended(tool: &ToolDefinition, amendment: &Amendment) -> Option<ToolDefinition> {
    let mut tool = tool.clone();
    let value = tool.settings.get_mut(amendment.setting)?;
    if value.as_i64() != Some(amendment.was) {
        return None;
    }
    *value = amendment.now.into();
    Some(tool)
}

fn amend_tool(tx: &Tx<'_>, amendment: &Amendment) -> Result<()> {
    let Some(stored) = crate::store::seeded_tool_definition(tx, amendment.slug)? else {
        return Ok(()); // deleted by its owner
    };
    let stored: ToolDefinition = parse(&stored, "tool")?;
    if let Some(tool) = amended(&stored, amendment) {
        crate::store::replace_tool_definition(tx, amendment.slug, &tools::canonical(&tool))?;
    }
    Ok(())
}

fn amend_snapshots(tx: &Tx<'_>, amendment: &Amendment) -> Result<()> {
    for latest in crate::store::latest_pipeline_versions(tx)? {
        let saved: SavedPipeline = parse(&latest.definition, "pipeline version")?;
        let Some(tool) = saved.tools.get(amendment.slug) else {
            continue;
        };
        let Some(tool) = amended(tool, amendment) else {
            continue;
        };
        let mut tools = saved.tools.clone();
        tools.insert(amendment.slug.to_string(), tool);
        save_next_version(tx, &latest, &saved, tools, amendment.why)?;
    }
    Ok(())
}

/// Saves `tools` as the version after `latest` of its pipeline, the definition unchanged.
fn save_next_version(
    tx: &Tx<'_>,
    latest: &LatestPipelineVersion,
    saved: &SavedPipeline,
    tools: BTreeMap<String, ToolDefinition>,
    saved_by: &str,
) -> Result<()> {
    insert_version(
        tx,
        latest.pipeline_id,
        latest.version + 1,
        &saved.pipeline,
        tools,
        saved_by,
    )?;
    Ok(())
}

/// A library seeded without Python: once Python is here, derive the seeded code tools that
/// are still as seeded, and give pipelines whose saved snapshot holds underived tools a new
/// version with the derived ones.
fn derive_late(store: &Store, executor: &Executor) -> Result<()> {
    if executor.check().is_err() {
        return Ok(()); // still no Python: the readiness check says so
    }
    let derived = tools::seeded_definitions(executor)?;
    let tx = store.write()?;
    tools::store_late_derivations(&tx, &derived)?;
    refresh_underived_snapshots(&tx)?;
    store.delete_meta("seeds_underived")?;
    tx.commit()?;
    Ok(())
}

/// Installs the seeded default pipeline (inside the seeding transaction) and saves version 1.
fn install_default_pipeline(tx: &Tx<'_>, tools: &[ToolDefinition]) -> Result<()> {
    let pipeline = PipelineDefinition {
        query_tools: vec!["expand_multi_query".into()],
        retrieval: Some("retrieve-hybrid-coverage".into()),
        retrieval_capabilities: vec![
            "retrieve-lexical-focused".into(),
            "retrieve-high-recall".into(),
        ],
        chunk_tools: vec!["iterative-context-chunk".into()],
        collections: Vec::new(),
        budget: Budget::default(),
    };
    let id = crate::store::insert_pipeline(
        tx,
        DEFAULT_PIPELINE,
        &serde_json::to_string(&pipeline).expect("json"),
    )?;
    let snapshot: BTreeMap<String, ToolDefinition> = tools
        .iter()
        .filter(|t| pipeline.uses(&t.slug))
        .map(|t| (t.slug.clone(), t.clone()))
        .collect();
    insert_version(tx, id, 1, &pipeline, snapshot, "seed")?;
    Ok(())
}

/// Gives every pipeline whose newest saved version holds an underived code tool (saved before
/// Python was available) a new version with the now-derived definition of that tool.
fn refresh_underived_snapshots(tx: &Tx<'_>) -> Result<()> {
    for latest in crate::store::latest_pipeline_versions(tx)? {
        let saved: SavedPipeline = parse(&latest.definition, "pipeline version")?;
        let mut tools = saved.tools.clone();
        let mut changed = false;
        for (slug, tool) in tools.iter_mut() {
            if tool.tool_type.is_code() && tool.derived.is_none() {
                let current = crate::store::tool_definition(tx, slug)?;
                if let Some(current) = current {
                    let current: ToolDefinition = parse(&current, "tool")?;
                    if current.derived.is_some() && current.source == tool.source {
                        *tool = current;
                        changed = true;
                    }
                }
            }
        }
        if changed {
            let by = "quarry (tools derived once Python was found)";
            save_next_version(tx, &latest, &saved, tools, by)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::pipeline::show;
    use crate::store::test_support::temp_store;

    fn default_versions(store: &Store) -> (Vec<i64>, SavedPipeline) {
        let view = show(store, DEFAULT_PIPELINE).unwrap();
        (
            view.versions,
            view.saved.expect("the default pipeline is saved"),
        )
    }

    #[test]
    fn a_library_seeded_without_python_is_derived_once_python_is_found() {
        let (_dir, store) = temp_store();
        let no_python = Executor::new(PathBuf::from("/nonexistent/python3"));
        install_seeds(&store, &no_python).unwrap();
        assert_eq!(tools::list(&store, None, None).unwrap().len(), 12);
        let (versions, saved) = default_versions(&store);
        assert_eq!(versions, [1]);
        assert_eq!(saved.saved_by, "seed");
        assert!(saved.tools["expand_multi_query"].derived.is_none());
        assert!(store.meta("seeds_underived").unwrap().is_some());

        // Still no Python: nothing changes.
        install_seeds(&store, &no_python).unwrap();
        assert_eq!(default_versions(&store).0, [1]);

        install_seeds(&store, &Executor::default()).unwrap();
        let (versions, saved) = default_versions(&store);
        assert_eq!(versions, [1, 2]);
        assert_eq!(
            saved.saved_by,
            "quarry (tools derived once Python was found)"
        );
        assert!(saved.tools["expand_multi_query"].derived.is_some());
        assert!(saved.tools["iterative-context-chunk"].derived.is_some());
        assert!(tools::get(&store, "expand_multi_query")
            .unwrap()
            .derived
            .is_some());
        assert!(store.meta("seeds_underived").unwrap().is_none());
    }

    /// `store` as a library seeded before the amendment: the tool and the default pipeline's
    /// newest version hold `value`, and no revision is recorded.
    fn as_seeded_before(store: &Store, amendment: &Amendment, value: i64) {
        let mut tool = tools::get(store, amendment.slug).unwrap();
        tool.settings[amendment.setting] = value.into();
        let (versions, saved) = default_versions(store);
        let mut snapshot = saved.tools.clone();
        snapshot.insert(amendment.slug.into(), tool.clone());
        let tx = store.write().unwrap();
        crate::store::replace_tool_definition(&tx, amendment.slug, &tools::canonical(&tool))
            .unwrap();
        let id = crate::store::latest_pipeline_versions(&tx).unwrap()[0].pipeline_id;
        let next = versions.last().unwrap() + 1;
        insert_version(&tx, id, next, &saved.pipeline, snapshot, "seed").unwrap();
        tx.commit().unwrap();
        store.delete_meta(SEEDS_REVISION).unwrap();
    }

    #[test]
    fn an_amended_seed_reaches_libraries_that_kept_the_old_value_and_spares_a_chosen_one() {
        let amendment = &AMENDMENTS[0];
        let setting = |tool: &ToolDefinition| tool.settings[amendment.setting].as_i64();

        // A fresh library is seeded with the new value and needs no amendment.
        let (_dir, store) = temp_store();
        install_seeds(&store, &Executor::default()).unwrap();
        assert_eq!(
            setting(&tools::get(&store, amendment.slug).unwrap()),
            Some(amendment.now)
        );
        install_seeds(&store, &Executor::default()).unwrap();
        assert_eq!(default_versions(&store).0, [1]);

        // A library seeded before: the tool and the pipeline get new versions with it.
        as_seeded_before(&store, amendment, amendment.was);
        install_seeds(&store, &Executor::default()).unwrap();
        assert_eq!(
            setting(&tools::get(&store, amendment.slug).unwrap()),
            Some(amendment.now)
        );
        let (versions, saved) = default_versions(&store);
        assert_eq!(versions, [1, 2, 3]);
        assert_eq!(saved.saved_by, amendment.why);
        assert_eq!(setting(&saved.tools[amendment.slug]), Some(amendment.now));
        // Once.
        install_seeds(&store, &Executor::default()).unwrap();
        assert_eq!(default_versions(&store).0, [1, 2, 3]);

        // A value somebody chose stays, in the tool and in the pipeline.
        let (_dir, store) = temp_store();
        install_seeds(&store, &Executor::default()).unwrap();
        as_seeded_before(&store, amendment, 5);
        install_seeds(&store, &Executor::default()).unwrap();
        assert_eq!(
            setting(&tools::get(&store, amendment.slug).unwrap()),
            Some(5)
        );
        let (versions, saved) = default_versions(&store);
        assert_eq!(versions, [1, 2]);
        assert_eq!(setting(&saved.tools[amendment.slug]), Some(5));
    }
}
