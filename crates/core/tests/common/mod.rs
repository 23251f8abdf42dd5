//! Helpers for core's integration tests: a fresh data folder and documents folder, one library
//! fixture with the indexing and session helpers every test file uses, and the fixture files and
//! polling the CLI's tests share.
#![allow(dead_code)]

pub mod fixtures;
pub mod http;

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;

pub use fixtures::*;
use quarry_core::evidence::EvidenceSession;
use quarry_core::tools::{ToolDefinition, ToolType};
use quarry_core::{IndexOptions, Library, LibraryOptions, Principal};

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

/// A library on a fresh data folder, with a documents folder its sources live in.
pub struct Fixture {
    pub data: tempfile::TempDir,
    pub docs: tempfile::TempDir,
    pub library: Library,
}

impl Fixture {
    /// An empty library with the default options.
    pub fn new() -> Fixture {
        Fixture::with_options(LibraryOptions::default())
    }

    /// An empty library with `options` (models, ONNX threads, executor).
    pub fn with_options(options: LibraryOptions) -> Fixture {
        let dirs = TestDirs::new();
        let library = Library::open_with(dirs.data.path(), options).unwrap();
        Fixture {
            data: dirs.data,
            docs: dirs.docs,
            library,
        }
    }

    /// A second library on the same data folder, opened with `options`.
    pub fn reopen(&self, options: LibraryOptions) -> Library {
        Library::open_with(self.data.path(), options).unwrap()
    }

    /// Writes `files` into `docs/<folder>` (`""` is the documents folder itself) and adds
    /// that folder as a source of `collection`, created on the way with the default label.
    pub fn add_source<T: AsRef<str>>(
        &mut self,
        collection: &str,
        folder: &str,
        files: &[(&str, T)],
    ) -> PathBuf {
        let dir = self.docs.path().join(folder);
        for (name, text) in files {
            write(&dir.join(name), text.as_ref());
        }
        self.library.add_source(&dir, collection, &[], &[]).unwrap();
        dir
    }

    /// Like [`Fixture::add_source`], creating the collection first with `sensitivity`.
    pub fn add_collection<T: AsRef<str>>(
        &mut self,
        collection: &str,
        sensitivity: &str,
        folder: &str,
        files: &[(&str, T)],
    ) -> PathBuf {
        self.library
            .create_collection(collection, sensitivity, "english")
            .unwrap();
        self.add_source(collection, folder, files)
    }

    pub fn reindex(&mut self) {
        reindex(&mut self.library);
    }

    pub fn embed(&mut self) {
        embed(&mut self.library);
    }
}

/// Indexes every source (full text only).
pub fn reindex(library: &mut Library) {
    library
        .writer()
        .unwrap()
        .index_all(&IndexOptions::default(), &|_| {})
        .unwrap();
}

/// Embeds every pending chunk with the installed default model.
pub fn embed(library: &mut Library) {
    library
        .writer()
        .unwrap()
        .embed_pending(&|_| {}, &AtomicBool::new(false))
        .unwrap();
}

/// An evidence session of `principal` under the library's key.
pub fn session(library: &Library, principal: Principal) -> EvidenceSession {
    EvidenceSession::new(library.evidence_key().unwrap(), principal).unwrap()
}

/// An evidence session of the administrator.
pub fn admin(library: &Library) -> EvidenceSession {
    session(library, Principal::administrator())
}

/// A code tool of `tool_type` with `source`, default settings and limits, not yet derived.
#[allow(dead_code)]
pub fn code_tool(slug: &str, tool_type: ToolType, source: &str) -> ToolDefinition {
    ToolDefinition {
        slug: slug.into(),
        name: slug.into(),
        description: String::new(),
        tool_type,
        settings: serde_json::json!({}),
        limits: None,
        egress: None,
        model: None,
        requires_confirmation: false,
        source: Some(source.into()),
        derived: None,
    }
}

/// Every Rust source file under `dir`, appended to `out` (the tests that read the sources).
pub fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}
