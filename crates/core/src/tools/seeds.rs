//! The 12 tool definitions every fresh library starts with (`seeds/tools/` in the repository).
//! Installing them with the default pipeline that uses them is `pipeline`'s job (one
//! transaction for both), so this module never reaches up to pipelines.

use super::{insert, prepare, Executor, SaveOptions, ToolDefinition};
use crate::error::{Error, Result};
use crate::store::Tx;

macro_rules! seed {
    ($slug:literal) => {
        (
            $slug,
            include_str!(concat!("../../../../seeds/tools/", $slug, ".json")),
            None,
        )
    };
    ($slug:literal, code) => {
        (
            $slug,
            include_str!(concat!("../../../../seeds/tools/", $slug, ".json")),
            Some(include_str!(concat!(
                "../../../../seeds/tools/",
                $slug,
                ".py"
            ))),
        )
    };
}

/// Slug, definition JSON and Python source of each seeded tool, in the manual's order.
const SEEDS: &[(&str, &str, Option<&str>)] = &[
    seed!("expand_multi_query", code),
    seed!("retrieve-lexical-focused"),
    seed!("retrieve-hybrid-coverage"),
    seed!("retrieve-high-recall"),
    seed!("llm_select_and_expand", code),
    seed!("iterative-context-chunk", code),
    seed!("noop_chunk", code),
    seed!("context_expansion", code),
    seed!("search_documents", code),
    seed!("fetch_source_document", code),
    seed!("fetch_document_chunks", code),
    seed!("fetch_neighbors", code),
];

/// The seeded tools' slugs.
pub const SEEDED_TOOLS: &[&str] = &[
    "expand_multi_query",
    "retrieve-lexical-focused",
    "retrieve-hybrid-coverage",
    "retrieve-high-recall",
    "llm_select_and_expand",
    "iterative-context-chunk",
    "noop_chunk",
    "context_expansion",
    "search_documents",
    "fetch_source_document",
    "fetch_document_chunks",
    "fetch_neighbors",
];

/// The seeded tool definitions, derived with `executor` where Python is available (without
/// Python the code tools are stored underived and reported as not ready).
pub(crate) fn seeded_definitions(executor: &Executor) -> Result<Vec<ToolDefinition>> {
    SEEDS
        .iter()
        .map(|(slug, json, source)| {
            let mut tool: ToolDefinition = serde_json::from_str(json)
                .map_err(|e| Error::Internal(format!("seed `{slug}` is unreadable: {e}")))?;
            tool.source = source.map(String::from);
            match prepare(tool.clone(), executor, &[], SaveOptions::default()) {
                Ok(tool) => Ok(tool),
                Err(Error::PythonUnavailable { reason }) => {
                    tracing::warn!(tool = slug, %reason, "seeded without its derived shapes");
                    tool.limits = Some(tool.limits.unwrap_or_default());
                    tool.egress = Some(tool.egress.unwrap_or_default());
                    Ok(tool)
                }
                Err(e) => Err(Error::Internal(format!("seed `{slug}` is invalid: {e}"))),
            }
        })
        .collect()
}

/// Inserts the seeded tools in the caller's transaction.
pub(crate) fn insert_seeded(tx: &Tx<'_>, tools: &[ToolDefinition]) -> Result<()> {
    for tool in tools {
        insert(tx, tool, true)?;
    }
    Ok(())
}

/// Stores the derived definition of each seeded code tool that is still as seeded and
/// underived (a library seeded before Python was available), in the caller's transaction.
pub(crate) fn store_late_derivations(tx: &Tx<'_>, derived: &[ToolDefinition]) -> Result<()> {
    for tool in derived.iter().filter(|t| t.derived.is_some()) {
        let stored = crate::store::seeded_tool_definition(tx, &tool.slug)?;
        let Some(stored) = stored else { continue };
        let stored: ToolDefinition = serde_json::from_str(&stored)
            .map_err(|e| Error::Internal(format!("stored tool is unreadable: {e}")))?;
        if stored.derived.is_none() && stored.source == tool.source {
            crate::store::set_derived_seed_definition(tx, &tool.slug, &super::canonical(tool))?;
        }
    }
    Ok(())
}
