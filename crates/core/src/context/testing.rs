//! The stub engine unit tests run pipelines and chat turns in: a real store in a temporary
//! folder, and models, an executor and an evidence key that these tests never start.

use std::path::PathBuf;

use super::{EngineContext, Retrieval};
use crate::evidence::EvidenceKey;
use crate::models::Models;
use crate::store::test_support::temp_store;
use crate::store::Store;
use crate::tools::Executor;

pub(crate) struct StubEngine {
    _dir: tempfile::TempDir,
    pub store: Store,
    pub models: Models,
    pub executor: Executor,
    pub key: EvidenceKey,
}

impl StubEngine {
    /// A fresh store, filled by `seed` before the evidence key is made.
    pub(crate) fn new(seed: impl FnOnce(&mut Store)) -> StubEngine {
        let (dir, mut store) = temp_store();
        seed(&mut store);
        let key = EvidenceKey::load_or_create(&store).unwrap();
        StubEngine {
            models: Models::at(vec![dir.path().join("models")]),
            // Never started: these tests run no code tools.
            executor: Executor::new(PathBuf::from("/nonexistent/python")),
            _dir: dir,
            store,
            key,
        }
    }

    /// The context a run or turn reads, searching through `retrieval`.
    pub fn engine<'a>(&'a self, retrieval: &'a dyn Retrieval) -> EngineContext<'a> {
        EngineContext {
            store: &self.store,
            models: &self.models,
            executor: &self.executor,
            evidence_key: &self.key,
            retrieval,
        }
    }
}
