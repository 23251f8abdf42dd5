//! The two grounded-QA sets `quarry eval --chat` reads: the tuning set (`grounded-qa`) and the
//! held-out one (`grounded-qa-reference`). Each loads, names only sources of its own corpora,
//! and passes its own `check.py` against the toolchain's documentation (every fact on its page,
//! every unanswerable question's key terms on none), so a reworded page shows up here.

use std::path::{Path, PathBuf};
use std::process::Command;

use quarry_core::eval::GroundedSet;

fn set(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/data")
        .join(name)
}

fn check(name: &str) {
    let out = Command::new("python3")
        .arg(set(name).join("check.py"))
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "{name}/check.py failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_tuning_set_loads_and_holds_against_its_corpora() {
    let loaded = GroundedSet::load(&set("grounded-qa")).unwrap();
    assert_eq!(loaded.questions.len(), 175);
    assert_eq!(
        loaded.questions.iter().filter(|q| !q.answerable()).count(),
        37
    );
    check("grounded-qa");
}

#[test]
fn the_held_out_set_loads_and_holds_against_the_reference() {
    let loaded = GroundedSet::load(&set("grounded-qa-reference")).unwrap();
    assert_eq!(loaded.sources.len(), 1);
    assert_eq!(loaded.sources[0].0, "rust-reference");
    let answerable = loaded.questions.iter().filter(|q| q.answerable()).count();
    assert!(answerable >= 60, "{answerable}");
    assert!(loaded.questions.len() - answerable >= 15);
    check("grounded-qa-reference");
}
