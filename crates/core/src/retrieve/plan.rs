//! Which collections a search covers: the names asked for, narrowed by the caller's scope.

use super::SearchRequest;
use crate::error::{Error, Result};
use crate::ids::CollectionId;
use crate::store::Collection;

/// The collections a search covers, in the shapes the stages need.
pub(super) struct Searched<'c> {
    /// The collections searched.
    pub collections: Vec<&'c Collection>,
    /// Their ids, for the full-text filter; empty means no filter (every collection).
    pub ids: Vec<CollectionId>,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::Scope;

    fn collection(id: i64, name: &str, language: &str) -> Collection {
        Collection {
            id: CollectionId(id),
            name: name.into(),
            sensitivity: "internal".into(),
            language: language.into(),
            created_at: 0,
            embedding_model: None,
            pending_model: None,
        }
    }

    fn only(names: &[&str]) -> Scope {
        Scope {
            collections: Some(names.iter().map(|n| n.to_string()).collect()),
            ..Scope::unrestricted()
        }
    }

    #[test]
    fn every_collection_unfiltered_with_each_language_once() {
        let all = [
            collection(1, "a", "english"),
            collection(2, "b", "german"),
            collection(3, "c", "english"),
        ];
        let searched = Searched::resolve(&SearchRequest::new("q"), &all)
            .unwrap()
            .unwrap();
        assert_eq!(searched.collections.len(), 3);
        assert!(searched.ids.is_empty(), "no filter when nothing narrows it");
        assert_eq!(searched.languages, ["english", "german"]);
    }

    #[test]
    fn a_scope_narrows_and_hides_what_it_does_not_allow() {
        let all = [collection(1, "a", "english"), collection(2, "b", "english")];
        let mut request = SearchRequest::new("q");
        request.scope = Some(only(&["b"]));
        let searched = Searched::resolve(&request, &all).unwrap().unwrap();
        assert_eq!(searched.ids, [CollectionId(2)]);
        // Named but not readable: "not found", like a missing one.
        request.collections = vec!["a".into()];
        let hidden = Searched::resolve(&request, &all).err().unwrap();
        assert!(matches!(hidden, Error::CollectionNotFound(name) if name == "a"));
        // Nothing readable: no collections, never all of them.
        request.collections.clear();
        request.scope = Some(only(&[]));
        assert!(Searched::resolve(&request, &all).unwrap().is_none());
    }
}
