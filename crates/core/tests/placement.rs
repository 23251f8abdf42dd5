//! Rules about where code lives, checked by reading the sources, so they stay true:
//! - storage is one room: every SQL statement lives in `crates/core/src/store/` (core, CLI and
//!   desktop shell are read);
//! - the engine reads environment variables only in `crates/core/src/environment.rs`;
//! - the database driver is named only in `store/` (transactions are `store::Tx`), in the error
//!   that wraps its errors, and where ids say how they are stored.
//!
//! Each failure names the file and line.

use std::path::{Path, PathBuf};

use regex::Regex;

mod common;
use common::rust_files;

/// A string literal that starts an SQL statement, e.g. `"SELECT` or `format!("INSERT`.
const SQL_LITERAL: &str = r#""\s*(SELECT|INSERT|UPDATE|DELETE|REPLACE|CREATE|DROP|ALTER|PRAGMA|BEGIN|COMMIT|WITH|VACUUM)\s"#;

/// Calls that reach the connection directly, or open a transaction another way than
/// `Store::write`.
const RAW_CALLS: &[&str] = &[
    ".conn()",
    ".execute(",
    ".execute_batch(",
    ".query_row(",
    ".query_map(",
    ".prepare(",
    ".prepare_cached(",
    "new_unchecked(",
    "unchecked_transaction(",
    "transaction_with_behavior(",
];

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `file:line: text` for every code line (comments skipped) of the Rust sources under `dirs`,
/// outside `allowed`, that `offends`.
fn offending_lines(dirs: &[&str], allowed: &Path, offends: impl Fn(&str) -> bool) -> Vec<String> {
    let root = workspace_root();
    let allowed = root.join(allowed);
    let mut files = Vec::new();
    for dir in dirs {
        rust_files(&root.join(dir), &mut files);
    }
    assert!(files.len() > 20, "found only {} sources", files.len());
    let mut offending = Vec::new();
    for file in files.iter().filter(|f| !f.starts_with(&allowed)) {
        let text = std::fs::read_to_string(file).unwrap();
        for (n, line) in text.lines().enumerate() {
            let code = line.trim_start();
            if !code.starts_with("//") && offends(code) {
                let shown = file.strip_prefix(&root).unwrap_or(file);
                offending.push(format!("{}:{}: {}", shown.display(), n + 1, code));
            }
        }
    }
    offending
}

#[test]
fn sql_lives_only_in_store() {
    let sql = Regex::new(SQL_LITERAL).unwrap();
    let offending = offending_lines(
        &["crates/core/src", "crates/cli/src", "src-tauri/src"],
        Path::new("crates/core/src/store"),
        |code| sql.is_match(code) || RAW_CALLS.iter().any(|call| code.contains(call)),
    );
    assert!(
        offending.is_empty(),
        "SQL or raw connection calls outside crates/core/src/store/ (move them into a store \
         repository file):\n{}",
        offending.join("\n")
    );
}

#[test]
fn the_check_sees_sql() {
    let sql = Regex::new(SQL_LITERAL).unwrap();
    assert!(sql.is_match(r#"let n = conn.query_row("SELECT COUNT(*) FROM chunks", [], f);"#));
    assert!(sql.is_match(r#"format!("INSERT INTO tools(slug) VALUES (?1)")"#));
    assert!(!sql.is_match(r#"println!("Select a collection first")"#));
}

#[test]
fn the_engine_reads_the_environment_in_one_module() {
    let offending = offending_lines(
        &["crates/core/src"],
        Path::new("crates/core/src/environment.rs"),
        |code| code.contains("env::var"),
    );
    assert!(
        offending.is_empty(),
        "environment reads outside crates/core/src/environment.rs (add a function there):\n{}",
        offending.join("\n")
    );
}

/// Outside `store/`, where `rusqlite` may still be named: the error wrapping its errors, and
/// the ids' `ToSql`/`FromSql`.
const DRIVER_ALLOWED: &[&str] = &["crates/core/src/error.rs", "crates/core/src/ids.rs"];

#[test]
fn the_database_driver_stays_in_store() {
    let offending: Vec<String> = offending_lines(
        &["crates/core/src", "crates/cli/src", "src-tauri/src"],
        Path::new("crates/core/src/store"),
        |code| code.contains("rusqlite"),
    )
    .into_iter()
    .filter(|line| !DRIVER_ALLOWED.iter().any(|file| line.starts_with(file)))
    .collect();
    assert!(
        offending.is_empty(),
        "the database driver named outside crates/core/src/store/ (take a `store::Tx`, or add \
         a store function):\n{}",
        offending.join("\n")
    );
}
