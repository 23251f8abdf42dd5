//! Seeding a fresh library: the seeded tools and the `default` pipeline that uses them, in one
//! transaction. It lives in `pipeline`, which already depends on `tools`, so `tools` never
//! reaches back up.

use std::collections::BTreeMap;

use super::{insert_version, parse, Budget, PipelineDefinition, SavedPipeline, DEFAULT_PIPELINE};
use crate::error::Result;
use crate::store::{Store, Tx};
use crate::tools::{self, Executor, ToolDefinition};

/// Installs the seeded tools and the default pipeline into a library that has never had them.
pub(crate) fn install_seeds(store: &Store, executor: &Executor) -> Result<()> {
    if store.meta("seeded")?.is_some() {
        if store.meta("seeds_underived")?.is_some() {
            derive_late(store, executor)?;
        }
        return Ok(());
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
    if tools
        .iter()
        .any(|t| t.tool_type.is_code() && t.derived.is_none())
    {
        store.set_meta("seeds_underived", "1")?;
    }
    tx.commit()?;
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
            insert_version(
                tx,
                latest.pipeline_id,
                latest.version + 1,
                &saved.pipeline,
                tools,
                "quarry (tools derived once Python was found)",
            )?;
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
}
