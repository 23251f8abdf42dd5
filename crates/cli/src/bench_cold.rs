//! `quarry bench search --cold`: one-shot searches, each a fresh `quarry search` process timed
//! from its start to its exit (what a script or an editor plugin pays per query), and where such
//! a process spends that time, from fresh processes that time each phase.

use std::path::Path;
use std::process::{Command, ExitCode, Stdio};
use std::time::Instant;

use anyhow::{Context, Result};
use quarry_core::models::ModelKind;
use quarry_core::{Library, SearchMode, SearchRequest};
use serde::{Deserialize, Serialize};

/// The phases of a one-shot search, in milliseconds.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct Phases {
    /// SQLite and tantivy opened, migrations and seeds checked.
    open_library: f64,
    /// The model's and runtime's files checked against their sha256 (or the kept record).
    check_model_files: f64,
    /// ONNX Runtime loaded and the model's session built.
    load_model: f64,
    /// The query through the model.
    embed_query: f64,
    /// Retrieval, fusion and the hits' text read.
    search: f64,
    /// The hits written out as JSON.
    write_results: f64,
}

impl Phases {
    fn rows(&self) -> [(&'static str, f64); 6] {
        [
            ("open library", self.open_library),
            ("check model files", self.check_model_files),
            ("load model (runtime + session)", self.load_model),
            ("embed the query", self.embed_query),
            ("search", self.search),
            ("write results", self.write_results),
        ]
    }

    fn total(&self) -> f64 {
        self.rows().iter().map(|(_, ms)| ms).sum()
    }
}

pub fn cold_search_bench(data_dir: &Path, mode: SearchMode, processes: usize) -> Result<ExitCode> {
    let queries = {
        let library = Library::open(data_dir)?;
        crate::bench::sample_queries(&library, processes.max(1))?
    };
    let exe = std::env::current_exe()?;
    let mode_name = mode.as_str();
    // One untimed run first: the page cache then holds the library, model and runtime, as it
    // does for someone searching the library they use (process-cold, not disk-cold).
    one_shot(&exe, data_dir, &queries[0], mode_name)?;
    let mut walls: Vec<f64> = Vec::with_capacity(queries.len());
    for query in &queries {
        walls.push(one_shot(&exe, data_dir, query, mode_name)?);
    }
    let mut phases: Vec<Phases> = Vec::with_capacity(queries.len());
    let mut phase_walls: Vec<f64> = Vec::with_capacity(queries.len());
    for query in &queries {
        let started = Instant::now();
        let out = Command::new(&exe)
            .arg("--data-dir")
            .arg(data_dir)
            .args(["bench", "search-phases", query, "--mode", mode_name])
            .stderr(Stdio::inherit())
            .output()?;
        phase_walls.push(started.elapsed().as_secs_f64() * 1e3);
        anyhow::ensure!(out.status.success(), "`bench search-phases` failed");
        phases.push(serde_json::from_slice(&out.stdout).context("reading search-phases")?);
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(|a, b| a.total_cmp(b));
        v[v.len() / 2]
    };
    let mut sorted = walls.clone();
    sorted.sort_by(|a, b| a.total_cmp(b));
    println!(
        "one-shot {mode_name} search, {} processes (`quarry search`, process start → exit): \
         p50 {:.0} ms  min {:.0} ms  max {:.0} ms",
        walls.len(),
        median(walls.clone()),
        sorted[0],
        sorted[sorted.len() - 1]
    );
    println!(
        "where a fresh process spends it (median of {}):",
        phases.len()
    );
    let rows = phases[0].rows().len();
    let mut accounted = 0.0;
    for row in 0..rows {
        let name = phases[0].rows()[row].0;
        let ms = median(phases.iter().map(|p| p.rows()[row].1).collect());
        accounted += ms;
        println!("  {name:<32} {ms:>7.1} ms");
    }
    let outside = median(
        phases
            .iter()
            .zip(&phase_walls)
            .map(|(p, wall)| wall - p.total())
            .collect(),
    );
    println!(
        "  {:<32} {:>7.1} ms",
        "process start, linking and exit", outside
    );
    println!("  {:<32} {:>7.1} ms", "sum", accounted + outside.max(0.0));
    Ok(ExitCode::SUCCESS)
}

/// Runs one `quarry search` process; its wall time in milliseconds.
fn one_shot(exe: &Path, data_dir: &Path, query: &str, mode: &str) -> Result<f64> {
    let started = Instant::now();
    let status = Command::new(exe)
        .arg("--data-dir")
        .arg(data_dir)
        .args(["search", query, "--mode", mode, "--json", "--limit", "10"])
        .stdout(Stdio::null())
        .status()?;
    let ms = started.elapsed().as_secs_f64() * 1e3;
    // 1: no hits, still a search that answered.
    anyhow::ensure!(
        status.success() || status.code() == Some(1),
        "`quarry search` failed"
    );
    Ok(ms)
}

/// Runs a one-shot search in this (fresh) process phase by phase and prints the phases as JSON.
pub fn search_phases(data_dir: &Path, query: &str, mode: SearchMode) -> Result<ExitCode> {
    let mut phases = Phases::default();
    let mut clock = Instant::now();
    let library = Library::open(data_dir)?;
    phases.open_library = lap(&mut clock);
    if mode != SearchMode::Lexical {
        let model = library
            .collections()?
            .into_iter()
            .find_map(|c| c.embedding_model)
            .context("no collection has an embedding model")?;
        clock = Instant::now();
        library
            .models()
            .find_kind(&model, ModelKind::Embedding)?
            .verify()?;
        library.models().runtime_library()?;
        phases.check_model_files = lap(&mut clock);
        (phases.load_model, phases.embed_query) =
            quarry_core::bench::query_embedding_phases(&library, &model, query)?;
    }
    clock = Instant::now();
    let mut request = SearchRequest::new(query).with_mode(mode);
    request.settings.limit = 10;
    let results = library.search(&request)?;
    phases.search = lap(&mut clock);
    let json = serde_json::to_string(&results)?;
    std::hint::black_box(json);
    phases.write_results = lap(&mut clock);
    println!("{}", serde_json::to_string(&phases)?);
    Ok(ExitCode::SUCCESS)
}

/// Milliseconds since `clock`, which restarts.
fn lap(clock: &mut Instant) -> f64 {
    let ms = clock.elapsed().as_secs_f64() * 1e3;
    *clock = Instant::now();
    ms
}
