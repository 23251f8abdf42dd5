//! How texts go through the embedding model on this machine, chosen by measuring it.
//!
//! One text per model run wastes nothing on padding but runs the model's small matrices one
//! row at a time; a batch runs bigger matrices but pads every text to its longest; one session
//! spreading a small run over every core waits on its threads at every layer, where one
//! single-threaded session per core embeds different texts side by side. Which wins depends on
//! the CPU (its vector units, VNNI or not, real cores or hyper-threads), so the first embedding
//! run on a machine times the same real texts under each [`shapes`] entry and keeps the fastest
//! per CPU model, embedding model and thread count in the models folder's [`RECORD`].
//! `QUARRY_EMBED_MODEL_BATCH` fixes the texts per run (on one worker) instead.

use std::path::Path;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::Embedder;
use crate::error::Result;

/// How texts go through the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunShape {
    /// Sessions embedding side by side: 1 is one session on every thread allowed; more are
    /// single-threaded sessions, one per thread.
    pub workers: usize,
    /// Most texts per model run (length-sorted).
    pub texts_per_run: usize,
}

impl std::fmt::Display for RunShape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.workers > 1 {
            write!(f, "{} one-thread workers, ", self.workers)?;
        } else {
            write!(f, "one session on every thread, ")?;
        }
        if self.texts_per_run > 1 {
            write!(f, "up to {} texts per run", self.texts_per_run)
        } else {
            write!(f, "one text per run")
        }
    }
}

/// The shapes tried with `threads` threads: one session on them all with one text per run;
/// with more than one thread, a one-thread worker per thread, one text or up to 4 per run; then
/// one session with length-sorted runs of up to 4, 8 and 16. The workers come before the big
/// runs so their sessions are gone (see [`Embedder::set_shape`]) before the big runs grow the
/// main session's buffers: the two never take memory at once.
pub fn shapes(threads: usize) -> Vec<RunShape> {
    let one_session = |texts_per_run| RunShape {
        workers: 1,
        texts_per_run,
    };
    let mut shapes = vec![one_session(1)];
    if threads > 1 {
        shapes.extend([1, 4].into_iter().map(|texts_per_run| RunShape {
            workers: threads,
            texts_per_run,
        }));
    }
    shapes.extend([4, 8, 16].map(one_session));
    shapes
}

/// Texts a calibration embeds under each shape (about a second per shape on 2 cores).
pub const SAMPLE_TEXTS: usize = 48;

/// Fewer texts than this say too little about a shape; the lane then waits for more.
pub const MIN_SAMPLE_TEXTS: usize = 24;

/// Another shape must beat one session with one text per run by this share to be chosen:
/// below it the difference is noise (and one text per run quantises a passage's activations
/// alone, exactly as a query's are).
const REQUIRED_GAIN: f64 = 0.05;

/// A shape with one-thread workers holds a session per worker beside the one every query
/// uses (about 200 MB each for MiniLM, whose weights ONNX Runtime unfolds to f32): it must beat
/// the best one-session shape by this share to be worth that memory. On a 2-core Xeon two
/// workers gave −6% to +23% more tokens/s for about 400 MB more resident memory.
const WORKER_REQUIRED_GAIN: f64 = 0.25;

/// The whole process may peak at this much resident memory while a shape embeds, unless
/// `QUARRY_EMBED_MEMORY_MIB` says otherwise: a bigger run pads more and ONNX Runtime's arena
/// keeps the largest run's buffers, and every worker holds a session of its own. Measured on
/// the Rust Book (29,094 chunks): two workers with 4 texts per run peaked at 944 MB, one session
/// with 16 per run at 651 MB, with 4 at 417 MB.
pub const DEFAULT_MEMORY_BUDGET_MIB: u64 = 600;

/// The baseline is timed first and last; when the two differ by more than this share,
/// something else was using the cores, and the record is not kept (the next run measures
/// again).
const STEADY_SPREAD: f64 = 0.25;

/// The record's file name, in the models folder.
pub const RECORD: &str = "embed-calibration.json";

/// One machine's measurement for one model and thread count.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Calibration {
    /// The CPU model (`/proc/cpuinfo`'s model name).
    pub cpu: String,
    /// The embedding model's id.
    pub model: String,
    /// ONNX Runtime threads the model ran with.
    pub threads: usize,
    /// The shape chosen.
    pub shape: RunShape,
    /// Tokens per second under each shape tried.
    pub rates: Vec<ShapeRate>,
    /// The memory budget shapes were held to, in MiB.
    #[serde(default)]
    pub memory_budget_mib: Option<u64>,
    /// The two timings of the baseline agreed: nothing else was using the cores.
    #[serde(default = "steady_by_default")]
    pub steady: bool,
    /// Taken with the model's int8-stored weights multiplied in int8 (`embed::int8_matmul`),
    /// which changes what each shape costs; one taken before is measured again.
    #[serde(default)]
    pub int8_products: bool,
}

fn steady_by_default() -> bool {
    true
}

/// Throughput under one shape.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShapeRate {
    /// The shape.
    pub shape: RunShape,
    /// Real (unpadded) tokens per second.
    pub tokens_per_sec: f64,
    /// The process's peak resident memory while the shape embedded, in MiB.
    #[serde(default)]
    pub peak_rss_mib: Option<u64>,
}

/// The memory budget: `QUARRY_EMBED_MEMORY_MIB`, else [`DEFAULT_MEMORY_BUDGET_MIB`].
pub fn memory_budget_mib() -> u64 {
    crate::environment::embed_memory_mib().unwrap_or(DEFAULT_MEMORY_BUDGET_MIB)
}

/// Times `sample` under every shape, with the process's peak memory under each, and leaves
/// `embedder` on the fastest that keeps within the memory budget.
pub fn measure(embedder: &Embedder, threads: usize, sample: &[&str]) -> Result<Calibration> {
    let baseline = RunShape {
        workers: 1,
        texts_per_run: 1,
    };
    let time = |shape: RunShape| -> Result<ShapeRate> {
        crate::memory::reset_peak_resident();
        embedder.set_shape(shape)?;
        // The first runs of a session allocate ONNX Runtime's arenas: not the shape's cost.
        embedder.embed(&sample[..sample.len().min(2 * shape.workers)])?;
        let started = Instant::now();
        let tokens = embedder.embed_counted(sample)?.tokens;
        Ok(ShapeRate {
            shape,
            tokens_per_sec: tokens as f64 / started.elapsed().as_secs_f64().max(1e-9),
            peak_rss_mib: crate::memory::peak_resident_bytes().map(|b| b >> 20),
        })
    };
    let mut rates = shapes(threads)
        .into_iter()
        .map(time)
        .collect::<Result<Vec<_>>>()?;
    // The baseline again, last: the first timing of a run often shares the cores with the
    // full-text index's merges, and every other shape is judged against it.
    let again = time(baseline)?;
    let mut steady = true;
    if let Some(first) = rates.iter_mut().find(|r| r.shape == baseline) {
        steady = agree(first.tokens_per_sec, again.tokens_per_sec);
        first.tokens_per_sec = first.tokens_per_sec.max(again.tokens_per_sec);
    }
    let budget = memory_budget_mib();
    let shape = choose(&rates, baseline, budget);
    // Fresh sessions, so the big runs' buffers are not kept.
    embedder.set_shape_afresh(shape)?;
    Ok(Calibration {
        cpu: crate::models::cpu_model(),
        model: embedder.id().to_string(),
        threads,
        shape,
        rates,
        memory_budget_mib: Some(budget),
        steady,
        int8_products: crate::environment::embed_int8_products(),
    })
}

/// Whether two timings of one shape agree within [`STEADY_SPREAD`].
fn agree(a: f64, b: f64) -> bool {
    a.min(b) >= a.max(b) * (1.0 - STEADY_SPREAD)
}

/// Among the shapes whose peak memory kept within `budget_mib` (the baseline always may), the
/// fastest one-session shape, unless it beats `baseline` by less than [`REQUIRED_GAIN`]; then
/// the fastest shape with workers, if it beats that by [`WORKER_REQUIRED_GAIN`].
fn choose(rates: &[ShapeRate], baseline: RunShape, budget_mib: u64) -> RunShape {
    let fits = |r: &ShapeRate| r.peak_rss_mib.is_none_or(|peak| peak <= budget_mib);
    let fastest_above = |floor: f64, workers: bool| {
        rates
            .iter()
            .filter(|r| (r.shape.workers > 1) == workers && r.tokens_per_sec > floor && fits(r))
            .max_by(|a, b| a.tokens_per_sec.total_cmp(&b.tokens_per_sec))
    };
    let base = rates
        .iter()
        .find(|r| r.shape == baseline)
        .map_or(0.0, |r| r.tokens_per_sec);
    let (single, single_rate) = fastest_above(base * (1.0 + REQUIRED_GAIN), false)
        .map_or((baseline, base), |r| (r.shape, r.tokens_per_sec));
    fastest_above(single_rate * (1.0 + WORKER_REQUIRED_GAIN), true).map_or(single, |r| r.shape)
}

/// Every calibration kept in `models_dir`. A record that cannot be read counts as none: the
/// next embedding run measures again and writes a good one.
fn read_all(models_dir: &Path) -> Vec<Calibration> {
    std::fs::read(models_dir.join(RECORD))
        .ok()
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .unwrap_or_default()
}

/// This machine's calibration for `model` at `threads` under today's memory budget, if one
/// was kept (one taken before shapes were held to a budget does not count).
pub fn recorded(models_dir: &Path, model: &str, threads: usize) -> Option<Calibration> {
    let cpu = crate::models::cpu_model();
    let budget = memory_budget_mib();
    let int8_products = crate::environment::embed_int8_products();
    read_all(models_dir).into_iter().find(|c| {
        c.cpu == cpu
            && c.model == model
            && c.threads == threads
            && c.memory_budget_mib == Some(budget)
            && c.int8_products == int8_products
    })
}

/// Keeps `calibration`, replacing an older one for the same CPU, model and threads. Best
/// effort: a folder that cannot be written only means measuring again next time.
pub fn remember(models_dir: &Path, calibration: &Calibration) {
    let mut all = read_all(models_dir);
    all.retain(|c| {
        !(c.cpu == calibration.cpu
            && c.model == calibration.model
            && c.threads == calibration.threads
            && c.int8_products == calibration.int8_products)
    });
    all.push(calibration.clone());
    crate::models::write_record(&models_dir.join(RECORD), &all);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(workers: usize, texts_per_run: usize) -> RunShape {
        RunShape {
            workers,
            texts_per_run,
        }
    }

    fn rates(figures: &[(RunShape, f64)]) -> Vec<ShapeRate> {
        figures
            .iter()
            .map(|&(shape, tokens_per_sec)| ShapeRate {
                shape,
                tokens_per_sec,
                peak_rss_mib: None,
            })
            .collect()
    }

    #[test]
    fn timings_taken_while_the_cores_were_busy_disagree() {
        assert!(agree(5000.0, 4600.0));
        assert!(agree(4600.0, 5000.0));
        assert!(
            !agree(5000.0, 3000.0),
            "something else ran during one of them"
        );
    }

    #[test]
    fn a_shape_that_peaks_above_the_memory_budget_is_not_chosen() {
        let base = shape(1, 1);
        let mut measured = rates(&[
            (base, 1000.0),
            (shape(1, 4), 1200.0),
            (shape(1, 16), 1500.0),
            (shape(2, 4), 2000.0),
        ]);
        for (rate, peak) in measured.iter_mut().zip([350, 420, 650, 940]) {
            rate.peak_rss_mib = Some(peak);
        }
        assert_eq!(choose(&measured, base, 600), shape(1, 4));
        assert_eq!(choose(&measured, base, 1000), shape(2, 4));
        assert_eq!(
            choose(&measured, base, 300),
            base,
            "the baseline always may"
        );
    }

    #[test]
    fn another_shape_is_chosen_only_when_it_clearly_beats_one_text_per_run() {
        let base = shape(1, 1);
        let measured = rates(&[(base, 1000.0), (shape(1, 4), 1200.0), (shape(2, 1), 1300.0)]);
        assert_eq!(
            choose(&measured, base, u64::MAX),
            shape(1, 4),
            "workers' sessions cost memory: 8% more is not worth it"
        );
        let measured = rates(&[(base, 1000.0), (shape(1, 4), 1200.0), (shape(2, 1), 1600.0)]);
        assert_eq!(choose(&measured, base, u64::MAX), shape(2, 1));
        let close = rates(&[(base, 1000.0), (shape(1, 4), 1030.0), (shape(2, 1), 990.0)]);
        assert_eq!(choose(&close, base, u64::MAX), base);
        assert_eq!(
            choose(
                &rates(&[(base, 1000.0), (shape(1, 4), 700.0)]),
                base,
                u64::MAX
            ),
            base
        );
    }

    #[test]
    fn workers_are_tried_only_with_more_than_one_thread() {
        assert!(shapes(1).iter().all(|s| s.workers == 1));
        assert!(shapes(2).contains(&shape(2, 1)));
        assert_eq!(shapes(2)[0], shape(1, 1), "the baseline comes first");
    }

    #[test]
    fn calibrations_are_kept_per_cpu_model_and_threads_and_a_bad_record_counts_as_none() {
        let dir = tempfile::tempdir().unwrap();
        let mine = Calibration {
            cpu: crate::models::cpu_model(),
            model: "m".into(),
            threads: 2,
            shape: shape(2, 1),
            rates: rates(&[(shape(1, 1), 1000.0), (shape(2, 1), 1400.0)]),
            memory_budget_mib: Some(600),
            steady: true,
            int8_products: crate::environment::embed_int8_products(),
        };
        let other_cpu = Calibration {
            cpu: "another CPU".into(),
            shape: shape(1, 1),
            ..mine.clone()
        };
        remember(dir.path(), &other_cpu);
        remember(dir.path(), &mine);
        assert_eq!(recorded(dir.path(), "m", 2), Some(mine.clone()));
        assert_eq!(recorded(dir.path(), "m", 1), None, "other thread count");
        // Measuring again replaces this machine's record and keeps the other's.
        let again = Calibration {
            shape: shape(1, 4),
            ..mine.clone()
        };
        remember(dir.path(), &again);
        assert_eq!(read_all(dir.path()).len(), 2);
        assert_eq!(recorded(dir.path(), "m", 2).unwrap().shape, shape(1, 4));

        // One held to another budget is measured again.
        remember(
            dir.path(),
            &Calibration {
                memory_budget_mib: Some(4096),
                ..mine.clone()
            },
        );
        assert_eq!(recorded(dir.path(), "m", 2), None);
        remember(dir.path(), &mine);
        // One taken with the products in the other precision is measured again.
        remember(
            dir.path(),
            &Calibration {
                int8_products: !mine.int8_products,
                ..mine.clone()
            },
        );
        assert_eq!(recorded(dir.path(), "m", 2), Some(mine.clone()));
        std::fs::write(
            dir.path().join(RECORD),
            serde_json::to_vec(&[Calibration {
                int8_products: !mine.int8_products,
                ..mine.clone()
            }])
            .unwrap(),
        )
        .unwrap();
        assert_eq!(recorded(dir.path(), "m", 2), None);

        std::fs::write(dir.path().join(RECORD), b"{not json").unwrap();
        assert_eq!(recorded(dir.path(), "m", 2), None);
        remember(dir.path(), &mine);
        assert_eq!(recorded(dir.path(), "m", 2), Some(mine));
    }
}
