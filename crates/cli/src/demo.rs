//! `quarry demo`: the headless main job. Indexes the bundled demo corpus into a throwaway
//! library (or `--data-dir`), runs sample searches, a traced pipeline run and a chat turn.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result};
use std::sync::atomic::AtomicBool;

use quarry_core::{IndexOptions, Library, SearchMode, SearchRequest};

use crate::terminal::{printable, TextStream};

/// Where the demo corpus is: `QUARRY_DEMO_DIR`, next to the executable
/// (`../share/quarry/demo`), or the source tree's `seeds/demo`.
fn demo_corpus() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("QUARRY_DEMO_DIR") {
        return Some(PathBuf::from(dir));
    }
    let exe_relative = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(|p| p.join("../share/quarry/demo")));
    let source_tree = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../seeds/demo");
    [exe_relative, Some(source_tree)]
        .into_iter()
        .flatten()
        .find(|p| p.is_dir())
}

pub fn run(data_dir: Option<PathBuf>, corpus: Option<PathBuf>) -> Result<ExitCode> {
    let corpus = corpus
        .or_else(demo_corpus)
        .context("demo corpus not found; pass --corpus DIR or set QUARRY_DEMO_DIR")?;
    let temp;
    let data_dir = match data_dir {
        Some(d) => d,
        None => {
            temp = tempfile::tempdir()?;
            temp.path().to_path_buf()
        }
    };
    println!(
        "Quarry demo: indexing {} into {}",
        corpus.display(),
        data_dir.display()
    );
    let mut library = Library::open(&data_dir)?;
    if library.find_source(&corpus.display().to_string()).is_err() {
        library.add_source(&corpus, "demo", &[], &[])?;
    }
    let mut writer = library.writer()?;
    let progress = writer.index_all(&IndexOptions::default(), &|_| {})?;
    crate::output::summary(&progress);
    // Lexical search works now; the embedding lane fills in vectors behind it.
    match writer.embed_pending(&|_| {}, &AtomicBool::new(false)) {
        Ok(n) => println!("embedded {n} chunk(s) for semantic search"),
        Err(e) => eprintln!("warning[{}]: semantic search unavailable: {e}", e.code()),
    }
    drop(writer);
    for (query, mode) in [
        (
            "how do lifetimes relate to the borrow checker",
            SearchMode::Hybrid,
        ),
        ("\"vector search\"", SearchMode::Lexical),
        ("orbital velocity", SearchMode::Hybrid),
        // No demo file says "satellite speed around a planet" in those words.
        (
            "how fast does a satellite travel around a planet",
            SearchMode::Lexical,
        ),
        (
            "how fast does a satellite travel around a planet",
            SearchMode::Vector,
        ),
        ("cache invalidation", SearchMode::Hybrid),
    ] {
        println!("\n$ quarry search --mode {} {query:?}", mode.as_str());
        let mut request = SearchRequest::new(query).with_mode(mode);
        request.settings.limit = 3;
        match library.search(&request) {
            Ok(results) => crate::output::hits(&results, false, false)?,
            Err(e) => println!("error[{}]: {e}", e.code()),
        }
    }
    // The seeded default pipeline: query expansion → hybrid retrieval → score-ordered selection.
    let question = "how does an LRU cache evict entries?";
    println!("\n$ quarry pipeline run {question:?} --trace");
    match library.run_pipeline(
        quarry_core::pipeline::DEFAULT_PIPELINE,
        question,
        &quarry_core::Principal::administrator(),
        &quarry_core::RunOptions::default(),
    ) {
        Ok(run) => crate::pipeline_cmd::print_run(&run, true),
        Err(e) => println!("error[{}]: {e}", e.code()),
    }
    // The assistant: the default mode runs that pipeline, then the embedded model writes a
    // cited answer (extractive when no model is installed).
    println!("\n$ quarry chat {question:?}");
    let options =
        quarry_core::orchestrator::ChatOptions::new(quarry_core::Principal::administrator());
    let mut stdout = std::io::stdout();
    let mut answer = TextStream::default();
    let mut written = String::new();
    let streamed = library.chat(question, &options, &mut |e| {
        use std::io::Write;
        match e {
            quarry_core::orchestrator::TurnEvent::Token(t) => {
                written.push_str(t);
                let _ = stdout.write_all(answer.push(t).as_bytes());
                let _ = stdout.flush();
            }
            quarry_core::orchestrator::TurnEvent::Notice(n) => {
                eprintln!("notice: {}", printable(n))
            }
            _ => {}
        }
    });
    match streamed {
        Ok(result) => {
            println!("{}", answer.finish());
            if let Some(checked) = crate::chat_cmd::after_the_check(&written, &result.answer) {
                println!("{checked}");
            }
            for c in &result.citations {
                println!("[{}] {}", c.n, printable(&c.locator));
            }
            println!(
                "({} · {} · {} passage(s) admitted · {} ms)",
                result.backend,
                result.basis,
                result.evidence.len(),
                result.took_ms
            );
        }
        Err(e) => println!("error[{}]: {e}", e.code()),
    }
    println!();
    crate::output::status(&library.status()?, false)?;
    Ok(ExitCode::SUCCESS)
}
