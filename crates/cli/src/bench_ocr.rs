//! `quarry bench ocr DIR`: renders pages of known text (abstracts from a BEIR corpus) into DIR
//! in several fonts and sizes, clean and damaged (turned, grainy, blurred, a poor copy), as PNG files and
//! as image-only PDFs; indexes the folder with one and with two OCR workers; and prints the
//! word recall of each kind of page, the pages per second and the peak RSS. With `--text`,
//! it also times the text lane on that folder alone and with OCR running beside it.

use std::collections::BTreeMap;
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context, Result};
use quarry_core::scans::{pdf_of, word_recall, Page, Render};
use quarry_core::{IndexOptions, Library};

use crate::bench::peak_rss;

/// One rendered page and the text it holds.
struct Sample {
    file: PathBuf,
    /// `clean` or what damaged it.
    condition: &'static str,
    /// Font and size.
    style: String,
    /// `png` or `pdf`.
    container: &'static str,
    truth: String,
}

/// The damage a scan may carry, by name.
fn conditions(font: &str, points: u32) -> Vec<(&'static str, Render)> {
    let clean = Render::clean(font, points);
    vec![
        ("clean", clean.clone()),
        (
            "turned 1.5°",
            Render {
                rotate: 1.5,
                ..clean.clone()
            },
        ),
        (
            "grainy",
            Render {
                noise: 0.6,
                ..clean.clone()
            },
        ),
        (
            "blurred",
            Render {
                blur: 1.2,
                ..clean.clone()
            },
        ),
        (
            "poor copy",
            Render {
                rotate: 3.0,
                noise: 1.5,
                blur: 1.6,
                ..clean
            },
        ),
    ]
}

pub fn ocr_bench(
    dir: &Path,
    corpus: &Path,
    pages: usize,
    dpi: u32,
    text: Option<&Path>,
) -> Result<ExitCode> {
    std::fs::create_dir_all(dir)?;
    let dir = dir.canonicalize()?;
    let texts = page_texts(corpus, pages)?;
    let started = Instant::now();
    let samples = write_samples(&dir, &texts)?;
    println!(
        "set               {} pages ({} texts × fonts, sizes, damage, PNG and PDF) rendered in {:.1} s",
        samples.len(),
        texts.len(),
        started.elapsed().as_secs_f64()
    );
    for workers in [1usize, 2] {
        let temp = tempfile::tempdir()?;
        let mut library = Library::open(temp.path())?;
        library.add_source(&dir, "scans", &[], &[])?;
        let mut options = IndexOptions::default();
        options.ocr_threads = workers;
        options.ocr_dpi = dpi;
        let started = Instant::now();
        let progress = library.writer()?.index_all(&options, &|_| {})?;
        println!(
            "{workers} OCR worker(s)     {} pages in {:.1} s: {:.2} pages/s in the OCR lane ({} with low confidence), peak RSS {}",
            progress.ocr_pages_done,
            started.elapsed().as_secs_f64(),
            progress.ocr_pages_per_sec,
            progress.ocr_pages_low_confidence,
            peak_rss()
        );
        if workers == 1 {
            print_recall(&library, &samples)?;
        }
    }
    if let Some(text) = text {
        text_lane_beside_ocr(text, &dir, dpi)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The first `pages` abstracts of a BEIR corpus, about 90 words each.
fn page_texts(corpus: &Path, pages: usize) -> Result<Vec<String>> {
    let file = std::fs::File::open(corpus)
        .with_context(|| format!("cannot read the corpus {}", corpus.display()))?;
    let mut texts = Vec::new();
    for line in std::io::BufReader::new(file).lines() {
        let doc: serde_json::Value = serde_json::from_str(&line?)?;
        let text = doc["text"].as_str().unwrap_or_default();
        let words: Vec<&str> = text.split_whitespace().take(90).collect();
        if words.len() >= 40 {
            texts.push(words.join(" "));
        }
        if texts.len() == pages {
            break;
        }
    }
    Ok(texts)
}

/// Each text in a font and size of its own, under every condition, as a PNG; the clean and
/// the turned ones also as a one-page image-only PDF (rasterised again at `--dpi` for OCR).
fn write_samples(dir: &Path, texts: &[String]) -> Result<Vec<Sample>> {
    let styles = [
        ("DejaVu-Sans", 12),
        ("DejaVu-Serif", 11),
        ("DejaVu-Sans-Mono", 10),
        ("DejaVu-Sans", 9),
    ];
    let mut samples = Vec::new();
    for (i, truth) in texts.iter().enumerate() {
        let (font, points) = styles[i % styles.len()];
        for (condition, render) in conditions(font, points) {
            let png = render.png(truth)?;
            let slug = condition.split(' ').next().unwrap_or(condition);
            let file = dir.join(format!("{i:03}-{slug}.png"));
            std::fs::write(&file, &png)?;
            let style = format!("{font} {points} pt");
            samples.push(Sample {
                file,
                condition,
                style: style.clone(),
                container: "png",
                truth: truth.clone(),
            });
            if matches!(condition, "clean" | "turned 1.5°") {
                let file = dir.join(format!("{i:03}-{slug}.pdf"));
                std::fs::write(&file, pdf_of(&[Page::Scanned(&png)]))?;
                samples.push(Sample {
                    file,
                    condition,
                    style,
                    container: "pdf",
                    truth: truth.clone(),
                });
            }
        }
    }
    Ok(samples)
}

/// Word recall by condition and container, and of clean pages by font and size.
fn print_recall(library: &Library, samples: &[Sample]) -> Result<()> {
    let mut by_condition: BTreeMap<(&str, &str), (f64, usize)> = BTreeMap::new();
    let mut by_style: BTreeMap<&str, (f64, usize)> = BTreeMap::new();
    for sample in samples {
        let read = library
            .document(&sample.file)
            .map(|view| {
                view.chunks
                    .iter()
                    .map(|c| c.text.as_str())
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .unwrap_or_default();
        let recall = word_recall(&sample.truth, &read);
        let entry = by_condition
            .entry((sample.condition, sample.container))
            .or_default();
        entry.0 += recall;
        entry.1 += 1;
        if sample.condition == "clean" {
            let entry = by_style.entry(sample.style.as_str()).or_default();
            entry.0 += recall;
            entry.1 += 1;
        }
    }
    for ((condition, container), (sum, n)) in by_condition {
        println!(
            "recall            {condition:<12} {container}: {:.1}% of words ({n} pages)",
            100.0 * sum / n as f64
        );
    }
    for (style, (sum, n)) in by_style {
        println!(
            "recall clean      {style:<24} {:.1}% ({n} pages)",
            100.0 * sum / n as f64
        );
    }
    Ok(())
}

/// The text lane's files/s on `text` alone, then with another library reading `scans` by OCR
/// at the same time (as a second process would: the OCR lane of one run follows its text lane).
fn text_lane_beside_ocr(text: &Path, scans: &Path, dpi: u32) -> Result<()> {
    let index_text = || -> Result<f64> {
        let temp = tempfile::tempdir()?;
        let mut library = Library::open(temp.path())?;
        library.add_source(text, "text", &[], &[])?;
        let progress = library
            .writer()?
            .index_all(&IndexOptions::default(), &|_| {})?;
        Ok(progress.files_processed as f64 / (progress.elapsed_ms.max(1) as f64 / 1000.0))
    };
    let alone = index_text()?;
    let (beside, ocr_pages) = std::thread::scope(|s| -> Result<(f64, u64)> {
        let ocr = s.spawn(|| -> Result<u64> {
            let temp = tempfile::tempdir()?;
            let mut library = Library::open(temp.path())?;
            library.add_source(scans, "scans", &[], &[])?;
            let mut options = IndexOptions::default();
            options.ocr_dpi = dpi;
            let progress = library.writer()?.index_all(&options, &|_| {})?;
            Ok(progress.ocr_pages_done)
        });
        // Let the OCR lane get going before the text lane starts.
        std::thread::sleep(std::time::Duration::from_secs(2));
        let beside = index_text()?;
        let pages = ocr.join().expect("the OCR run")?;
        Ok((beside, pages))
    })?;
    println!(
        "text lane         {alone:.0} files/s alone, {beside:.0} files/s with one OCR worker beside it ({ocr_pages} pages), peak RSS {}",
        peak_rss()
    );
    Ok(())
}
