//! `knowledge_search`, line by line against its plugin manual, on real libraries embedded with
//! the real MiniLM model (installed under `models/cache` by `scripts/test.sh`): boot, the query
//! check, namespace resolution, one embedding, the per-namespace fan-out, the merge, the output
//! shape, per-namespace failures, the caller's authorization and the admitted evidence.

mod common;

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use quarry_core::auth::{PrincipalKind, Scope};
use quarry_core::context::EngineContext;
use quarry_core::evidence::EvidenceKey;
use quarry_core::models::{ModelKind, Models};
use quarry_core::orchestrator::knowledge_search::{
    KnowledgeSearch, KnowledgeSearchConfig, KnowledgeSearchOutcome,
};
use quarry_core::{LibraryOptions, Principal};
use serde_json::{json, Value};

use common::{admin, session};

const MODEL: &str = "all-minilm-l6-v2-int8";

fn installed_models() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/cache");
    assert!(
        dir.join(MODEL).join("model.onnx").is_file(),
        "the embedding model is not installed; run `bash scripts/test.sh` (or `cargo run -p quarry-cli -- models fetch --defaults`)"
    );
}

/// Three collections on unrelated subjects, one folder each.
const CORPUS: &[(&str, &[(&str, &str)])] = &[
    (
        "garden",
        &[
            (
                "tomatoes.md",
                "# Growing tomatoes\n\nTomato plants want full sun, deep watering twice a week and \
                 a stake to climb. Pinch out the side shoots so the plant puts its strength into the fruit.\n",
            ),
            (
                "roses.md",
                "# Pruning roses\n\nCut rose bushes back in late winter, just above an outward-facing \
                 bud, and remove dead or crossing canes so air moves through the shrub.\n",
            ),
            (
                "compost.md",
                "# Making compost\n\nLayer green kitchen scraps with brown leaves, keep the heap as damp \
                 as a wrung-out sponge and turn it every few weeks until it smells of forest soil.\n",
            ),
        ],
    ),
    (
        "kitchen",
        &[
            (
                "bread.md",
                "# Baking sourdough at home\n\nFeed the starter the night before, mix flour, water and \
                 salt, fold the dough every half hour, then let it rise slowly before baking it in a hot oven.\n",
            ),
            (
                "soup.md",
                "# Tomato soup recipe\n\nSoften onions and garlic in butter, add ripe tomatoes and stock, \
                 simmer for twenty minutes, then blend the soup until smooth and season it with basil.\n",
            ),
        ],
    ),
    (
        "space",
        &[
            (
                "stars.md",
                "# How stars shine\n\nNuclear fusion in the core of a star turns hydrogen into helium. The \
                 energy released travels outwards for thousands of years before it leaves the surface as light.\n",
            ),
            (
                "moon.md",
                "# The Moon\n\n## Phases\n\nAs the Moon orbits the Earth we see more or less of its sunlit \
                 half: new moon, crescent, quarter, gibbous and full moon, over about twenty-nine days.\n\n\
                 ## Tides\n\nThe Moon's gravity pulls the oceans into two bulges, so most coasts get two \
                 high tides and two low tides every day.\n",
            ),
        ],
    ),
];

/// The shared fixture with the evidence key tool calls run under.
struct Fixture {
    base: common::Fixture,
    key: EvidenceKey,
}

impl std::ops::Deref for Fixture {
    type Target = common::Fixture;
    fn deref(&self) -> &common::Fixture {
        &self.base
    }
}

impl std::ops::DerefMut for Fixture {
    fn deref_mut(&mut self) -> &mut common::Fixture {
        &mut self.base
    }
}

impl Fixture {
    /// What a tool call runs in: the library's narrow context.
    fn ctx(&self) -> EngineContext<'_> {
        self.library.engine_context(&self.key)
    }
}

/// A library with the three collections of [`CORPUS`], indexed and embedded with MiniLM.
fn fixture() -> Fixture {
    fixture_with(None)
}

/// [`fixture`] with its own model folders.
fn fixture_with(models: Option<Models>) -> Fixture {
    installed_models();
    let mut base = common::Fixture::with_options(LibraryOptions {
        ort_threads: Some(1),
        models,
        ..LibraryOptions::default()
    });
    for (collection, files) in CORPUS {
        base.add_collection(collection, "internal", collection, files);
    }
    base.reindex();
    base.embed();
    let key = base.library.evidence_key().unwrap();
    Fixture { base, key }
}

/// Adds a collection with one file, indexed (not embedded).
fn add_collection(fx: &mut Fixture, name: &str, sensitivity: &str, file: &str, text: &str) {
    fx.add_collection(name, sensitivity, name, &[(file, text)]);
    fx.reindex();
}

fn scoped(collections: &[&str], ceiling: &str) -> Principal {
    Principal {
        kind: PrincipalKind::Personal,
        id: "key:7".into(),
        label: "reader".into(),
        scope: Scope {
            collections: Some(collections.iter().map(|s| s.to_string()).collect()),
            sensitivity_ceiling: ceiling.into(),
        },
    }
}

fn config(namespaces: &[&str]) -> KnowledgeSearchConfig {
    KnowledgeSearchConfig::new(namespaces.iter().map(|s| s.to_string()).collect())
}

fn boot(config: KnowledgeSearchConfig) -> KnowledgeSearch {
    KnowledgeSearch::boot(config).unwrap()
}

fn results(outcome: &KnowledgeSearchOutcome) -> &Vec<Value> {
    assert!(!outcome.is_error, "{}", outcome.text);
    outcome.output["results"].as_array().unwrap()
}

fn namespaces_of(outcome: &KnowledgeSearchOutcome) -> Vec<String> {
    results(outcome)
        .iter()
        .map(|r| r["namespace"].as_str().unwrap().to_string())
        .collect()
}

fn file_names(outcome: &KnowledgeSearchOutcome) -> Vec<String> {
    results(outcome)
        .iter()
        .map(|r| {
            Path::new(r["source"].as_str().unwrap())
                .file_name()
                .unwrap()
                .to_string_lossy()
                .into_owned()
        })
        .collect()
}

fn similarities(outcome: &KnowledgeSearchOutcome) -> Vec<f64> {
    results(outcome)
        .iter()
        .map(|r| r["similarity"].as_f64().unwrap())
        .collect()
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

// ---- boot ------------------------------------------------------------------------------

#[test]
fn boot_fails_with_the_manuals_message_when_namespaces_is_empty() {
    let err = KnowledgeSearch::boot(config(&[])).unwrap_err();
    assert_eq!(
        err.to_string(),
        "at least one namespace must be configured under 'namespaces' at boot"
    );
    assert_eq!(err.code(), "orchestrator_not_ready");
}

#[test]
fn boot_fails_with_the_same_message_when_namespaces_is_unset() {
    let unset: KnowledgeSearchConfig =
        serde_json::from_value(json!({ "default_namespaces": [], "top_k": 3 })).unwrap();
    assert!(unset.namespaces.is_empty());
    let err = KnowledgeSearch::boot(unset).unwrap_err();
    assert_eq!(
        err.to_string(),
        "at least one namespace must be configured under 'namespaces' at boot"
    );
}

#[test]
fn configuration_has_the_manuals_defaults_and_refuses_unknown_keys() {
    let c: KnowledgeSearchConfig =
        serde_json::from_value(json!({ "namespaces": ["kb", "project-docs"] })).unwrap();
    assert_eq!(c.default_namespaces, Vec::<String>::new());
    assert_eq!(c.top_k, 5);
    assert!(c.include_metadata);
    assert_eq!(c.tool_name, "knowledge_search");
    assert_eq!(c, config(&["kb", "project-docs"]));
    // The manual's example block, and the seeded `"*"` block, both boot.
    let manual: KnowledgeSearchConfig = serde_json::from_value(json!({
        "namespaces": ["kb", "project-docs"], "default_namespaces": ["kb"],
        "top_k": 5, "include_metadata": true
    }))
    .unwrap();
    boot(manual);
    let seeded: KnowledgeSearchConfig = serde_json::from_value(json!({
        "namespaces": ["*"], "default_namespaces": [], "top_k": 5, "include_metadata": true
    }))
    .unwrap();
    boot(seeded);
    let typo =
        serde_json::from_value::<KnowledgeSearchConfig>(json!({ "namespaces": ["kb"], "topk": 3 }))
            .unwrap_err();
    assert!(typo.to_string().contains("topk"), "{typo}");
}

#[test]
fn boot_names_the_field_of_a_bad_setting() {
    let field = |c: KnowledgeSearchConfig| match KnowledgeSearch::boot(c).unwrap_err() {
        quarry_core::Error::InvalidSetting { field, .. } => field,
        other => panic!("{other}"),
    };
    let mut c = config(&["kb"]);
    c.top_k = 0;
    assert_eq!(field(c), "knowledge_search.top_k");
    let mut c = config(&["kb", "project-docs"]);
    c.default_namespaces = strings(&["kb", "elsewhere"]);
    assert_eq!(field(c), "knowledge_search.default_namespaces[1]");
    let mut c = config(&["kb"]);
    c.tool_name = "search the kb".into();
    assert_eq!(field(c), "knowledge_search.tool_name");
}

// ---- the tool surface ------------------------------------------------------------------

#[test]
fn tool_spec_offers_query_and_the_allowed_namespaces() {
    let mut c = config(&["garden", "kitchen"]);
    c.default_namespaces = strings(&["kitchen"]);
    let spec = boot(c).tool_spec();
    assert_eq!(spec.name, "knowledge_search");
    assert!(spec.description.contains("cite sources by file path"));
    assert!(spec.description.contains("factual questions"));
    let p = &spec.parameters;
    assert_eq!(p["type"], "object");
    assert_eq!(p["required"], json!(["query"]));
    assert_eq!(p["additionalProperties"], json!(false));
    assert_eq!(p["properties"]["query"]["type"], "string");
    assert_eq!(p["properties"]["query"]["minLength"], 1);
    assert_eq!(p["properties"]["query"]["maxLength"], 500);
    assert_eq!(p["properties"]["namespaces"]["type"], "array");
    assert_eq!(
        p["properties"]["namespaces"]["items"],
        json!({ "type": "string", "enum": ["garden", "kitchen"] })
    );
    let keys: HashSet<&str> = p["properties"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(keys, HashSet::from(["query", "namespaces"]));
    // "*": the names are only known at call time, so no enum.
    let spec = boot(config(&["*"])).tool_spec();
    assert_eq!(
        spec.parameters["properties"]["namespaces"]["items"],
        json!({ "type": "string" })
    );
}

#[test]
fn a_renamed_tool_is_offered_and_admits_evidence_under_its_new_name() {
    let fx = fixture();
    let mut c = config(&["garden"]);
    c.tool_name = "search_my_notes".into();
    let tool = boot(c);
    assert_eq!(tool.name(), "search_my_notes");
    assert_eq!(tool.tool_spec().name, "search_my_notes");
    let out = tool.call(
        &fx.ctx(),
        &admin(&fx.library),
        &json!({ "query": "pruning roses" }),
    );
    assert!(!out.entries.is_empty());
    assert!(out
        .entries
        .iter()
        .all(|e| e.admitted_by == "search_my_notes"));
}

// ---- 1. the query ----------------------------------------------------------------------

#[test]
fn an_empty_query_is_an_error_result_the_llm_sees_as_query_argument_required() {
    let fx = fixture();
    let tool = boot(config(&["garden"]));
    for query in ["", "   ", "\n\t "] {
        let out = tool.call(&fx.ctx(), &admin(&fx.library), &json!({ "query": query }));
        assert!(out.is_error);
        assert_eq!(out.text, r#"Error: "query argument required""#);
        assert_eq!(out.output, json!({ "error": "query argument required" }));
        assert!(out.entries.is_empty());
    }
}

#[test]
fn a_call_without_a_query_is_the_same_error() {
    let fx = fixture();
    let tool = boot(config(&["garden"]));
    for args in [
        json!({}),
        json!({ "namespaces": ["garden"] }),
        json!({ "query": 42 }),
        json!({ "query": null }),
        json!(null),
        json!("tomatoes"),
    ] {
        let out = tool.call(&fx.ctx(), &admin(&fx.library), &args);
        assert!(out.is_error, "{args}");
        assert_eq!(out.text, r#"Error: "query argument required""#, "{args}");
    }
}

#[test]
fn the_query_is_trimmed() {
    let fx = fixture();
    let out = boot(config(&["garden"])).call(
        &fx.ctx(),
        &admin(&fx.library),
        &json!({ "query": "  growing tomatoes \n" }),
    );
    assert_eq!(out.output["query"], "growing tomatoes");
    assert_eq!(file_names(&out)[0], "tomatoes.md");
}

// ---- 2. namespaces ---------------------------------------------------------------------

#[test]
fn without_namespaces_from_the_llm_the_default_namespaces_are_searched() {
    let fx = fixture();
    let mut c = config(&["garden", "kitchen", "space"]);
    c.default_namespaces = strings(&["kitchen"]);
    let tool = boot(c);
    for args in [
        json!({ "query": "how do stars make light" }),
        json!({ "query": "how do stars make light", "namespaces": [] }),
        json!({ "query": "how do stars make light", "namespaces": null }),
    ] {
        let out = tool.call(&fx.ctx(), &admin(&fx.library), &args);
        assert_eq!(out.namespaces, strings(&["kitchen"]), "{args}");
        let found = namespaces_of(&out);
        assert!(!found.is_empty());
        assert!(found.iter().all(|n| n == "kitchen"), "{found:?}");
    }
}

#[test]
fn without_default_namespaces_the_whole_allow_list_is_the_default() {
    let fx = fixture();
    let mut c = config(&["garden", "kitchen"]);
    c.top_k = 10;
    let out = boot(c).call(
        &fx.ctx(),
        &admin(&fx.library),
        &json!({ "query": "tomatoes" }),
    );
    assert_eq!(out.namespaces, strings(&["garden", "kitchen"]));
    let found: HashSet<String> = namespaces_of(&out).into_iter().collect();
    assert_eq!(found, HashSet::from(["garden".into(), "kitchen".into()]));
}

#[test]
fn names_from_the_llm_are_intersected_with_the_allow_list() {
    let fx = fixture();
    let tool = boot(config(&["garden", "kitchen"]));
    // `space` exists and would answer best, but it is not allowed: dropped, the rest searched.
    let out = tool.call(
        &fx.ctx(),
        &admin(&fx.library),
        &json!({ "query": "nuclear fusion in stars", "namespaces": ["space", "garden", "garden"] }),
    );
    assert_eq!(out.namespaces, strings(&["garden"]));
    let found = namespaces_of(&out);
    assert!(!found.is_empty());
    assert!(found.iter().all(|n| n == "garden"), "{found:?}");
    assert!(out.warnings.iter().any(|w| w.contains("`space`")));
    assert!(
        !out.text.contains("\"space\"") && !out.text.contains("stars.md"),
        "the LLM is not told: {}",
        out.text
    );
}

#[test]
fn when_the_allow_list_filters_out_every_name_no_valid_namespaces_selected() {
    let fx = fixture();
    let out = boot(config(&["garden", "kitchen"])).call(
        &fx.ctx(),
        &admin(&fx.library),
        &json!({ "query": "stars", "namespaces": ["space", "astronomy"] }),
    );
    assert!(out.is_error);
    assert_eq!(out.text, r#"Error: "no valid namespaces selected""#);
    assert_eq!(
        out.output,
        json!({ "error": "no valid namespaces selected" })
    );
    assert!(out.entries.is_empty());
    // With "*" the allow-list is every collection, so only names of none are filtered out.
    let out = boot(config(&["*"])).call(
        &fx.ctx(),
        &admin(&fx.library),
        &json!({ "query": "stars", "namespaces": ["astronomy"] }),
    );
    assert_eq!(out.text, r#"Error: "no valid namespaces selected""#);
    let out = boot(config(&["*"])).call(
        &fx.ctx(),
        &admin(&fx.library),
        &json!({ "query": "stars", "namespaces": ["space"] }),
    );
    assert_eq!(namespaces_of(&out)[0], "space");
}

#[test]
fn a_wildcard_allow_list_searches_every_collection() {
    let fx = fixture();
    let out = boot(config(&["*"])).call(
        &fx.ctx(),
        &admin(&fx.library),
        &json!({ "query": "ocean tides" }),
    );
    assert_eq!(out.namespaces, strings(&["garden", "kitchen", "space"]));
    assert_eq!(namespaces_of(&out)[0], "space");
}

// ---- 3 to 5. embed once, fan out, merge ------------------------------------------------

#[test]
fn each_namespace_is_queried_with_the_same_vector_and_k() {
    let fx = fixture();
    let sess = admin(&fx.library);
    let query = json!({ "query": "looking after plants in the garden" });
    let mut c = config(&["garden", "kitchen"]);
    c.top_k = 2;
    // Alone, garden (three documents) gives K = top_k = 2.
    let mut alone = c.clone();
    alone.default_namespaces = strings(&["garden"]);
    let garden = boot(alone).call(&fx.ctx(), &sess, &query);
    assert_eq!(results(&garden).len(), 2);
    let mut alone = c.clone();
    alone.default_namespaces = strings(&["kitchen"]);
    let kitchen = boot(alone).call(&fx.ctx(), &sess, &query);
    assert_eq!(results(&kitchen).len(), 2);
    // Together, each hit has exactly the similarity it had alone: the same query vector.
    let both = boot(c).call(&fx.ctx(), &sess, &query);
    let alone: Vec<(String, f64)> = results(&garden)
        .iter()
        .chain(results(&kitchen))
        .map(|r| {
            (
                r["source"].as_str().unwrap().to_string(),
                r["similarity"].as_f64().unwrap(),
            )
        })
        .collect();
    for r in results(&both) {
        let source = r["source"].as_str().unwrap();
        let (_, s) = alone.iter().find(|(p, _)| p == source).unwrap();
        assert_eq!(r["similarity"].as_f64().unwrap(), *s, "{source}");
    }
}

#[test]
fn hits_merge_across_namespaces_sorted_by_similarity_and_truncated_to_top_k() {
    let fx = fixture();
    let sess = admin(&fx.library);
    let query = json!({ "query": "tomato soup recipe" });
    // Every namespace alone, then merged by hand.
    let mut expected: Vec<(String, f64)> = Vec::new();
    for ns in ["garden", "kitchen", "space"] {
        let mut c = config(&[ns]);
        c.top_k = 3;
        let out = boot(c).call(&fx.ctx(), &sess, &query);
        expected.extend(
            results(&out)
                .iter()
                .map(|r| (ns.to_string(), r["similarity"].as_f64().unwrap())),
        );
    }
    expected.sort_by(|a, b| b.1.total_cmp(&a.1));
    expected.truncate(3);
    let mut c = config(&["garden", "kitchen", "space"]);
    c.top_k = 3;
    let out = boot(c).call(&fx.ctx(), &sess, &query);
    let got = similarities(&out);
    assert_eq!(got.len(), 3);
    assert!(got.windows(2).all(|w| w[0] >= w[1]), "{got:?}");
    assert_eq!(
        got,
        expected.iter().map(|e| e.1).collect::<Vec<_>>(),
        "{expected:?}"
    );
    let ranks: Vec<u64> = results(&out)
        .iter()
        .map(|r| r["rank"].as_u64().unwrap())
        .collect();
    assert_eq!(ranks, vec![1, 2, 3]);
    // The best hit of each namespace competes: the soup recipe and the tomato plants, from
    // two namespaces, take the first two places.
    let top: HashSet<String> = file_names(&out).into_iter().take(2).collect();
    assert_eq!(top, HashSet::from(["soup.md".into(), "tomatoes.md".into()]));
    assert_eq!(out.entries.len(), 3);
}

// ---- 6. the output ---------------------------------------------------------------------

#[test]
fn the_output_has_the_manuals_shape_field_by_field() {
    let fx = fixture();
    let mut c = config(&["space", "garden"]);
    c.top_k = 3;
    let out = boot(c).call(
        &fx.ctx(),
        &admin(&fx.library),
        &json!({ "query": "  why are there two high tides a day " }),
    );
    assert!(!out.is_error);
    let top: HashSet<&str> = out
        .output
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(top, HashSet::from(["query", "results"]));
    assert_eq!(out.output["query"], "why are there two high tides a day");
    // What the LLM reads is this JSON, in the manual's field order.
    assert_eq!(
        serde_json::from_str::<Value>(&out.text).unwrap(),
        out.output
    );
    assert!(out.text.starts_with(r#"{"query":"why are there two high tides a day","results":[{"rank":1,"namespace":"space","similarity":"#), "{}", out.text);
    let order = [
        "\"rank\"",
        "\"namespace\"",
        "\"similarity\"",
        "\"source\"",
        "\"chunk_idx\"",
        "\"content\"",
        "\"metadata\"",
    ];
    let at: Vec<usize> = order.iter().map(|k| out.text.find(k).unwrap()).collect();
    assert!(at.windows(2).all(|w| w[0] < w[1]), "{}", out.text);

    let items = results(&out);
    assert_eq!(items.len(), 3);
    assert_eq!(out.entries.len(), 3);
    for (i, (item, entry)) in items.iter().zip(&out.entries).enumerate() {
        let keys: HashSet<&str> = item
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(
            keys,
            HashSet::from([
                "rank",
                "namespace",
                "similarity",
                "source",
                "chunk_idx",
                "content",
                "metadata"
            ])
        );
        assert_eq!(item["rank"], json!(i + 1));
        assert_eq!(item["namespace"], json!(entry.collection));
        let similarity = item["similarity"].as_f64().unwrap();
        assert!((-1.0..=1.0).contains(&similarity));
        assert_eq!((similarity * 1e4).round() / 1e4, similarity, "4 decimals");
        assert!((similarity - f64::from(entry.score.unwrap())).abs() < 1e-4);
        let source = entry.path.to_string_lossy().into_owned();
        assert_eq!(item["source"], json!(source));
        assert!(Path::new(&source).is_absolute());
        assert_eq!(item["chunk_idx"], json!(entry.ordinal.to_string()));
        assert_eq!(item["content"], json!(entry.text));
        assert_eq!(
            item["metadata"],
            json!({
                "source": source,
                "chunk_idx": entry.ordinal.to_string(),
                "chunk_size": entry.text.chars().count().to_string(),
            })
        );
    }
    // The tides are a later section of moon.md: a chunk_idx past "0", as a string.
    assert_ne!(items[0]["chunk_idx"], "0");
    assert!(items[0]["content"].as_str().unwrap().contains("tides"));
    assert!(items[0]["source"].as_str().unwrap().ends_with("moon.md"));
}

#[test]
fn without_include_metadata_results_have_no_metadata() {
    let fx = fixture();
    let mut c = config(&["garden", "kitchen"]);
    c.include_metadata = false;
    let out = boot(c).call(
        &fx.ctx(),
        &admin(&fx.library),
        &json!({ "query": "baking bread" }),
    );
    assert!(!results(&out).is_empty());
    for item in results(&out) {
        assert!(item.get("metadata").is_none(), "{item}");
        assert!(item["source"].is_string() && item["chunk_idx"].is_string());
    }
    assert!(!out.text.contains("metadata"));
}

#[test]
fn no_results_is_an_empty_list_not_an_error() {
    let mut fx = fixture();
    add_collection(&mut fx, "empty", "internal", "ignored.bin", "");
    let out = boot(config(&["empty"])).call(
        &fx.ctx(),
        &admin(&fx.library),
        &json!({ "query": "anything" }),
    );
    assert!(!out.is_error);
    assert_eq!(out.output, json!({ "query": "anything", "results": [] }));
}

// ---- per-namespace failures ------------------------------------------------------------

#[test]
fn a_namespace_that_does_not_exist_is_a_warning_and_the_rest_still_answer() {
    let fx = fixture();
    let out = boot(config(&["ghost", "garden"])).call(
        &fx.ctx(),
        &admin(&fx.library),
        &json!({ "query": "pruning roses" }),
    );
    assert!(!out.is_error);
    assert_eq!(out.namespaces, strings(&["ghost", "garden"]));
    assert_eq!(file_names(&out)[0], "roses.md");
    assert!(
        out.warnings
            .iter()
            .any(|w| w.contains("`ghost`") && w.contains("does not exist")),
        "{:?}",
        out.warnings
    );
}

#[test]
fn a_namespace_embedded_with_another_model_is_a_warning_and_the_rest_still_answer() {
    // A second embedding model: MiniLM imported again under another id, in a models folder
    // of this test's own (so nothing lands in the shared one).
    let scratch = tempfile::tempdir().unwrap();
    let mut dirs = vec![scratch.path().to_path_buf()];
    dirs.extend(Models::discover(scratch.path()).dirs().iter().cloned());
    let models = Models::at(dirs);
    let installed = models.find(MODEL).unwrap().dir;
    models
        .import(&installed, Some("other-model"), ModelKind::Embedding)
        .unwrap();
    let mut fx = fixture_with(Some(models));
    add_collection(
        &mut fx,
        "legacy",
        "internal",
        "old.md",
        "# Roses\n\nOld notes on pruning roses.\n",
    );
    // `legacy` is embedded by the other model.
    fx.library
        .use_embedding_model("legacy", "other-model")
        .unwrap();
    fx.embed();
    let legacy = fx
        .library
        .embedding_coverage()
        .unwrap()
        .into_iter()
        .find(|c| c.collection == "legacy")
        .unwrap();
    assert_eq!(legacy.model.as_deref(), Some("other-model"));
    assert_eq!(legacy.embedded, legacy.total, "{legacy:?}");

    let out = boot(config(&["garden", "legacy"])).call(
        &fx.ctx(),
        &admin(&fx.library),
        &json!({ "query": "pruning roses" }),
    );
    assert!(!out.is_error, "{}", out.text);
    assert!(namespaces_of(&out).iter().all(|n| n == "garden"));
    assert_eq!(file_names(&out)[0], "roses.md");
    assert!(
        out.warnings.iter().any(|w| w.contains("`legacy`")
            && w.contains("is embedded with `other-model`, not `all-minilm-l6-v2-int8`")),
        "{:?}",
        out.warnings
    );
}

#[test]
fn a_namespace_not_embedded_yet_is_a_warning_and_the_rest_still_answer() {
    let mut fx = fixture();
    add_collection(
        &mut fx,
        "fresh",
        "internal",
        "fresh.md",
        "# Watering\n\nWater tomato plants deeply at the roots.\n",
    );
    let out = boot(config(&["fresh", "garden"])).call(
        &fx.ctx(),
        &admin(&fx.library),
        &json!({ "query": "watering tomatoes" }),
    );
    assert!(!out.is_error);
    assert!(namespaces_of(&out).iter().all(|n| n == "garden"));
    assert!(
        out.warnings
            .iter()
            .any(|w| w.contains("`fresh`") && w.contains("still being embedded")),
        "{:?}",
        out.warnings
    );
}

#[test]
fn what_a_namespace_still_being_embedded_holds_in_the_querys_words_is_embedded_first() {
    let mut fx = fixture();
    // Twenty notes the walk reaches first, and the page the assistant is after.
    let mut files: Vec<(String, String)> = (0..20)
        .map(|i| {
            (
                format!("a{i:02}.md"),
                format!("# Note {i}\n\nNote {i} of the logbook records observation number {i}.\n"),
            )
        })
        .collect();
    files.push((
        "z-watering.md".into(),
        "# Watering\n\nWater tomato plants deeply at the roots, early in the morning.\n".into(),
    ));
    let refs: Vec<(&str, &str)> = files
        .iter()
        .map(|(n, t)| (n.as_str(), t.as_str()))
        .collect();
    fx.add_collection("fresh", "internal", "fresh", &refs);
    fx.reindex();
    let tool = boot(config(&["fresh"]));
    let ask = |fx: &Fixture| {
        tool.call(
            &fx.ctx(),
            &admin(&fx.library),
            &json!({ "query": "watering tomato plants" }),
        )
    };

    // Nothing there has a vector: no result, the warning, and the page queued by its words.
    let out = ask(&fx);
    assert!(results(&out).is_empty());
    assert!(
        out.warnings.iter().any(|w| w.contains("`fresh`")),
        "{:?}",
        out.warnings
    );

    // The lane's first chunk is that page, ahead of the walk; the next call finds it.
    fx.library
        .writer()
        .unwrap()
        .embed_pending_limited(1, &|_| {}, &std::sync::atomic::AtomicBool::new(false))
        .unwrap();
    let fresh = fx
        .library
        .embedding_coverage()
        .unwrap()
        .into_iter()
        .find(|c| c.collection == "fresh")
        .unwrap();
    assert_eq!((fresh.embedded, fresh.ahead), (0, 1), "{fresh:?}");
    assert_eq!(file_names(&ask(&fx)), ["z-watering.md"]);
}

#[test]
fn a_query_that_cannot_be_embedded_is_an_embed_query_error() {
    let fx = fixture();
    let empty = tempfile::tempdir().unwrap();
    let options = LibraryOptions {
        models: Some(Models::at(vec![PathBuf::from(empty.path())])),
        ..LibraryOptions::default()
    };
    let without_models = fx.reopen(options);
    let key = without_models.evidence_key().unwrap();
    let out = boot(config(&["garden"])).call(
        &without_models.engine_context(&key),
        &admin(&without_models),
        &json!({ "query": "pruning roses" }),
    );
    assert!(out.is_error);
    let message = out.output["error"].as_str().unwrap();
    assert!(message.starts_with("embed query: "), "{message}");
    assert!(message.contains(MODEL), "{message}");
    assert_eq!(
        out.text,
        format!("Error: {}", serde_json::to_string(message).unwrap())
    );
    assert!(out.text.starts_with(r#"Error: "embed query: "#));
}

// ---- authorization ---------------------------------------------------------------------

#[test]
fn a_caller_scoped_to_one_collection_never_sees_another() {
    let mut fx = fixture();
    add_collection(
        &mut fx,
        "vault",
        "confidential",
        "secret.md",
        "# Rose breeding plan\n\nThe secret cross of two climbing roses.\n",
    );
    fx.embed();
    let reader = session(&fx.library, scoped(&["garden", "vault"], "internal"));
    let all = ["garden", "kitchen", "space", "vault"];

    // Defaults: only what the caller may read answers (vault is above its ceiling).
    let mut c = config(&all);
    c.top_k = 10;
    let out = boot(c.clone()).call(&fx.ctx(), &reader, &json!({ "query": "roses" }));
    assert!(!results(&out).is_empty());
    assert!(namespaces_of(&out).iter().all(|n| n == "garden"));
    assert!(out.entries.iter().all(|e| e.collection == "garden"));
    assert!(!out.text.contains("secret") && !out.text.contains("vault"));

    // Naming an unreadable collection: the same warning as one that does not exist.
    let out = boot(c).call(
        &fx.ctx(),
        &reader,
        &json!({ "query": "stars", "namespaces": ["space", "vault"] }),
    );
    assert!(!out.is_error);
    assert!(results(&out).is_empty());
    let ghost = boot(config(&["nothing"])).call(&fx.ctx(), &reader, &json!({ "query": "x" }));
    let missing = ghost.warnings[0].replace("nothing", "space");
    assert!(out.warnings.contains(&missing), "{:?}", out.warnings);
    assert!(out
        .warnings
        .contains(&ghost.warnings[0].replace("nothing", "vault")));

    // "*" expands to the readable collections only.
    let out = boot(config(&["*"])).call(&fx.ctx(), &reader, &json!({ "query": "roses" }));
    assert_eq!(out.namespaces, strings(&["garden"]));
    let out = boot(config(&["*"])).call(
        &fx.ctx(),
        &reader,
        &json!({ "query": "roses", "namespaces": ["vault"] }),
    );
    assert_eq!(out.text, r#"Error: "no valid namespaces selected""#);

    // The administrator sees the vault.
    let out = boot(config(&["*"])).call(
        &fx.ctx(),
        &admin(&fx.library),
        &json!({ "query": "secret rose breeding" }),
    );
    assert!(namespaces_of(&out).contains(&"vault".to_string()));
}

// ---- evidence --------------------------------------------------------------------------

#[test]
fn every_result_is_admitted_evidence_whose_text_is_the_content() {
    let fx = fixture();
    let sess = admin(&fx.library);
    let mut c = config(&["garden", "kitchen", "space"]);
    c.top_k = 6;
    let out = boot(c).call(&fx.ctx(), &sess, &json!({ "query": "food" }));
    let items = results(&out);
    assert_eq!(items.len(), 6);
    assert_eq!(out.entries.len(), items.len());
    let stored = fx
        .library
        .chunks_by_id(&out.entries.iter().map(|e| e.chunk_id).collect::<Vec<_>>())
        .unwrap();
    for ((item, entry), chunk) in items.iter().zip(&out.entries).zip(&stored) {
        assert_eq!(item["content"], json!(entry.text));
        assert_eq!(entry.text, chunk.text, "the text comes from SQLite");
        assert_eq!(entry.chunk_id, chunk.id);
        assert_eq!(entry.admitted_by, "knowledge_search");
        assert_eq!(item["namespace"], json!(entry.collection));
        let score = f64::from(entry.score.unwrap());
        assert!((item["similarity"].as_f64().unwrap() - score).abs() < 1e-4);
        // The reference is bound to this session: it revalidates here and nowhere else.
        let again = fx
            .library
            .revalidate_evidence(&sess, &entry.evidence_ref, "check")
            .unwrap();
        assert_eq!(again.chunk_id, entry.chunk_id);
        let other_run = admin(&fx.library);
        let err = fx
            .library
            .revalidate_evidence(&other_run, &entry.evidence_ref, "check")
            .unwrap_err();
        assert_eq!(err.code(), "evidence_rejected");
        let other_caller = session(
            &fx.library,
            scoped(&["garden", "kitchen", "space"], "restricted"),
        );
        assert!(fx
            .library
            .revalidate_evidence(&other_caller, &entry.evidence_ref, "check")
            .is_err());
    }
}
