//! Text → vector with an installed embedding model, through fastembed on ONNX Runtime.

use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use fastembed::{
    InitOptionsUserDefined, Pooling, QuantizationMode, TextEmbedding, TokenizerFiles,
    UserDefinedEmbeddingModel,
};
use ort::ep::ExecutionProviderDispatch;

use super::calibration::{self, Calibration, RunShape};
use super::device::{self, EmbedPlacement, Request};
use super::runtime::environment;
use super::served::ServedEmbedder;
use crate::error::{Error, Result};
use crate::models::{InstalledModel, ModelKind, Models};

/// How many recent query vectors are kept (a query costs a model run; the GUI repeats them).
const QUERY_CACHE_ENTRIES: usize = 512;

/// How texts go through the model when nothing else says: one at a time on every thread, which
/// measured fastest on the AMD CPU it was chosen on. The machine's own calibration
/// ([`super::calibration`]) or `QUARRY_EMBED_MODEL_BATCH` (texts per run) replaces it.
const DEFAULT_SHAPE: RunShape = RunShape {
    workers: 1,
    texts_per_run: 1,
};

/// A run's texts may be this much longer than its shortest (in tokens) before a new run starts:
/// a batch pads every text to its longest, and that padding is work thrown away.
const RUN_LENGTH_SPREAD: f64 = 1.2;

/// A run pads every text to its longest; its padded tokens stay under this, so a run of long
/// texts is short and ONNX Runtime's arena, which keeps the largest run's buffers, stays small
/// (16 texts of 256 tokens would need twice this).
const MAX_RUN_PADDED_TOKENS: usize = 2048;

/// Texts embedded together with their real token counts (`[CLS]` and `[SEP]` included, after
/// truncation to the model's window): what the work was, for tokens-per-second figures.
#[derive(Debug)]
pub struct Embedded {
    /// One unit vector per text, in the order given.
    pub vectors: Vec<Vec<f32>>,
    /// Tokens the model read, padding excluded.
    pub tokens: usize,
    /// Each text's tokens, in the order given.
    pub lengths: Vec<usize>,
}

/// A loaded embedding model. Cheap to share (`Arc`); one inference at a time.
pub struct Embedder {
    model: InstalledModel,
    dimension: usize,
    /// The sessions the shape runs on; queries and token counts use the first. None for a
    /// served model.
    sessions: Mutex<Sessions>,
    /// The server of a served model, which embeds instead of ONNX Runtime.
    served: Option<ServedEmbedder>,
    shape: Mutex<RunShape>,
    /// The run shape is this machine's measured one (or the environment's).
    calibrated: AtomicBool,
    threads: usize,
    runtime: PathBuf,
    /// Where calibrations and optimised copies are kept: the models folder installs go to.
    models_dir: PathBuf,
    /// The device asked for (`QUARRY_EMBED_DEVICE`), read when the model loads.
    request: Request,
    /// Where the sessions run; `None` for a served model.
    placement: Mutex<Option<EmbedPlacement>>,
    query_cache: Mutex<lru::LruCache<String, Arc<[f32]>>>,
}

/// One session with every thread allowed (a shape with one worker), or one one-thread session
/// per worker, side by side: never both, for each session holds its own copy of the weights
/// and its own arena (about 120 MiB here), and a session kept only for queries would cost that
/// for a few milliseconds a query.
struct Sessions {
    /// ONNX Runtime threads each session runs with.
    threads_each: usize,
    /// Empty only while they are made again.
    list: Arc<[Mutex<TextEmbedding>]>,
}

impl std::fmt::Debug for Embedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Embedder")
            .field("model", &self.model.id)
            .field("dimension", &self.dimension)
            .finish()
    }
}

/// Reads the tokenizer set fastembed expects from a model folder.
pub(crate) fn tokenizer_files(model: &InstalledModel) -> Result<TokenizerFiles> {
    let read = |name: &str| {
        let path = model.file(name);
        std::fs::read(&path).map_err(|_| Error::ModelFileBad {
            path,
            problem: "missing".into(),
            fix: model.fix_command(),
        })
    };
    Ok(TokenizerFiles {
        tokenizer_file: read("tokenizer.json")?,
        config_file: read("config.json")?,
        special_tokens_map_file: read("special_tokens_map.json")?,
        tokenizer_config_file: read("tokenizer_config.json")?,
    })
}

/// ONNX Runtime threads: `QUARRY_ORT_THREADS`, else every core.
pub(crate) fn ort_threads(requested: Option<usize>) -> usize {
    requested
        .filter(|n| *n > 0)
        .or_else(crate::environment::ort_threads)
        .unwrap_or_else(|| {
            std::thread::available_parallelism()
                .map(NonZeroUsize::get)
                .unwrap_or(2)
        })
}

impl Embedder {
    /// Loads and checks the installed model `id` (files verified against their sha256), with
    /// the run shape this machine's calibration chose (made on the first embedding run when
    /// there is none).
    pub fn load(models: &Models, id: &str, threads: Option<usize>) -> Result<Embedder> {
        Embedder::load_shaped(models, id, threads, None)
    }

    /// [`Embedder::load`] for searches: one session with every thread, whatever the
    /// calibration chose for the embedding lane (a query is one text; a second session would
    /// only hold memory).
    pub fn load_for_queries(models: &Models, id: &str, threads: Option<usize>) -> Result<Embedder> {
        Embedder::load_shaped(models, id, threads, Some(DEFAULT_SHAPE))
    }

    fn load_shaped(
        models: &Models,
        id: &str,
        threads: Option<usize>,
        shape: Option<RunShape>,
    ) -> Result<Embedder> {
        let model = models.find_kind(id, ModelKind::Embedding)?;
        model.verify()?;
        let dimension = model.dimension.ok_or_else(|| Error::InvalidModel {
            path: model.dir.clone(),
            reason: "its record has no dimension".into(),
        })?;
        let threads = ort_threads(threads);
        let models_dir = models.install_dir().to_path_buf();
        if let Some(served) = &model.served {
            let server = ServedEmbedder::connect(&model.id, served, Some(dimension))?;
            server.check_identity()?;
            return Ok(Embedder {
                sessions: Mutex::new(Sessions {
                    threads_each: threads,
                    list: Vec::new().into(),
                }),
                served: Some(server),
                shape: Mutex::new(DEFAULT_SHAPE),
                calibrated: AtomicBool::new(true),
                threads,
                runtime: PathBuf::new(),
                models_dir,
                request: Request::Auto,
                placement: Mutex::new(None),
                query_cache: new_query_cache(),
                model,
                dimension,
            });
        }
        let request = Request::from_env()?;
        let runtime = models.runtime_library()?;
        let chosen = match crate::environment::embed_model_batch() {
            Some(texts_per_run) => Some(RunShape {
                workers: 1,
                texts_per_run,
            }),
            None => shape.or_else(|| {
                calibration::recorded(&models_dir, &model.id, threads).map(|c| c.shape)
            }),
        };
        let embedder = Embedder {
            model,
            dimension,
            sessions: Mutex::new(Sessions {
                threads_each: threads,
                list: Vec::new().into(),
            }),
            served: None,
            shape: Mutex::new(DEFAULT_SHAPE),
            calibrated: AtomicBool::new(chosen.is_some()),
            threads,
            runtime,
            models_dir,
            request,
            placement: Mutex::new(None),
            query_cache: new_query_cache(),
        };
        embedder.set_shape(chosen.unwrap_or(DEFAULT_SHAPE))?;
        Ok(embedder)
    }

    /// The model's id.
    pub fn id(&self) -> &str {
        &self.model.id
    }

    /// Vector size.
    pub fn dimension(&self) -> usize {
        self.dimension
    }

    /// How texts go through the model now.
    pub fn shape(&self) -> RunShape {
        *self.shape.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sets how texts go through the model (at least one worker and one text per run; no more
    /// workers than threads allowed), making its sessions here, not while timing.
    pub fn set_shape(&self, shape: RunShape) -> Result<()> {
        self.shape_sessions(shape, false)
    }

    /// [`Embedder::set_shape`] with fresh sessions even where the shape's are held: ONNX
    /// Runtime's arena keeps the largest run's buffers for a session's life, and a calibration
    /// runs up to 16 texts at once; fresh ones hold only what the runs after them need.
    pub(super) fn set_shape_afresh(&self, shape: RunShape) -> Result<()> {
        self.shape_sessions(shape, true)
    }

    fn shape_sessions(&self, shape: RunShape, afresh: bool) -> Result<()> {
        let shape = RunShape {
            workers: shape.workers.clamp(1, self.threads.max(1)),
            texts_per_run: shape.texts_per_run.max(1),
        };
        if self.served.is_some() {
            // The server batches as it was registered to.
            return Ok(());
        }
        let threads_each = if shape.workers > 1 { 1 } else { self.threads };
        let mut sessions = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        if afresh || sessions.list.len() != shape.workers || sessions.threads_each != threads_each {
            self.make_sessions(&mut sessions, shape.workers, threads_each)?;
        }
        *self.shape.lock().unwrap_or_else(|e| e.into_inner()) = shape;
        Ok(())
    }

    /// Makes `count` sessions of `threads_each` threads in place of the ones held, which go
    /// first, so the two sets never take memory at once.
    fn make_sessions(
        &self,
        sessions: &mut Sessions,
        count: usize,
        threads_each: usize,
    ) -> Result<()> {
        sessions.list = Vec::new().into();
        crate::memory::return_freed_memory();
        let mut placement = None;
        sessions.list = (0..count)
            .map(|_| {
                let (session, placed) = new_session(
                    &self.model,
                    &self.runtime,
                    &self.models_dir,
                    threads_each,
                    self.request,
                )?;
                placement = Some(placed);
                Ok(Mutex::new(session))
            })
            .collect::<Result<Vec<_>>>()?
            .into();
        sessions.threads_each = threads_each;
        *self.placement.lock().unwrap_or_else(|e| e.into_inner()) = placement;
        Ok(())
    }

    /// Where the model's sessions run (the CPU or a CUDA device) and why; `None` for a model
    /// a server runs.
    pub fn placement(&self) -> Option<EmbedPlacement> {
        self.placement
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The sessions held now.
    fn sessions(&self) -> Result<Arc<[Mutex<TextEmbedding>]>> {
        let list = self
            .sessions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .list
            .clone();
        if list.is_empty() {
            return Err(self
                .inference_error("its session could not be made again after calibrating".into()));
        }
        Ok(list)
    }

    /// Runs `f` on the first session.
    fn with_session<R>(&self, f: impl FnOnce(&mut TextEmbedding) -> Result<R>) -> Result<R> {
        let list = self.sessions()?;
        let mut session = list[0].lock().unwrap_or_else(|e| e.into_inner());
        f(&mut session)
    }

    /// How many sessions are loaded.
    #[cfg(test)]
    pub(super) fn session_count(&self) -> usize {
        self.sessions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .list
            .len()
    }

    /// ONNX Runtime threads the model runs with.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Neither a kept calibration nor `QUARRY_EMBED_MODEL_BATCH` has chosen the run shape.
    pub fn needs_calibration(&self) -> bool {
        !self.calibrated.load(Ordering::Relaxed)
    }

    /// Measures every run shape on `sample` (real texts to embed), keeps the fastest for this
    /// CPU, and embeds with it from now on.
    pub fn calibrate(&self, sample: &[&str]) -> Result<Calibration> {
        if self.served.is_some() {
            return Err(self.inference_error(
                "a served model is not calibrated here: its server decides how texts run".into(),
            ));
        }
        let measured = calibration::measure(self, self.threads, sample)?;
        if measured.steady {
            calibration::remember(&self.models_dir, &measured);
        } else {
            tracing::info!(model = %self.model.id, "the machine was busy while calibrating: measuring again next run");
        }
        self.calibrated.store(true, Ordering::Relaxed);
        tracing::info!(
            model = %self.model.id,
            shape = %measured.shape,
            "embedding run shape calibrated"
        );
        Ok(measured)
    }

    /// Embeds texts; every vector has unit length (so dot product = cosine).
    pub fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>> {
        Ok(self.embed_counted(texts)?.vectors)
    }

    /// Embeds texts in runs of at most the shape's texts per run, of similar length (sorted by
    /// token count, so a run pads little), on its workers side by side; returns the vectors in
    /// the order given and the tokens read.
    pub fn embed_counted(&self, texts: &[&str]) -> Result<Embedded> {
        if let Some(server) = &self.served {
            return server.embed_counted(texts);
        }
        let shape = self.shape();
        let lengths = self.with_session(|session| {
            texts
                .iter()
                .map(|t| {
                    session
                        .tokenizer
                        .encode(*t, true)
                        // Padding, should the tokenizer add any, is not work read.
                        .map(|e| e.get_attention_mask().iter().filter(|&&m| m == 1).count())
                        .map_err(|e| self.inference_error(e.to_string()))
                })
                .collect::<Result<Vec<usize>>>()
        })?;
        let runs = plan_runs(&lengths, shape.texts_per_run);
        let mut vectors: Vec<Vec<f32>> = vec![Vec::new(); texts.len()];
        if shape.workers <= 1 || runs.len() <= 1 {
            self.with_session(|session| self.run_all(session, texts, runs, &mut vectors))?;
        } else {
            let workers = self.sessions()?;
            let shares = share_runs(runs, &lengths, workers.len());
            let done: Vec<Result<Vec<Vec<f32>>>> = std::thread::scope(|scope| {
                let handles: Vec<_> = shares
                    .into_iter()
                    .zip(workers.iter())
                    .map(|(share, session)| {
                        scope.spawn(move || {
                            let mut part: Vec<Vec<f32>> = vec![Vec::new(); texts.len()];
                            let mut session = session.lock().unwrap_or_else(|e| e.into_inner());
                            self.run_all(&mut session, texts, share, &mut part)
                                .map(|()| part)
                        })
                    })
                    .collect();
                handles
                    .into_iter()
                    .map(|h| {
                        h.join().unwrap_or_else(|_| {
                            Err(Error::Internal("an embedding worker panicked".into()))
                        })
                    })
                    .collect()
            });
            for part in done {
                for (slot, v) in vectors.iter_mut().zip(part?) {
                    if !v.is_empty() {
                        *slot = v;
                    }
                }
            }
        }
        let vectors = vectors
            .into_iter()
            .map(|v| {
                if v.len() != self.dimension {
                    return Err(self.inference_error(format!(
                        "it produced {} numbers per text, its record says {}",
                        v.len(),
                        self.dimension
                    )));
                }
                Ok(normalized(v))
            })
            .collect::<Result<_>>()?;
        Ok(Embedded {
            vectors,
            tokens: lengths.iter().sum(),
            lengths,
        })
    }

    /// Runs `runs` (indices into `texts`) through one session, filling `vectors`.
    fn run_all(
        &self,
        session: &mut TextEmbedding,
        texts: &[&str],
        runs: Vec<Vec<usize>>,
        vectors: &mut [Vec<f32>],
    ) -> Result<()> {
        for run in runs {
            let group: Vec<&str> = run.iter().map(|&i| texts[i]).collect();
            let out = session
                .embed(&group, Some(group.len()))
                .map_err(|e| self.inference_error(e.to_string()))?;
            for (i, v) in run.into_iter().zip(out) {
                vectors[i] = v;
            }
        }
        Ok(())
    }

    fn inference_error(&self, reason: String) -> Error {
        Error::Inference {
            model: self.model.id.clone(),
            reason,
        }
    }

    /// Embeds a query, from the cache when it was asked recently.
    pub fn embed_query(&self, text: &str) -> Result<Arc<[f32]>> {
        if let Some(hit) = self
            .query_cache
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(text)
        {
            return Ok(hit.clone());
        }
        let vector: Arc<[f32]> = self
            .embed(&[text])?
            .pop()
            .ok_or_else(|| Error::Internal("no vector for the query".into()))?
            .into();
        self.query_cache
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .put(text.to_string(), vector.clone());
        Ok(vector)
    }
}

/// Groups texts (by index) into model runs: one text each when `texts_per_run` is 1 (in the
/// order given), else sorted by length and cut when a run is full, when its next text is more
/// than [`RUN_LENGTH_SPREAD`] times its shortest, or when padding it to that text would pass
/// [`MAX_RUN_PADDED_TOKENS`].
fn plan_runs(lengths: &[usize], texts_per_run: usize) -> Vec<Vec<usize>> {
    if texts_per_run <= 1 {
        return (0..lengths.len()).map(|i| vec![i]).collect();
    }
    let mut order: Vec<usize> = (0..lengths.len()).collect();
    order.sort_by_key(|&i| lengths[i]);
    let mut runs: Vec<Vec<usize>> = Vec::new();
    for i in order {
        match runs.last_mut() {
            Some(run)
                if run.len() < texts_per_run
                    && lengths[i] as f64 <= lengths[run[0]] as f64 * RUN_LENGTH_SPREAD
                    && (run.len() + 1) * lengths[i] <= MAX_RUN_PADDED_TOKENS =>
            {
                run.push(i)
            }
            _ => runs.push(vec![i]),
        }
    }
    runs
}

/// Deals runs out to `workers`, each run to the least loaded so far (longest runs first; a
/// run's cost taken as its tokens), so the workers finish together.
fn share_runs(
    mut runs: Vec<Vec<usize>>,
    lengths: &[usize],
    workers: usize,
) -> Vec<Vec<Vec<usize>>> {
    let cost = |run: &Vec<usize>| run.iter().map(|&i| lengths[i]).sum::<usize>();
    runs.sort_by_key(|run| std::cmp::Reverse(cost(run)));
    let mut shares: Vec<Vec<Vec<usize>>> = vec![Vec::new(); workers.max(1)];
    let mut loads = vec![0usize; workers.max(1)];
    for run in runs {
        let least = (0..loads.len()).min_by_key(|&w| loads[w]).unwrap_or(0);
        loads[least] += cost(&run);
        shares[least].push(run);
    }
    shares
}

fn new_query_cache() -> Mutex<lru::LruCache<String, Arc<[f32]>>> {
    Mutex::new(lru::LruCache::new(
        NonZeroUsize::new(QUERY_CACHE_ENTRIES).expect("non-zero"),
    ))
}

/// A session of the model with `threads` intra-op threads on the device `request` asks for
/// (see `device`), and where it runs. On the CPU it is made from the optimised copy when there
/// is a good one (see `optimized`), else from the original; on a GPU from the installed graph,
/// for the CPU's rewrites suit the CPU's kernels only.
fn new_session(
    model: &InstalledModel,
    runtime: &Path,
    models_dir: &Path,
    threads: usize,
    request: Request,
) -> Result<(TextEmbedding, EmbedPlacement)> {
    let env = environment(runtime)?;
    device::make_on_device(request, runtime, |providers, gpu| {
        if gpu {
            let graph = super::optimized::installed_graph(model)?;
            return session_of(model, &env, graph, threads, providers);
        }
        cpu_session(model, &env, runtime, models_dir, threads)
    })
}

/// A CPU session of the model, from its optimised copy or int8 rewrite when they load, else
/// from the installed file.
fn cpu_session(
    model: &InstalledModel,
    env: &ort::environment::Environment,
    runtime: &Path,
    models_dir: &Path,
    threads: usize,
) -> Result<TextEmbedding> {
    let graph = super::optimized::model_bytes(model, env, runtime, models_dir)?;
    let (optimised, rewritten) = (graph.optimised, graph.rewritten);
    let e = match session_of(model, env, graph.bytes, threads, Vec::new()) {
        Err(e) if optimised || rewritten => e,
        loaded => return loaded,
    };
    if optimised {
        tracing::warn!(model = %model.id, "the optimised copy does not load ({e}); using the model");
        super::optimized::forget(model, models_dir);
        let plain = super::optimized::original(model)?;
        let plain_rewritten = plain.rewritten;
        match session_of(model, env, plain.bytes, threads, Vec::new()) {
            Err(e) if plain_rewritten => {
                tracing::warn!(model = %model.id, "its int8 graph does not load ({e}); using the installed file");
            }
            loaded => return loaded,
        }
    } else {
        tracing::warn!(model = %model.id, "its int8 graph does not load ({e}); using the installed file");
    }
    session_of(
        model,
        env,
        super::optimized::installed_graph(model)?,
        threads,
        Vec::new(),
    )
}

/// A session of `onnx`, a graph of `model`, for the tests that compare graphs.
#[cfg(test)]
pub(super) fn session_of_graph(
    model: &InstalledModel,
    runtime: &Path,
    onnx: Vec<u8>,
) -> Result<TextEmbedding> {
    session_of(model, &environment(runtime)?, onnx, 1, Vec::new())
}

fn session_of(
    model: &InstalledModel,
    env: &ort::environment::Environment,
    onnx: Vec<u8>,
    threads: usize,
    providers: Vec<ExecutionProviderDispatch>,
) -> Result<TextEmbedding> {
    let pooling = match model.pooling.as_deref() {
        Some("cls") => Pooling::Cls,
        _ => Pooling::Mean,
    };
    // Runs are formed by the caller; fastembed refuses to split a batch for dynamically
    // quantised models, so it is told "none" and given one run at a time.
    let user_model = UserDefinedEmbeddingModel::new(onnx, tokenizer_files(model)?)
        .with_pooling(pooling)
        .with_quantization(QuantizationMode::None);
    let options = InitOptionsUserDefined::new()
        .with_environment(env.clone())
        .with_execution_providers(providers)
        .with_max_length(model.max_tokens)
        .with_intra_threads(threads);
    TextEmbedding::try_new_from_user_defined(user_model, options).map_err(|e| Error::InvalidModel {
        path: model.file("model.onnx"),
        reason: format!("ONNX Runtime cannot load it: {e}"),
    })
}

/// Scales to unit length (a zero vector stays zero).
pub fn normalized(mut v: Vec<f32>) -> Vec<f32> {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        v.iter_mut().for_each(|x| *x /= norm);
    }
    v
}

#[cfg(test)]
mod tests {
    use super::{plan_runs, share_runs};

    #[test]
    fn runs_hold_texts_of_similar_length_and_cover_each_text_once() {
        let lengths = [10, 200, 12, 11, 190, 50, 205, 13, 9];
        let runs = plan_runs(&lengths, 3);
        let mut seen: Vec<usize> = runs.iter().flatten().copied().collect();
        seen.sort_unstable();
        assert_eq!(seen, (0..lengths.len()).collect::<Vec<_>>());
        for run in &runs {
            assert!(run.len() <= 3);
            let shortest = run.iter().map(|&i| lengths[i]).min().unwrap();
            let longest = run.iter().map(|&i| lengths[i]).max().unwrap();
            assert!(longest as f64 <= shortest as f64 * 1.2, "{run:?}");
        }
        // 9, 10, 11 | 12, 13 | 50 | 190, 200, 205
        assert_eq!(runs.len(), 4, "{runs:?}");
        assert_eq!(plan_runs(&lengths, 1).len(), lengths.len());
        assert_eq!(
            plan_runs(&lengths, 1)[1],
            vec![1],
            "one at a time keeps the order"
        );
    }

    #[test]
    fn a_run_of_long_texts_is_short() {
        let lengths = [256; 16];
        let runs = plan_runs(&lengths, 16);
        assert!(runs.iter().all(|r| r.len() * 256 <= 2048), "{runs:?}");
        assert_eq!(runs.len(), 2);
        assert_eq!(plan_runs(&[100; 16], 16).len(), 1, "short texts fill a run");
    }

    #[test]
    fn workers_get_shares_of_about_equal_tokens() {
        let lengths = [100, 100, 100, 100, 50, 50, 200];
        let runs = plan_runs(&lengths, 1);
        let shares = share_runs(runs, &lengths, 2);
        let load =
            |share: &Vec<Vec<usize>>| share.iter().flatten().map(|&i| lengths[i]).sum::<usize>();
        assert_eq!(shares.len(), 2);
        assert_eq!(load(&shares[0]) + load(&shares[1]), 700);
        assert_eq!(load(&shares[0]), 350, "{shares:?}");
    }
}
