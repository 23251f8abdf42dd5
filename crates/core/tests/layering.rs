//! The engine's top-level modules form layers, checked by reading the sources so they stay
//! true: a module may name (`use crate::…`, or an inline `crate::…` path) only modules of a
//! lower layer, so no two modules depend on each other, directly or around a cycle.
//! `LAYERS` is the one place the allowed direction is written; a new module goes into it.
//!
//! Each failure names the file, the line and the two modules.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use regex::Regex;

mod common;
use common::rust_files;

/// Bottom first. A module may use the modules of the layers before its own, never its own
/// layer's or a later one's.
const LAYERS: &[&[&str]] = &[
    // Leaves: they name no other module of the crate (but `error`).
    &["error"],
    &[
        "ids",
        "names",
        "environment",
        "cancel",
        "cores",
        "memory",
        "serde_paths",
        "json_diff",
        "lock",
        "scans",
    ],
    // Storage and what models are on disk.
    &["store", "models"],
    // Over the store: keys, audit, the full-text index; over the models: the chat runtimes
    // and their HTTP client.
    &["auth", "audit", "fulltext", "llm"],
    // The embedders: ONNX Runtime, or a server asked through `llm`'s HTTP client.
    &["embed"],
    &["evidence", "retrieve", "ingest"],
    &["tools"],
    &["context"],
    &["pipeline"],
    &["orchestrator"],
    // The facade, and the files that extend it (`impl Library` blocks).
    &["library"],
    &["assistant", "governance", "eval", "model_use", "bench"],
];

fn core_src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The top-level module a source file belongs to (`store/sign_index.rs` → `store`).
fn module_of(file: &Path) -> String {
    let relative = file.strip_prefix(core_src()).unwrap();
    let first = relative.components().next().unwrap().as_os_str();
    first.to_string_lossy().trim_end_matches(".rs").to_string()
}

/// What `lib.rs` re-exports at the crate root (`Library` → `library`), so `crate::Library`
/// counts as a use of `library`.
fn root_reexports() -> BTreeMap<String, String> {
    let lib = std::fs::read_to_string(core_src().join("lib.rs")).unwrap();
    let reexport = Regex::new(r"pub use (\w+)::\{?([^;}]*)\}?;").unwrap();
    let mut names = BTreeMap::new();
    for caps in reexport.captures_iter(&lib) {
        for name in caps[2].split(',').map(str::trim).filter(|n| !n.is_empty()) {
            names.insert(name.to_string(), caps[1].to_string());
        }
    }
    names
}

/// The first names of the paths in a `use crate::{…}` group (`{a::B, c}` → `a`, `c`).
fn group_heads(group: &str) -> Vec<String> {
    let mut heads = Vec::new();
    let (mut depth, mut item) = (0, String::new());
    for ch in group.chars().chain([',']) {
        match ch {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                if let Some(head) = item.split("::").next().map(str::trim) {
                    if !head.is_empty() {
                        heads.push(head.to_string());
                    }
                }
                item.clear();
                continue;
            }
            _ => {}
        }
        item.push(ch);
    }
    heads
}

/// One use of another module: where, and which module.
struct Edge {
    from: String,
    to: String,
    at: String,
}

/// Every use of one top-level module by another, with the first file and line of each.
fn edges() -> Vec<Edge> {
    let reexports = root_reexports();
    let inline = Regex::new(r"\bcrate::(\w+)").unwrap();
    let group = Regex::new(r"(?s)use crate::\{(.*?)\};").unwrap();
    let mut files = Vec::new();
    rust_files(&core_src(), &mut files);
    assert!(files.len() > 50, "found only {} sources", files.len());
    let mut seen = BTreeSet::new();
    let mut edges = Vec::new();
    for file in files.iter().filter(|f| module_of(f) != "lib") {
        let from = module_of(file);
        // Comments out, lines kept, so positions still name the line.
        let code: String = std::fs::read_to_string(file)
            .unwrap()
            .lines()
            .map(|l| l.split_once("//").map_or(l, |(code, _)| code))
            .collect::<Vec<_>>()
            .join("\n");
        let line_of = |pos: usize| code[..pos].matches('\n').count() + 1;
        let mut named: Vec<(String, usize)> = inline
            .captures_iter(&code)
            .map(|c| (c[1].to_string(), c.get(0).unwrap().start()))
            .collect();
        for caps in group.captures_iter(&code) {
            let at = caps.get(0).unwrap().start();
            named.extend(group_heads(&caps[1]).into_iter().map(|h| (h, at)));
        }
        for (name, pos) in named {
            let to = reexports.get(&name).cloned().unwrap_or(name);
            if to != from && seen.insert((from.clone(), to.clone())) {
                let shown = file.strip_prefix(core_src()).unwrap().display();
                edges.push(Edge {
                    from: from.clone(),
                    to,
                    at: format!("crates/core/src/{shown}:{}", line_of(pos)),
                });
            }
        }
    }
    edges
}

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|layer| layer.contains(&module))
}

#[test]
fn every_module_uses_only_lower_layers() {
    let mut upward = Vec::new();
    for edge in edges() {
        let (Some(from), Some(to)) = (layer_of(&edge.from), layer_of(&edge.to)) else {
            continue; // a module missing from LAYERS is the next test's failure
        };
        if to >= from {
            upward.push(format!(
                "{}: `{}` (layer {from}) uses `{}` (layer {to})",
                edge.at, edge.from, edge.to
            ));
        }
    }
    assert!(
        upward.is_empty(),
        "uses that go sideways or up (move the shared part down into a leaf module, or beside \
         what it serves):\n{}",
        upward.join("\n")
    );
}

#[test]
fn every_module_has_a_layer() {
    let mut modules = BTreeSet::new();
    let mut files = Vec::new();
    rust_files(&core_src(), &mut files);
    for file in &files {
        modules.insert(module_of(file));
    }
    modules.remove("lib");
    let missing: Vec<_> = modules.iter().filter(|m| layer_of(m).is_none()).collect();
    assert!(
        missing.is_empty(),
        "modules missing from LAYERS in tests/layering.rs: {missing:?}"
    );
    let gone: Vec<&str> = LAYERS
        .iter()
        .flat_map(|layer| layer.iter().copied())
        .filter(|m| !modules.contains(*m))
        .collect();
    assert!(
        gone.is_empty(),
        "LAYERS names modules that are gone: {gone:?}"
    );
}

#[test]
fn the_check_sees_grouped_and_inline_uses() {
    assert_eq!(
        group_heads("auth::{Principal, Scope},\n error::Result, ids"),
        ["auth", "error", "ids"]
    );
    let found = edges();
    let has = |from: &str, to: &str| found.iter().any(|e| e.from == from && e.to == to);
    assert!(has("library", "store"), "a plain `use crate::store::…`");
    assert!(
        has("assistant", "library"),
        "`crate::Library`, re-exported by lib.rs"
    );
}
