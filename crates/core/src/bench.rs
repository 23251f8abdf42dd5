//! The measurements behind `quarry bench` that reach inside the engine (the vector store, the
//! sign bits, the embedder's run shapes), so the CLI stays on the public surface. Each writes
//! its report a line at a time through `line` as it measures; figures are printed, never
//! asserted.

use std::time::Instant;

use crate::error::{Error, Result};
use crate::ids::ChunkId;
use crate::library::Library;
use crate::store::{dot, Collection, SignIndex, Store};

/// The value at fraction `p` of `times` (sorted in place); NaN when there are none.
pub fn percentile(times: &mut [f64], p: f64) -> f64 {
    if times.is_empty() {
        return f64::NAN;
    }
    times.sort_by(|a, b| a.total_cmp(b));
    times[((times.len() as f64 * p) as usize).min(times.len() - 1)]
}

/// KNN latency and recall@10 of sqlite-vec's exact scan and of sign bits + rescoring (in
/// sqlite-vec and in memory) against an in-memory brute-force scan, on `n` synthetic
/// clustered unit vectors of `dim` dimensions, in a throwaway store.
pub fn vector_search(
    n: usize,
    dim: usize,
    queries: usize,
    breadths: &[usize],
    line: &mut dyn FnMut(String),
) -> Result<()> {
    if n == 0 || dim == 0 || queries == 0 {
        return Err(Error::InvalidSetting {
            field: "n, dim, queries".into(),
            reason: "n, dim and queries must be positive".into(),
        });
    }
    // Clustered data, like embeddings of a corpus (topics), rather than uniform noise in
    // which nearest neighbours are barely nearer than anything else.
    let mut rng = Rng(0x2545F4914F6CDD1D);
    let clusters = (n / 100).clamp(10, 5000);
    let centres: Vec<Vec<f32>> = (0..clusters)
        .map(|_| (0..dim).map(|_| rng.gaussian()).collect())
        .collect();
    let started = Instant::now();
    let mut data = Vec::with_capacity(n * dim);
    for i in 0..n {
        data.extend(rng.unit_near(&centres[i % clusters], 0.9));
    }
    let qs: Vec<Vec<f32>> = (0..queries)
        .map(|_| {
            let i = (rng.next() % n as u64) as usize;
            rng.unit_near(&data[i * dim..(i + 1) * dim], 0.02)
        })
        .collect();
    line(format!(
        "vectors           {n} × {dim} (clustered, {clusters} clusters), generated in {:.1} s",
        started.elapsed().as_secs_f64()
    ));

    let temp = tempfile::tempdir().map_err(|e| Error::io(std::env::temp_dir(), e))?;
    let mut store = Store::open(&temp.path().join("quarry.db"))?;
    let collection = store.create_collection("bench", "internal", "english", "bench-model")?;
    let table = store.ensure_vector_table("bench-model", dim)?;
    let started = Instant::now();
    let batch = 10_000;
    for start in (0..n).step_by(batch) {
        let rows: Vec<(i64, Vec<f32>)> = (start..(start + batch).min(n))
            .map(|i| (i as i64 + 1, data[i * dim..(i + 1) * dim].to_vec()))
            .collect();
        store.store_vectors_unchecked(&table, collection.id, &rows)?;
    }
    let insert_secs = started.elapsed().as_secs_f64();
    let db_bytes: u64 = std::fs::read_dir(temp.path())
        .map_err(|e| Error::io(temp.path(), e))?
        .flatten()
        .filter_map(|e| e.metadata().ok())
        .map(|m| m.len())
        .sum();
    line(format!(
        "insert            {:.1} s ({:.0} vectors/s), database {:.0} MB",
        insert_secs,
        n as f64 / insert_secs,
        db_bytes as f64 / 1e6
    ));

    let k = 10;
    let mut truth = Vec::with_capacity(qs.len());
    let mut times = Vec::with_capacity(qs.len());
    for q in &qs {
        let t = Instant::now();
        truth.push(top_k_brute(&data, dim, q, k));
        times.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    let brute_p50 = percentile(&mut times, 0.5);
    line(format!(
        "{:<40} p50 {:>8.2} ms  p95 {:>8.2} ms  recall@10 1.000",
        "in-memory brute force (f32)",
        brute_p50,
        percentile(&mut times, 0.95)
    ));
    // The exact vec0 scan is slow at a million: time fewer queries there.
    let exact_queries = if n > 200_000 {
        qs.len().min(10)
    } else {
        qs.len()
    };
    let started = Instant::now();
    let mut index = SignIndex::build(&store, &table, collection.id)?;
    line(format!(
        "sign-bit copy     {} vectors loaded in {:.2} s ({:.0} MB)",
        index.len(),
        started.elapsed().as_secs_f64(),
        (index.len() * dim.div_ceil(64) * 8 + index.len() * 8) as f64 / 1e6
    ));
    let mut methods: Vec<(String, usize, usize, bool)> =
        vec![("sqlite-vec exact scan".into(), 0, exact_queries, false)];
    for &b in breadths {
        methods.push((format!("vec0 sign bits {b} + rescore"), b, qs.len(), false));
        methods.push((
            format!("in-memory sign bits {b} + rescore"),
            b,
            qs.len(),
            true,
        ));
    }
    for (name, breadth, count, in_memory) in methods {
        let mut times = Vec::with_capacity(count);
        let mut found = 0usize;
        for (q, want) in qs.iter().zip(&truth).take(count) {
            let t = Instant::now();
            let index = if in_memory { Some(&mut index) } else { None };
            let got = store.nearest_chunks(&table, collection.id, q, k, breadth, index)?;
            times.push(t.elapsed().as_secs_f64() * 1000.0);
            found += got.iter().filter(|(id, _)| want.contains(&id.0)).count();
        }
        let p50 = percentile(&mut times, 0.5);
        line(format!(
            "{:<40} p50 {:>8.2} ms  p95 {:>8.2} ms  recall@10 {:.3}  ({:.1}× brute force, {count} queries)",
            name,
            p50,
            percentile(&mut times, 0.95),
            found as f64 / (count * k) as f64,
            p50 / brute_p50
        ));
    }
    Ok(())
}

fn top_k_brute(data: &[f32], dim: usize, q: &[f32], k: usize) -> Vec<i64> {
    let mut scored: Vec<(f32, i64)> = data
        .chunks_exact(dim)
        .enumerate()
        .map(|(i, v)| (dot(v, q), i as i64 + 1))
        .collect();
    let k = k.min(scored.len());
    scored.select_nth_unstable_by(k.saturating_sub(1), |a, b| b.0.total_cmp(&a.0));
    scored.truncate(k);
    scored.sort_by(|a, b| b.0.total_cmp(&a.0));
    scored.into_iter().map(|x| x.1).collect()
}

/// Starts a new peak of the process's resident memory, so a benchmark's next phase reads its
/// own (Linux; a no-op elsewhere).
pub fn reset_peak_resident() {
    crate::memory::reset_peak_resident();
}

/// Embedding throughput on the first `chunks` chunks of the library's first collection: the
/// model alone under every run shape the calibration tries (the calibration itself, kept for
/// this CPU as the lane's first run would keep it), then the embedding lane (which adds
/// reading chunks and writing vectors) on the same chunks.
pub fn embedding_throughput(
    library: &mut Library,
    chunks: usize,
    line: &mut dyn FnMut(String),
) -> Result<()> {
    let (collection, model) = first_collection_and_model(library)?;
    // The lane's own queue, read from the store, so raw and lane embed the same chunks.
    let texts: Vec<String> = library
        .store()
        .pending_chunks(collection.id, &model, chunks)?
        .into_iter()
        .map(|p| p.text)
        .collect();
    let embedder = library.embedder(&model)?;
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let calibration = embedder.calibrate(&refs)?;
    line(format!(
        "model alone       {} chunks, {} ONNX Runtime threads, {}",
        texts.len(),
        embedder.threads(),
        calibration.cpu
    ));
    for rate in &calibration.rates {
        line(format!(
            "  {:<52} {:>6.0} tokens/s  peak RSS {:>5} MiB{}",
            rate.shape.to_string(),
            rate.tokens_per_sec,
            rate.peak_rss_mib
                .map_or_else(|| "?".to_string(), |m| m.to_string()),
            if rate.shape == calibration.shape {
                "  <- chosen"
            } else {
                ""
            }
        ));
    }
    let raw_rate = {
        let started = Instant::now();
        embedder.embed(&refs)?;
        texts.len() as f64 / started.elapsed().as_secs_f64()
    };
    let stop = std::sync::atomic::AtomicBool::new(false);
    let started = Instant::now();
    let done = std::cell::Cell::new(0u64);
    library
        .writer()?
        .embed_pending_limited(chunks, &|p| done.set(p.embedded_this_run), &stop)?;
    let lane_rate = done.get() as f64 / started.elapsed().as_secs_f64();
    line(format!(
        "embedding lane    {} chunks (with SQLite writes): {:.1} chunks/s = {:.2} of the model alone ({:.1} chunks/s)",
        done.get(),
        lane_rate,
        lane_rate / raw_rate,
        raw_rate
    ));
    Ok(())
}

/// Gives every chunk of the library's first collection a synthetic vector of the collection
/// model's dimension (clustered like a corpus's topics), written as the embedding lane writes
/// real ones: embedding 100k chunks for real would take an hour on two cores. Returns how many.
pub fn synthetic_vectors(library: &Library) -> Result<usize> {
    let (collection, model) = first_collection_and_model(library)?;
    let dim = library.embedder(&model)?.dimension();
    let ids = library.chunk_ids()?;
    let mut rng = Rng(0x9E3779B97F4A7C15);
    let centres: Vec<Vec<f32>> = (0..(ids.len() / 100).clamp(10, 5000))
        .map(|_| (0..dim).map(|_| rng.gaussian()).collect())
        .collect();
    // A connection of its own: the library's is for reads.
    let mut store = Store::open(library.store().path())?;
    let table = store.ensure_vector_table(&model, dim)?;
    for group in ids.chunks(10_000) {
        let rows: Vec<(ChunkId, Vec<f32>)> = group
            .iter()
            .map(|&id| {
                (
                    id,
                    rng.unit_near(&centres[id.0 as usize % centres.len()], 0.9),
                )
            })
            .collect();
        // Real rows, so this also moves the embedding cursor like the lane does.
        let last = *group.last().expect("chunks() gives non-empty groups");
        store.store_vectors(&table, collection.id, &rows, &[], last)?;
    }
    Ok(ids.len())
}

/// The library's first collection and the model that embeds it.
fn first_collection_and_model(library: &Library) -> Result<(Collection, String)> {
    let collection = library
        .collections()?
        .into_iter()
        .next()
        .ok_or_else(|| Error::CollectionNotFound("(the library has no collection)".into()))?;
    let model = collection
        .embedding_model
        .clone()
        .ok_or_else(|| Error::InvalidSetting {
            field: "embedding_model".into(),
            reason: format!("collection `{}` has none", collection.name),
        })?;
    Ok((collection, model))
}

/// The two query-embedding phases of a one-shot search, in milliseconds: loading `model`
/// (ONNX Runtime session, tokenizer) and embedding `query` with it.
pub fn query_embedding_phases(library: &Library, model: &str, query: &str) -> Result<(f64, f64)> {
    let started = Instant::now();
    let embedder = library.embedder(model)?;
    let load = started.elapsed().as_secs_f64() * 1e3;
    let started = Instant::now();
    embedder.embed_query(query)?;
    Ok((load, started.elapsed().as_secs_f64() * 1e3))
}

/// Deterministic xorshift, and Gaussian numbers from it (Box-Muller).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn uniform(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    fn gaussian(&mut self) -> f32 {
        let (u, v) = (self.uniform().max(1e-12), self.uniform());
        ((-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()) as f32
    }

    fn unit_near(&mut self, centre: &[f32], noise: f32) -> Vec<f32> {
        let v = centre.iter().map(|c| c + noise * self.gaussian()).collect();
        crate::embed::normalized(v)
    }
}
