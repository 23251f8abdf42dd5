//! Helpers for core's integration tests: a fresh data folder and documents folder, and the
//! fixture files and polling the CLI's tests share.
#![allow(dead_code)]

pub mod fixtures;

use std::path::Path;

pub use fixtures::*;

/// A fresh data folder and a folder of documents, both removed when dropped.
pub struct TestDirs {
    pub data: tempfile::TempDir,
    pub docs: tempfile::TempDir,
}

impl TestDirs {
    pub fn new() -> TestDirs {
        TestDirs {
            data: tempfile::tempdir().unwrap(),
            docs: tempfile::tempdir().unwrap(),
        }
    }

    pub fn docs(&self) -> &Path {
        self.docs.path()
    }
}
