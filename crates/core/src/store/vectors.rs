//! Vectors in sqlite-vec: one `vec0` table per embedding model, the collection as partition
//! key, rowid = chunk id. Each row holds the unit-length float vector and its sign bits; a KNN
//! either scans the floats exactly or scans the bits (a 32× smaller coarse pass) and rescores
//! the best candidates with the floats.
//!
//! Chunks are deleted in many ways (a new revision, a removed file, source or collection); a
//! trigger per vector table removes the chunk's vector in the same transaction, since vec0
//! has no cascade.

use rusqlite::{params, OptionalExtension};
use serde::Serialize;

use super::{now_unix, Store};
use crate::error::{Error, Result};
use crate::ids::{ChunkId, CollectionId};

/// Vectors per vec0 chunk (its storage unit). vec0 reads one vector of a chunk through an
/// incremental blob that walks the chunk's overflow pages, so the rescoring pass's point reads
/// cost about in proportion to it: with the default 1024, 400 reads took 90 ms at 100k vectors;
/// with 64, the whole sign-bit pass plus rescoring takes about 1.5× an in-memory scan.
const VEC_CHUNK_SIZE: usize = 64;

/// A model's vector table.
#[derive(Debug, Clone, Serialize)]
pub struct VectorTable {
    /// The embedding model.
    pub model_id: String,
    /// Vector size.
    pub dimension: usize,
    /// The vec0 table.
    pub table: String,
}

impl VectorTable {
    /// Whether a sign-bit column exists (it needs a dimension divisible by 8).
    pub fn has_bits(&self) -> bool {
        self.dimension.is_multiple_of(8)
    }
}

/// A chunk waiting for its vector.
#[derive(Debug, Clone)]
pub struct PendingChunk {
    /// Chunk id.
    pub id: ChunkId,
    /// What gets embedded: the document title, then the chunk text.
    pub text: String,
    /// Where the chunk's own text starts in `text`.
    pub body_start: usize,
    /// It already has its vector: carried over from the same text in the revision before.
    pub has_vector: bool,
}

/// Gives each new chunk the vectors, of every model, of the old chunk with the same text
/// (`(old, new)` pairs), in the caller's transaction.
pub(super) fn carry_vectors_over(
    tx: &rusqlite::Transaction<'_>,
    pairs: &[(i64, i64)],
) -> Result<()> {
    if pairs.is_empty() {
        return Ok(());
    }
    let tables: Vec<(String, usize)> = {
        let mut stmt = tx.prepare_cached("SELECT table_name, dimension FROM vector_tables")?;
        let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get::<_, i64>(1)? as usize)))?;
        rows.collect::<rusqlite::Result<_>>()?
    };
    for (table, dimension) in tables {
        let bits = dimension.is_multiple_of(8);
        let mut read = tx.prepare_cached(&format!(
            "SELECT collection_id, embedding FROM {table} WHERE rowid = ?1"
        ))?;
        let mut write = tx.prepare_cached(&format!(
            "INSERT OR REPLACE INTO {table}(rowid, collection_id, embedding{}) VALUES (?1, ?2, ?3{})",
            if bits { ", embedding_bits" } else { "" },
            if bits { ", vec_quantize_binary(?3)" } else { "" },
        ))?;
        for (old, new) in pairs {
            let found: Option<(i64, Vec<u8>)> = read
                .query_row([old], |r| Ok((r.get(0)?, r.get(1)?)))
                .optional()?;
            if let Some((collection_id, embedding)) = found {
                write.execute(params![new, collection_id, embedding])?;
            }
        }
    }
    Ok(())
}

/// What the embedding lane gave a chunk (`chunks.vector_kind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VectorKind {
    /// The model read it.
    Own = 1,
    /// It took the vector of a chunk of the same shape (see `embed::need`).
    Shared = 2,
    /// No vector: it carries no prose, and full text finds it.
    LexicalOnly = 3,
}

/// How far a collection's vectors are.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "specta", derive(specta::Type))]
pub struct EmbeddingCoverage {
    /// The collection.
    pub collection: String,
    /// The model serving its searches.
    pub model: Option<String>,
    /// A model being switched to.
    pub pending_model: Option<String>,
    /// Chunks with a vector from the model being filled (the pending one, else the serving one).
    pub embedded: i64,
    /// Chunks in the collection.
    pub total: i64,
    /// Of the embedded, chunks that took a near-duplicate's vector instead of the model's.
    pub shared: i64,
    /// Of the embedded, chunks left to full text: they carry no prose.
    pub lexical_only: i64,
    /// Of the chunks the lane has yet to reach, those it took first because a search found
    /// their document or the app opened it (they count as embedded once it reaches them).
    pub ahead: i64,
    /// The time left to embed the rest at the lane's last measured rate, in seconds; `None`
    /// when nothing is left or no rate was measured yet.
    pub eta_secs: Option<u64>,
}

/// The pending-chunks query. CROSS JOIN keeps chunks the outer loop, walked by id from the
/// cursor: left to choose, SQLite went from the collection to every one of its chunks and
/// sorted them, 0.28 s a batch at 542,192 chunks (most of the lane's time), 0.1 ms this way.
fn pending_sql(has_vector: &str) -> String {
    format!(
        "SELECT ch.id, ch.text, d.title, {has_vector} FROM chunks ch
         CROSS JOIN documents d ON d.id = ch.document_id
         CROSS JOIN sources s ON s.id = d.source_id
         WHERE ch.id > ?1 AND s.collection_id = ?2 AND ch.repeated = 0
         ORDER BY ch.id LIMIT ?3"
    )
}

/// A pending chunk from a row of `ch.id, ch.text, d.title, has_vector`.
pub(super) fn pending_chunk(r: &rusqlite::Row<'_>) -> rusqlite::Result<PendingChunk> {
    let text: String = r.get(1)?;
    let title: Option<String> = r.get(2)?;
    // The title gives a passage its context (measured: about +0.01 nDCG@10).
    let (text, body_start) = match title {
        Some(t) if !t.is_empty() && !text.starts_with(t.as_str()) => {
            (format!("{t}\n{text}"), t.len() + 1)
        }
        _ => (text, 0),
    };
    Ok(PendingChunk {
        id: r.get(0)?,
        text,
        body_start,
        has_vector: r.get(3)?,
    })
}

/// Writes vectors for chunks (skipping chunks deleted meanwhile) and notes what each chunk of
/// `kinds` got, in the caller's transaction. Returns how many vectors were written.
pub(super) fn write_vectors(
    tx: &rusqlite::Transaction<'_>,
    table: &VectorTable,
    collection_id: CollectionId,
    vectors: &[(ChunkId, Vec<f32>)],
    kinds: &[(ChunkId, VectorKind)],
) -> Result<usize> {
    let mut stored = 0;
    let mut mark = tx.prepare_cached("UPDATE chunks SET vector_kind = ?2 WHERE id = ?1")?;
    for (chunk_id, kind) in kinds {
        mark.execute(params![chunk_id, *kind as i64])?;
    }
    let insert = if table.has_bits() {
        format!(
                "INSERT OR REPLACE INTO {}(rowid, collection_id, embedding, embedding_bits)
                 SELECT ?1, ?2, ?3, vec_quantize_binary(?3) WHERE EXISTS (SELECT 1 FROM chunks WHERE id = ?1)",
                table.table
            )
    } else {
        format!(
            "INSERT OR REPLACE INTO {}(rowid, collection_id, embedding)
                 SELECT ?1, ?2, ?3 WHERE EXISTS (SELECT 1 FROM chunks WHERE id = ?1)",
            table.table
        )
    };
    let mut stmt = tx.prepare(&insert)?;
    for (chunk_id, vector) in vectors {
        if vector.len() != table.dimension {
            return Err(Error::Internal(format!(
                "vector of {} numbers for a {}-number table",
                vector.len(),
                table.dimension
            )));
        }
        stored += stmt.execute(params![chunk_id, collection_id, f32_bytes(vector)])?;
    }
    Ok(stored)
}

/// Registers sqlite-vec on one connection. Per connection, not process-wide: a process-wide
/// auto-extension would also load it into every other SQLite user of the process (WebKit's).
pub(crate) fn register(conn: &rusqlite::Connection) -> Result<()> {
    type Init = unsafe extern "C" fn(
        *mut rusqlite::ffi::sqlite3,
        *mut *mut std::os::raw::c_char,
        *const rusqlite::ffi::sqlite3_api_routines,
    ) -> std::os::raw::c_int;
    // SAFETY: sqlite3_vec_init has the standard extension entry signature (the crate declares
    // it without arguments); with SQLITE_CORE it ignores the api-routines pointer.
    let rc = unsafe {
        let init: Init = std::mem::transmute(sqlite_vec::sqlite3_vec_init as *const ());
        init(conn.handle(), std::ptr::null_mut(), std::ptr::null())
    };
    if rc != rusqlite::ffi::SQLITE_OK {
        return Err(Error::Internal(format!("sqlite-vec failed to load ({rc})")));
    }
    Ok(())
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn bytes_f32(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// Dot product with eight independent sums, so the compiler can use SIMD lanes (a plain
/// `sum()` must add in order and stays scalar).
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let (a8, b8) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = a8
        .remainder()
        .iter()
        .zip(b8.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in a8.zip(b8) {
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    acc.iter().sum::<f32>() + tail
}

impl Store {
    /// The vector table of `model_id`, if one was made.
    pub fn vector_table(&self, model_id: &str) -> Result<Option<VectorTable>> {
        Ok(self
            .conn
            .query_row(
                "SELECT model_id, dimension, table_name FROM vector_tables WHERE model_id = ?1",
                [model_id],
                |r| {
                    Ok(VectorTable {
                        model_id: r.get(0)?,
                        dimension: r.get::<_, i64>(1)? as usize,
                        table: r.get(2)?,
                    })
                },
            )
            .optional()?)
    }

    /// The vector table of `model_id`, created (with its delete trigger) if needed.
    pub fn ensure_vector_table(&mut self, model_id: &str, dimension: usize) -> Result<VectorTable> {
        if let Some(t) = self.vector_table(model_id)? {
            if t.dimension != dimension {
                return Err(Error::InvalidModel {
                    path: model_id.into(),
                    reason: format!(
                        "it now produces {dimension}-number vectors, but this library holds {}-number vectors from it; import it under another id",
                        t.dimension
                    ),
                });
            }
            return Ok(t);
        }
        let slug: String = model_id
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() {
                    c.to_ascii_lowercase()
                } else {
                    '_'
                }
            })
            .collect();
        let tx = self.write()?;
        let n: i64 = tx.query_row("SELECT COUNT(*) FROM vector_tables", [], |r| r.get(0))?;
        let table = format!("vec{n}_{slug}");
        let bits = if dimension.is_multiple_of(8) {
            format!(", embedding_bits bit[{dimension}]")
        } else {
            String::new()
        };
        tx.execute_batch(&format!(
            "CREATE VIRTUAL TABLE {table} USING vec0(
                collection_id integer partition key,
                embedding float[{dimension}] distance_metric=cosine{bits},
                chunk_size={VEC_CHUNK_SIZE}
            );
            CREATE TRIGGER {table}_chunk_deleted AFTER DELETE ON chunks BEGIN
                DELETE FROM {table} WHERE rowid = OLD.id;
            END;"
        ))?;
        tx.execute(
            "INSERT INTO vector_tables(model_id, dimension, table_name, created_at) VALUES (?1, ?2, ?3, ?4)",
            params![model_id, dimension as i64, table, now_unix()],
        )?;
        tx.commit()?;
        Ok(VectorTable {
            model_id: model_id.to_string(),
            dimension,
            table,
        })
    }

    /// Chunk id up to which the collection is embedded with `model_id`. Ids are never
    /// reused and always grow, so everything at or below the cursor has a vector.
    pub fn embedding_cursor(&self, collection_id: CollectionId, model_id: &str) -> Result<i64> {
        Ok(self
            .conn
            .query_row(
                "SELECT last_chunk_id FROM embedding_progress WHERE collection_id = ?1 AND model_id = ?2",
                params![collection_id, model_id],
                |r| r.get(0),
            )
            .optional()?
            .unwrap_or(0))
    }

    /// The next chunks of a collection without a vector from `model_id`, oldest first.
    pub fn pending_chunks(
        &self,
        collection_id: CollectionId,
        model_id: &str,
        limit: usize,
    ) -> Result<Vec<PendingChunk>> {
        let cursor = self.embedding_cursor(collection_id, model_id)?;
        let has_vector = self.has_vector_sql(model_id)?;
        let mut stmt = self.conn.prepare_cached(&pending_sql(&has_vector))?;
        let rows = stmt.query_map(params![cursor, collection_id, limit as i64], pending_chunk)?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// The SQL that says whether a chunk (`ch`) has a vector in `model_id`'s table.
    pub(super) fn has_vector_sql(&self, model_id: &str) -> Result<String> {
        Ok(match self.vector_table(model_id)? {
            Some(t) => format!("EXISTS (SELECT 1 FROM {} WHERE rowid = ch.id)", t.table),
            None => "0".to_string(),
        })
    }

    /// Stores vectors for chunks (skipping chunks deleted meanwhile), notes what each chunk
    /// of `kinds` got, and moves the cursor to `through_chunk_id`, in one transaction.
    /// Returns how many vectors were stored.
    pub fn store_vectors(
        &mut self,
        table: &VectorTable,
        collection_id: CollectionId,
        vectors: &[(ChunkId, Vec<f32>)],
        kinds: &[(ChunkId, VectorKind)],
        through_chunk_id: ChunkId,
    ) -> Result<usize> {
        let tx = self.write()?;
        let stored = write_vectors(&tx, table, collection_id, vectors, kinds)?;
        tx.execute(
            "INSERT INTO embedding_progress(collection_id, model_id, last_chunk_id) VALUES (?1, ?2, ?3)
             ON CONFLICT(collection_id, model_id) DO UPDATE SET last_chunk_id = MAX(last_chunk_id, excluded.last_chunk_id)",
            params![collection_id, table.model_id, through_chunk_id],
        )?;
        super::embed_first::forget_passed(&tx, collection_id, &table.model_id, through_chunk_id)?;
        tx.commit()?;
        Ok(stored)
    }

    /// The vector `table` holds for a chunk, if any.
    pub fn vector_of(&self, table: &VectorTable, chunk_id: ChunkId) -> Result<Option<Vec<f32>>> {
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT embedding FROM {} WHERE rowid = ?1",
            table.table
        ))?;
        let bytes: Option<Vec<u8>> = stmt.query_row([chunk_id], |r| r.get(0)).optional()?;
        Ok(bytes.map(|b| bytes_f32(&b)))
    }

    /// Writes vectors without checking that their chunks exist or moving any cursor: for
    /// `quarry bench vector`, which fills a table with synthetic vectors.
    #[doc(hidden)]
    pub fn store_vectors_unchecked(
        &mut self,
        table: &VectorTable,
        collection_id: CollectionId,
        vectors: &[(i64, Vec<f32>)],
    ) -> Result<()> {
        let tx = self.write()?;
        {
            let mut stmt = tx.prepare(&format!(
                "INSERT OR REPLACE INTO {}(rowid, collection_id, embedding{}) VALUES (?1, ?2, ?3{})",
                table.table,
                if table.has_bits() { ", embedding_bits" } else { "" },
                if table.has_bits() { ", vec_quantize_binary(?3)" } else { "" },
            ))?;
            for (id, v) in vectors {
                stmt.execute(params![id, collection_id, f32_bytes(v)])?;
            }
        }
        tx.commit()?;
        Ok(())
    }

    /// Embedded and total chunks of every collection.
    pub fn embedding_coverage(&self) -> Result<Vec<EmbeddingCoverage>> {
        self.collections()?
            .into_iter()
            .map(|c| self.coverage_of(c))
            .collect()
    }

    /// Embedded and total chunks of one collection (a count over its chunks).
    pub fn coverage_of(&self, c: crate::store::Collection) -> Result<EmbeddingCoverage> {
        let filling = c
            .pending_model
            .clone()
            .or_else(|| c.embedding_model.clone());
        let cursor = match &filling {
            Some(m) => self.embedding_cursor(c.id, m)?,
            None => 0,
        };
        let (embedded, total, shared, lexical_only): (i64, i64, i64, i64) = self.conn.query_row(
            "SELECT COALESCE(SUM(ch.id <= ?2 AND ch.repeated = 0), 0), COALESCE(SUM(ch.repeated = 0), 0),
                    COALESCE(SUM(ch.id <= ?2 AND ch.repeated = 0 AND ch.vector_kind = ?3), 0),
                    COALESCE(SUM(ch.id <= ?2 AND ch.repeated = 0 AND ch.vector_kind = ?4), 0)
             FROM chunks ch
             JOIN documents d ON d.id = ch.document_id
             JOIN sources s ON s.id = d.source_id WHERE s.collection_id = ?1",
            params![
                c.id,
                cursor,
                VectorKind::Shared as i64,
                VectorKind::LexicalOnly as i64
            ],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
        )?;
        let rate: Option<f64> = self.conn.query_row(
            "SELECT embed_chunks_per_sec FROM collections WHERE id = ?1",
            [c.id],
            |r| r.get(0),
        )?;
        let ahead = match &filling {
            Some(m) => self.embedded_ahead_count(c.id, m)?,
            None => 0,
        };
        let eta_secs = rate
            .filter(|r| *r > 0.0 && embedded < total)
            .map(|r| ((total - embedded) as f64 / r).ceil() as u64);
        Ok(EmbeddingCoverage {
            collection: c.name,
            model: c.embedding_model,
            pending_model: c.pending_model,
            embedded,
            total,
            shared,
            lexical_only,
            ahead,
            eta_secs,
        })
    }

    /// Keeps the embedding lane's measured rate for `collection_id` (chunks a second), what
    /// the time left in [`EmbeddingCoverage`] is reckoned at.
    pub fn record_embedding_rate(
        &mut self,
        collection_id: CollectionId,
        chunks_per_sec: f64,
    ) -> Result<()> {
        self.conn.execute(
            "UPDATE collections SET embed_chunks_per_sec = ?2 WHERE id = ?1",
            params![collection_id, chunks_per_sec],
        )?;
        Ok(())
    }

    /// Points a collection at another embedding model. With vectors already serving, the new
    /// model becomes pending and the old vectors keep serving until it is complete.
    pub fn set_collection_model(&mut self, name: &str, model_id: Option<&str>) -> Result<()> {
        let c = self
            .collection_by_name(name)?
            .ok_or_else(|| Error::CollectionNotFound(name.to_string()))?;
        let tx = self.write()?;
        match (c.embedding_model.as_deref(), model_id) {
            (Some(current), Some(new)) if current == new => {
                tx.execute(
                    "UPDATE collections SET pending_model = NULL WHERE id = ?1",
                    [c.id],
                )?;
            }
            (Some(_), Some(new)) => {
                tx.execute(
                    "UPDATE collections SET pending_model = ?2 WHERE id = ?1",
                    params![c.id, new],
                )?;
            }
            (None, new) | (Some(_), new @ None) => {
                tx.execute(
                    "UPDATE collections SET embedding_model = ?2, pending_model = NULL WHERE id = ?1",
                    params![c.id, new],
                )?;
            }
        }
        tx.commit()?;
        Ok(())
    }

    /// Makes a fully embedded pending model the serving one and drops the old model's vectors
    /// of that collection.
    pub fn finish_model_switch(&mut self, collection_id: CollectionId) -> Result<()> {
        let c = self
            .collections()?
            .into_iter()
            .find(|c| c.id == collection_id)
            .ok_or_else(|| Error::Internal(format!("collection {collection_id} vanished")))?;
        let (Some(old), Some(new)) = (c.embedding_model.clone(), c.pending_model.clone()) else {
            return Ok(());
        };
        let old_table = self.vector_table(&old)?;
        let tx = self.write()?;
        tx.execute(
            "UPDATE collections SET embedding_model = ?2, pending_model = NULL WHERE id = ?1",
            params![c.id, new],
        )?;
        if let Some(t) = old_table {
            tx.execute(
                &format!(
                    "DELETE FROM {} WHERE rowid IN (SELECT ch.id FROM chunks ch
                     JOIN documents d ON d.id = ch.document_id
                     JOIN sources s ON s.id = d.source_id WHERE s.collection_id = ?1)",
                    t.table
                ),
                [c.id],
            )?;
        }
        tx.execute(
            "DELETE FROM embedding_progress WHERE collection_id = ?1 AND model_id = ?2",
            params![c.id, old],
        )?;
        super::embed_first::forget_model(&tx, c.id, &old)?;
        tx.commit()?;
        Ok(())
    }

    /// The `k` nearest chunks of one collection by cosine similarity, best first, scanning
    /// every float vector (exact).
    pub(super) fn exact_nearest(
        &self,
        table: &VectorTable,
        collection_id: CollectionId,
        query: &[f32],
        k: usize,
    ) -> Result<Vec<(ChunkId, f32)>> {
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT rowid, distance FROM {} WHERE embedding MATCH ?1 AND k = ?2 AND collection_id = ?3",
            table.table
        ))?;
        let rows = stmt.query_map(params![f32_bytes(query), k as i64, collection_id], |r| {
            Ok((r.get::<_, ChunkId>(0)?, 1.0 - r.get::<_, f64>(1)? as f32))
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// The `n` chunks of one collection nearest to `query` by Hamming distance of the sign
    /// bits, from vec0's own bit column (in no useful order).
    pub(super) fn sign_bit_nearest(
        &self,
        table: &VectorTable,
        collection_id: CollectionId,
        query: &[f32],
        n: usize,
    ) -> Result<Vec<i64>> {
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT rowid FROM {} WHERE embedding_bits MATCH vec_quantize_binary(?1) AND k = ?2 AND collection_id = ?3",
            table.table
        ))?;
        let rows = stmt.query_map(params![f32_bytes(query), n as i64, collection_id], |r| {
            r.get::<_, i64>(0)
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// `query`'s sign bits, as vec0 stores them.
    pub(super) fn sign_bits(&self, query: &[f32]) -> Result<Vec<u8>> {
        Ok(self
            .conn
            .query_row("SELECT vec_quantize_binary(?1)", [f32_bytes(query)], |r| {
                r.get(0)
            })?)
    }

    /// `candidates` scored exactly against `query`, best first (ties by id), cut to `k`; and
    /// how many were found deleted.
    pub(super) fn rescore(
        &self,
        table: &VectorTable,
        query: &[f32],
        candidates: Vec<i64>,
        k: usize,
    ) -> Result<(Vec<(ChunkId, f32)>, usize)> {
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT embedding FROM {} WHERE rowid = ?1",
            table.table
        ))?;
        let mut scored = Vec::with_capacity(candidates.len());
        let mut gone = 0;
        for id in candidates {
            let mut rows = stmt.query([id])?;
            match rows.next()? {
                Some(row) => {
                    let blob = row.get_ref(0)?.as_blob().map_err(rusqlite::Error::from)?;
                    scored.push((ChunkId(id), dot(query, &bytes_f32(blob))));
                }
                None => gone += 1,
            }
        }
        scored.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        scored.truncate(k);
        Ok((scored, gone))
    }

    /// How many vectors a table holds for a collection (a full scan: tests only).
    #[cfg(test)]
    pub(super) fn vector_count(
        &self,
        table: &VectorTable,
        collection_id: CollectionId,
    ) -> Result<i64> {
        Ok(self.conn.query_row(
            &format!(
                "SELECT COUNT(*) FROM {} WHERE collection_id = ?1",
                table.table
            ),
            [collection_id],
            |r| r.get(0),
        )?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_time_left_is_reckoned_at_the_lane_s_last_rate() {
        use std::path::Path;

        use crate::store::test_support::{collection_with_source, temp_store, write_document};
        use crate::store::{ChunkLocation, ChunkRecord, NewChunk};
        let (_dir, mut store) = temp_store();
        let source = collection_with_source(&mut store, "notes", "internal", "m", Path::new("/d"));
        let chunks: Vec<NewChunk> = (0..40)
            .map(|i| NewChunk {
                text: format!("Paragraph {i} about the pump."),
                heading_path: String::new(),
                location: ChunkLocation::default(),
                token_count: 8,
                reader_span: None,
            })
            .collect();
        let written = write_document(&store, &source, Path::new("/d/a.md"), "A", 900, &chunks);
        assert_eq!(
            store.embedding_coverage().unwrap()[0].eta_secs,
            None,
            "no rate measured yet"
        );

        let table = store.ensure_vector_table("m", 2).unwrap();
        let embed = |store: &mut Store, chunks: &[ChunkRecord]| {
            let vectors: Vec<(ChunkId, Vec<f32>)> =
                chunks.iter().map(|c| (c.id, vec![1.0, 0.0])).collect();
            let through = chunks.last().unwrap().id;
            store
                .store_vectors(&table, source.collection_id, &vectors, &[], through)
                .unwrap();
        };
        embed(&mut store, &written[..10]);
        store
            .record_embedding_rate(source.collection_id, 4.0)
            .unwrap();
        let left = store.embedding_coverage().unwrap().remove(0);
        assert_eq!((left.embedded, left.total), (10, 40));
        assert_eq!(left.eta_secs, Some(8), "30 chunks at 4 a second");

        embed(&mut store, &written[10..]);
        assert_eq!(
            store.embedding_coverage().unwrap()[0].eta_secs,
            None,
            "nothing left"
        );
    }

    #[test]
    fn pending_chunks_are_read_by_id_from_the_cursor_not_collected_and_sorted() {
        let (_dir, store) = crate::store::test_support::temp_store();
        let plan: Vec<String> = store
            .conn
            .prepare(&format!("EXPLAIN QUERY PLAN {}", pending_sql("0")))
            .unwrap()
            .query_map(params![0, 1, 32], |r| r.get::<_, String>(3))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        assert!(
            plan[0].contains("ch USING INTEGER PRIMARY KEY (rowid>?)"),
            "{plan:?}"
        );
        assert!(
            !plan.iter().any(|step| step.contains("TEMP B-TREE")),
            "{plan:?}"
        );
    }
}
