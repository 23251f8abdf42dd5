//! The embedding lane: fills in vectors behind the lexical index.
//!
//! Files are searchable by full text as soon as they are extracted; this lane then embeds
//! their chunks in batches, oldest first. Each batch's vectors and the collection's cursor
//! commit in one transaction, so a restart resumes at the first chunk without a vector.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::embed::Embedder;
use crate::error::Result;
use crate::ids::ChunkId;
use crate::store::{EmbeddingCoverage, Store};

/// Chunks embedded per transaction (the model runs them one at a time, see
/// `embed::Embedder::embed`). Big enough to amortise a commit, small enough that progress moves
/// and a stop is honoured within a second.
pub const DEFAULT_EMBED_BATCH: usize = 32;

/// Progress of the embedding lane, per collection.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "specta", derive(specta::Type))]
pub struct EmbedProgress {
    /// The collection being filled.
    pub collection: String,
    /// The model filling it.
    pub model: String,
    /// Chunks with a vector.
    pub embedded: i64,
    /// Chunks in the collection.
    pub total: i64,
    /// Chunks embedded in this run.
    pub embedded_this_run: u64,
    /// Chunks per second in this run.
    pub chunks_per_sec: f64,
    /// Tokens of the chunks given a vector in this run (a copy of a text seen earlier in the
    /// run counts, though the model did not read it again).
    pub tokens_this_run: u64,
    /// Tokens the model read in this run.
    pub model_tokens_this_run: u64,
    /// `tokens_this_run` per second.
    pub tokens_per_sec: f64,
    /// Time left at that rate.
    pub eta_ms: Option<u64>,
    /// The collection is fully embedded.
    pub done: bool,
}

/// Embeds every chunk still missing a vector, collection by collection, until none is left or
/// `stop` is set. `embedder_for` loads (or fetches from a cache) the model by id.
pub(crate) fn backfill(
    store: &mut Store,
    embedder_for: &dyn Fn(&str) -> Result<std::sync::Arc<Embedder>>,
    batch: usize,
    limit: u64,
    on_progress: &dyn Fn(&EmbedProgress),
    stop: &AtomicBool,
) -> Result<u64> {
    let mut embedded_total = 0;
    for collection in store.collections()? {
        let Some(model_id) = collection
            .pending_model
            .clone()
            .or_else(|| collection.embedding_model.clone())
        else {
            continue;
        };
        if store
            .pending_chunks(collection.id, &model_id, 1)?
            .is_empty()
        {
            if collection.pending_model.is_some() {
                store.finish_model_switch(collection.id)?;
            }
            continue;
        }
        let embedder = embedder_for(&model_id)?;
        if embedder.needs_calibration() {
            calibrate(store, &embedder, collection.id, &model_id)?;
        }
        let table = store.ensure_vector_table(&model_id, embedder.dimension())?;
        // Per collection, so one model's vectors never stand in for another's.
        let mut seen = SeenTexts::default();
        let started = Instant::now();
        let mut this_run = Work::default();
        // Counted once: a count per report would cost a scan of the collection's chunks.
        let before = store.coverage_of(collection.clone())?;
        let mut last_report = Instant::now() - Duration::from_secs(1);
        let report = |this_run: &Work, done: bool| {
            on_progress(&progress(&before, &model_id, this_run, started, done));
        };
        loop {
            if stop.load(Ordering::Relaxed) || embedded_total >= limit {
                report(&this_run, false);
                return Ok(embedded_total);
            }
            let room = (limit - embedded_total).min(batch.max(1) as u64) as usize;
            let pending = store.pending_chunks(collection.id, &model_id, room)?;
            let Some(last) = pending.last().map(|p| p.id) else {
                break;
            };
            // Chunks that kept their vector from the revision before only move the cursor.
            let missing: Vec<_> = pending.iter().filter(|p| !p.has_vector).collect();
            let texts: Vec<&str> = missing.iter().map(|p| p.text.as_str()).collect();
            // The assistant reads its prompt on a core fewer meanwhile.
            let busy = crate::cores::LaneBusy::begin();
            let embedded = seen.embed(&embedder, &texts)?;
            drop(busy);
            let rows: Vec<(ChunkId, Vec<f32>)> =
                missing.iter().map(|p| p.id).zip(embedded.vectors).collect();
            store.store_vectors(&table, collection.id, &rows, last)?;
            this_run.chunks += pending.len() as u64;
            this_run.tokens += embedded.tokens as u64;
            this_run.model_tokens += embedded.model_tokens as u64;
            embedded_total += rows.len() as u64;
            if last_report.elapsed() >= Duration::from_millis(500) {
                report(&this_run, false);
                last_report = Instant::now();
            }
        }
        if collection.pending_model.is_some() {
            store.finish_model_switch(collection.id)?;
        }
        report(&this_run, true);
    }
    Ok(embedded_total)
}

/// What a run of the lane did for one collection.
#[derive(Default)]
struct Work {
    chunks: u64,
    tokens: u64,
    model_tokens: u64,
}

/// Chooses the embedder's run shape on this machine's first embedding run, by timing the
/// collection's next pending texts (see `embed::calibration`). With too few texts pending the
/// default stays until a bigger run.
fn calibrate(
    store: &Store,
    embedder: &Embedder,
    collection_id: crate::ids::CollectionId,
    model_id: &str,
) -> Result<()> {
    use crate::embed::calibration::{MIN_SAMPLE_TEXTS, SAMPLE_TEXTS};
    let sample = store.pending_chunks(collection_id, model_id, SAMPLE_TEXTS)?;
    if sample.len() >= MIN_SAMPLE_TEXTS {
        let texts: Vec<&str> = sample
            .iter()
            .filter(|p| !p.has_vector)
            .map(|p| p.text.as_str())
            .collect();
        if texts.len() >= MIN_SAMPLE_TEXTS {
            embedder.calibrate(&texts)?;
        }
    }
    Ok(())
}

/// Vectors for a batch of texts, with the tokens they hold and the tokens the model read.
struct SeenEmbedded {
    vectors: Vec<Vec<f32>>,
    tokens: usize,
    model_tokens: usize,
}

/// Vectors of texts this run already embedded: a chunk whose input (title and text) is
/// identical to one of them (the same page under two paths or editions, a print-all page, an
/// unchanged section of a new revision) takes its vector instead of running the model again.
/// Measured on the Book, Reference and Cargo docs that ship with the toolchain: 71,933 chunks,
/// 58,182 distinct inputs, so 19% fewer model runs. Bounded: cleared when full.
#[derive(Default)]
struct SeenTexts {
    /// Each text's vector and token count.
    vectors: std::collections::HashMap<blake3::Hash, (Vec<f32>, usize)>,
}

/// Texts whose vectors are kept (a MiniLM vector is 1.5 KB: 24 MB at most).
const SEEN_TEXTS: usize = 16_384;

impl SeenTexts {
    /// The vectors of `texts`, in order: each distinct unseen text through the model once.
    fn embed(&mut self, embedder: &Embedder, texts: &[&str]) -> Result<SeenEmbedded> {
        let hashes: Vec<blake3::Hash> = texts.iter().map(|t| blake3::hash(t.as_bytes())).collect();
        let mut unseen: Vec<&str> = Vec::new();
        let mut unseen_hashes: Vec<blake3::Hash> = Vec::new();
        for (text, hash) in texts.iter().zip(&hashes) {
            if !self.vectors.contains_key(hash) && !unseen_hashes.contains(hash) {
                unseen.push(text);
                unseen_hashes.push(*hash);
            }
        }
        let mut batch: std::collections::HashMap<blake3::Hash, (Vec<f32>, usize)> =
            std::collections::HashMap::new();
        let mut model_tokens = 0;
        if !unseen.is_empty() {
            let fresh = embedder.embed_counted(&unseen)?;
            model_tokens = fresh.tokens;
            batch.extend(
                unseen_hashes
                    .into_iter()
                    .zip(fresh.vectors.into_iter().zip(fresh.lengths)),
            );
        }
        let mut tokens = 0;
        let vectors = hashes
            .iter()
            .map(|h| {
                let (vector, length) = batch
                    .get(h)
                    .or_else(|| self.vectors.get(h))
                    .cloned()
                    .expect("every text was embedded or seen");
                tokens += length;
                vector
            })
            .collect();
        if self.vectors.len() + batch.len() > SEEN_TEXTS {
            self.vectors.clear();
        }
        self.vectors.extend(batch.drain());
        Ok(SeenEmbedded {
            vectors,
            tokens,
            model_tokens,
        })
    }
}

fn progress(
    before: &EmbeddingCoverage,
    model: &str,
    this_run: &Work,
    started: Instant,
    done: bool,
) -> EmbedProgress {
    let embedded = before.embedded + this_run.chunks as i64;
    let total = before.total.max(embedded);
    let secs = started.elapsed().as_secs_f64().max(1e-3);
    let rate = this_run.chunks as f64 / secs;
    EmbedProgress {
        collection: before.collection.clone(),
        model: model.to_string(),
        embedded,
        total,
        embedded_this_run: this_run.chunks,
        chunks_per_sec: rate,
        tokens_this_run: this_run.tokens,
        model_tokens_this_run: this_run.model_tokens,
        tokens_per_sec: this_run.tokens as f64 / secs,
        eta_ms: (rate > 0.0).then(|| ((total - embedded).max(0) as f64 / rate * 1000.0) as u64),
        done,
    }
}
