//! The embedder on the real model (installed under `models/cache` by `scripts/test.sh`): the
//! run shape is measured once per CPU, and the optimised copy of the model embeds alike.

use super::calibration::{self, RunShape};
use super::Embedder;
use crate::models::{default_embedding_model, Models};

#[test]
fn the_run_shape_is_measured_once_per_cpu_and_every_shape_embeds_alike() {
    // A models folder of its own first, so the record lands there and nowhere shared.
    let scratch = tempfile::tempdir().unwrap();
    let mut dirs = vec![scratch.path().to_path_buf()];
    dirs.extend(Models::discover(scratch.path()).dirs().iter().cloned());
    let models = Models::at(dirs);
    let id = default_embedding_model();
    let texts: Vec<String> = (0..30)
        .map(|i| {
            format!(
                "Section {i}. {}",
                "The gearbox is serviced every {i} thousand kilometres. ".repeat(1 + i % 7)
            )
        })
        .collect();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();

    let embedder = Embedder::load(&models, id, Some(2)).unwrap();
    assert!(embedder.needs_calibration(), "no record yet");
    let measured = embedder.calibrate(&refs).unwrap();
    assert_eq!(measured.rates.len(), calibration::shapes(2).len());
    assert!(measured.rates.iter().all(|r| r.tokens_per_sec > 0.0));
    assert_eq!(embedder.shape(), measured.shape);
    assert_eq!(
        embedder.session_count(),
        measured.shape.workers,
        "one session per worker of the chosen shape, and no other"
    );
    // A measurement taken while other tests used the cores is not kept.
    assert_eq!(
        scratch.path().join(calibration::RECORD).is_file(),
        measured.steady
    );
    if !measured.steady {
        calibration::remember(scratch.path(), &measured);
    }

    // The next process on this CPU takes the kept shape without measuring.
    let again = Embedder::load(&models, id, Some(2)).unwrap();
    assert!(!again.needs_calibration());
    assert_eq!(again.shape(), measured.shape);

    // Sorting and splitting change which texts run together, never what each vector is.
    again
        .set_shape(RunShape {
            workers: 1,
            texts_per_run: 1,
        })
        .unwrap();
    let one_by_one = again.embed_counted(&refs).unwrap();
    for shape in calibration::shapes(2) {
        again.set_shape(shape).unwrap();
        assert_eq!(again.session_count(), shape.workers, "{shape}");
        let embedded = again.embed_counted(&refs).unwrap();
        assert_eq!(embedded.tokens, one_by_one.tokens, "{shape}");
        assert_eq!(embedded.lengths, one_by_one.lengths, "{shape}");
        for (i, (a, b)) in embedded.vectors.iter().zip(&one_by_one.vectors).enumerate() {
            assert!(cosine(a, b) > 0.99, "{shape}: text {i} moved");
        }
    }
}

#[test]
fn the_optimised_copy_of_the_model_gives_the_same_vectors_and_a_bad_one_is_set_aside() {
    // A models folder holding its own copy of the model, and so its own optimised copies.
    let scratch = tempfile::tempdir().unwrap();
    let installed = Models::discover(scratch.path());
    let id = default_embedding_model();
    let source = installed.find(id).unwrap().dir;
    let own = scratch.path().join(id);
    std::fs::create_dir_all(&own).unwrap();
    for entry in std::fs::read_dir(&source).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_file() {
            std::fs::copy(entry.path(), own.join(entry.file_name())).unwrap();
        }
    }
    let mut dirs = vec![scratch.path().to_path_buf()];
    dirs.extend(installed.dirs().iter().cloned());
    let models = Models::at(dirs);
    let texts = [
        "The gearbox is serviced every 40,000 km.",
        "Tyre pressure: 2.4 bar.",
    ];
    let copies = || -> Vec<std::path::PathBuf> {
        std::fs::read_dir(scratch.path().join("optimized"))
            .map(|d| d.map(|e| e.unwrap().path()).collect())
            .unwrap_or_default()
    };

    // The first session makes the copy; the next loads it.
    let original = Embedder::load(&models, id, Some(1))
        .unwrap()
        .embed(&texts)
        .unwrap();
    let made = copies();
    assert!(
        made.iter()
            .any(|p| p.extension().is_some_and(|e| e == "onnx")),
        "{made:?}"
    );
    let from_copy = Embedder::load(&models, id, Some(1))
        .unwrap()
        .embed(&texts)
        .unwrap();
    assert_same_vectors(&original, &from_copy);

    // A copy that is not a model, noted with its own hash (so the hash check passes): the
    // session falls back to the original and the bad copy is removed.
    let copy = made
        .iter()
        .find(|p| p.extension().is_some_and(|e| e == "onnx"))
        .unwrap();
    std::fs::write(copy, b"not an onnx graph").unwrap();
    let (sha256, _) = crate::models::sha256_file(copy).unwrap();
    std::fs::write(copy.with_extension("sha256"), sha256).unwrap();
    let after = Embedder::load(&models, id, Some(1))
        .unwrap()
        .embed(&texts)
        .unwrap();
    assert_same_vectors(&original, &after);
    assert!(copies().is_empty(), "the bad copy is set aside");
}

#[test]
fn int8_products_embed_within_a_hair_of_the_installed_graph() {
    let models = Models::discover(tempfile::tempdir().unwrap().path());
    let model = models.find(default_embedding_model()).unwrap();
    let installed = super::optimized::installed_graph(&model).unwrap();
    let (rewritten, products) = super::int8_matmul::rewrite(&installed).unwrap();
    assert_eq!(products, 36, "six layers of six products");
    let runtime = models.runtime_library().unwrap();
    let texts = [
        "The gearbox is serviced every 40,000 km, or every two years, whichever comes first.",
        "Tyre pressure: 2.4 bar.",
        "What does the question mark operator do with an Err value?",
        "fn main() { println!(\"hello\"); }",
    ];
    let mut f32_graph = super::embedder::session_of_graph(&model, &runtime, installed).unwrap();
    let mut int8_graph = super::embedder::session_of_graph(&model, &runtime, rewritten).unwrap();
    let a = f32_graph.embed(texts, None).unwrap();
    let b = int8_graph.embed(texts, None).unwrap();
    for (i, (x, y)) in a.iter().zip(&b).enumerate() {
        let norms = cosine(x, x).sqrt() * cosine(y, y).sqrt();
        let similarity = cosine(x, y) / norms;
        // The served-model rule for "the same model" (`embed::served`) is 0.98.
        assert!(similarity > 0.98, "text {i}: cosine {similarity}");
    }
}

fn cosine(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

fn assert_same_vectors(a: &[Vec<f32>], b: &[Vec<f32>]) {
    assert_eq!(a.len(), b.len());
    for (x, y) in a.iter().zip(b) {
        assert!(cosine(x, y) > 0.9999, "cosine {}", cosine(x, y));
    }
}
