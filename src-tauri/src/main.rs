//! Quarry's desktop app: a Tauri window over quarry-core. The shell holds no engine logic:
//! `engine` runs the library and its indexer thread, `commands` adapts calls from the UI,
//! `admin` serves the keys and audit views, `chat` the assistant's, `models` the model
//! manager's, `activity` folds indexing events into what the UI shows.

// No console window on Windows release builds.
#![cfg_attr(not(debug_assertions), windows_subsystem = "windows")]

mod activity;
mod admin;
mod bindings;
mod chat;
#[cfg(test)]
mod command_names;
mod commands;
mod engine;
mod error;
mod events;
mod models;
mod opener;
mod pipeline_commands;
mod secrets;
mod settings;
mod stops;
mod tool_commands;

use std::sync::Arc;

use tauri::Manager;
use tauri_specta::Event;

use crate::engine::{Engine, Notice};
use crate::events::{ActivityChanged, IndexChanged, SourcesChanged};

// The same allocator as the CLI. The indexer's threads allocate many small strings, and glibc's
// malloc, an arena per thread, kept what full-text indexing freed: the app's heap stayed at
// 935 MiB while the lane embedded the toolchain tree, 459-480 MiB with this.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("QUARRY_LOG").unwrap_or_else(|_| {
                tracing_subscriber::EnvFilter::new(format!(
                    "warn,{}=error",
                    quarry_core::llm::embedded::LOG_TARGET
                ))
            }),
        )
        .with_writer(std::io::stderr)
        .init();

    let bridge = bindings::builder();
    let invoke_handler = bridge.invoke_handler();
    tauri::Builder::default()
        .plugin(tauri_plugin_dialog::init())
        .plugin(tauri_plugin_opener::init())
        .setup(move |app| {
            bridge.mount_events(app);
            let handle = app.handle().clone();
            let notify = Arc::new(move |notice: Notice| {
                let sent = match notice {
                    Notice::Activity(activity) => ActivityChanged(activity).emit(&handle),
                    Notice::SourcesChanged => SourcesChanged.emit(&handle),
                    Notice::IndexChanged => IndexChanged.emit(&handle),
                };
                if let Err(e) = sent {
                    tracing::warn!(error = %e, "could not send an event to the window");
                }
            });
            let data_dir = quarry_core::Library::default_data_dir();
            let engine = Engine::open(&data_dir, notify)
                .map_err(|e| format!("cannot open the library in {}: {e}", data_dir.display()))?;
            let engine = Arc::new(engine);
            engine.start_indexing();
            app.manage(engine);
            app.manage(Arc::new(stops::Stops::default()));
            Ok(())
        })
        .invoke_handler(invoke_handler)
        .build(tauri::generate_context!())
        .expect("error while building Quarry")
        .run(|app, event| {
            // Stop the indexer cleanly on exit: the file being read is finished first.
            if let tauri::RunEvent::Exit = event {
                if let Some(engine) = app.try_state::<Arc<Engine>>() {
                    engine.pause_indexing();
                }
            }
        });
}
