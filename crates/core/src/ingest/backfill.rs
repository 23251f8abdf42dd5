//! The embedding lane: fills in vectors behind the lexical index.
//!
//! Files are searchable by full text as soon as they are extracted; this lane then embeds
//! their chunks in batches, oldest first. Each batch's vectors and the collection's cursor
//! commit in one transaction, so a restart resumes at the first chunk without a vector.
//!
//! What the user searches first is embedded first: before each batch of that walk, the lane
//! embeds the chunks of the documents a search found or the app opened meanwhile
//! (`store::embed_first`), wherever they are; and a collection that a scoped search or the
//! assistant named while it waited is walked before the others, even midway through another.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::embed::need::{vector_need, ShapeKey, VectorNeed};
use crate::embed::Embedder;
use crate::error::Result;
use crate::ids::ChunkId;
use crate::store::{Collection, EmbeddingCoverage, PendingChunk, Store, VectorKind, VectorTable};

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
    /// Where the model runs (`CPU`, `CUDA 0`); `None` for a model a server runs.
    pub device: Option<String>,
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
    /// Of the embedded, chunks that took a near-duplicate's vector instead of the model's.
    pub shared: i64,
    /// Of the embedded, chunks left to full text: they carry no prose.
    pub lexical_only: i64,
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
    while let Some(n) = embed_queued(store, embedder_for, batch)? {
        embedded_total += n;
        if stop.load(Ordering::Relaxed) || embedded_total >= limit {
            return Ok(embedded_total);
        }
    }
    'walk: while let Some((collection, model_id)) = next_collection(store)? {
        // What indexing freed goes back before the model's sessions and buffers are made:
        // glibc keeps it otherwise, and the lane's peak would stand on full text's.
        crate::memory::return_freed_memory();
        let embedder = embedder_for(&model_id)?;
        if embedder.needs_calibration() {
            calibrate(store, &embedder, collection.id, &model_id)?;
        }
        let table = store.ensure_vector_table(&model_id, embedder.dimension())?;
        // Per collection, so one model's vectors never stand in for another's.
        let mut shared = SharedVectors::default();
        let started = Instant::now();
        let mut this_run = Work::default();
        // Counted at the start, and the total again with each kept rate (a scan beside the lane,
        // the app's watcher, adds chunks): a count per report would cost a scan of the
        // collection's chunks.
        let before = store.coverage_of(collection.clone())?;
        let mut total = before.total;
        let mut last_report = Instant::now() - Duration::from_secs(1);
        let mut last_rate_kept = Instant::now();
        let device = embedder.placement().map(|p| p.label());
        let report = |this_run: &Work, total: i64, done: bool| {
            let mut progress = progress(&before, total, &model_id, this_run, started, done);
            progress.device = device.clone();
            on_progress(&progress);
        };
        loop {
            if stop.load(Ordering::Relaxed) || embedded_total >= limit {
                keep_rate(store, collection.id, &this_run, started)?;
                report(&this_run, total, false);
                return Ok(embedded_total);
            }
            if let Some(n) = embed_queued(store, embedder_for, batch)? {
                embedded_total += n;
                continue;
            }
            if store
                .collection_embedded_first()?
                .is_some_and(|first| first != collection.id)
            {
                // Another collection was asked for meanwhile: it goes first, this one resumes
                // at its cursor after.
                keep_rate(store, collection.id, &this_run, started)?;
                report(&this_run, total, false);
                continue 'walk;
            }
            let room = (limit - embedded_total).min(batch.max(1) as u64) as usize;
            let pending = store.pending_chunks(collection.id, &model_id, room)?;
            let Some(last) = pending.last().map(|p| p.id) else {
                break;
            };
            // Chunks that kept their vector from the revision before only move the cursor.
            let missing: Vec<&PendingChunk> = pending.iter().filter(|p| !p.has_vector).collect();
            // The assistant reads its prompt on a core fewer meanwhile.
            let busy = crate::cores::LaneBusy::begin();
            let batch = shared.vectors_for(store, &table, &embedder, &missing)?;
            drop(busy);
            store.store_vectors(&table, collection.id, &batch.rows, &batch.kinds, last)?;
            this_run.chunks += pending.len() as u64;
            this_run.tokens += batch.tokens as u64;
            this_run.model_tokens += batch.model_tokens as u64;
            for (_, kind) in &batch.kinds {
                match kind {
                    VectorKind::Shared => this_run.shared += 1,
                    VectorKind::LexicalOnly => this_run.lexical_only += 1,
                    VectorKind::Own => {}
                }
            }
            embedded_total += missing.len() as u64;
            if last_report.elapsed() >= Duration::from_millis(500) {
                report(&this_run, total, false);
                last_report = Instant::now();
            }
            if last_rate_kept.elapsed() >= RATE_KEPT_EVERY {
                keep_rate(store, collection.id, &this_run, started)?;
                total = store.coverage_of(collection.clone())?.total;
                last_rate_kept = Instant::now();
            }
        }
        keep_rate(store, collection.id, &this_run, started)?;
        if collection.pending_model.is_some() {
            store.finish_model_switch(collection.id)?;
        }
        store.collection_walked(collection.id)?;
        report(&this_run, total, true);
    }
    Ok(embedded_total)
}

/// The collection the walk goes on with, and the model filling it: the first, in walk order
/// (requested ones first, see `store::embed_first`), whose chunks wait. Those found with none
/// waiting finish their model switch, and a request for them is answered.
fn next_collection(store: &mut Store) -> Result<Option<(Collection, String)>> {
    for (collection, requested) in store.collections_in_walk_order()? {
        let filling = collection
            .pending_model
            .clone()
            .or_else(|| collection.embedding_model.clone());
        if let Some(model_id) = filling {
            if !store
                .pending_chunks(collection.id, &model_id, 1)?
                .is_empty()
            {
                return Ok(Some((collection, model_id)));
            }
            if collection.pending_model.is_some() {
                store.finish_model_switch(collection.id)?;
            }
        }
        if requested {
            store.collection_walked(collection.id)?;
        }
    }
    Ok(None)
}

/// Embeds the next chunks of the queue (documents a search found or the app opened while
/// they waited), ahead of the walk: they are stored with their vectors but the cursor stays.
/// Returns how many the model or a near-duplicate gave a vector, or `None` when the queue is
/// empty.
fn embed_queued(
    store: &mut Store,
    embedder_for: &dyn Fn(&str) -> Result<std::sync::Arc<Embedder>>,
    batch: usize,
) -> Result<Option<u64>> {
    let Some(next) = store.next_embed_first(batch.max(1))? else {
        return Ok(None);
    };
    if next.chunks.is_empty() {
        store.dequeue_for_vectors(&next.finished)?;
        return Ok(Some(0));
    }
    let embedder = embedder_for(&next.model_id)?;
    let table = store.ensure_vector_table(&next.model_id, embedder.dimension())?;
    // Chunks that kept their vector from the revision before are only noted.
    let missing: Vec<&PendingChunk> = next.chunks.iter().filter(|p| !p.has_vector).collect();
    let busy = crate::cores::LaneBusy::begin();
    let vectors = SharedVectors::default().vectors_for(store, &table, &embedder, &missing)?;
    drop(busy);
    let dealt: Vec<ChunkId> = next.chunks.iter().map(|p| p.id).collect();
    store.store_vectors_ahead(
        &table,
        next.collection_id,
        &vectors.rows,
        &vectors.kinds,
        &dealt,
        &next.finished,
    )?;
    tracing::debug!(
        chunks = dealt.len(),
        documents = next.finished.len(),
        "embedded what was searched first"
    );
    Ok(Some(missing.len() as u64))
}

/// How often a long run keeps its rate, so `quarry status` in another terminal reckons the
/// time left from this run's pace.
const RATE_KEPT_EVERY: Duration = Duration::from_secs(30);

/// A run shorter than this says little about the pace (a file saved by the watcher).
const RATE_MIN_RUN: Duration = Duration::from_secs(5);

/// Keeps the run's rate for the time left that status reckons, when the run was long enough
/// to mean something.
fn keep_rate(
    store: &mut Store,
    collection_id: crate::ids::CollectionId,
    this_run: &Work,
    started: Instant,
) -> Result<()> {
    let elapsed = started.elapsed();
    if elapsed < RATE_MIN_RUN || this_run.chunks == 0 {
        return Ok(());
    }
    store.record_embedding_rate(
        collection_id,
        this_run.chunks as f64 / elapsed.as_secs_f64(),
    )
}

/// What a run of the lane did for one collection.
#[derive(Default)]
struct Work {
    chunks: u64,
    tokens: u64,
    model_tokens: u64,
    shared: u64,
    lexical_only: u64,
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

/// What one batch of pending chunks gets.
struct BatchVectors {
    /// The vectors to store, the model's and the shared.
    rows: Vec<(ChunkId, Vec<f32>)>,
    /// What each chunk got.
    kinds: Vec<(ChunkId, VectorKind)>,
    /// Tokens of the chunks given a vector (a shared one counts, though the model did not read
    /// it again).
    tokens: usize,
    /// Tokens the model read.
    model_tokens: usize,
}

/// The chunk whose vector stands for each shape embedded in this run (see `embed::need`): a
/// chunk of the same shape (the same page under two paths, a trait implemented for another
/// type, an unchanged section of a new revision) takes its vector instead of running the model
/// again; a chunk without prose gets none. Bounded: cleared when full (16 MB at most).
#[derive(Default)]
struct SharedVectors {
    /// Each shape's chunk and its token count.
    by_shape: HashMap<ShapeKey, (ChunkId, usize)>,
}

/// Shapes remembered.
const SHAPES_KEPT: usize = 1 << 19;

impl SharedVectors {
    /// What each of `chunks` gets: nothing without prose, else a vector of the same shape
    /// given earlier in the run or in this batch, else the model's (each shape read once).
    fn vectors_for(
        &mut self,
        store: &Store,
        table: &VectorTable,
        embedder: &Embedder,
        chunks: &[&PendingChunk],
    ) -> Result<BatchVectors> {
        let mut out = BatchVectors {
            rows: Vec::with_capacity(chunks.len()),
            kinds: Vec::with_capacity(chunks.len()),
            tokens: 0,
            model_tokens: 0,
        };
        // Chunks the model reads, with their shapes; chunks copying one of them (by index).
        let mut read: Vec<(&PendingChunk, ShapeKey)> = Vec::new();
        let mut first_in_batch: HashMap<ShapeKey, usize> = HashMap::new();
        let mut copies: Vec<(ChunkId, usize)> = Vec::new();
        for chunk in chunks {
            let key = match vector_need(&chunk.text, &chunk.text[chunk.body_start..]) {
                VectorNeed::LexicalOnly => {
                    out.kinds.push((chunk.id, VectorKind::LexicalOnly));
                    continue;
                }
                VectorNeed::Vector(key) => key,
            };
            if let Some(&index) = first_in_batch.get(&key) {
                copies.push((chunk.id, index));
                continue;
            }
            if let Some(&(source, tokens)) = self.by_shape.get(&key) {
                if let Some(vector) = store.vector_of(table, source)? {
                    out.rows.push((chunk.id, vector));
                    out.kinds.push((chunk.id, VectorKind::Shared));
                    out.tokens += tokens;
                    continue;
                }
            }
            first_in_batch.insert(key, read.len());
            read.push((chunk, key));
        }
        if read.is_empty() {
            return Ok(out);
        }
        let texts: Vec<&str> = read.iter().map(|(c, _)| c.text.as_str()).collect();
        let embedded = embedder.embed_counted(&texts)?;
        out.model_tokens = embedded.tokens;
        out.tokens += embedded.tokens;
        for (chunk_id, index) in copies {
            out.rows.push((chunk_id, embedded.vectors[index].clone()));
            out.kinds.push((chunk_id, VectorKind::Shared));
            out.tokens += embedded.lengths[index];
        }
        if self.by_shape.len() + read.len() > SHAPES_KEPT {
            self.by_shape.clear();
        }
        for (((chunk, key), vector), length) in
            read.into_iter().zip(embedded.vectors).zip(embedded.lengths)
        {
            self.by_shape.insert(key, (chunk.id, length));
            out.rows.push((chunk.id, vector));
            out.kinds.push((chunk.id, VectorKind::Own));
        }
        Ok(out)
    }
}

/// A collection's progress: `before` as counted when its walk began, `total` its chunks as
/// counted since, and what this run did.
fn progress(
    before: &EmbeddingCoverage,
    total: i64,
    model: &str,
    this_run: &Work,
    started: Instant,
    done: bool,
) -> EmbedProgress {
    let embedded = before.embedded + this_run.chunks as i64;
    let total = total.max(embedded);
    let secs = started.elapsed().as_secs_f64().max(1e-3);
    let rate = this_run.chunks as f64 / secs;
    EmbedProgress {
        collection: before.collection.clone(),
        model: model.to_string(),
        device: None,
        embedded,
        total,
        embedded_this_run: this_run.chunks,
        chunks_per_sec: rate,
        tokens_this_run: this_run.tokens,
        model_tokens_this_run: this_run.model_tokens,
        tokens_per_sec: this_run.tokens as f64 / secs,
        shared: before.shared + this_run.shared as i64,
        lexical_only: before.lexical_only + this_run.lexical_only as i64,
        eta_ms: (rate > 0.0).then(|| ((total - embedded).max(0) as f64 / rate * 1000.0) as u64),
        done,
    }
}
