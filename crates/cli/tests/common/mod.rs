//! Shared helpers for the CLI tests: run the real `quarry` binary against a fresh data dir.
//! Fixture files of every format come from core's test helpers, shared by path.
#![allow(dead_code)]

#[path = "../../../core/tests/common/fixtures.rs"]
mod fixtures;
pub use fixtures::*;
#[path = "../../../core/tests/common/http.rs"]
pub mod http;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

pub struct TestEnv {
    pub data: tempfile::TempDir,
    pub docs: tempfile::TempDir,
}

impl TestEnv {
    pub fn new() -> TestEnv {
        TestEnv {
            data: tempfile::tempdir().unwrap(),
            docs: tempfile::tempdir().unwrap(),
        }
    }

    pub fn docs(&self) -> &Path {
        self.docs.path()
    }

    pub fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_quarry"));
        cmd.arg("--data-dir")
            .arg(self.data.path())
            .args(args)
            .env_remove("QUARRY_DATA_DIR")
            .env("QUARRY_LOG", "warn")
            .stdin(Stdio::null());
        cmd
    }

    /// Runs quarry; returns the output whatever the exit code.
    pub fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("quarry runs")
    }

    /// Runs quarry and fails the test, showing everything, unless it succeeds.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        if !out.status.success() {
            panic!(
                "quarry {args:?} failed with {}\n--- stdout\n{}\n--- stderr\n{}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    pub fn json(&self, args: &[&str]) -> serde_json::Value {
        let mut all = args.to_vec();
        all.push("--json");
        let out = self.run(&all);
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "quarry {all:?}: not JSON ({e})\n--- stdout\n{}\n--- stderr\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )
        })
    }

    /// Paths of the search hits (best first), empty when none.
    pub fn search_paths(&self, query: &str) -> Vec<PathBuf> {
        let v = self.json(&["search", "--mode", "lexical", query]);
        v["hits"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| PathBuf::from(h["path"].as_str().unwrap()))
            .collect()
    }

    /// The status report as JSON.
    pub fn status(&self) -> serde_json::Value {
        self.json(&["status"])
    }

    pub fn add_docs_source(&self, collection: &str) {
        self.ok(&[
            "source",
            "add",
            self.docs().to_str().unwrap(),
            "--collection",
            collection,
        ]);
    }
}
