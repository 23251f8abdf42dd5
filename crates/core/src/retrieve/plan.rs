//! Which collections a search covers: the names asked for, narrowed by the caller's scope.

use super::SearchRequest;
use crate::error::{Error, Result};
use crate::store::Collection;

/// The collections a search covers, in the shapes the stages need.
pub(super) struct Searched<'c> {
    /// The collections searched.
    pub collections: Vec<&'c Collection>,
    /// Their ids, for the full-text filter; empty means no filter (every collection).
    pub ids: Vec<i64>,
    /// Their stemming languages, each once, in collection order.
    pub languages: Vec<String>,
}

impl<'c> Searched<'c> {
    /// The collections `request` covers among `all`; `None` when its caller may read none of
    /// them (an empty answer, never "all collections").
    pub(super) fn resolve(
        request: &SearchRequest,
        all: &'c [Collection],
    ) -> Result<Option<Searched<'c>>> {
        let mut wanted = named(&request.collections, all)?;
        if let Some(scope) = &request.scope {
            // A named collection the caller may not read is "not found", like a missing one, so
            // the answer does not tell which exist.
            if let Some(hidden) = wanted
                .iter()
                .find(|c| !request.collections.is_empty() && !scope.allows(c))
            {
                return Err(Error::CollectionNotFound(hidden.name.clone()));
            }
            wanted.retain(|c| scope.allows(c));
            if wanted.is_empty() {
                return Ok(None);
            }
        }
        let ids = if request.collections.is_empty() && request.scope.is_none() {
            Vec::new()
        } else {
            wanted.iter().map(|c| c.id).collect()
        };
        let mut languages: Vec<String> = Vec::new();
        for c in &wanted {
            if !languages.contains(&c.language) {
                languages.push(c.language.clone());
            }
        }
        Ok(Some(Searched {
            collections: wanted,
            ids,
            languages,
        }))
    }
}

/// The collections called `names` (every one when `names` is empty).
fn named<'c>(names: &[String], all: &'c [Collection]) -> Result<Vec<&'c Collection>> {
    if names.is_empty() {
        return Ok(all.iter().collect());
    }
    names
        .iter()
        .map(|name| {
            all.iter()
                .find(|c| &c.name == name)
                .ok_or_else(|| Error::CollectionNotFound(name.clone()))
        })
        .collect()
}
