//! An in-memory copy of a collection's sign bits (one bit per dimension: 48 bytes for a
//! 384-dimension vector), scanned with popcount for the approximate pass of a KNN search,
//! and that search ([`Store::nearest_chunks`]). It builds on the vector tables' primitives;
//! `vectors` knows nothing of it.
//!
//! vec0 scans its own bit column too, but pays per-chunk overhead that dominates at a million
//! vectors (about 400 ms); this scan is a tight loop over one array. The floats stay in vec0:
//! candidates are rescored there, so a vector deleted since the copy was made simply fails its
//! read and drops out. New vectors are picked up through the embedding cursor (chunk ids only
//! grow) and, for those the lane gave ahead of it (`embed_first`), through their notes; the
//! copy is rebuilt when too many of its entries have gone stale.

use std::collections::HashSet;

use rusqlite::params;

use super::vectors::VectorTable;
use super::Store;
use crate::error::Result;
use crate::ids::{ChunkId, CollectionId};

/// A sign index shared by the searches of a process.
pub type SharedSignIndex = std::sync::Arc<std::sync::Mutex<SignIndex>>;

/// The sign bits of one collection's vectors in one table.
#[derive(Debug, Default)]
pub struct SignIndex {
    words: usize,
    ids: Vec<i64>,
    bits: Vec<u64>,
    /// Embedding cursor the copy is complete through.
    cursor: i64,
    /// Chunks beyond the cursor the copy has dealt with (their vectors were given ahead of
    /// it): the cursor, passing them, must not add them twice.
    ahead: HashSet<i64>,
    /// The last note of a chunk dealt with ahead of the cursor that the copy has read.
    ahead_seq: i64,
    /// Entries whose vector was found gone at rescoring.
    stale: usize,
}

fn words_of(blob: &[u8], words: usize, out: &mut Vec<u64>) {
    for w in 0..words {
        let mut b = [0u8; 8];
        let start = w * 8;
        let end = (start + 8).min(blob.len());
        if start < end {
            b[..end - start].copy_from_slice(&blob[start..end]);
        }
        out.push(u64::from_le_bytes(b));
    }
}

#[inline(always)]
fn scan_into(bits: &[u64], query: &[u64], out: &mut [u16]) {
    let words = query.len();
    for (row, d) in bits.chunks_exact(words).zip(out.iter_mut()) {
        let mut sum = 0u32;
        for (a, b) in row.iter().zip(query) {
            sum += (a ^ b).count_ones();
        }
        *d = sum as u16;
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "popcnt")]
unsafe fn scan_popcnt(bits: &[u64], query: &[u64], out: &mut [u16]) {
    scan_into(bits, query, out)
}

fn hamming_scan(bits: &[u64], query: &[u64], out: &mut [u16]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("popcnt") {
        // SAFETY: the CPU has the instruction (checked just above).
        unsafe { scan_popcnt(bits, query, out) };
        return;
    }
    scan_into(bits, query, out)
}

impl Store {
    /// The `k` nearest chunks of one collection by cosine similarity, best first.
    ///
    /// `breadth` 0 scans every float vector (exact). Otherwise `max(breadth, k)` candidates
    /// nearest by Hamming distance of the sign bits are rescored exactly: taken from `index`
    /// (the in-memory copy) when given, else from vec0's own bit column.
    pub fn nearest_chunks(
        &self,
        table: &VectorTable,
        collection_id: CollectionId,
        query: &[f32],
        k: usize,
        breadth: usize,
        index: Option<&mut SignIndex>,
    ) -> Result<Vec<(ChunkId, f32)>> {
        if k == 0 {
            return Ok(Vec::new());
        }
        let coarse_k = breadth.max(k);
        let small = index.as_ref().is_some_and(|i| i.len() <= coarse_k);
        if breadth == 0 || !table.has_bits() || small {
            return self.exact_nearest(table, collection_id, query, k);
        }
        let candidates = match &index {
            Some(index) => index.candidates(&self.sign_bits(query)?, coarse_k),
            None => self.sign_bit_nearest(table, collection_id, query, coarse_k)?,
        };
        let (scored, gone) = self.rescore(table, query, candidates, k)?;
        if let Some(index) = index {
            index.note_stale(gone);
        }
        Ok(scored)
    }
}

impl SignIndex {
    /// Reads every sign-bit vector of `collection_id` from `table`.
    pub fn build(
        store: &Store,
        table: &VectorTable,
        collection_id: CollectionId,
    ) -> Result<SignIndex> {
        store.snapshot(|| SignIndex::build_in_snapshot(store, table, collection_id))
    }

    /// [`SignIndex::build`] inside one read transaction: the cursor, the notes and the
    /// vectors read must be of one state, or a batch stored between two reads would be both
    /// read and added again later.
    fn build_in_snapshot(
        store: &Store,
        table: &VectorTable,
        collection_id: CollectionId,
    ) -> Result<SignIndex> {
        let words = table.dimension.div_ceil(64);
        let cursor = store.embedding_cursor(collection_id, &table.model_id)?;
        let notes = store.embedded_ahead_since(collection_id, &table.model_id, 0)?;
        let mut index = SignIndex {
            words,
            cursor,
            ahead_seq: notes.last().map_or(0, |(seq, _)| *seq),
            ahead: notes
                .into_iter()
                .map(|(_, id)| id.0)
                .filter(|id| *id > cursor)
                .collect(),
            ..SignIndex::default()
        };
        if index
            .read_shadow_tables(store, table, collection_id)
            .is_err()
        {
            index.ids.clear();
            index.bits.clear();
            index.read_rows(store, table, collection_id)?;
        }
        Ok(index)
    }

    /// Row by row through vec0: always right, about 7 µs a vector.
    fn read_rows(
        &mut self,
        store: &Store,
        table: &VectorTable,
        collection_id: CollectionId,
    ) -> Result<()> {
        let mut stmt = store.conn().prepare(&format!(
            "SELECT rowid, embedding_bits FROM {} WHERE collection_id = ?1",
            table.table
        ))?;
        let mut rows = stmt.query([collection_id])?;
        while let Some(row) = rows.next()? {
            self.ids.push(row.get(0)?);
            let blob = row.get_ref(1)?.as_blob().map_err(rusqlite::Error::from)?;
            words_of(blob, self.words, &mut self.bits);
        }
        Ok(())
    }

    /// Chunk by chunk from vec0's shadow tables (sqlite-vec 0.1.9's layout: `_chunks` holds a
    /// validity bitmap and the rowids of each chunk's slots, `_vector_chunks01` the second
    /// vector column's slots): about 20× faster than row by row. Any surprise in the layout
    /// is an error, and the caller falls back to [`SignIndex::read_rows`]; a test checks that
    /// both agree.
    fn read_shadow_tables(
        &mut self,
        store: &Store,
        table: &VectorTable,
        collection_id: CollectionId,
    ) -> Result<()> {
        let bytes_per_vector = table.dimension / 8;
        let mut stmt = store.conn().prepare(&format!(
            "SELECT c.size, c.validity, c.rowids, v.vectors FROM {t}_chunks c
             JOIN {t}_vector_chunks01 v ON v.rowid = c.chunk_id
             WHERE c.partition00 = ?1 ORDER BY c.chunk_id",
            t = table.table
        ))?;
        let mut rows = stmt.query([collection_id])?;
        let layout = || crate::error::Error::Internal("unexpected vec0 chunk layout".into());
        while let Some(row) = rows.next()? {
            let size: i64 = row.get(0)?;
            let size = usize::try_from(size).map_err(|_| layout())?;
            let blob = |i| row.get_ref(i)?.as_blob().map_err(rusqlite::Error::from);
            let (validity, rowids, vectors) = (blob(1)?, blob(2)?, blob(3)?);
            if validity.len() * 8 < size
                || rowids.len() < size * 8
                || vectors.len() < size * bytes_per_vector
            {
                return Err(layout());
            }
            for slot in 0..size {
                if validity[slot / 8] & (1 << (slot % 8)) == 0 {
                    continue;
                }
                let id =
                    i64::from_le_bytes(rowids[slot * 8..slot * 8 + 8].try_into().expect("8 bytes"));
                self.ids.push(id);
                let start = slot * bytes_per_vector;
                words_of(
                    &vectors[start..start + bytes_per_vector],
                    self.words,
                    &mut self.bits,
                );
            }
        }
        Ok(())
    }

    /// Vectors in the copy (deleted ones included until a rebuild).
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// True when it holds nothing.
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// Brings the copy up to date: adds vectors embedded since it was made, or rebuilds it when
    /// much has changed (a large backfill, many deletions).
    pub fn refresh(
        &mut self,
        store: &Store,
        table: &VectorTable,
        collection_id: CollectionId,
    ) -> Result<()> {
        store.snapshot(|| self.refresh_in_snapshot(store, table, collection_id))
    }

    fn refresh_in_snapshot(
        &mut self,
        store: &Store,
        table: &VectorTable,
        collection_id: CollectionId,
    ) -> Result<()> {
        let cursor = store.embedding_cursor(collection_id, &table.model_id)?;
        let notes = store.embedded_ahead_since(collection_id, &table.model_id, self.ahead_seq)?;
        let many_stale = self.stale > 64 && self.stale * 5 > self.ids.len();
        if cursor == self.cursor && notes.is_empty() && !many_stale {
            return Ok(());
        }
        let passed: Vec<i64> = {
            let mut stmt = store.conn().prepare_cached(
                // Chunks walked by id, as `Store::pending_chunks` does (see there).
                "SELECT ch.id FROM chunks ch
                 CROSS JOIN documents d ON d.id = ch.document_id
                 CROSS JOIN sources s ON s.id = d.source_id
                 WHERE ch.id > ?1 AND ch.id <= ?2 AND s.collection_id = ?3 AND ch.repeated = 0
                 ORDER BY ch.id",
            )?;
            let rows = stmt.query_map(params![self.cursor, cursor, collection_id], |r| r.get(0))?;
            rows.collect::<rusqlite::Result<_>>()?
        };
        // Point reads cost about 0.1 ms each; past a few thousand a full read is cheaper.
        if many_stale || passed.len() + notes.len() > 4096 || cursor < self.cursor {
            *self = SignIndex::build_in_snapshot(store, table, collection_id)?;
            return Ok(());
        }
        let new_ids = self.take_new(passed, notes, cursor);
        let mut stmt = store.conn().prepare_cached(&format!(
            "SELECT embedding_bits FROM {} WHERE rowid = ?1",
            table.table
        ))?;
        for id in new_ids {
            let mut rows = stmt.query([id])?;
            if let Some(row) = rows.next()? {
                self.ids.push(id);
                words_of(
                    row.get_ref(0)?.as_blob().map_err(rusqlite::Error::from)?,
                    self.words,
                    &mut self.bits,
                );
            }
        }
        self.cursor = cursor;
        Ok(())
    }

    /// Of the chunks the cursor `passed` and those noted as dealt with ahead of it, the ones
    /// the copy does not hold yet; the notes are taken in.
    fn take_new(&mut self, passed: Vec<i64>, notes: Vec<(i64, ChunkId)>, cursor: i64) -> Vec<i64> {
        let mut new_ids: Vec<i64> = passed
            .into_iter()
            .filter(|id| !self.ahead.remove(id))
            .collect();
        for (seq, id) in notes {
            self.ahead_seq = self.ahead_seq.max(seq);
            // One at or below the cursor came in with `passed`.
            if id.0 > cursor && self.ahead.insert(id.0) {
                new_ids.push(id.0);
            }
        }
        // Noted chunks deleted before the cursor reached them.
        self.ahead.retain(|id| *id > cursor);
        new_ids
    }

    /// Records that `n` candidates were found deleted at rescoring.
    pub fn note_stale(&mut self, n: usize) {
        self.stale += n;
    }

    /// The `breadth` ids nearest to `query_bits` by Hamming distance (ties broken by position,
    /// so the answer is deterministic).
    pub fn candidates(&self, query_bits: &[u8], breadth: usize) -> Vec<i64> {
        if self.ids.is_empty() || breadth == 0 {
            return Vec::new();
        }
        let mut query = Vec::with_capacity(self.words);
        words_of(query_bits, self.words, &mut query);
        let mut distances = vec![0u16; self.ids.len()];
        hamming_scan(&self.bits, &query, &mut distances);
        // Counting selection: distances are small integers (at most the dimension).
        let mut histogram = vec![0usize; self.words * 64 + 1];
        for &d in &distances {
            histogram[d as usize] += 1;
        }
        let mut threshold = 0;
        let mut below = 0;
        for (d, &count) in histogram.iter().enumerate() {
            threshold = d;
            if below + count >= breadth {
                break;
            }
            below += count;
        }
        let mut at_threshold_room = breadth.saturating_sub(below);
        let mut out = Vec::with_capacity(breadth.min(self.ids.len()));
        for (i, &d) in distances.iter().enumerate() {
            let d = d as usize;
            if d < threshold {
                out.push(self.ids[i]);
            } else if d == threshold && at_threshold_room > 0 {
                out.push(self.ids[i]);
                at_threshold_room -= 1;
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::test_support::temp_store;

    #[test]
    fn shadow_table_read_matches_the_row_by_row_read() {
        let (_dir, mut store) = temp_store();
        let a = store
            .create_collection("a", "internal", "english", "test-model")
            .unwrap();
        let b = store
            .create_collection("b", "internal", "english", "test-model")
            .unwrap();
        let table = store.ensure_vector_table("m", 128).unwrap();
        let vector = |i: i64| -> Vec<f32> {
            (0..128)
                .map(|d| if (i * 7 + d) % 3 == 0 { 1.0 } else { -1.0 })
                .collect()
        };
        // More than one vec0 chunk per partition, two partitions, and a deleted slot.
        let rows_a: Vec<(i64, Vec<f32>)> = (1..=150).map(|i| (i, vector(i))).collect();
        let rows_b: Vec<(i64, Vec<f32>)> = (151..=170).map(|i| (i, vector(i))).collect();
        store
            .store_vectors_unchecked(&table, a.id, &rows_a)
            .unwrap();
        store
            .store_vectors_unchecked(&table, b.id, &rows_b)
            .unwrap();
        store
            .conn()
            .execute(&format!("DELETE FROM {} WHERE rowid = 42", table.table), [])
            .unwrap();
        for c in [a.id, b.id] {
            let mut fast = SignIndex {
                words: 2,
                ..SignIndex::default()
            };
            fast.read_shadow_tables(&store, &table, c).unwrap();
            let mut slow = SignIndex {
                words: 2,
                ..SignIndex::default()
            };
            slow.read_rows(&store, &table, c).unwrap();
            let mut f: Vec<_> = fast.ids.iter().zip(fast.bits.chunks(2)).collect();
            let mut s: Vec<_> = slow.ids.iter().zip(slow.bits.chunks(2)).collect();
            f.sort();
            s.sort();
            assert_eq!(f, s);
            assert_eq!(fast.len(), if c == a.id { 149 } else { 20 });
        }
    }

    fn unit(seed: u64, dim: usize) -> Vec<f32> {
        let mut x = seed.wrapping_mul(0x9E3779B97F4A7C15) | 1;
        let v: Vec<f32> = (0..dim)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x % 2000) as f32 / 1000.0 - 1.0
            })
            .collect();
        let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        v.into_iter().map(|x| x / norm).collect()
    }

    #[test]
    fn exact_and_sign_bit_search_agree_and_deleted_chunks_lose_their_vectors() {
        let (_dir, mut store) = temp_store();
        let c = store
            .create_collection("c", "internal", "english", "test-model")
            .unwrap();
        let table = store.ensure_vector_table("m", 64).unwrap();
        assert_eq!(
            store.ensure_vector_table("m", 64).unwrap().table,
            table.table
        );
        assert_eq!(
            store.ensure_vector_table("m", 32).unwrap_err().code(),
            "invalid_model"
        );
        let rows: Vec<(i64, Vec<f32>)> = (1..=300).map(|i| (i, unit(i as u64, 64))).collect();
        store.store_vectors_unchecked(&table, c.id, &rows).unwrap();
        let query = unit(77, 64);
        let exact = store
            .nearest_chunks(&table, c.id, &query, 5, 0, None)
            .unwrap();
        assert_eq!(exact[0].0, ChunkId(77));
        assert!((exact[0].1 - 1.0).abs() < 1e-4);
        // A sign-bit pass as wide as the table rescoring exactly is the exact answer.
        let coarse = store
            .nearest_chunks(&table, c.id, &query, 5, 300, None)
            .unwrap();
        let ids = |v: &[(ChunkId, f32)]| v.iter().map(|x| x.0).collect::<Vec<_>>();
        assert_eq!(ids(&coarse), ids(&exact));
        // The in-memory copy of the sign bits finds the same.
        let mut index = SignIndex::build(&store, &table, c.id).unwrap();
        assert_eq!(index.len(), 300);
        let bits = store.sign_bits(&query).unwrap();
        // Candidates come as a set (in storage order); the query's own vector is among the 3.
        assert!(index.candidates(&bits, 3).contains(&77));
        assert_eq!(index.candidates(&bits, 50).len(), 50);
        let in_memory = store
            .nearest_chunks(&table, c.id, &query, 5, 100, Some(&mut index))
            .unwrap();
        assert_eq!(ids(&in_memory)[0], ChunkId(77));
        // Another collection's partition is not searched.
        assert!(store
            .nearest_chunks(&table, CollectionId(c.id.0 + 1), &query, 5, 0, None)
            .unwrap()
            .is_empty());
        // The trigger: deleting a chunk row deletes its vector. (No real chunk rows exist
        // here, so insert one with the id the vector uses.)
        store
            .conn
            .execute_batch(
                "INSERT INTO sources(id, collection_id, root, root_display, created_at) VALUES (1, 1, x'2f', '/', 0);
                 INSERT INTO documents(id, source_id, path, path_display, status, updated_at) VALUES (1, 1, x'2f61', '/a', 'indexed', 0);
                 INSERT INTO revisions(id, document_id, content_hash, size, mtime_ns, extracted_bytes, created_at) VALUES (1, 1, 'h', 0, 0, 0, 0);
                 INSERT INTO chunks(id, document_id, revision_id, ordinal, text, token_count) VALUES (77, 1, 1, 0, 't', 1);
                 DELETE FROM chunks WHERE id = 77;",
            )
            .unwrap();
        let after = store
            .nearest_chunks(&table, c.id, &query, 5, 0, None)
            .unwrap();
        assert!(!ids(&after).contains(&ChunkId(77)));
        // The in-memory copy still lists 77; its rescoring read fails and it drops out.
        let after = store
            .nearest_chunks(&table, c.id, &query, 5, 100, Some(&mut index))
            .unwrap();
        assert!(!ids(&after).contains(&ChunkId(77)));
        assert_eq!(store.vector_count(&table, c.id).unwrap(), 299);
        // store_vectors skips chunks that no longer exist, and moves the cursor.
        let stored = store
            .store_vectors(
                &table,
                c.id,
                &[(ChunkId(77), unit(77, 64))],
                &[],
                ChunkId(77),
            )
            .unwrap();
        assert_eq!(stored, 0);
        assert_eq!(store.embedding_cursor(c.id, "m").unwrap(), 77);
    }
}
