//! Tauri commands of the Pipelines view and its tester: open a pipeline with its readiness and
//! what saving would change, edit the draft, save a version, run the draft or the saved
//! version with every stage's report, and score pipelines and search modes on a labelled set
//! (the engine's `quarry eval`, with progress and a stop button).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use quarry_core::cancel::Cancel;
use quarry_core::pipeline::{PipelineDefinition, PipelineView, ReadinessProblem};
use quarry_core::tools::ToolSummary;
use quarry_core::{
    run_evaluation, EvalPlan, EvalProgress, EvalReport, Library, PipelineRun, Principal,
    RetrievalSettings, RunOptions,
};
use serde::Serialize;
use tauri::ipc::Channel;
use tauri::AppHandle;

use crate::commands::{blocking, folder_dialog, EngineState};
use crate::error::CommandResult;
use crate::stops::Stops;
use crate::tool_commands::RunAs;

/// One pipeline in the list.
#[derive(Serialize, specta::Type)]
pub struct PipelineSummary {
    name: String,
    /// The newest saved version, if any.
    version: Option<i64>,
    unsaved_changes: bool,
}

/// A pipeline as the Pipelines view opens it.
#[derive(Serialize, specta::Type)]
pub struct PipelineDetail {
    view: PipelineView,
    /// The draft's readiness for the administrator: blocking problems first.
    problems: Vec<ReadinessProblem>,
    /// Every tool, for the stage pickers.
    tools: Vec<ToolSummary>,
    /// Collection names the pipeline may be limited to.
    collections: Vec<String>,
}

fn detail(library: &Library, name: &str) -> quarry_core::Result<PipelineDetail> {
    let mut problems = library.check_pipeline(name, true, &Principal::administrator())?;
    problems.sort_by_key(|p| p.severity as u8);
    Ok(PipelineDetail {
        view: library.pipeline(name)?,
        problems,
        tools: library.tools(None, None)?,
        collections: library.collections()?.into_iter().map(|c| c.name).collect(),
    })
}

#[tauri::command]
#[specta::specta]
pub async fn pipelines_list(engine: EngineState<'_>) -> CommandResult<Vec<PipelineSummary>> {
    blocking(&engine, |engine| {
        let library = engine.library();
        let mut out = Vec::new();
        for name in library.pipelines()? {
            let view = library.pipeline(&name)?;
            out.push(PipelineSummary {
                version: view.saved.as_ref().map(|s| s.version),
                unsaved_changes: view.unsaved_changes,
                name,
            });
        }
        Ok(out)
    })
    .await
}

#[tauri::command]
#[specta::specta]
pub async fn pipeline_open(engine: EngineState<'_>, name: String) -> CommandResult<PipelineDetail> {
    blocking(&engine, move |engine| Ok(detail(&engine.library(), &name)?)).await
}

/// A new pipeline (a draft), empty or as a copy of another's draft.
#[tauri::command]
#[specta::specta]
pub async fn pipeline_create(
    engine: EngineState<'_>,
    name: String,
    copy_of: Option<String>,
) -> CommandResult<PipelineDetail> {
    blocking(&engine, move |engine| {
        let library = engine.library();
        let definition = match copy_of.filter(|c| !c.is_empty()) {
            Some(other) => library.pipeline(&other)?.draft,
            None => PipelineDefinition::default(),
        };
        library.create_pipeline(&name, &definition)?;
        Ok(detail(&library, &name)?)
    })
    .await
}

/// Replaces the draft (stages, collections, budget); runs keep using the saved version.
#[tauri::command]
#[specta::specta]
pub async fn pipeline_edit(
    engine: EngineState<'_>,
    name: String,
    draft: PipelineDefinition,
) -> CommandResult<PipelineDetail> {
    blocking(&engine, move |engine| {
        let library = engine.library();
        library.edit_pipeline(&name, &draft)?;
        Ok(detail(&library, &name)?)
    })
    .await
}

/// Saves the draft as a new version, snapshotting its tools.
#[tauri::command]
#[specta::specta]
pub async fn pipeline_save(engine: EngineState<'_>, name: String) -> CommandResult<PipelineDetail> {
    blocking(&engine, move |engine| {
        let library = engine.library();
        library.save_pipeline(&name, &Principal::administrator())?;
        Ok(detail(&library, &name)?)
    })
    .await
}

#[tauri::command]
#[specta::specta]
pub async fn pipeline_delete(engine: EngineState<'_>, name: String) -> CommandResult<()> {
    blocking(&engine, move |engine| {
        Ok(engine.library().delete_pipeline(&name)?)
    })
    .await
}

/// Runs the draft (with the live tools) or the newest saved version, as `run_as`; the run is
/// audited like `quarry pipeline run`.
#[tauri::command]
#[specta::specta]
pub async fn pipeline_run(
    engine: EngineState<'_>,
    name: String,
    query: String,
    draft: bool,
    run_as: RunAs,
    history: Vec<HistoryMessage>,
) -> CommandResult<PipelineRun> {
    blocking(&engine, move |engine| {
        // Off the UI's handle, like tool tests: its code tools may start Python workers.
        let library = engine.workbench_library()?;
        let principal = run_as.principal(&library)?;
        let options = RunOptions {
            draft,
            history: history
                .into_iter()
                .map(|m| serde_json::json!({"role": m.role, "content": m.content}))
                .collect(),
            ..RunOptions::default()
        };
        Ok(library.run_pipeline(&name, &query, &principal, &options)?)
    })
    .await
}

/// One earlier message of the conversation a tester run continues, as query tools receive it.
#[derive(serde::Deserialize, specta::Type)]
pub struct HistoryMessage {
    /// `user` or `assistant`.
    role: HistoryRole,
    content: String,
}

#[derive(serde::Deserialize, serde::Serialize, specta::Type)]
#[serde(rename_all = "snake_case")]
pub enum HistoryRole {
    User,
    Assistant,
}

/// The labelled sets offered as samples: Cranfield where the app runs from a checkout.
#[tauri::command]
#[specta::specta]
pub async fn eval_samples() -> CommandResult<Vec<String>> {
    let mut roots: Vec<PathBuf> = Vec::new();
    if let Ok(cwd) = std::env::current_dir() {
        roots.extend(cwd.ancestors().map(Path::to_path_buf));
    }
    if let Ok(exe) = std::env::current_exe() {
        roots.extend(exe.ancestors().map(Path::to_path_buf));
    }
    // Cranfield (short abstracts) and the long-page set over the toolchain's books.
    let mut found: Vec<String> = Vec::new();
    for set in ["tests/data/cranfield", "tests/data/rust-docs-qa"] {
        let sample = roots
            .iter()
            .map(|r| r.join(set))
            .find(|p| p.join("qrels/test.tsv").is_file())
            .and_then(|p| p.canonicalize().ok());
        found.extend(sample.map(|p| p.display().to_string()));
    }
    Ok(found)
}

/// The native folder dialog for a BEIR-layout set; `None` when cancelled.
#[tauri::command]
#[specta::specta]
pub async fn eval_pick_set(app: AppHandle) -> CommandResult<Option<String>> {
    folder_dialog(
        app,
        "A labelled set (corpus.jsonl or corpus-folder.json, queries.jsonl, qrels/)",
    )
    .await
}

/// Scores search modes and saved pipelines on the set at `set`, indexed into a library of its
/// own (the user's is only read, for the pipelines). Progress streams to `events`;
/// `eval_cancel(id)` stops it.
#[tauri::command]
#[specta::specta]
pub async fn eval_run(
    engine: EngineState<'_>,
    stops: tauri::State<'_, Arc<Stops>>,
    id: String,
    set: String,
    modes: Vec<String>,
    pipelines: Vec<String>,
    events: Channel<EvalProgress>,
) -> CommandResult<EvalReport> {
    let stops = Arc::clone(&stops);
    blocking(&engine, move |engine| {
        let pipelines = {
            let library = engine.library();
            pipelines
                .iter()
                .map(|name| library.resolve_pipeline(name, false))
                .collect::<quarry_core::Result<Vec<_>>>()?
        };
        let plan = EvalPlan {
            set: PathBuf::from(set.trim()),
            modes,
            settings: RetrievalSettings::default(),
            sweep_lexical_weight: Vec::new(),
            pipelines,
            keep: None,
            per_query: true,
            baseline: false,
            deep: None,
            export_corpus: None,
        };
        let key = format!("eval:{id}");
        let cancel: Cancel = stops.start(&key);
        // Runs without the UI's library held: the other views stay responsive.
        let report = run_evaluation(
            &plan,
            &|p| {
                let _ = events.send(p);
            },
            &cancel,
        );
        stops.finish(&key);
        Ok(report?)
    })
    .await
}

/// Stops an evaluation at its next query.
#[tauri::command]
#[specta::specta]
pub async fn eval_cancel(stops: tauri::State<'_, Arc<Stops>>, id: String) -> CommandResult<bool> {
    Ok(stops.stop(&format!("eval:{id}")))
}
