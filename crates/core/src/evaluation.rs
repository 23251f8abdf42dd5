//! The library's face for measuring itself: retrieval and pipeline scores on a labelled set
//! ([`crate::eval`]), and the chunks benchmarks sample their inputs from, so `quarry eval`
//! and `quarry bench` call the library and nothing below it.

use crate::error::Result;
use crate::eval::{self, BeirSet, EvalScores};
use crate::ids::ChunkId;
use crate::pipeline::ResolvedPipeline;
use crate::retrieve::RetrievalSettings;
use crate::store::ChunkRecord;
use crate::Library;

impl Library {
    /// Scores retrieval settings on a labelled set already indexed into this library (see
    /// [`eval::evaluate`]).
    pub fn evaluate(
        &self,
        set: &BeirSet,
        name: &str,
        settings: &RetrievalSettings,
    ) -> Result<EvalScores> {
        eval::evaluate(self, set, name, settings)
    }

    /// Scores a pipeline (resolved from any library, see [`Library::resolve_pipeline`]) on a
    /// labelled set already indexed into this library (see [`eval::evaluate_pipeline`]).
    pub fn evaluate_pipeline(
        &self,
        set: &BeirSet,
        pipeline: &ResolvedPipeline,
    ) -> Result<EvalScores> {
        let key = self.evidence_key()?;
        eval::evaluate_pipeline(&self.engine_context(&key), set, pipeline)
    }

    /// The chunks with these ids that are still indexed, in the order given.
    pub fn chunks_by_id(&self, ids: &[ChunkId]) -> Result<Vec<ChunkRecord>> {
        self.store().chunks_by_id(ids)
    }

    /// Every indexed chunk's id, ascending.
    pub fn chunk_ids(&self) -> Result<Vec<ChunkId>> {
        self.store().all_chunk_ids()
    }
}
