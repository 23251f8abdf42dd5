//! `quarry bench scale DIR`: a whole folder tree as a new user indexes it. Full text first
//! (files, chunks, time, peak RSS), then the embedding lane to the end or for a set time
//! (then the rest projected at the rate measured), each phase's peak RSS, and the library's
//! size on disk.

use std::path::Path;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::Result;
use quarry_core::{EmbedProgress, IndexOptions, Library};

use crate::bench::peak_rss;

pub fn scale_bench(path: &Path, minutes: Option<f64>, keep: Option<&Path>) -> Result<ExitCode> {
    let temp = tempfile::tempdir()?;
    let dir = keep.unwrap_or(temp.path());
    let mut library = Library::open(dir)?;
    library.add_source(path, "scale", &[], &[])?;

    let started = Instant::now();
    let indexed = library
        .writer()?
        .index_all(&IndexOptions::default(), &|_| {})?;
    let lexical_secs = started.elapsed().as_secs_f64();
    let status = library.status()?;
    println!("corpus            {}", path.display());
    println!(
        "files             {} indexed, {} skipped, {} failed",
        indexed.files_indexed, indexed.files_skipped, indexed.files_failed
    );
    println!(
        "chunks            {} ({} searchable, {} repeated copies searched once)",
        status.stats.chunks,
        status.stats.chunks - status.stats.chunks_repeated,
        status.stats.chunks_repeated
    );
    println!(
        "full text         {lexical_secs:.1} s, peak RSS {}",
        peak_rss()
    );

    quarry_core::bench::reset_peak_resident();
    let last: Mutex<Option<EmbedProgress>> = Mutex::new(None);
    let stop = AtomicBool::new(false);
    let started = Instant::now();
    std::thread::scope(|scope| -> Result<()> {
        if let Some(minutes) = minutes {
            let stop = &stop;
            scope.spawn(move || {
                let deadline = Instant::now() + Duration::from_secs_f64(minutes * 60.0);
                while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(200));
                }
                stop.store(true, Ordering::Relaxed);
            });
        }
        let result = library.writer().and_then(|mut w| {
            w.embed_pending(
                &|p| *last.lock().expect("not poisoned") = Some(p.clone()),
                &stop,
            )
        });
        stop.store(true, Ordering::Relaxed);
        result?;
        Ok(())
    })?;
    let vector_secs = started.elapsed().as_secs_f64();
    let coverage = library.embedding_coverage()?;
    let last = last.into_inner().expect("not poisoned");
    for c in &coverage {
        println!(
            "vectors           {}/{} chunks: {} read by the model, {} share a near-duplicate's vector, {} full text only (no prose)",
            c.embedded,
            c.total,
            c.embedded - c.shared - c.lexical_only,
            c.shared,
            c.lexical_only
        );
    }
    let (embedded, total): (i64, i64) = coverage
        .iter()
        .fold((0, 0), |(e, t), c| (e + c.embedded, t + c.total));
    if let Some(p) = &last {
        println!(
            "embedding lane    {:.1} chunks/s, {:.0} tokens/s ({} tokens read by the model)",
            p.chunks_per_sec, p.tokens_per_sec, p.model_tokens_this_run
        );
    }
    if embedded >= total {
        println!(
            "vectors time      {vector_secs:.0} s ({:.1} min), peak RSS {}",
            vector_secs / 60.0,
            peak_rss()
        );
    } else {
        let rate = last.as_ref().map_or(0.0, |p| p.chunks_per_sec);
        let projected = vector_secs + (total - embedded) as f64 / rate.max(1e-9);
        println!(
            "vectors time      stopped after {vector_secs:.0} s; projected {projected:.0} s ({:.1} min) at this run's rate, peak RSS {}",
            projected / 60.0,
            peak_rss()
        );
    }
    println!(
        "library on disk   {:.1} MB",
        library.status()?.disk_bytes as f64 / 1e6
    );
    Ok(ExitCode::SUCCESS)
}
