//! Tauri commands: thin adapters from the UI to quarry-core. Each runs its engine work on a
//! blocking thread, never on the UI's.

use std::path::PathBuf;
use std::sync::Arc;

use quarry_core::audit::AuditSummary;
use quarry_core::models::{ModelKind, ModelListing, RuntimeStatus, SetupProblem};
use quarry_core::retrieve::RerankSettings;
use quarry_core::EmbeddingCoverage;
use quarry_core::{
    ChunkId, ChunkInContext, Collection, DocumentId, DocumentRecord, SearchMode, SearchRequest,
    SearchResults, Source, SourceId, Stats,
};
use serde::{Deserialize, Serialize};
use tauri::{AppHandle, State};
use tauri_plugin_dialog::{DialogExt, MessageDialogButtons};
use tauri_plugin_opener::OpenerExt;

use crate::activity::Activity;
use crate::engine::Engine;
use crate::error::{CommandError, CommandResult, ShellError};
use crate::opener::{self, Opener};
use crate::settings::{self, Settings};

pub(crate) type EngineState<'a> = State<'a, Arc<Engine>>;

/// Runs `work` with the engine on a blocking thread.
pub(crate) async fn blocking<T: Send + 'static>(
    engine: &EngineState<'_>,
    work: impl FnOnce(&Engine) -> CommandResult<T> + Send + 'static,
) -> CommandResult<T> {
    let engine = Arc::clone(engine);
    tauri::async_runtime::spawn_blocking(move || work(&engine))
        .await
        .map_err(|e| CommandError::internal(format!("the command failed: {e}")))?
}

/// Everything the Status view shows.
#[derive(Serialize, specta::Type)]
pub struct AppStatus {
    data_dir: String,
    disk_bytes: u64,
    /// The audit log's size and what it keeps.
    audit: AuditSummary,
    stats: Stats,
    embeddings: Vec<EmbeddingCoverage>,
    collections: Vec<Collection>,
    /// Embedding models and rerankers, and the chat models that are installed.
    models: Vec<ModelListing>,
    /// ONNX Runtime: where it was found, or what is wrong.
    runtime: RuntimeStatus,
    /// What is missing, each with the command that fixes it.
    problems: Vec<SetupProblem>,
    activity: Activity,
}

#[tauri::command]
#[specta::specta]
pub async fn app_status(engine: EngineState<'_>) -> CommandResult<AppStatus> {
    blocking(&engine, |engine| {
        let library = engine.library();
        let status = library.status()?;
        let setup = library.models().setup_report();
        Ok(AppStatus {
            data_dir: status.data_dir.display().to_string(),
            disk_bytes: status.disk_bytes,
            audit: status.audit,
            stats: status.stats,
            embeddings: status.embeddings,
            collections: library.collections()?,
            models: setup
                .models
                .into_iter()
                .filter(|m| m.kind != ModelKind::Llm || m.installed_at.is_some())
                .collect(),
            runtime: setup.runtime,
            problems: setup.problems,
            activity: engine.activity(),
        })
    })
    .await
}

#[tauri::command]
#[specta::specta]
pub async fn list_collections(engine: EngineState<'_>) -> CommandResult<Vec<Collection>> {
    blocking(&engine, |engine| Ok(engine.library().collections()?)).await
}

#[tauri::command]
#[specta::specta]
pub async fn list_sources(engine: EngineState<'_>) -> CommandResult<Vec<Source>> {
    blocking(&engine, |engine| Ok(engine.library().sources()?)).await
}

#[tauri::command]
#[specta::specta]
pub async fn add_source(
    engine: EngineState<'_>,
    path: String,
    collection: String,
    include: Vec<String>,
    exclude: Vec<String>,
) -> CommandResult<Source> {
    blocking(&engine, move |engine| {
        let path = path.trim();
        if path.is_empty() {
            return Err(quarry_core::Error::InvalidSourcePath {
                path: "".into(),
                reason: "type a folder path or browse for one".into(),
            }
            .into());
        }
        let collection = match collection.trim() {
            "" => "documents",
            name => name,
        };
        let clean = |globs: Vec<String>| -> Vec<String> {
            globs
                .into_iter()
                .map(|g| g.trim().to_string())
                .filter(|g| !g.is_empty())
                .collect()
        };
        let source = engine.library().add_source(
            &expand_home(path),
            collection,
            &clean(include),
            &clean(exclude),
        )?;
        engine.sources_edited()?;
        Ok(source)
    })
    .await
}

/// `~/notes` as the user typed it.
fn expand_home(path: &str) -> PathBuf {
    match (path.strip_prefix("~/"), std::env::var_os("HOME")) {
        (Some(rest), Some(home)) => PathBuf::from(home).join(rest),
        _ => PathBuf::from(path),
    }
}

#[tauri::command]
#[specta::specta]
pub async fn remove_source(engine: EngineState<'_>, id: SourceId) -> CommandResult<()> {
    blocking(&engine, move |engine| {
        engine.library().remove_source(id)?;
        engine.sources_edited()?;
        Ok(())
    })
    .await
}

/// The native folder dialog; `None` when cancelled.
#[tauri::command]
#[specta::specta]
pub async fn pick_folder(app: AppHandle) -> CommandResult<Option<String>> {
    folder_dialog(app, "Add a folder to Quarry").await
}

/// The native folder dialog titled `title`, off the async runtime; `None` when cancelled.
pub(crate) async fn folder_dialog(
    app: AppHandle,
    title: &'static str,
) -> CommandResult<Option<String>> {
    tauri::async_runtime::spawn_blocking(move || {
        app.dialog()
            .file()
            .set_title(title)
            .blocking_pick_folder()
            .and_then(|f| f.into_path().ok())
            .map(|p| p.display().to_string())
    })
    .await
    .map_err(|e| CommandError::internal(format!("the folder dialog failed: {e}")))
}

#[tauri::command]
#[specta::specta]
pub async fn activity(engine: EngineState<'_>) -> CommandResult<Activity> {
    Ok(engine.activity())
}

#[tauri::command]
#[specta::specta]
pub async fn set_indexing_paused(engine: EngineState<'_>, paused: bool) -> CommandResult<Activity> {
    blocking(&engine, move |engine| {
        if paused {
            engine.pause_indexing();
        } else {
            engine.start_indexing();
        }
        Ok(engine.activity())
    })
    .await
}

#[tauri::command]
#[specta::specta]
pub async fn list_problems(
    engine: EngineState<'_>,
    source_id: Option<SourceId>,
) -> CommandResult<Vec<DocumentRecord>> {
    blocking(&engine, move |engine| {
        Ok(engine.library().problem_documents(source_id, 500)?)
    })
    .await
}

#[tauri::command]
#[specta::specta]
pub async fn retry_file(engine: EngineState<'_>, document_id: DocumentId) -> CommandResult<()> {
    blocking(&engine, move |engine| Ok(engine.retry(document_id)?)).await
}

/// A search from the Search view.
#[derive(Deserialize, specta::Type)]
pub struct SearchArgs {
    query: String,
    mode: SearchMode,
    collections: Vec<String>,
    limit: usize,
    /// Deep search: the local chat model judges the best candidates when the first search
    /// is unsure (seconds, not milliseconds: the view runs it after the plain search).
    #[serde(default)]
    deep: bool,
}

#[tauri::command]
#[specta::specta]
pub async fn search(engine: EngineState<'_>, args: SearchArgs) -> CommandResult<SearchResults> {
    blocking(&engine, move |engine| {
        let mut request = SearchRequest::new(args.query.trim()).with_mode(args.mode);
        request.collections = args.collections;
        request.settings.limit = args.limit.clamp(1, 200);
        if args.deep {
            // No chat model installed: the default is named anyway, so the rerank stage says
            // it is missing (with the command that installs it) beside the plain results.
            let model = quarry_core::retrieve::deep_search_model(engine.library().models())
                .unwrap_or_else(|_| quarry_core::models::default_llm_model().to_string());
            request.settings.rerank = Some(RerankSettings::judged_by(model));
        }
        if request.query.is_empty() {
            return Ok(SearchResults {
                hits: Vec::new(),
                took_us: 0,
                mode: args.mode,
                trace: Vec::new(),
                readiness: Vec::new(),
                certainty: None,
            });
        }
        Ok(engine.library().search(&request)?)
    })
    .await
}

/// Chunks shown on each side of the focused one.
const PREVIEW_CONTEXT: usize = 3;

/// The chunk among its neighbours in its own document.
#[tauri::command]
#[specta::specta]
pub async fn preview(engine: EngineState<'_>, chunk_id: ChunkId) -> CommandResult<ChunkInContext> {
    blocking(&engine, move |engine| {
        let library = engine.library();
        let preview = library
            .chunk_in_context(chunk_id, PREVIEW_CONTEXT)?
            .ok_or_else(chunk_gone)?;
        // What the user opens is embedded next, if it still waits; a hint, never an error.
        if let Err(e) = library.embed_first(&[preview.document.id]) {
            tracing::debug!("could not queue the opened document for vectors: {e}");
        }
        Ok(preview)
    })
    .await
}

fn chunk_gone() -> CommandError {
    ShellError::ChunkNotFound
        .with("that result is no longer in the index (the file changed): search again")
}

fn find_chunk(
    library: &quarry_core::Library,
    chunk_id: ChunkId,
) -> CommandResult<quarry_core::ChunkRecord> {
    library
        .chunks_by_id(&[chunk_id])?
        .into_iter()
        .next()
        .ok_or_else(chunk_gone)
}

/// Opens the file of an indexed chunk at its page or line. Only indexed files can be opened:
/// the page names a chunk, never a path.
#[tauri::command]
#[specta::specta]
pub async fn open_result(
    app: AppHandle,
    engine: EngineState<'_>,
    chunk_id: ChunkId,
) -> CommandResult<String> {
    blocking(&engine, move |engine| {
        let chunk = find_chunk(&engine.library(), chunk_id)?;
        if !chunk.path.is_file() {
            return Err(
                ShellError::FileMissing.with(format!("{} is gone from disk", chunk.path.display()))
            );
        }
        let place = opener::describe(&chunk.path, &chunk.location);
        match Opener::configured(engine.data_dir())? {
            Opener::Command(template) => {
                opener::spawn_command(&opener::command_words(
                    &template,
                    &chunk.path,
                    &chunk.location,
                ))?;
            }
            Opener::System => app
                .opener()
                .open_path(chunk.path.display().to_string(), None::<&str>)
                .map_err(|e| {
                    ShellError::OpenFailed.with(format!(
                        "the system could not open {}: {e}",
                        chunk.path.display()
                    ))
                })?,
        }
        Ok(format!("Opened {place}"))
    })
    .await
}

#[tauri::command]
#[specta::specta]
pub async fn get_settings(engine: EngineState<'_>) -> CommandResult<Settings> {
    blocking(&engine, |engine| settings::load(engine.data_dir())).await
}

#[tauri::command]
#[specta::specta]
pub async fn save_settings(
    app: AppHandle,
    engine: EngineState<'_>,
    settings: Settings,
) -> CommandResult<Settings> {
    blocking(&engine, move |engine| {
        let current = settings::load(engine.data_dir()).unwrap_or_default();
        let command = settings.open_command.trim();
        // The open command runs a program: the page alone may not choose one, the user
        // confirms it in a native dialog.
        if !command.is_empty() && command != current.open_command.trim() {
            let allowed = app
                .dialog()
                .message(format!(
                    "Open search results by running this command?\n\n{command}\n\n\
                     ({{path}}, {{line}} and {{page}} are filled in for each result.)"
                ))
                .title("Quarry: open command")
                .buttons(MessageDialogButtons::OkCancelCustom(
                    "Use this command".into(),
                    "Cancel".into(),
                ))
                .blocking_show();
            if !allowed {
                return Err(ShellError::Cancelled.with("the open command was not changed"));
            }
        }
        settings::save(engine.data_dir(), &settings)
    })
    .await
}
