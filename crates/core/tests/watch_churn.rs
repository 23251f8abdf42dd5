//! After a burst of creates, edits, renames (chained, over existing files, of whole folders)
//! and deletes made while the watcher runs, the index settles to exactly the folder: the same
//! paths with the same content, and no search finds a file that is gone. Run with OS events
//! and with polling. The operations come from a fixed seed, so a failure replays the same
//! sequence (the timing between them is the machine's).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use quarry_core::models::Models;
use quarry_core::{
    DocumentStatus, IndexOptions, Library, LibraryOptions, SearchMode, SearchRequest, WatchOptions,
};

const NOTES: usize = 400;
const OPERATIONS: usize = 400;
const SEED: u64 = 0x5eed_0021;

/// splitmix64: a seeded sequence without a dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

/// Notes that differ only in their marker, all the same size, as a busy notes folder has.
fn note(marker: usize) -> String {
    format!(
        "# Field note\n\nObservation m{marker:05}x was logged at the station.\n\n\
         The weather held steady and the instruments were read at the usual hours.\n"
    )
}

fn marker(n: usize) -> String {
    format!("m{n:05}x")
}

/// The folder being churned, and every marker it ever held.
struct Churn {
    root: PathBuf,
    rng: Rng,
    markers: usize,
    names: usize,
}

impl Churn {
    fn new(root: &Path) -> Churn {
        let mut churn = Churn {
            root: root.to_path_buf(),
            rng: Rng(SEED),
            markers: 0,
            names: 0,
        };
        for dir in ["", "alpha", "beta", "alpha/gamma"] {
            std::fs::create_dir_all(root.join(dir)).unwrap();
        }
        for _ in 0..NOTES {
            churn.create();
        }
        churn
    }

    fn dirs(&self) -> Vec<PathBuf> {
        let mut dirs = vec![self.root.clone()];
        let mut i = 0;
        while i < dirs.len() {
            for entry in std::fs::read_dir(&dirs[i]).unwrap() {
                let entry = entry.unwrap();
                if entry.file_type().unwrap().is_dir() {
                    dirs.push(entry.path());
                }
            }
            i += 1;
        }
        dirs
    }

    fn files(&self) -> Vec<PathBuf> {
        let mut files = Vec::new();
        for dir in self.dirs() {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let entry = entry.unwrap();
                if entry.file_type().unwrap().is_file() {
                    files.push(entry.path());
                }
            }
        }
        files.sort();
        files
    }

    fn new_path(&mut self) -> PathBuf {
        let dir = self.rng.pick(&self.dirs()).clone();
        self.names += 1;
        dir.join(format!("n{}.md", self.names))
    }

    fn write_new_marker(&mut self, path: &Path) {
        self.markers += 1;
        std::fs::write(path, note(self.markers)).unwrap();
    }

    fn create(&mut self) {
        let path = self.new_path();
        self.write_new_marker(&path);
    }

    /// One random operation.
    fn step(&mut self) {
        let files = self.files();
        if files.len() < 20 {
            return self.create();
        }
        let a = self.rng.pick(&files).clone();
        match self.rng.below(100) {
            0..15 => self.create(),
            15..35 => self.write_new_marker(&a),
            35..55 => {
                let to = self.new_path();
                std::fs::rename(&a, to).unwrap();
            }
            55..65 => {
                // Renamed, and renamed again before the first settles.
                let (b, c) = (self.new_path(), self.new_path());
                std::fs::rename(&a, &b).unwrap();
                std::fs::rename(&b, c).unwrap();
            }
            65..80 => std::fs::remove_file(&a).unwrap(),
            80..90 => {
                let b = self.rng.pick(&files).clone();
                if a != b {
                    std::fs::rename(&a, &b).unwrap(); // over an existing file
                }
            }
            90..93 => {
                let dirs = self.dirs();
                let dir = self.rng.pick(&dirs[1..]).clone();
                self.names += 1;
                let to = dir.with_file_name(format!("d{}", self.names));
                std::fs::rename(&dir, to).unwrap();
            }
            93..96 => {
                // Renamed, then deleted.
                let b = self.new_path();
                std::fs::rename(&a, &b).unwrap();
                std::fs::remove_file(b).unwrap();
            }
            _ => {
                // Here and gone within one debounce window.
                let b = self.new_path();
                self.write_new_marker(&b);
                std::fs::remove_file(b).unwrap();
            }
        }
    }

    /// Path → content hash of every file in the folder.
    fn on_disk(&self) -> BTreeMap<PathBuf, String> {
        self.files()
            .into_iter()
            .map(|p| {
                let hash = blake3::hash(&std::fs::read(&p).unwrap())
                    .to_hex()
                    .to_string();
                (p, hash)
            })
            .collect()
    }

    /// The markers the folder holds now, by file.
    fn live_markers(&self) -> BTreeMap<String, PathBuf> {
        self.files()
            .into_iter()
            .map(|p| {
                let text = std::fs::read_to_string(&p).unwrap();
                let start = text.find("Observation m").unwrap() + "Observation ".len();
                (text[start..start + 7].to_string(), p)
            })
            .collect()
    }
}

/// Path → content hash of every indexed document of the library's one source.
fn indexed(library: &Library) -> BTreeMap<PathBuf, String> {
    let source = &library.sources().unwrap()[0];
    library
        .documents_of_source(source.id)
        .unwrap()
        .into_iter()
        .filter(|d| d.status == DocumentStatus::Indexed)
        .map(|d| (d.path, d.content_hash.unwrap_or_default()))
        .collect()
}

/// What differs between the folder and the index, one line each.
fn differences(disk: &BTreeMap<PathBuf, String>, index: &BTreeMap<PathBuf, String>) -> String {
    let mut lines = Vec::new();
    for (path, hash) in disk {
        match index.get(path) {
            None => lines.push(format!("not indexed: {}", path.display())),
            Some(h) if h != hash => lines.push(format!("stale content: {}", path.display())),
            Some(_) => {}
        }
    }
    for path in index.keys().filter(|p| !disk.contains_key(*p)) {
        lines.push(format!("ghost (file is gone): {}", path.display()));
    }
    lines.join("\n")
}

fn lexical_paths(library: &Library, query: &str) -> Vec<PathBuf> {
    let request = SearchRequest::new(query).with_mode(SearchMode::Lexical);
    let results = library.search(&request).unwrap();
    results.hits.into_iter().map(|h| h.path).collect()
}

fn churn_settles_to_the_folder(poll_only: bool) {
    let dirs = TestDirs::new();
    let root = dirs.docs().canonicalize().unwrap();
    let mut churn = Churn::new(&root);
    // No models: the test is about the index of files, and embedding would only slow it.
    let no_models = tempfile::tempdir().unwrap();
    let options = || LibraryOptions {
        models: Some(Models::at(vec![no_models.path().to_path_buf()])),
        ..LibraryOptions::default()
    };
    let mut reader = Library::open_with(dirs.data.path(), options()).unwrap();
    reader.add_source(&root, "notes", &[], &[]).unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let watcher = {
        let (data, stop, library_options) =
            (dirs.data.path().to_path_buf(), stop.clone(), options());
        std::thread::spawn(move || {
            let mut library = Library::open_with(&data, library_options).unwrap();
            let options = WatchOptions {
                poll_only,
                rescan_interval: Duration::from_secs(1),
                // The events alone must get it right; reconciliation (tested in the watcher's
                // unit tests) is the safety net for events the OS never sends.
                reconcile_after: Duration::from_secs(3600),
                ..WatchOptions::default()
            };
            let mut writer = library.writer().unwrap();
            writer.watch(&IndexOptions::default(), &options, &|_| {}, &stop)
        })
    };
    eventually(120, "the first scan to index every note", || {
        indexed(&reader).len() == NOTES
    });

    let mut ever: BTreeSet<String> = (1..=churn.markers).map(marker).collect();
    for _ in 0..OPERATIONS {
        churn.step();
        std::thread::sleep(Duration::from_millis(churn.rng.below(20) as u64));
    }
    ever.extend((1..=churn.markers).map(marker));

    let disk = churn.on_disk();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut diff = differences(&disk, &indexed(&reader));
    while !diff.is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(250));
        diff = differences(&disk, &indexed(&reader));
    }
    assert!(
        diff.is_empty(),
        "30 s after the last change the index still differs from the folder \
         ({} files on disk):\n{diff}",
        disk.len()
    );

    // The full-text index agrees: every live marker finds its file, a gone one finds nothing.
    let live = churn.live_markers();
    eventually(30, "the full-text index to catch up", || {
        ever.iter().all(|m| {
            let paths = lexical_paths(&reader, m);
            match live.get(m) {
                Some(path) => paths == [path.clone()],
                None => paths.is_empty(),
            }
        })
    });

    stop.store(true, Ordering::Relaxed);
    watcher.join().unwrap().unwrap();
}

#[test]
fn churn_under_os_events_leaves_no_ghosts_and_no_stale_content() {
    churn_settles_to_the_folder(false);
}

#[test]
fn churn_under_polling_leaves_no_ghosts_and_no_stale_content() {
    churn_settles_to_the_folder(true);
}
