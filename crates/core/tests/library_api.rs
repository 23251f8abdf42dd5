//! The library's public API on real SQLite files and tantivy directories, without the binary:
//! previews resolved by the chunk's own document, and stored source settings that fail closed.

mod common;

use quarry_core::{IndexOptions, Library, Principal, SearchMode, SearchRequest};

use common::Fixture;

/// One folder, indexed into two collections.
fn one_folder_in_two_collections() -> (tempfile::TempDir, tempfile::TempDir, Library) {
    let mut f = Fixture::new();
    let files = [
        (
            "pump.md",
            "# Pump\n\nThe bilge pump is serviced every spring.\n\n## Seals\n\nReplace the seals.\n",
        ),
        ("keep.md", "# Keep\n\nkeep this file\n"),
    ];
    f.add_source("first", "", &files);
    f.add_source("second", "", &[] as &[(&str, &str)]);
    f.reindex();
    (f.docs, f.data, f.library)
}

#[test]
fn a_preview_shows_the_hit_s_own_document_when_a_folder_is_in_two_collections() {
    let (_docs, _data, library) = one_folder_in_two_collections();
    let mut request = SearchRequest::new("bilge pump serviced").with_mode(SearchMode::Lexical);
    request.collections = vec!["second".into()];
    let hits = library.search(&request).unwrap().hits;
    let hit = hits.first().expect("a hit in the second collection");
    assert_eq!(hit.collection, "second");

    let preview = library
        .chunk_in_context(hit.chunk_id, 3)
        .unwrap()
        .expect("the chunk is indexed");
    assert_eq!(preview.document.collection, "second");
    assert_eq!(preview.document.id, hit.document_id);
    assert!(preview.chunks.iter().any(|c| c.id == hit.chunk_id));
    assert!(preview
        .chunks
        .iter()
        .all(|c| c.document_id == hit.document_id));

    // The same path's document in the first collection is another row; by path alone the
    // library will not pick one of the two.
    let first = library
        .document_in(&hit.path, Some("first"))
        .unwrap()
        .document;
    assert_ne!(first.id, preview.document.id);
    assert_eq!(first.collection, "first");
    let ambiguous = library.document(&hit.path).unwrap_err();
    assert_eq!(ambiguous.code(), "ambiguous_document");
    assert!(
        ambiguous.to_string().contains("first, second"),
        "{ambiguous}"
    );
    assert_eq!(
        library
            .document_by_id(hit.document_id)
            .unwrap()
            .unwrap()
            .collection,
        "second"
    );
    assert!(library
        .chunk_in_context(quarry_core::ChunkId(i64::MAX), 3)
        .unwrap()
        .is_none());
    assert!(library
        .document_by_id(quarry_core::DocumentId(i64::MAX))
        .unwrap()
        .is_none());
}

#[test]
fn unreadable_globs_fail_closed_naming_the_source_and_keep_the_index() {
    let docs = tempfile::tempdir().unwrap();
    std::fs::write(
        docs.path().join("public.md"),
        "# Public\n\nlighthouse keeper\n",
    )
    .unwrap();
    std::fs::write(
        docs.path().join("secret.md"),
        "# Secret\n\nlighthouse vault code\n",
    )
    .unwrap();
    let data = tempfile::tempdir().unwrap();
    let mut library = Library::open(data.path()).unwrap();
    let source = library
        .add_source(docs.path(), "notes", &[], &["secret.md".to_string()])
        .unwrap();
    library
        .writer()
        .unwrap()
        .index_all(&IndexOptions::default(), &|_| {})
        .unwrap();
    let indexed_before = library.stats().unwrap().documents_indexed;
    assert_eq!(indexed_before, 1);
    drop(library);

    // Damage the stored exclude list, as a bad hand edit or a torn write would.
    let db = rusqlite::Connection::open(data.path().join("quarry.db")).unwrap();
    db.execute(
        "UPDATE sources SET exclude_globs = '[\"secret.md\"' WHERE id = ?1",
        [source.id],
    )
    .unwrap();
    drop(db);

    let mut library = Library::open(data.path()).unwrap();
    let error = library.sources().unwrap_err();
    let message = error.to_string();
    assert!(
        message.contains(&format!("source {}", source.id)) && message.contains("exclude"),
        "{message}"
    );
    // Indexing refuses rather than reading the excluded file.
    assert!(library
        .writer()
        .unwrap()
        .index_all(&IndexOptions::default(), &|_| {})
        .is_err());
    let hits = library
        .search(&SearchRequest::new("vault").with_mode(SearchMode::Lexical))
        .unwrap()
        .hits;
    assert!(hits.is_empty(), "the excluded file was indexed");
    let lighthouse = library
        .search(&SearchRequest::new("lighthouse keeper").with_mode(SearchMode::Lexical))
        .unwrap()
        .hits;
    assert_eq!(lighthouse.len(), 1, "what was indexed is kept");
    assert_eq!(library.stats().unwrap().documents_indexed, indexed_before);
}

#[test]
fn a_model_in_use_is_not_removed_and_the_refusal_names_its_users() {
    let mut f = Fixture::new();
    f.add_source("notes", "", &[("a.md", "# A\n\nsome text\n")]);
    f.reindex();
    let models = f.library.models();
    let embedder = quarry_core::models::default_embedding_model();
    let collection = f.library.collections().unwrap()[0].clone();
    assert_eq!(collection.embedding_model.as_deref(), Some(embedder));
    let e = f.library.remove_model(embedder).unwrap_err();
    assert_eq!(e.code(), "model_in_use");
    assert!(e.to_string().contains("collection `notes`"), "{e}");
    assert!(models.find(embedder).is_ok(), "nothing was removed");

    // The chat model `auto` stands for (the default, unless this machine measured a better
    // one) answers the seeded configuration's modes.
    let llm = quarry_core::llm::speed::choose(models).model;
    let llm = llm.as_str();
    let e = f.library.remove_model(llm).unwrap_err();
    assert!(
        e.to_string()
            .contains("orchestrator configuration `default` (mode `grounded`)"),
        "{e}"
    );

    // A model nobody uses goes.
    let gguf = f.docs.path().join("spare.gguf");
    std::fs::write(&gguf, b"GGUF and nothing else").unwrap();
    let spare = models
        .import(
            &gguf,
            Some("spare-chat"),
            quarry_core::models::ModelKind::Llm,
        )
        .unwrap();
    assert!(f.library.model_users("spare-chat").unwrap().is_empty());
    let removed = f.library.remove_model("spare-chat").unwrap();
    assert_eq!(removed, spare.dir);
    assert!(!spare.dir.exists());
    assert_eq!(
        f.library.remove_model("spare-chat").unwrap_err().code(),
        "unknown_model"
    );
}

#[test]
fn the_default_pipeline_s_reranker_is_chosen_and_saved_as_a_new_version() {
    let f = Fixture::new();
    let library = &f.library;
    assert_eq!(
        library.pipeline_reranker("default").unwrap().as_deref(),
        Some("jina-reranker-v2-base-multilingual")
    );
    // Only an installed reranker can be chosen.
    let e = library
        .set_pipeline_reranker(
            "default",
            Some("ms-marco-minilm-l6-v2"),
            &Principal::administrator(),
        )
        .unwrap_err();
    assert!(e.to_string().contains("ms-marco-minilm-l6-v2"), "{e}");

    // An imported cross-encoder folder (ONNX header and tokenizer files).
    let folder = f.docs.path().join("tiny-reranker");
    std::fs::create_dir_all(&folder).unwrap();
    std::fs::write(folder.join("model.onnx"), [0x08u8, 0x07, 0x12, 0x00]).unwrap();
    for name in [
        "tokenizer.json",
        "config.json",
        "special_tokens_map.json",
        "tokenizer_config.json",
    ] {
        std::fs::write(folder.join(name), "{}").unwrap();
    }
    library
        .models()
        .import(
            &folder,
            Some("tiny-reranker"),
            quarry_core::models::ModelKind::Reranker,
        )
        .unwrap();
    let before = library.pipeline("default").unwrap().versions.len();
    let saved = library
        .set_pipeline_reranker(
            "default",
            Some("tiny-reranker"),
            &Principal::administrator(),
        )
        .unwrap();
    assert_eq!(
        library.pipeline("default").unwrap().versions.len(),
        before + 1
    );
    assert_eq!(
        library.pipeline_reranker("default").unwrap().as_deref(),
        Some("tiny-reranker")
    );
    let snapshot = &saved.tools["retrieve-hybrid-coverage"];
    assert_eq!(
        snapshot.retrieval_settings().unwrap().rerank.unwrap().model,
        "tiny-reranker"
    );
    assert!(library
        .model_users("tiny-reranker")
        .unwrap()
        .contains(&"tool `retrieve-hybrid-coverage` (its reranker)".to_string()));

    // None turns reranking off.
    library
        .set_pipeline_reranker("default", None, &Principal::administrator())
        .unwrap();
    assert_eq!(library.pipeline_reranker("default").unwrap(), None);
}

/// The `max_per_document` of the default pipeline's retrieval tool in the tool itself, the
/// pipeline's newest version and the chat's newest revision.
fn answers_per_page(library: &Library) -> [Option<u64>; 3] {
    let setting = |tool: &quarry_core::ToolDefinition| tool.settings["max_per_document"].as_u64();
    let slug = "retrieve-hybrid-coverage";
    let pipeline = library.pipeline("default").unwrap();
    let revision = library.orchestrator_revision("default", None).unwrap();
    [
        setting(&library.tool(slug).unwrap()),
        setting(&pipeline.saved.unwrap().tools[slug]),
        setting(&revision.pipelines["default"].tools[slug]),
    ]
}

#[test]
fn a_library_seeded_before_a_seed_was_amended_takes_it_up_in_the_tool_the_pipeline_and_the_chat() {
    let f = Fixture::new();
    // Seeded today: no amendment to take up.
    assert_eq!(answers_per_page(&f.library), [Some(0); 3]);
    assert_eq!(
        f.library.orchestrator_revisions("default").unwrap().len(),
        1
    );

    // As seeded before (two passages per page), and a second library nobody changed the seed
    // of that chose its own value.
    let old = |value: i64| {
        let db = rusqlite::Connection::open(f.data.path().join("quarry.db")).unwrap();
        db.execute_batch(&format!(
            r#"UPDATE tools SET definition = json_set(definition, '$.settings.max_per_document', {value})
                 WHERE slug = 'retrieve-hybrid-coverage';
               UPDATE pipeline_versions SET definition = json_set(definition,
                 '$.tools."retrieve-hybrid-coverage".settings.max_per_document', {value});
               UPDATE orchestrator_revisions SET snapshot = json_set(snapshot,
                 '$.pipelines.default.tools."retrieve-hybrid-coverage".settings.max_per_document', {value});
               DELETE FROM meta WHERE key IN ('seeds_revision', 'seeds_followed');"#
        ))
        .unwrap();
    };
    old(2);
    let library = f.reopen(Default::default());
    assert_eq!(answers_per_page(&library), [Some(0); 3]);
    let pipeline = library.pipeline("default").unwrap();
    assert_eq!(pipeline.versions, [1, 2]);
    let amended_by = pipeline.saved.unwrap().saved_by;
    assert!(amended_by.starts_with("quarry ("), "{amended_by}");
    // The chat runs it through a new revision of its configuration, applied by the amendment.
    let revision = library.orchestrator_revision("default", None).unwrap();
    assert_eq!(revision.revision, 2);
    assert_eq!(revision.applied_by, amended_by);
    assert_eq!(revision.pipelines["default"].version, Some(2));
    // Once.
    drop(library);
    let library = f.reopen(Default::default());
    assert_eq!(library.orchestrator_revisions("default").unwrap().len(), 2);
    assert_eq!(library.pipeline("default").unwrap().versions, [1, 2]);

    // A value somebody chose stays everywhere.
    drop(library);
    old(5);
    let library = f.reopen(Default::default());
    assert_eq!(answers_per_page(&library), [Some(5); 3]);
    assert_eq!(library.orchestrator_revisions("default").unwrap().len(), 2);
}
