//! The vector stage, and the one path by which anything in the engine runs a vector query:
//! which collections can answer (each with its model and table, or the readiness sentence
//! saying why not), and the nearest-neighbour query through the shared sign-bit copy.
//! `knowledge_search` runs [`query_collection`] per namespace, so its warnings and the search
//! box's readiness issues are the same sentences.

use std::sync::Arc;
use std::time::Instant;

use super::{elapsed_us, ReadinessIssue, RetrievalSettings, SearchContext, SearchMode, StageTrace};
use super::{SearchRequest, Store};
use crate::embed::Embedder;
use crate::error::{Error, Result};
use crate::ids::{ChunkId, CollectionId};
use crate::store::{Collection, SharedSignIndex, VectorTable};

/// A check's answer: what was checked for, or why the collection cannot answer.
pub(crate) type Checked<T> = std::result::Result<T, ReadinessIssue>;

/// What a vector query needs from the library: its database and its sign-bit copies.
#[derive(Clone, Copy)]
pub(crate) struct VectorContext<'a> {
    pub store: &'a Store,
    /// The in-memory sign bits of a collection's vectors, built or refreshed; `None` scans
    /// the vectors exactly (a test's stub).
    pub sign_index: &'a dyn Fn(&VectorTable, CollectionId) -> Result<Option<SharedSignIndex>>,
}

/// A collection a vector stream searches, with its model and table.
pub(super) struct VectorTarget {
    collection_id: CollectionId,
    table: VectorTable,
    embedder: Arc<Embedder>,
}

/// The collections a vector stream can search (none when the mode has no vector stream).
/// Missing models and partial vectors become readiness issues; asking for a model other than
/// a collection's is an error (the plugin manual's rule), and so is a vector-only search that
/// nothing can answer.
pub(super) fn targets(
    ctx: &SearchContext<'_>,
    request: &SearchRequest,
    wanted: &[&Collection],
    readiness: &mut Vec<ReadinessIssue>,
) -> Result<Vec<VectorTarget>> {
    if !request.settings.mode.uses_vector() {
        return Ok(Vec::new());
    }
    let mut targets = Vec::new();
    for c in wanted {
        targets.extend(target(ctx, request, c, readiness)?);
    }
    if request.settings.mode == SearchMode::Vector && targets.is_empty() && !wanted.is_empty() {
        // Nothing can answer a vector-only search: say why instead of returning nothing.
        if let Some(issue) = readiness.first() {
            return Err(Error::InvalidSetting {
                field: "mode".into(),
                reason: format!("vector search is not possible here: {}", issue.message),
            });
        }
    }
    Ok(targets)
}

/// Collection `c` as a target, or `None` with the reason added to `readiness`.
fn target(
    ctx: &SearchContext<'_>,
    request: &SearchRequest,
    c: &Collection,
    readiness: &mut Vec<ReadinessIssue>,
) -> Result<Option<VectorTarget>> {
    let model = match embedding_model_of(c, request.embedding_model.as_deref())? {
        Ok(model) => model,
        Err(issue) => {
            readiness.push(issue);
            return Ok(None);
        }
    };
    // The model first: a missing or corrupt model is the more useful thing to report.
    let embedder = match (ctx.embedder)(model) {
        Ok(e) => e,
        // A vector-only search cannot do without it: the model's own error says what to run.
        Err(e) if request.settings.mode == SearchMode::Vector => return Err(e),
        Err(e) => {
            readiness.push(ReadinessIssue {
                component: "embedding_model",
                message: e.to_string(),
            });
            return Ok(None);
        }
    };
    let table = match vector_table_of(ctx.store, c, model)? {
        Ok(table) => table,
        Err(issue) => {
            readiness.push(issue);
            return Ok(None);
        }
    };
    readiness.extend(partly_embedded(ctx.store, c, model)?);
    Ok(Some(VectorTarget {
        collection_id: c.id,
        table,
        embedder,
    }))
}

/// Stage `vector` for query variant `variant`: each target's nearest chunks, merged best
/// first, cut to `vector_candidates`, without those below `min_similarity`.
pub(super) fn stage(
    ctx: &SearchContext<'_>,
    targets: &[VectorTarget],
    settings: &RetrievalSettings,
    text: &str,
    variant: usize,
) -> Result<(Vec<(ChunkId, f32)>, StageTrace)> {
    let t = Instant::now();
    let mut list: Vec<(ChunkId, f32)> = Vec::new();
    let mut models = Vec::new();
    for target in targets {
        let query = target.embedder.embed_query(text)?;
        list.extend(nearest_in_collection(
            ctx.vectors(),
            &target.table,
            target.collection_id,
            &query,
            settings.vector_candidates,
            settings.ann_breadth,
        )?);
        if !models.contains(&target.embedder.id()) {
            models.push(target.embedder.id());
        }
    }
    list.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    list.truncate(settings.vector_candidates);
    let before = list.len();
    list.retain(|x| x.1 >= settings.min_similarity);
    let method = if settings.ann_breadth == 0 {
        "exact scan".to_string()
    } else {
        format!(
            "in-memory sign-bit pass, {} rescored exactly",
            settings.ann_breadth
        )
    };
    let trace = StageTrace {
        stage: "vector",
        variant: Some(variant),
        candidates: list.len(),
        took_us: elapsed_us(t),
        detail: format!(
            "cosine KNN with {} ({method}); {} below min_similarity dropped",
            models.join(", "),
            before - list.len()
        ),
    };
    Ok((list, trace))
}

/// What one collection's vector query found.
pub(crate) struct CollectionHits {
    /// `(chunk id, cosine similarity)`, best first.
    pub hits: Vec<(ChunkId, f32)>,
    /// Set when only part of the collection is embedded yet.
    pub partial: Option<ReadinessIssue>,
}

/// The `k` nearest chunks of collection `c` to `query`, a vector of `model`, with the checks
/// of the search's vector stage: `knowledge_search`'s per-namespace query. A collection that
/// cannot answer gives its readiness issue; a model other than the collection's is an error.
pub(crate) fn query_collection(
    vectors: VectorContext<'_>,
    c: &Collection,
    model: &str,
    query: &[f32],
    k: usize,
    breadth: usize,
) -> Result<Checked<CollectionHits>> {
    if let Err(issue) = embedding_model_of(c, Some(model))? {
        return Ok(Err(issue));
    }
    let table = match vector_table_of(vectors.store, c, model)? {
        Ok(table) => table,
        Err(issue) => return Ok(Err(issue)),
    };
    let hits = nearest_in_collection(vectors, &table, c.id, query, k, breadth)?;
    // A failed progress check only loses the note: the hits are good.
    let partial = partly_embedded(vectors.store, c, model).ok().flatten();
    Ok(Ok(CollectionHits { hits, partial }))
}

/// The `k` nearest chunks of one collection, best first. A positive `breadth` takes the
/// sign-bit pass over the process's shared in-memory copy (locked for the query); 0 scans
/// every vector exactly.
pub(crate) fn nearest_in_collection(
    vectors: VectorContext<'_>,
    table: &VectorTable,
    collection_id: CollectionId,
    query: &[f32],
    k: usize,
    breadth: usize,
) -> Result<Vec<(ChunkId, f32)>> {
    let index = if breadth > 0 {
        (vectors.sign_index)(table, collection_id)?
    } else {
        None
    };
    let mut guard = index
        .as_ref()
        .map(|i| i.lock().unwrap_or_else(|e| e.into_inner()));
    vectors.store.nearest_chunks(
        table,
        collection_id,
        query,
        k,
        breadth,
        guard.as_deref_mut(),
    )
}

/// The model that embedded `c`, or the issue when none did. Asking for another model is an
/// error: vectors of two models are not comparable.
fn embedding_model_of<'c>(c: &'c Collection, requested: Option<&str>) -> Result<Checked<&'c str>> {
    let Some(model) = c.embedding_model.as_deref() else {
        return Ok(Err(ReadinessIssue {
            component: "embedding_model",
            message: format!(
                "collection `{}` has no embedding model (`quarry models use <model> -c {}`)",
                c.name, c.name
            ),
        }));
    };
    match requested {
        Some(requested) if requested != model => Err(Error::ModelMismatch {
            collection: c.name.clone(),
            embedded_with: model.to_string(),
            requested: requested.to_string(),
        }),
        _ => Ok(Ok(model)),
    }
}

/// `model`'s vector table, or the issue when nothing of `c` was embedded with it yet.
fn vector_table_of(store: &Store, c: &Collection, model: &str) -> Result<Checked<VectorTable>> {
    Ok(store.vector_table(model)?.ok_or_else(|| ReadinessIssue {
        component: "vectors_incomplete",
        message: format!(
            "collection `{}` has no vectors yet (run `quarry index` to embed it)",
            c.name
        ),
    }))
}

/// The issue when `c` is still being embedded with its serving `model`.
fn partly_embedded(store: &Store, c: &Collection, model: &str) -> Result<Option<ReadinessIssue>> {
    if c.pending_model.is_some() || store.pending_chunks(c.id, model, 1)?.is_empty() {
        return Ok(None);
    }
    Ok(Some(ReadinessIssue {
        component: "vectors_incomplete",
        message: format!(
            "collection `{}` is still being embedded; vector results cover only the chunks embedded so far",
            c.name
        ),
    }))
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;
    use crate::embed::normalized;
    use crate::store::test_support::temp_store;
    use crate::store::SignIndex;

    fn ask(store: &Store, name: &str, model: &str) -> Result<Checked<CollectionHits>> {
        let c = store
            .collection_by_name(name)?
            .expect("the collection exists");
        let sign_index = |t: &VectorTable, id: CollectionId| -> Result<Option<SharedSignIndex>> {
            Ok(Some(Arc::new(Mutex::new(SignIndex::build(store, t, id)?))))
        };
        let vectors = VectorContext {
            store,
            sign_index: &sign_index,
        };
        let query = normalized(vec![1.0; 8]);
        query_collection(vectors, &c, model, &query, 3, 400)
    }

    fn issue(answer: Result<Checked<CollectionHits>>) -> String {
        match answer {
            Ok(Err(issue)) => issue.message,
            Ok(Ok(_)) => panic!("answered"),
            Err(e) => panic!("{e}"),
        }
    }

    #[test]
    fn a_collection_query_says_why_it_cannot_answer_as_a_search_does() {
        let (_dir, mut store) = temp_store();
        let c = store
            .create_collection("c", "internal", "english", "m")
            .unwrap();
        assert_eq!(
            issue(ask(&store, "c", "m")),
            "collection `c` has no vectors yet (run `quarry index` to embed it)"
        );
        assert!(matches!(
            ask(&store, "c", "other"),
            Err(Error::ModelMismatch { .. })
        ));

        let table = store.ensure_vector_table("m", 8).unwrap();
        let away = normalized(vec![1.0, -1.0, 1.0, -1.0, 1.0, -1.0, 1.0, -1.0]);
        let rows = [(1, normalized(vec![1.0; 8])), (2, away)];
        store.store_vectors_unchecked(&table, c.id, &rows).unwrap();
        let found = ask(&store, "c", "m").unwrap().unwrap();
        assert_eq!(
            found.hits.iter().map(|h| h.0).collect::<Vec<_>>(),
            [ChunkId(1), ChunkId(2)]
        );
        assert!(found.partial.is_none());

        store.set_collection_model("c", None).unwrap();
        assert!(issue(ask(&store, "c", "m")).starts_with("collection `c` has no embedding model"));
    }
}
