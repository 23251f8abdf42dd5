//! Typed row ids. Each wraps the SQLite `INTEGER` id of its table, so a chunk id cannot be
//! passed where a document id is expected. They serialize as the bare number (JSON output and
//! stored data are unchanged) and bind and read as SQLite integers.

use std::fmt;

use rusqlite::types::{FromSql, FromSqlResult, ToSql, ToSqlOutput, ValueRef};
use serde::{Deserialize, Serialize};

macro_rules! ids {
    ($($(#[$doc:meta])* $name:ident;)*) => {$(
        $(#[$doc])*
        #[derive(
            Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
        )]
        #[serde(transparent)]
        #[cfg_attr(feature = "specta", derive(specta::Type))]
        pub struct $name(pub i64);

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.fmt(f)
            }
        }

        impl From<i64> for $name {
            fn from(id: i64) -> Self {
                $name(id)
            }
        }

        impl ToSql for $name {
            fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
                self.0.to_sql()
            }
        }

        impl FromSql for $name {
            fn column_result(value: ValueRef<'_>) -> FromSqlResult<Self> {
                i64::column_result(value).map($name)
            }
        }
    )*};
}

ids! {
    /// A chunk (`chunks.id`): also the vector rowid and the full-text `chunk_id`.
    ChunkId;
    /// A document (`documents.id`): one file of one source.
    DocumentId;
    /// A revision (`revisions.id`): one indexed version of a document.
    RevisionId;
    /// A source (`sources.id`): one folder of one collection.
    SourceId;
    /// A collection (`collections.id`).
    CollectionId;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_serialize_as_bare_numbers() {
        assert_eq!(serde_json::to_string(&ChunkId(42)).unwrap(), "42");
        let id: DocumentId = serde_json::from_str("7").unwrap();
        assert_eq!(id, DocumentId(7));
        assert_eq!(SourceId(3).to_string(), "3");
    }
}
