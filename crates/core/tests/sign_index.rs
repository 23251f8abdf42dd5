//! The in-memory sign bits stay in step with the library: vectors embedded after the copy was
//! made join it, deleted ones drop out of results, and many deletions trigger a rebuild.

mod common;

use quarry_core::{ChunkId, Library};

use common::{reindex, Fixture};

fn vector(chunk: ChunkId) -> Vec<f32> {
    let seed = chunk.0;
    (0..384)
        .map(|d| {
            if (seed * 31 + d * 7) % 5 < 2 {
                1.0
            } else {
                -1.0
            }
        })
        .collect()
}

fn embed_everything(library: &mut Library) -> usize {
    let collection = library.collections().unwrap().remove(0);
    let pending = library
        .store()
        .pending_chunks(collection.id, "all-minilm-l6-v2-int8", 10_000)
        .unwrap();
    let db = library.store().path().to_path_buf();
    let mut store = quarry_core::store::Store::open(&db).unwrap();
    let table = store
        .ensure_vector_table("all-minilm-l6-v2-int8", 384)
        .unwrap();
    let rows: Vec<(ChunkId, Vec<f32>)> = pending
        .iter()
        .map(|p| (p.id, quarry_core::embed::normalized(vector(p.id))))
        .collect();
    if let Some(last) = rows.last().map(|r| r.0) {
        store
            .store_vectors(&table, collection.id, &rows, last)
            .unwrap();
    }
    rows.len()
}

#[test]
fn the_copy_follows_new_and_deleted_vectors() {
    let mut f = Fixture::new();
    let notes: Vec<(String, String)> = (0..5)
        .map(|i| (format!("{i}.md"), format!("# Note {i}\n\nText number {i}.")))
        .collect();
    let notes: Vec<(&str, &String)> = notes.iter().map(|(n, t)| (n.as_str(), t)).collect();
    f.add_source("notes", "", &notes);
    let Fixture {
        docs, mut library, ..
    } = f;
    reindex(&mut library);
    assert_eq!(embed_everything(&mut library), 5);
    let collection = library.collections().unwrap().remove(0);
    let table = library
        .store()
        .vector_table("all-minilm-l6-v2-int8")
        .unwrap()
        .unwrap();
    let index = library.sign_index(&table, collection.id).unwrap();
    assert_eq!(index.lock().unwrap().len(), 5);

    // Three new files, embedded after the copy was made: the next use picks them up.
    for i in 5..8 {
        std::fs::write(
            docs.path().join(format!("{i}.md")),
            format!("# Note {i}\n\nMore text {i}."),
        )
        .unwrap();
    }
    reindex(&mut library);
    assert_eq!(embed_everything(&mut library), 3);
    let index = library.sign_index(&table, collection.id).unwrap();
    assert_eq!(index.lock().unwrap().len(), 8);

    // A deleted file's vector is gone from results even though the copy still lists it.
    let gone_id = library.document(&docs.path().join("6.md")).unwrap().chunks[0].id;
    std::fs::remove_file(docs.path().join("6.md")).unwrap();
    reindex(&mut library);
    let query = quarry_core::embed::normalized(vector(gone_id));
    let mut guard = index.lock().unwrap();
    let hits = library
        .store()
        .nearest_chunks(&table, collection.id, &query, 3, 4, Some(&mut guard))
        .unwrap();
    assert!(!hits.iter().any(|(id, _)| *id == gone_id), "{hits:?}");
    assert_eq!(hits.len(), 3);
}
