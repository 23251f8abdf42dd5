//! Tauri commands of the Models view: the catalogue and what is installed (each file's sha256
//! checked), installs streamed to the window with a Cancel (a hub download resumes where it
//! stopped), imports of an ONNX folder or a GGUF file, removal (refused while something uses
//! the model), each collection's embedding model switched, and the chat model unloaded.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use quarry_core::embed_device::{self, EmbedPlacement};
use quarry_core::llm::device::{self, Placement};
use quarry_core::llm::embedded::EmbeddedBackend;
use quarry_core::llm::speed::{self, ChatSpeed, Choice};
use quarry_core::models::{spec, FetchProgress, InstalledModel, ModelKind, Models, RuntimeStatus};
use quarry_core::orchestrator::BackendConfig;
use quarry_core::pipeline::DEFAULT_PIPELINE;
use quarry_core::EmbeddingCoverage;
use quarry_core::{Library, Principal};
use serde::Serialize;
use tauri::ipc::Channel;
use tauri::AppHandle;
use tauri_plugin_dialog::DialogExt;

use crate::commands::{blocking, EngineState};
use crate::error::{CommandError, CommandResult};
use crate::settings;
use crate::stops::Stops;

/// One installed file, as recorded when it was installed.
#[derive(Serialize, specta::Type)]
pub struct ModelFile {
    path: String,
    bytes: u64,
    sha256: String,
}

/// A model of the catalogue, installed or not, or one imported.
#[derive(Serialize, specta::Type)]
pub struct ModelRow {
    id: String,
    kind: ModelKind,
    description: String,
    license: String,
    /// The catalogue's default for its kind.
    default: bool,
    /// In the built-in catalogue (installable from here).
    in_catalogue: bool,
    /// Where it is installed, if it is.
    dir: Option<String>,
    /// Where it came from (PyPI wheels, the hub, an import).
    origin: Option<String>,
    /// Who published the weights, when that is not their own publisher (the catalogue says).
    provenance: Option<String>,
    files: Vec<ModelFile>,
    /// Every file matches its recorded sha256 (`None`: not installed).
    verified: Option<bool>,
    /// What is wrong with the installed copy.
    problem: Option<String>,
    /// Who uses it (collections, tools, configurations): it cannot be removed while any does.
    users: Vec<String>,
    /// A chat model held in memory now.
    loaded: bool,
    /// A chat model's speed as measured on this machine.
    speed: Option<ChatSpeed>,
    /// Its predicted first tokens against the budget, in words.
    first_tokens: Option<String>,
}

/// A collection's embedding model and how far its vectors are.
#[derive(Serialize, specta::Type)]
pub struct CollectionModel {
    collection: String,
    coverage: Option<EmbeddingCoverage>,
}

/// What the Models view shows.
#[derive(Serialize, specta::Type)]
pub struct ModelsOverview {
    /// Where installs go.
    install_dir: String,
    runtime: RuntimeStatus,
    models: Vec<ModelRow>,
    collections: Vec<CollectionModel>,
    /// The reranker of the default pipeline's retrieval tool (`None`: it does not rerank).
    pipeline_reranker: Option<String>,
    /// The chat model `auto` (the seeded modes' model) answers with, and why.
    auto: Choice,
    /// Where that model runs: a GPU, or the CPU and why (`None`: it is not installed, or
    /// cannot load).
    chat_device: Option<Placement>,
    /// Why it cannot load where `QUARRY_LLM_DEVICE` asks.
    chat_device_problem: Option<String>,
    /// Where embedding models run: a CUDA device, or the CPU and why.
    embedding_device: Option<EmbedPlacement>,
    /// Why they cannot load where `QUARRY_EMBED_DEVICE` asks (or at all).
    embedding_device_problem: Option<String>,
}

/// The model the assistant's chosen backend (the desktop's own setting) answers with, if it
/// is an embedded one.
fn assistant_model(data_dir: &Path) -> Option<String> {
    match settings::load(data_dir).ok()?.chat_backend? {
        BackendConfig::Embedded { model, .. } => Some(model),
        _ => None,
    }
}

/// Who uses `id`: the library's users, and the assistant when the window chose it.
fn users_of(
    library: &Library,
    assistant_model: Option<&str>,
    id: &str,
) -> quarry_core::Result<Vec<String>> {
    let mut users = library.model_users(id)?;
    if assistant_model == Some(id) {
        users.push(ASSISTANT.into());
    }
    Ok(users)
}

/// The assistant, as a user of a model.
const ASSISTANT: &str = "the assistant (chosen in Chat)";

fn row(
    library: &Library,
    assistant_model: Option<&str>,
    id: &str,
    installed: Option<&InstalledModel>,
) -> CommandResult<ModelRow> {
    let catalogue = spec(id);
    let loaded = EmbeddedBackend::shared_now().iter().any(|(m, _)| m == id);
    let measured = speed::recorded(library.models(), id);
    let (verified, problem) = match installed.map(InstalledModel::verify) {
        None => (None, None),
        Some(Ok(())) => (Some(true), None),
        Some(Err(e)) => (Some(false), Some(e.to_string())),
    };
    Ok(ModelRow {
        id: id.to_string(),
        kind: installed
            .map_or_else(|| catalogue.map(|s| s.kind), |m| Some(m.kind))
            .unwrap_or(ModelKind::Embedding),
        description: catalogue.map_or_else(
            || format!("imported ({})", installed.map_or("", |m| m.origin.as_str())),
            |s| s.description.clone(),
        ),
        license: catalogue.map_or_else(|| "as the source says".into(), |s| s.license.clone()),
        default: catalogue.is_some_and(|s| s.default),
        in_catalogue: catalogue.is_some(),
        dir: installed.map(|m| m.dir.display().to_string()),
        origin: installed.map(|m| m.origin.clone()),
        provenance: catalogue.and_then(|s| s.provenance.clone()),
        files: installed
            .map(|m| {
                m.files
                    .iter()
                    .map(|f| ModelFile {
                        path: f.path.clone(),
                        bytes: f.bytes,
                        sha256: f.sha256.clone(),
                    })
                    .collect()
            })
            .unwrap_or_default(),
        verified,
        problem,
        users: users_of(library, assistant_model, id)?,
        loaded,
        first_tokens: measured.as_ref().map(speed::first_tokens),
        speed: measured,
    })
}

fn model_rows(library: &Library, data_dir: &Path) -> CommandResult<Vec<ModelRow>> {
    let models = library.models();
    let installed = models.installed();
    let assistant = assistant_model(data_dir);
    let mut rows = Vec::new();
    for listing in models.list() {
        let copy = installed.iter().find(|m| m.id == listing.id);
        rows.push(row(library, assistant.as_deref(), &listing.id, copy)?);
    }
    Ok(rows)
}

#[tauri::command]
#[specta::specta]
pub async fn models_overview(engine: EngineState<'_>) -> CommandResult<ModelsOverview> {
    blocking(&engine, |engine| {
        overview(&engine.library(), engine.data_dir())
    })
    .await
}

/// Times every installed chat model's prompt and generation on this machine (a few seconds
/// each), keeps the figures, and returns the overview with them and `auto`'s new choice.
#[tauri::command]
#[specta::specta]
pub async fn models_measure(engine: EngineState<'_>) -> CommandResult<ModelsOverview> {
    blocking(&engine, |engine| {
        // The library stays free for searches and chat meanwhile.
        let models = engine.library().models().clone();
        for model in models.installed() {
            if model.kind == ModelKind::Llm {
                let measured = speed::measure(&models, &model.id, None)?;
                speed::remember(&models, &measured);
            }
        }
        overview(&engine.library(), engine.data_dir())
    })
    .await
}

fn overview(library: &Library, data_dir: &Path) -> CommandResult<ModelsOverview> {
    // Only the coverage: `status()` would also walk the data folder on every refresh.
    let coverage = library.embedding_coverage()?;
    let setup = library.models().setup_report();
    let auto = speed::choose(library.models());
    let (chat_device, chat_device_problem) = auto_placement(library.models(), &auto);
    let (embedding_device, embedding_device_problem) =
        match embed_device::expected(library.models()) {
            Ok(placement) => (Some(placement), None),
            Err(e) => (None, Some(e.to_string())),
        };
    Ok(ModelsOverview {
        install_dir: library.models().install_dir().display().to_string(),
        runtime: setup.runtime,
        models: model_rows(library, data_dir)?,
        collections: library
            .collections()?
            .into_iter()
            .map(|c| CollectionModel {
                coverage: coverage.iter().find(|e| e.collection == c.name).cloned(),
                collection: c.name,
            })
            .collect(),
        pipeline_reranker: library.pipeline_reranker(DEFAULT_PIPELINE)?,
        chat_device,
        chat_device_problem,
        embedding_device,
        embedding_device_problem,
        auto,
    })
}

/// Where `auto`'s model runs (a GPU or the CPU), or why it cannot load there; nothing when it
/// is not installed.
fn auto_placement(models: &Models, auto: &Choice) -> (Option<Placement>, Option<String>) {
    match device::placement_of_installed(models, &auto.model) {
        Some(Ok(placement)) => (Some(placement), None),
        Some(Err(e)) => (None, Some(e.to_string())),
        None => (None, None),
    }
}

/// Makes `model` (`None`: none) the reranker of the default pipeline, saved as its new
/// version.
#[tauri::command]
#[specta::specta]
pub async fn models_pipeline_reranker(
    engine: EngineState<'_>,
    model: Option<String>,
) -> CommandResult<i64> {
    blocking(&engine, move |engine| {
        let saved = engine.library().set_pipeline_reranker(
            DEFAULT_PIPELINE,
            model.as_deref(),
            &Principal::administrator(),
        )?;
        Ok(saved.version)
    })
    .await
}

/// Download progress of one file, as the window shows it.
#[derive(Clone, Serialize, specta::Type)]
pub struct InstallProgress {
    file: String,
    done: u64,
    total: Option<u64>,
}

impl From<&FetchProgress> for InstallProgress {
    fn from(p: &FetchProgress) -> Self {
        InstallProgress {
            file: p.file.clone(),
            done: p.done,
            total: p.total,
        }
    }
}

/// The models an install writes into: the library's own, never a shared folder.
fn models_of(library: &Library) -> CommandResult<&Models> {
    let models = library.models();
    std::fs::create_dir_all(models.install_dir())
        .map_err(|e| quarry_core::Error::io(models.install_dir(), e))?;
    Ok(models)
}

/// Installs a catalogue model, streaming progress to `events`; `models_cancel(id)` stops it.
#[tauri::command]
#[specta::specta]
pub async fn models_install(
    engine: EngineState<'_>,
    stops: tauri::State<'_, Arc<Stops>>,
    id: String,
    events: Channel<InstallProgress>,
) -> CommandResult<ModelRow> {
    let stops = Arc::clone(&stops);
    blocking(&engine, move |engine| {
        let key = format!("install:{id}");
        let cancel = stops.start(&key);
        // The download runs without the UI's library held: another view stays responsive.
        let models = Models::discover(engine.data_dir());
        let installed = std::fs::create_dir_all(models.install_dir())
            .map_err(|e| quarry_core::Error::io(models.install_dir(), e))
            .and_then(|()| {
                models.fetch_until(
                    &id,
                    &|p| {
                        let _ = events.send(InstallProgress::from(p));
                    },
                    &cancel,
                )
            });
        stops.finish(&key);
        let installed = installed?;
        let assistant = assistant_model(engine.data_dir());
        row(
            &engine.library(),
            assistant.as_deref(),
            &id,
            Some(&installed),
        )
    })
    .await
}

/// Stops an install; what was downloaded stays for the next one to resume.
#[tauri::command]
#[specta::specta]
pub async fn models_cancel(stops: tauri::State<'_, Arc<Stops>>, id: String) -> CommandResult<bool> {
    Ok(stops.stop(&format!("install:{id}")))
}

/// Imports a model: an ONNX folder (an embedder or a cross-encoder) or a GGUF file (a chat
/// model), under `id` (default: its name).
#[tauri::command]
#[specta::specta]
pub async fn models_import(
    engine: EngineState<'_>,
    path: String,
    kind: ModelKind,
    id: Option<String>,
) -> CommandResult<ModelRow> {
    blocking(&engine, move |engine| {
        let library = engine.library();
        let id = id.filter(|i| !i.trim().is_empty());
        let model =
            models_of(&library)?.import(&PathBuf::from(path.trim()), id.as_deref(), kind)?;
        let assistant = assistant_model(engine.data_dir());
        row(&library, assistant.as_deref(), &model.id, Some(&model))
    })
    .await
}

/// The native dialog for an import: a folder for ONNX models, a `.gguf` file for chat
/// models; `None` when cancelled.
#[tauri::command]
#[specta::specta]
pub async fn pick_model(app: AppHandle, kind: ModelKind) -> CommandResult<Option<String>> {
    tauri::async_runtime::spawn_blocking(move || {
        let dialog = app.dialog().file().set_title("Import a model into Quarry");
        let picked = if kind == ModelKind::Llm {
            dialog
                .add_filter("GGUF chat model", &["gguf"])
                .blocking_pick_file()
        } else {
            dialog.blocking_pick_folder()
        };
        picked
            .and_then(|f| f.into_path().ok())
            .map(|p| p.display().to_string())
    })
    .await
    .map_err(|e| CommandError::internal(format!("the file dialog failed: {e}")))
}

/// Removes an installed model, unless something uses it (the error names them).
#[tauri::command]
#[specta::specta]
pub async fn models_remove(engine: EngineState<'_>, id: String) -> CommandResult<String> {
    blocking(&engine, move |engine| {
        if assistant_model(engine.data_dir()).as_deref() == Some(id.as_str()) {
            return Err(quarry_core::Error::ModelInUse {
                model: id,
                users: vec![ASSISTANT.into()],
            }
            .into());
        }
        let dir = engine.library().remove_model(&id)?;
        Ok(dir.display().to_string())
    })
    .await
}

/// Makes `model` the collection's embedding model: its vectors are filled in the background
/// (the Library view shows the progress) while the old ones keep serving searches.
#[tauri::command]
#[specta::specta]
pub async fn models_use_for_collection(
    engine: EngineState<'_>,
    collection: String,
    model: String,
) -> CommandResult<()> {
    blocking(&engine, move |engine| {
        // The indexer's embedding lane looks for pending vectors every second.
        Ok(engine.library().use_embedding_model(&collection, &model)?)
    })
    .await
}

/// Releases the chat models held in memory (the next answer loads its model again); returns
/// how many were released.
#[tauri::command]
#[specta::specta]
pub async fn models_unload(engine: EngineState<'_>) -> CommandResult<u32> {
    blocking(&engine, |_| Ok(EmbeddedBackend::release_shared() as u32)).await
}
