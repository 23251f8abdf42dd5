//! What the user searches first is embedded first. The embedding lane walks a collection by
//! chunk id (the cursor in `embedding_progress`); a document that a search found or the app
//! opened while its chunks still wait is queued here (`embed_first`), and the lane embeds its
//! chunks between two batches of the walk, ahead of the cursor.
//!
//! Those chunks are noted in `embedded_ahead` until the cursor passes them: the searches'
//! sign-bit copy (`sign_index`) picks up new vectors by cursor range, and reads this table for
//! the ones ahead of it; the walk, reaching them, finds their vectors and only moves on.
//!
//! Whole collections go first too: one that a scoped search or the assistant named while it
//! waited (`collections.embed_first`) is walked before the others, the latest request first,
//! even if the lane is partway through another.

use rusqlite::{params, OptionalExtension};

use super::vectors::{pending_chunk, write_vectors};
use super::{Collection, PendingChunk, Store, Tx, VectorKind, VectorTable};
use crate::error::Result;
use crate::ids::{ChunkId, CollectionId, DocumentId};

/// Documents queued at most: the oldest requests drop out first.
const QUEUED_AT_MOST: i64 = 256;

/// The next chunks the lane embeds ahead of its walk: all of one collection and model.
#[derive(Debug)]
pub(crate) struct EmbedFirst {
    /// The collection.
    pub collection_id: CollectionId,
    /// The model filling it (the pending one, else the serving one).
    pub model_id: String,
    /// Chunks of the queued documents, the latest request first.
    pub chunks: Vec<PendingChunk>,
    /// Queued documents these chunks finish, or that need nothing any more: they leave the
    /// queue once the chunks are stored.
    pub finished: Vec<DocumentId>,
}

/// `items` without repeats, in their order, that `keep` holds for.
fn distinct_where<T: Copy + PartialEq>(
    items: &[T],
    mut keep: impl FnMut(T) -> Result<bool>,
) -> Result<Vec<T>> {
    let mut kept = Vec::new();
    for &item in items {
        if !kept.contains(&item) && keep(item)? {
            kept.push(item);
        }
    }
    Ok(kept)
}

/// The model filling collection `c` (the pending one, else the serving one), as SQL.
const FILLING_MODEL: &str = "COALESCE(c.pending_model, c.embedding_model)";

/// Chunks of document `?1` beyond the filling model's cursor that the lane has not dealt with
/// ahead of it; `{has_vector}` is [`Store::has_vector_sql`]'s test.
fn waiting_chunks_sql(has_vector: &str) -> String {
    format!(
        "SELECT ch.id, ch.text, d.title, {has_vector} FROM chunks ch
         JOIN documents d ON d.id = ch.document_id
         JOIN sources s ON s.id = d.source_id
         JOIN collections c ON c.id = s.collection_id
         WHERE ch.document_id = ?1 AND ch.repeated = 0 AND {FILLING_MODEL} IS NOT NULL
           AND ch.id > COALESCE((SELECT last_chunk_id FROM embedding_progress ep
                                 WHERE ep.collection_id = c.id AND ep.model_id = {FILLING_MODEL}), 0)
           AND NOT EXISTS (SELECT 1 FROM embedded_ahead a WHERE a.collection_id = c.id
                           AND a.model_id = {FILLING_MODEL} AND a.chunk_id = ch.id)
         ORDER BY ch.id LIMIT ?2"
    )
}

impl Store {
    /// Queues `documents` (best first) to be embedded before the rest of their collections:
    /// those of them whose collection has an embedding model and some of whose chunks still
    /// wait for it. Returns how many were queued; writes nothing when none waits, nor while
    /// another connection writes (the indexer's batch: a search does not wait for it).
    pub fn queue_for_vectors(&self, documents: &[DocumentId]) -> Result<usize> {
        let waiting = distinct_where(documents, |d| self.awaits_vectors(d))?;
        self.write_requests(
            &waiting,
            "INSERT INTO embed_first(document_id, requested)
             VALUES (?1, (SELECT COALESCE(MAX(requested), 0) + 1 FROM embed_first))
             ON CONFLICT(document_id) DO UPDATE SET requested = excluded.requested",
            |tx| {
                tx.execute(
                    "DELETE FROM embed_first WHERE document_id NOT IN
                     (SELECT document_id FROM embed_first ORDER BY requested DESC LIMIT ?1)",
                    [QUEUED_AT_MOST],
                )?;
                Ok(())
            },
        )
    }

    /// Puts `collections` (named by a scoped search or the assistant) ahead of the others in
    /// the lane's walk: those of them that wait for vectors and have no standing request.
    /// Returns how many were requested; writes nothing when none was, nor while another
    /// connection writes.
    pub fn queue_collections_for_vectors(&self, collections: &[CollectionId]) -> Result<usize> {
        let waiting = distinct_where(collections, |c| self.collection_awaits_request(c))?;
        self.write_requests(
            &waiting,
            "UPDATE collections SET embed_first =
               (SELECT COALESCE(MAX(embed_first), 0) + 1 FROM collections) WHERE id = ?1",
            |_| Ok(()),
        )
    }

    /// Requests each of `waiting` with `request` (`?1` its id), then runs `then` in the same
    /// transaction. The first of them is requested last, so the lane, taking the latest
    /// request first, takes it first. Writes nothing when `waiting` is empty, nor while
    /// another connection writes (a search does not wait for the indexer's batch). Returns
    /// how many were requested.
    fn write_requests<T: rusqlite::ToSql>(
        &self,
        waiting: &[T],
        request: &str,
        then: impl FnOnce(&Tx<'_>) -> Result<()>,
    ) -> Result<usize> {
        if waiting.is_empty() {
            return Ok(0);
        }
        let Some(tx) = self.write_if_free()? else {
            return Ok(0);
        };
        {
            let mut statement = tx.prepare_cached(request)?;
            for id in waiting.iter().rev() {
                statement.execute([id])?;
            }
        }
        then(&tx)?;
        tx.commit()?;
        Ok(waiting.len())
    }

    /// Whether `collection` has no standing request and chunks that wait for its filling model.
    fn collection_awaits_request(&self, collection: CollectionId) -> Result<bool> {
        let row: Option<(Option<i64>, Option<String>)> = self
            .conn()
            .query_row(
                "SELECT embed_first, COALESCE(pending_model, embedding_model)
                 FROM collections WHERE id = ?1",
                [collection],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()?;
        match row {
            Some((None, Some(model_id))) => {
                Ok(!self.pending_chunks(collection, &model_id, 1)?.is_empty())
            }
            _ => Ok(false),
        }
    }

    /// The collection the lane walks first: the latest standing request.
    pub(crate) fn collection_embedded_first(&self) -> Result<Option<CollectionId>> {
        Ok(self
            .conn()
            .query_row(
                "SELECT id FROM collections WHERE embed_first IS NOT NULL
                 ORDER BY embed_first DESC LIMIT 1",
                [],
                |r| r.get(0),
            )
            .optional()?)
    }

    /// Every collection in the order the lane walks them: the requested ones, latest first,
    /// then the rest by name; each with whether a request for it stands.
    pub(crate) fn collections_in_walk_order(&self) -> Result<Vec<(Collection, bool)>> {
        let mut stmt = self.conn().prepare_cached(&format!(
            "SELECT {}, embed_first IS NOT NULL FROM collections
             ORDER BY embed_first IS NULL, embed_first DESC, name",
            Collection::COLUMNS
        ))?;
        let rows = stmt.query_map([], |r| {
            Ok((Collection::from_row(r)?, r.get(Collection::COLUMN_COUNT)?))
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// The lane has walked `collection` to its end: a request for it is answered.
    pub(crate) fn collection_walked(&self, collection: CollectionId) -> Result<()> {
        let tx = self.write()?;
        tx.execute(
            "UPDATE collections SET embed_first = NULL WHERE id = ?1",
            [collection],
        )?;
        tx.commit()?;
        Ok(())
    }

    /// Whether some chunk of `document` waits for a vector the lane has not given it.
    fn awaits_vectors(&self, document: DocumentId) -> Result<bool> {
        // Every search asks this of its best hits: a document the walk has passed (the usual
        // case) is answered from the index of its chunks alone, without visiting each chunk
        // (15.8 ms a search for the Book's ten largest pages otherwise).
        let mut past = self.conn().prepare_cached(&format!(
            "SELECT MAX(ch.id) <= COALESCE((SELECT last_chunk_id FROM embedding_progress ep
                                           WHERE ep.collection_id = c.id AND ep.model_id = {FILLING_MODEL}), 0)
             FROM chunks ch
             JOIN documents d ON d.id = ch.document_id
             JOIN sources s ON s.id = d.source_id
             JOIN collections c ON c.id = s.collection_id
             WHERE ch.document_id = ?1"
        ))?;
        let passed: Option<bool> = past.query_row([document], |r| r.get(0))?;
        if passed != Some(false) {
            return Ok(false);
        }
        let mut stmt = self
            .conn()
            .prepare_cached(&format!("SELECT EXISTS ({})", waiting_chunks_sql("0")))?;
        Ok(stmt.query_row(params![document, 1], |r| r.get(0))?)
    }

    /// Documents waiting in the queue.
    pub fn queued_for_vectors(&self) -> Result<Vec<DocumentId>> {
        let mut stmt = self
            .conn()
            .prepare_cached("SELECT document_id FROM embed_first ORDER BY requested DESC")?;
        let rows = stmt.query_map([], |r| r.get(0))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// Up to `limit` chunks of the queued documents, the latest request first, all of the
    /// collection and model of that request; `None` when the queue is empty.
    pub(crate) fn next_embed_first(&self, limit: usize) -> Result<Option<EmbedFirst>> {
        let queued = self.queued_for_vectors()?;
        let mut next: Option<EmbedFirst> = None;
        for document in queued {
            let filling: Option<(CollectionId, Option<String>)> = self
                .conn()
                .query_row(
                    &format!(
                        "SELECT c.id, {FILLING_MODEL} FROM documents d
                         JOIN sources s ON s.id = d.source_id
                         JOIN collections c ON c.id = s.collection_id WHERE d.id = ?1"
                    ),
                    [document],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .optional()?;
            let batch = next.get_or_insert_with(EmbedFirst::empty);
            let Some((collection_id, Some(model_id))) = filling else {
                // Its collection lost its model meanwhile: nothing to embed.
                batch.finished.push(document);
                continue;
            };
            if batch.model_id.is_empty() {
                batch.collection_id = collection_id;
                batch.model_id = model_id.clone();
            }
            if (batch.collection_id, batch.model_id.as_str()) != (collection_id, &model_id) {
                continue;
            }
            let room = limit.saturating_sub(batch.chunks.len());
            if room == 0 {
                break;
            }
            let has_vector = self.has_vector_sql(&model_id)?;
            let mut stmt = self
                .conn()
                .prepare_cached(&waiting_chunks_sql(&has_vector))?;
            let rows = stmt.query_map(params![document, room as i64 + 1], pending_chunk)?;
            let mut chunks: Vec<PendingChunk> = rows.collect::<rusqlite::Result<_>>()?;
            if chunks.len() <= room {
                batch.finished.push(document);
            } else {
                chunks.truncate(room);
            }
            batch.chunks.extend(chunks);
        }
        Ok(next)
    }

    /// Stores what the lane gave chunks of the queue (see [`Store::store_vectors`]) without
    /// moving the cursor: the vectors, what each chunk got, every chunk of `dealt` noted as
    /// dealt with ahead of the cursor, and `finished` taken off the queue, in one
    /// transaction.
    pub(crate) fn store_vectors_ahead(
        &mut self,
        table: &VectorTable,
        collection_id: CollectionId,
        vectors: &[(ChunkId, Vec<f32>)],
        kinds: &[(ChunkId, VectorKind)],
        dealt: &[ChunkId],
        finished: &[DocumentId],
    ) -> Result<usize> {
        let tx = self.write()?;
        let stored = write_vectors(&tx, table, collection_id, vectors, kinds)?;
        {
            let mut note = tx.prepare_cached(
                "INSERT OR IGNORE INTO embedded_ahead(collection_id, model_id, chunk_id)
                 SELECT ?1, ?2, ?3 WHERE EXISTS (SELECT 1 FROM chunks WHERE id = ?3)",
            )?;
            for chunk_id in dealt {
                note.execute(params![collection_id, table.model_id, chunk_id])?;
            }
        }
        dequeue(&tx, finished)?;
        tx.commit()?;
        Ok(stored)
    }

    /// Takes `documents` off the queue.
    pub(crate) fn dequeue_for_vectors(&self, documents: &[DocumentId]) -> Result<()> {
        let tx = self.write()?;
        dequeue(&tx, documents)?;
        tx.commit()?;
        Ok(())
    }

    /// Chunks dealt with ahead of the cursor that were noted after `after_seq`, with their
    /// notes' sequence numbers, oldest first.
    pub(super) fn embedded_ahead_since(
        &self,
        collection_id: CollectionId,
        model_id: &str,
        after_seq: i64,
    ) -> Result<Vec<(i64, ChunkId)>> {
        let mut stmt = self.conn().prepare_cached(
            "SELECT seq, chunk_id FROM embedded_ahead
             WHERE collection_id = ?1 AND model_id = ?2 AND seq > ?3 ORDER BY seq",
        )?;
        let rows = stmt.query_map(params![collection_id, model_id, after_seq], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// How many chunks of the collection were dealt with ahead of the cursor of `model_id`
    /// (they are counted as embedded once the cursor passes them).
    pub(super) fn embedded_ahead_count(
        &self,
        collection_id: CollectionId,
        model_id: &str,
    ) -> Result<i64> {
        Ok(self.conn().query_row(
            "SELECT COUNT(*) FROM embedded_ahead a JOIN chunks ch ON ch.id = a.chunk_id
             WHERE a.collection_id = ?1 AND a.model_id = ?2",
            params![collection_id, model_id],
            |r| r.get(0),
        )?)
    }
}

impl EmbedFirst {
    /// No collection chosen yet.
    fn empty() -> EmbedFirst {
        EmbedFirst {
            collection_id: CollectionId(0),
            model_id: String::new(),
            chunks: Vec::new(),
            finished: Vec::new(),
        }
    }
}

/// Forgets the chunks dealt with ahead of the cursor that it has now reached, in the caller's
/// transaction.
pub(super) fn forget_passed(
    tx: &rusqlite::Transaction<'_>,
    collection_id: CollectionId,
    model_id: &str,
    cursor: ChunkId,
) -> Result<()> {
    tx.prepare_cached(
        "DELETE FROM embedded_ahead WHERE collection_id = ?1 AND model_id = ?2 AND chunk_id <= ?3",
    )?
    .execute(params![collection_id, model_id, cursor])?;
    Ok(())
}

fn dequeue(tx: &rusqlite::Transaction<'_>, documents: &[DocumentId]) -> Result<()> {
    let mut done = tx.prepare_cached("DELETE FROM embed_first WHERE document_id = ?1")?;
    for document in documents {
        done.execute([document])?;
    }
    Ok(())
}

/// Forgets every chunk dealt with ahead of `model_id`'s cursor in the collection (the model
/// left it), in the caller's transaction.
pub(super) fn forget_model(
    tx: &rusqlite::Transaction<'_>,
    collection_id: CollectionId,
    model_id: &str,
) -> Result<()> {
    tx.execute(
        "DELETE FROM embedded_ahead WHERE collection_id = ?1 AND model_id = ?2",
        params![collection_id, model_id],
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::store::test_support::{collection_with_source, temp_store, write_document};
    use crate::store::{ChunkLocation, ChunkRecord, NewChunk, SignIndex};

    fn chunks(n: usize, word: &str) -> Vec<NewChunk> {
        (0..n)
            .map(|i| NewChunk {
                text: format!("Paragraph {i} about the {word}."),
                heading_path: String::new(),
                location: ChunkLocation::default(),
                token_count: 8,
                reader_span: None,
            })
            .collect()
    }

    /// A unit vector pointing at dimension `i`.
    fn axis(i: usize) -> Vec<f32> {
        let mut v = vec![0.0; 16];
        v[i % 16] = 1.0;
        v
    }

    fn vectors_of(chunks: &[ChunkRecord]) -> Vec<(ChunkId, Vec<f32>)> {
        chunks
            .iter()
            .map(|c| (c.id, axis(c.id.0 as usize)))
            .collect()
    }

    /// A store with one collection `notes` (model `m`, 16 dimensions) holding a document of
    /// `n` chunks per word, written in order; its table; each document's chunks.
    fn notes(
        words: &[&str],
        n: usize,
    ) -> (tempfile::TempDir, Store, VectorTable, Vec<Vec<ChunkRecord>>) {
        let (dir, mut store) = temp_store();
        let source = collection_with_source(&mut store, "notes", "internal", "m", Path::new("/d"));
        let documents = words
            .iter()
            .map(|word| {
                let path = format!("/d/{word}.md");
                write_document(
                    &store,
                    &source,
                    Path::new(&path),
                    word,
                    90,
                    &chunks(n, word),
                )
            })
            .collect();
        let table = store.ensure_vector_table("m", 16).unwrap();
        (dir, store, table, documents)
    }

    #[test]
    fn a_queued_document_is_embedded_ahead_of_the_cursor_and_held_once_by_the_sign_copy() {
        let (_dir, mut store, table, documents) = notes(&["pump", "valve", "gauge"], 3);
        let c = store.collections().unwrap()[0].id;
        let (first, middle, last) = (&documents[0], &documents[1], &documents[2]);
        store
            .store_vectors(&table, c, &vectors_of(first), &[], first[2].id)
            .unwrap();
        let mut copy = SignIndex::build(&store, &table, c).unwrap();
        assert_eq!(copy.len(), 3);

        // A document the walk has passed is not queued; one still waiting is, once.
        let (done, waiting) = (first[0].document_id, last[0].document_id);
        assert_eq!(store.queue_for_vectors(&[done]).unwrap(), 0);
        assert_eq!(
            store.queue_for_vectors(&[waiting, waiting, done]).unwrap(),
            1
        );
        assert_eq!(store.queued_for_vectors().unwrap(), vec![waiting]);

        // The lane takes its chunks (2 at a time), storing them without moving the cursor.
        let next = store.next_embed_first(2).unwrap().unwrap();
        assert_eq!((next.collection_id, next.model_id.as_str()), (c, "m"));
        let ids: Vec<ChunkId> = next.chunks.iter().map(|p| p.id).collect();
        assert_eq!(ids, vec![last[0].id, last[1].id]);
        assert!(next.finished.is_empty(), "a chunk of it is left");
        store
            .store_vectors_ahead(&table, c, &vectors_of(&last[..2]), &[], &ids, &[])
            .unwrap();
        let next = store.next_embed_first(2).unwrap().unwrap();
        assert_eq!(next.chunks.len(), 1);
        assert_eq!(next.chunks[0].id, last[2].id);
        assert_eq!(next.finished, vec![waiting]);
        store
            .store_vectors_ahead(
                &table,
                c,
                &vectors_of(&last[2..]),
                &[],
                &[last[2].id],
                &next.finished,
            )
            .unwrap();
        assert!(
            store.next_embed_first(2).unwrap().is_none(),
            "the queue is empty"
        );
        assert_eq!(store.embedding_cursor(c, "m").unwrap(), first[2].id.0);
        let coverage = store.embedding_coverage().unwrap().remove(0);
        assert_eq!(
            (coverage.embedded, coverage.ahead, coverage.total),
            (3, 3, 9)
        );
        // Nothing of it waits any more: searching it again queues nothing.
        assert_eq!(store.queue_for_vectors(&[waiting]).unwrap(), 0);

        // The searches' copy finds the vectors given ahead of the cursor…
        copy.refresh(&store, &table, c).unwrap();
        assert_eq!(copy.len(), 6);
        let query = axis(last[1].id.0 as usize);
        let found = store
            .nearest_chunks(&table, c, &query, 1, 4, Some(&mut copy))
            .unwrap();
        assert_eq!(found[0].0, last[1].id);
        // …and, when the walk reaches them (their vectors are there: it only moves on), adds
        // none of them again, but does add the walk's own.
        store
            .store_vectors(&table, c, &vectors_of(middle), &[], last[2].id)
            .unwrap();
        copy.refresh(&store, &table, c).unwrap();
        assert_eq!(copy.len(), 9);
        let coverage = store.embedding_coverage().unwrap().remove(0);
        assert_eq!(
            (coverage.embedded, coverage.ahead),
            (9, 0),
            "the notes are forgotten"
        );
        // A copy built while vectors stand ahead of the cursor holds each once too.
        assert_eq!(SignIndex::build(&store, &table, c).unwrap().len(), 9);
    }

    #[test]
    fn a_copy_built_with_vectors_ahead_of_the_cursor_does_not_add_them_again() {
        let (_dir, mut store, table, documents) = notes(&["pump", "valve"], 2);
        let c = store.collections().unwrap()[0].id;
        let (first, last) = (&documents[0], &documents[1]);
        store.queue_for_vectors(&[last[0].document_id]).unwrap();
        let next = store.next_embed_first(8).unwrap().unwrap();
        let dealt: Vec<ChunkId> = next.chunks.iter().map(|p| p.id).collect();
        store
            .store_vectors_ahead(&table, c, &vectors_of(last), &[], &dealt, &next.finished)
            .unwrap();
        let mut copy = SignIndex::build(&store, &table, c).unwrap();
        assert_eq!(copy.len(), 2);
        store
            .store_vectors(&table, c, &vectors_of(first), &[], last[1].id)
            .unwrap();
        copy.refresh(&store, &table, c).unwrap();
        assert_eq!(
            copy.len(),
            4,
            "the walk's two added, the two ahead not again"
        );
    }

    #[test]
    fn a_collection_without_a_model_queues_nothing() {
        let (_dir, mut store, _table, documents) = notes(&["pump"], 2);
        let written = &documents[0];
        store.set_collection_model("notes", None).unwrap();
        assert_eq!(
            store.queue_for_vectors(&[written[0].document_id]).unwrap(),
            0
        );
        assert!(store.next_embed_first(8).unwrap().is_none());
    }

    #[test]
    fn a_named_collection_that_waits_is_walked_first_until_its_walk_ends() {
        let (_dir, mut store, table, documents) = notes(&["pump"], 2);
        let notes_id = store.collections().unwrap()[0].id;
        let logs = collection_with_source(&mut store, "logs", "internal", "m", Path::new("/l"));
        write_document(
            &store,
            &logs,
            Path::new("/l/a.md"),
            "a",
            90,
            &chunks(2, "log"),
        );
        let archive =
            collection_with_source(&mut store, "archive", "internal", "m", Path::new("/a"));
        let logs_id = logs.collection_id;
        let archive_id = archive.collection_id;
        let names = |store: &Store| -> Vec<(String, bool)> {
            store
                .collections_in_walk_order()
                .unwrap()
                .into_iter()
                .map(|(c, requested)| (c.name, requested))
                .collect()
        };
        let name = |n: &str, r: bool| (n.to_string(), r);
        assert_eq!(
            names(&store),
            [
                name("archive", false),
                name("logs", false),
                name("notes", false)
            ]
        );

        // `archive` has nothing to embed: not requested. The first named goes first.
        let asked = [notes_id, archive_id, logs_id, notes_id];
        assert_eq!(store.queue_collections_for_vectors(&asked).unwrap(), 2);
        assert_eq!(store.collection_embedded_first().unwrap(), Some(notes_id));
        assert_eq!(
            names(&store),
            [
                name("notes", true),
                name("logs", true),
                name("archive", false)
            ]
        );
        // A standing request is not written again.
        assert_eq!(store.queue_collections_for_vectors(&[logs_id]).unwrap(), 0);

        // Walked to its end, `notes` leaves the front; once embedded, it is not asked for again.
        let notes_chunks = &documents[0];
        store
            .store_vectors(
                &table,
                notes_id,
                &vectors_of(notes_chunks),
                &[],
                notes_chunks[1].id,
            )
            .unwrap();
        store.collection_walked(notes_id).unwrap();
        assert_eq!(store.collection_embedded_first().unwrap(), Some(logs_id));
        assert_eq!(store.queue_collections_for_vectors(&[notes_id]).unwrap(), 0);
    }

    #[test]
    fn a_hint_is_not_written_while_another_connection_writes() {
        let (_dir, store, _table, documents) = notes(&["pump"], 2);
        let waiting = documents[0][0].document_id;
        let notes_id = store.collections().unwrap()[0].id;
        let indexer = Store::open(store.path()).unwrap();
        let batch = indexer.write().unwrap();
        // Another write would wait up to 30 s for the lock and then fail; a hint gives up.
        assert_eq!(store.queue_for_vectors(&[waiting]).unwrap(), 0);
        assert_eq!(store.queue_collections_for_vectors(&[notes_id]).unwrap(), 0);
        drop(batch);
        assert_eq!(store.queue_for_vectors(&[waiting]).unwrap(), 1);
        assert_eq!(store.queue_collections_for_vectors(&[notes_id]).unwrap(), 1);
    }
}
