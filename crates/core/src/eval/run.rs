//! The library's face for measuring itself: retrieval and pipeline scores on a labelled set
//! ([`super::beir`]), the whole `quarry eval` run (index the set into a library of its own,
//! embed it, score each mode and pipeline) that the CLI and the desktop tester share, and the
//! chunks benchmarks sample their inputs from, so `quarry eval` and `quarry bench` call the
//! library and nothing below it.

use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::Serialize;

use super::beir::{self, BeirSet, EvalScores, ScoringControl};
use crate::cancel::Cancel;
use crate::error::{Error, Result};
use crate::pipeline::ResolvedPipeline;
use crate::retrieve::{Fusion, RerankSettings, RerankWhen, RetrievalSettings, SearchMode};
use crate::{IndexOptions, Library};

impl Library {
    /// Scores retrieval settings on a labelled set already indexed into this library (see
    /// [`beir::evaluate`]).
    pub fn evaluate(
        &self,
        set: &BeirSet,
        name: &str,
        settings: &RetrievalSettings,
        control: ScoringControl<'_>,
    ) -> Result<EvalScores> {
        beir::evaluate(self, set, name, settings, control)
    }

    /// Scores a pipeline (resolved from any library, see [`Library::resolve_pipeline`]) on a
    /// labelled set already indexed into this library (see [`beir::evaluate_pipeline`]).
    pub fn evaluate_pipeline(
        &self,
        set: &BeirSet,
        pipeline: &ResolvedPipeline,
        control: ScoringControl<'_>,
    ) -> Result<EvalScores> {
        let key = self.evidence_key()?;
        beir::evaluate_pipeline(&self.engine_context(&key), set, pipeline, control)
    }

    /// Each document's path and text as search sees it: its title and chunks, in order.
    fn document_texts(&self) -> Result<Vec<(String, String)>> {
        let mut documents: Vec<(String, String)> = Vec::new();
        let mut index_of: std::collections::HashMap<crate::DocumentId, usize> = Default::default();
        for chunk in self.store().chunks_by_id(&self.store().all_chunk_ids()?)? {
            let i = *index_of.entry(chunk.document_id).or_insert_with(|| {
                let title = chunk.title.clone().unwrap_or_default();
                documents.push((chunk.path.to_string_lossy().into_owned(), title));
                documents.len() - 1
            });
            documents[i].1.push('\n');
            documents[i].1.push_str(&chunk.text);
        }
        Ok(documents)
    }

    /// Writes the set's documents as this library extracted them to `out`, as a BEIR
    /// `corpus.jsonl` (`_id` the set's document id, `text`), so a baseline computed outside
    /// Quarry ranks the same text.
    pub fn export_corpus(&self, set: &BeirSet, out: &Path) -> Result<usize> {
        let mut lines = String::new();
        let mut count = 0;
        for (path, text) in self.document_texts()? {
            let Some(id) = set.document_id(Path::new(&path)) else {
                continue;
            };
            let line = serde_json::json!({"_id": id, "title": "", "text": text});
            lines.push_str(&line.to_string());
            lines.push('\n');
            count += 1;
        }
        std::fs::write(out, lines).map_err(|e| Error::io(out, e))?;
        Ok(count)
    }

    /// Scores whole-document BM25 over this library's documents (each one's title and chunks
    /// as one text): the baseline page ranking is measured against.
    pub fn evaluate_document_bm25(
        &self,
        set: &BeirSet,
        control: ScoringControl<'_>,
    ) -> Result<EvalScores> {
        let index = crate::fulltext::DocumentBm25::build(self.document_texts()?)?;
        beir::evaluate_ranked(set, "document bm25", control, |text| {
            let paths: Vec<PathBuf> = index
                .search(text, 100)?
                .into_iter()
                .map(PathBuf::from)
                .collect();
            Ok(paths.into())
        })
    }
}

/// What one evaluation scores.
#[derive(Debug, Clone, Default)]
pub struct EvalPlan {
    /// The BEIR-layout folder.
    pub set: PathBuf,
    /// Search modes to score (`lexical`, `vector`, `hybrid`).
    pub modes: Vec<String>,
    /// Retrieval settings the modes start from.
    pub settings: RetrievalSettings,
    /// Weighted hybrid fusion at these lexical weights, each scored too.
    pub sweep_lexical_weight: Vec<f32>,
    /// Pipelines (resolved from the user's library) to score over the set.
    pub pipelines: Vec<ResolvedPipeline>,
    /// Keep the set's own library here (reused when it already holds the set); `None`: a
    /// temporary folder.
    pub keep: Option<PathBuf>,
    /// Keep each query's scores in the rows.
    pub per_query: bool,
    /// Score whole-document BM25 too, as the baseline for page ranking.
    pub baseline: bool,
    /// Score a deep hybrid search too: this rerank by a chat model (see
    /// [`RerankSettings::judged_by`]).
    pub deep: Option<RerankSettings>,
    /// Write the documents as indexed to this BEIR `corpus.jsonl`, for baselines outside
    /// Quarry.
    pub export_corpus: Option<PathBuf>,
}

/// Where an evaluation is.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "specta", derive(specta::Type))]
#[serde(tag = "stage", rename_all = "snake_case")]
pub enum EvalProgress {
    /// Writing and indexing the set's documents.
    Indexing,
    /// Embedding its chunks.
    Embedding {
        /// Chunks with a vector.
        done: i64,
        /// Chunks in all.
        total: i64,
    },
    /// Scoring one row (a mode or a pipeline).
    Scoring {
        /// The row.
        name: String,
        /// Queries scored.
        done: usize,
        /// Judged queries.
        total: usize,
    },
}

/// A finished evaluation: what was indexed and each row's scores.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "specta", derive(specta::Type))]
pub struct EvalReport {
    /// The set's folder.
    pub set: String,
    /// Documents in its corpus.
    pub documents: usize,
    /// Chunks written this run (0 when a kept library already held the set).
    pub chunks: u64,
    /// Seconds spent indexing.
    pub indexed_secs: f64,
    /// Chunks embedded this run.
    pub embedded: u64,
    /// Seconds spent embedding.
    pub embed_secs: f64,
    /// Judged queries.
    pub judged_queries: usize,
    /// One row per mode, weight and pipeline, in the plan's order.
    pub rows: Vec<EvalScores>,
}

/// Runs `plan`: the set is indexed into a library of its own (never the user's), embedded
/// when a row needs vectors, then each row is scored. `on_progress` hears every step; a
/// pressed `cancel` stops at the next query or embedding batch with [`Error::Cancelled`].
pub fn run_evaluation(
    plan: &EvalPlan,
    on_progress: &(dyn Fn(EvalProgress) + Sync),
    cancel: &Cancel,
) -> Result<EvalReport> {
    let set = BeirSet::load(&plan.set)?;
    let temp = tempfile::tempdir().map_err(|e| Error::io(std::env::temp_dir(), e))?;
    let work = plan.keep.as_deref().unwrap_or(temp.path());
    let (library, mut report) = index_set(&set, plan, work, on_progress, cancel)?;
    if let Some(out) = &plan.export_corpus {
        library.export_corpus(&set, out)?;
    }
    for row in plan_rows(plan) {
        let name = row.name();
        let on_query = |done, total| {
            on_progress(EvalProgress::Scoring {
                name: name.clone(),
                done,
                total,
            })
        };
        let control = ScoringControl {
            on_query: &on_query,
            cancel,
        };
        let mut scores = match row {
            Row::Settings(name, settings) => library.evaluate(&set, &name, &settings, control)?,
            Row::Pipeline(pipeline) => library.evaluate_pipeline(&set, pipeline, control)?,
            Row::DocumentBm25 => library.evaluate_document_bm25(&set, control)?,
        };
        if !plan.per_query {
            scores.per_query.clear();
        }
        report.rows.push(scores);
    }
    // The set's library, its index and its caches go now: give their memory back, so a
    // long-lived process (the desktop app) does not keep it after the evaluation.
    drop(library);
    crate::memory::return_freed_memory();
    Ok(report)
}

/// One row of the report.
enum Row<'a> {
    Settings(String, RetrievalSettings),
    Pipeline(&'a ResolvedPipeline),
    DocumentBm25,
}

impl Row<'_> {
    fn name(&self) -> String {
        match self {
            Row::Settings(name, _) => name.clone(),
            Row::Pipeline(p) => format!("pipeline {}", p.name),
            Row::DocumentBm25 => "document bm25".into(),
        }
    }
}

/// The rows `plan` asks for, in its order: modes, weights, pipelines.
fn plan_rows(plan: &EvalPlan) -> Vec<Row<'_>> {
    let mut rows = Vec::new();
    if plan.baseline {
        rows.push(Row::DocumentBm25);
    }
    for mode in &plan.modes {
        let mut settings = plan.settings.clone();
        // Checked by `index_set` before any work.
        settings.mode = SearchMode::parse(mode).expect("checked");
        rows.push(Row::Settings(mode.clone(), settings));
    }
    for w in &plan.sweep_lexical_weight {
        let mut settings = plan.settings.clone();
        settings.mode = SearchMode::Hybrid;
        settings.fusion = Fusion::Weighted { lexical_weight: *w };
        rows.push(Row::Settings(format!("hybrid w={w}"), settings));
    }
    if let Some(rerank) = &plan.deep {
        let mut settings = plan.settings.clone();
        settings.mode = SearchMode::Hybrid;
        settings.rerank = Some(rerank.clone());
        let name = match rerank.when {
            RerankWhen::Always => "hybrid deep (always)",
            RerankWhen::Unsure => "hybrid deep",
        };
        rows.push(Row::Settings(name.into(), settings));
    }
    rows.extend(plan.pipelines.iter().map(Row::Pipeline));
    rows
}

/// Opens the set's own library in `work`, writes and indexes the corpus unless it is already
/// there, and embeds it when a row needs vectors.
fn index_set(
    set: &BeirSet,
    plan: &EvalPlan,
    work: &Path,
    on_progress: &(dyn Fn(EvalProgress) + Sync),
    cancel: &Cancel,
) -> Result<(Library, EvalReport)> {
    for mode in &plan.modes {
        SearchMode::parse(mode)?;
    }
    let mut library = Library::open(&work.join("library"))?;
    if library.sources()?.is_empty() {
        match &set.corpus_folder {
            Some(c) => library.add_source(&c.folder, "eval", &c.include, &[])?,
            None => {
                let folder = work.join("corpus");
                set.write_corpus(&folder)?;
                library.add_source(&folder, "eval", &[], &[])?
            }
        };
    }
    on_progress(EvalProgress::Indexing);
    let started = Instant::now();
    let mut writer = library.writer()?;
    let progress = writer.index_all(&IndexOptions::default(), &|_| {})?;
    let indexed_secs = started.elapsed().as_secs_f64();
    let started = Instant::now();
    let needs_vectors = plan.modes.iter().any(|m| m != "lexical")
        || !plan.sweep_lexical_weight.is_empty()
        || !plan.pipelines.is_empty()
        || plan.deep.is_some();
    let embedded = if needs_vectors {
        let on_embed = |p: &crate::EmbedProgress| {
            on_progress(EvalProgress::Embedding {
                done: p.embedded,
                total: p.total,
            })
        };
        writer.embed_pending(&on_embed, cancel.flag())?
    } else {
        0
    };
    if cancel.is_cancelled() {
        return Err(Error::Cancelled);
    }
    let embed_secs = started.elapsed().as_secs_f64();
    drop(writer);
    let report = EvalReport {
        set: plan.set.display().to_string(),
        documents: match set.corpus_folder {
            Some(_) => library.status()?.stats.documents_indexed as usize,
            None => set.corpus.len(),
        },
        chunks: progress.chunks_written,
        indexed_secs,
        embedded,
        embed_secs,
        judged_queries: set.queries.len(),
        rows: Vec::new(),
    };
    Ok((library, report))
}
