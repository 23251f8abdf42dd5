//! The one error type of quarry-core, with stable codes for every boundary (CLI exit codes,
//! Tauri `{code, kind, message}`).
//!
//! Errors are sorted by whose fault they are: [`ErrorKind::InvalidInput`] and
//! [`ErrorKind::NotFound`] are the caller's to fix, [`ErrorKind::Unavailable`] is the
//! environment's (a lock held by another process, a full disk), [`ErrorKind::Internal`] is a bug
//! or corrupt data. Codes are API: never rename one (a test snapshots the table).

use std::path::PathBuf;

/// Result alias used across quarry-core.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Who can fix an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "specta", derive(specta::Type))]
pub enum ErrorKind {
    /// The request itself is wrong (bad name, bad glob, bad path).
    InvalidInput,
    /// Something named by the request does not exist.
    NotFound,
    /// The environment stops us for now (lock held, disk full); retrying later may work.
    Unavailable,
    /// A bug or corrupt data.
    Internal,
}

/// Every error quarry-core returns.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A collection name that is not known.
    #[error("collection `{0}` does not exist (see `quarry collection list`)")]
    CollectionNotFound(String),
    /// A collection name already taken.
    #[error("collection `{0}` already exists")]
    CollectionExists(String),
    /// A collection name that cannot be used.
    #[error("invalid collection name `{name}`: {reason}")]
    InvalidCollectionName {
        /// The rejected name.
        name: String,
        /// Why it was rejected.
        reason: String,
    },
    /// A language without a stemmer.
    #[error("unknown language `{language}`; known: {known}")]
    UnknownLanguage {
        /// The language asked for.
        language: String,
        /// The languages there are stemmers for, comma-separated.
        known: String,
    },
    /// A source that is not known.
    #[error("no source matches `{0}` (see `quarry source list`)")]
    SourceNotFound(String),
    /// The folder is already a source of that collection.
    #[error("`{path}` is already a source of collection `{collection}`")]
    SourceExists {
        /// The folder.
        path: PathBuf,
        /// The collection it belongs to.
        collection: String,
    },
    /// A source path that cannot be indexed.
    #[error("cannot add `{path}` as a source: {reason}")]
    InvalidSourcePath {
        /// The folder given.
        path: PathBuf,
        /// Why it was rejected.
        reason: String,
    },
    /// An include or exclude glob that does not parse.
    #[error("invalid glob `{glob}`: {reason}")]
    InvalidGlob {
        /// The glob as given.
        glob: String,
        /// The parser's complaint.
        reason: String,
    },
    /// A document path that is not in the library.
    #[error("no indexed document at `{0}`")]
    DocumentNotFound(PathBuf),
    /// A path that is a document of several collections (its folder is a source of each),
    /// asked for without saying which.
    #[error(
        "`{path}` is a document of {} collections ({}): say which one (`--collection NAME`)",
        collections.len(),
        collections.join(", ")
    )]
    AmbiguousDocument {
        /// The path asked for.
        path: PathBuf,
        /// The collections it is a document of.
        collections: Vec<String>,
    },
    /// Another process holds the library's write lock.
    #[error("the library at `{data_dir}` is being written by another process ({holder}); wait for it to finish or stop it")]
    WriterBusy {
        /// The library's data directory.
        data_dir: PathBuf,
        /// What the lock file says about its holder (pid and command).
        holder: String,
    },
    /// The library was written by a newer Quarry.
    #[error("the library at `{path}` has schema version {found}, newer than this Quarry understands ({supported}); upgrade Quarry")]
    SchemaTooNew {
        /// The database file.
        path: PathBuf,
        /// Version on disk.
        found: i64,
        /// Highest version this build knows.
        supported: i64,
    },
    /// A watch could not be set up.
    #[error("cannot watch `{path}`: {reason}")]
    Watch {
        /// The folder.
        path: PathBuf,
        /// notify's error.
        reason: String,
    },
    /// The disk is full.
    #[error("no space left on device while writing `{0}`")]
    DiskFull(PathBuf),
    /// SQLite failed.
    #[error("database error: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// tantivy failed.
    #[error("full-text index error: {0}")]
    Tantivy(#[from] tantivy::TantivyError),
    /// The full-text index does not agree with SQLite and could not repair itself.
    #[error("full-text index out of sync: {0}")]
    FulltextOutOfSync(String),
    /// Filesystem failure on a library file (not a document: those are per-file errors).
    #[error("I/O error on `{path}`: {source}")]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// A model id that is neither installed nor in the catalogue.
    #[error("unknown model `{0}` (see `quarry models list`)")]
    UnknownModel(String),
    /// A known model whose files are not installed.
    #[error("model `{model}` is not installed (looked in {searched}); run `{fix}`")]
    ModelNotInstalled {
        /// The model id.
        model: String,
        /// The folders searched.
        searched: String,
        /// The command that installs it.
        fix: String,
    },
    /// A model or runtime file that is missing or does not match its checksum.
    #[error("`{path}` is {problem}; run `{fix}` to reinstall it")]
    ModelFileBad {
        /// The file.
        path: PathBuf,
        /// What is wrong (missing, or its checksum).
        problem: String,
        /// The command that repairs it.
        fix: String,
    },
    /// A model that collections, tools or configurations still use.
    #[error("model `{model}` is used by {users}; switch them to another model first", users = .users.join(", "))]
    ModelInUse {
        /// The model id.
        model: String,
        /// Who uses it, in words.
        users: Vec<String>,
    },
    /// The ONNX Runtime library cannot be loaded.
    #[error("ONNX Runtime is not available: {reason}; run `{fix}` (or point ORT_DYLIB_PATH at libonnxruntime)")]
    RuntimeUnavailable {
        /// Why.
        reason: String,
        /// The command that installs it.
        fix: String,
    },
    /// A folder that cannot be imported as a model.
    #[error("cannot use `{path}` as a model: {reason}")]
    InvalidModel {
        /// The folder or file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// A query embedded with a different model than the collection's vectors.
    #[error("collection `{collection}` is embedded with `{embedded_with}`, not `{requested}`; query it with `{embedded_with}` or switch it with `quarry models use {requested} -c {collection}`")]
    ModelMismatch {
        /// The collection.
        collection: String,
        /// The model its vectors come from.
        embedded_with: String,
        /// The model the query asked for.
        requested: String,
    },
    /// ONNX Runtime failed while running a model.
    #[error("inference failed with model `{model}`: {reason}")]
    Inference {
        /// The model id.
        model: String,
        /// ONNX Runtime's or the tokenizer's message.
        reason: String,
    },
    /// A download failed.
    #[error("download of `{url}` failed: {reason}")]
    Download {
        /// What was fetched.
        url: String,
        /// Why it failed.
        reason: String,
    },
    /// Query text over the parser's limits (length, nesting, operators): refused before
    /// parsing, since deeply nested input overflows the parser's stack and aborts the process.
    #[error("invalid query: {reason}")]
    InvalidQuery {
        /// Which limit, and the query's figure.
        reason: String,
    },
    /// A retrieval or model setting out of range.
    #[error("invalid setting `{field}`: {reason}")]
    InvalidSetting {
        /// The setting's name.
        field: String,
        /// What is wrong.
        reason: String,
    },
    /// A BEIR-layout data set that cannot be read.
    #[error("cannot read data set `{path}`: {reason}")]
    InvalidDataset {
        /// The file.
        path: PathBuf,
        /// What is wrong (with the line number where one applies).
        reason: String,
    },
    /// A tool slug that is not known.
    #[error("tool `{0}` does not exist (see `quarry tools list`)")]
    ToolNotFound(String),
    /// A tool slug already taken.
    #[error("tool `{0}` already exists")]
    ToolExists(String),
    /// A tool definition that cannot be saved.
    #[error("invalid tool `{tool}`: `{field}` {reason}")]
    InvalidTool {
        /// The tool's slug.
        tool: String,
        /// The offending field.
        field: String,
        /// What is wrong.
        reason: String,
    },
    /// A code tool's source that does not parse or has an undeclared shape.
    #[error("tool `{tool}` source, line {line}, column {column}: {message}")]
    ToolSource {
        /// The tool's slug.
        tool: String,
        /// 1-based line.
        line: u32,
        /// 1-based column.
        column: u32,
        /// What is wrong.
        message: String,
    },
    /// A tool that pipelines still use.
    #[error("tool `{tool}` is used by pipeline(s) {pipelines}; remove it from them first", pipelines = .pipelines.join(", "))]
    ToolInUse {
        /// The tool's slug.
        tool: String,
        /// The pipelines that use it.
        pipelines: Vec<String>,
    },
    /// A tool export file that cannot be imported.
    #[error("cannot import `{path}`: {reason}")]
    InvalidToolFile {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A code tool that failed, was refused by the sandbox, or returned a bad shape.
    #[error("tool `{tool}` failed: {reason}")]
    ToolFailed {
        /// The tool's slug.
        tool: String,
        /// What happened.
        reason: String,
    },
    /// A code tool that ran past its time limit (its worker was killed).
    #[error("tool `{tool}` timed out after {timeout_ms} ms")]
    ToolTimeout {
        /// The tool's slug.
        tool: String,
        /// The limit.
        timeout_ms: u64,
    },
    /// No Python to run code tools with.
    #[error(
        "code tools need Python 3.8 or later: {reason} (install python3 or set QUARRY_PYTHON)"
    )]
    PythonUnavailable {
        /// What went wrong finding or starting it.
        reason: String,
    },
    /// A pipeline name that is not known.
    #[error("pipeline `{0}` does not exist (see `quarry pipeline list`)")]
    PipelineNotFound(String),
    /// A pipeline name already taken.
    #[error("pipeline `{0}` already exists")]
    PipelineExists(String),
    /// A pipeline with blocking readiness problems.
    #[error("pipeline `{pipeline}` is not ready: {problems}", problems = .problems.join("; "))]
    PipelineNotReady {
        /// The pipeline.
        pipeline: String,
        /// What blocks it.
        problems: Vec<String>,
    },
    /// A key that is unknown, revoked or malformed, or a principal that cannot be formed.
    #[error("not authorized: {0}")]
    Unauthorized(String),
    /// A key name that is not known.
    #[error("no API key named `{0}` (see `quarry keys list`)")]
    KeyNotFound(String),
    /// An evidence reference or cursor that failed revalidation.
    #[error("evidence reference rejected: {0}")]
    EvidenceRejected(String),
    /// An LLM backend that failed (unreachable server, bad reply, model load failure).
    #[error("LLM backend `{backend}` failed: {message}")]
    LlmFailed {
        /// `embedded`, `openai` or `ollama`, with the model or URL.
        backend: String,
        /// What happened.
        message: String,
    },
    /// No usable LLM: no model installed, or none configured.
    #[error("no LLM available: {0}")]
    LlmUnavailable(String),
    /// A conversation id that is not known (or belongs to another caller).
    #[error("conversation `{0}` does not exist (see `quarry chat --list`)")]
    ConversationNotFound(String),
    /// An orchestrator configuration that cannot start; the message is shown as is (the
    /// `knowledge_search` manual fixes some of these strings).
    #[error("{0}")]
    OrchestratorNotReady(String),
    /// Long work stopped because its caller pressed stop.
    #[error("cancelled")]
    Cancelled,
    /// Invariant broken: a bug.
    #[error("internal error: {0}")]
    Internal(String),
}

impl Error {
    /// Wraps an I/O error with the path it happened on; a full disk gets its own code.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        let path = path.into();
        if source.raw_os_error() == Some(28) {
            return Error::DiskFull(path);
        }
        Error::Io { path, source }
    }

    /// The stable snake_case code of this error (see [`ERROR_CODES`]).
    pub fn code(&self) -> &'static str {
        self.code_and_kind().0
    }

    /// Who can fix it.
    pub fn kind(&self) -> ErrorKind {
        self.code_and_kind().1
    }
}

/// Gives each variant its code and kind in one place: the match it generates is exhaustive, so a
/// new variant without a code does not compile, and [`ERROR_CODES`] is built from the same lines,
/// so the table cannot miss a code. `Variant { .. }` matches tuple variants too.
macro_rules! error_codes {
    ($($variant:ident => $code:ident, $kind:ident;)*) => {
        impl Error {
            fn code_and_kind(&self) -> (&'static str, ErrorKind) {
                match self {
                    $(Error::$variant { .. } => (stringify!($code), ErrorKind::$kind),)*
                }
            }
        }

        /// Every code with its kind, in declaration order: the table the boundaries map from.
        pub const ERROR_CODES: &[(&str, ErrorKind)] = &[$((stringify!($code), ErrorKind::$kind)),*];
    };
}

error_codes! {
    CollectionNotFound => collection_not_found, NotFound;
    CollectionExists => collection_exists, InvalidInput;
    InvalidCollectionName => invalid_collection_name, InvalidInput;
    UnknownLanguage => unknown_language, InvalidInput;
    SourceNotFound => source_not_found, NotFound;
    SourceExists => source_exists, InvalidInput;
    InvalidSourcePath => invalid_source_path, InvalidInput;
    InvalidGlob => invalid_glob, InvalidInput;
    DocumentNotFound => document_not_found, NotFound;
    AmbiguousDocument => ambiguous_document, InvalidInput;
    WriterBusy => writer_busy, Unavailable;
    SchemaTooNew => schema_too_new, Unavailable;
    Watch => watch_failed, Unavailable;
    DiskFull => disk_full, Unavailable;
    Sqlite => database_error, Internal;
    Tantivy => fulltext_error, Internal;
    FulltextOutOfSync => fulltext_out_of_sync, Internal;
    Io => io_error, Unavailable;
    UnknownModel => unknown_model, NotFound;
    ModelNotInstalled => model_not_installed, Unavailable;
    ModelFileBad => model_file_bad, Unavailable;
    ModelInUse => model_in_use, InvalidInput;
    RuntimeUnavailable => runtime_unavailable, Unavailable;
    InvalidModel => invalid_model, InvalidInput;
    ModelMismatch => model_mismatch, InvalidInput;
    Inference => inference_failed, Internal;
    Download => download_failed, Unavailable;
    InvalidSetting => invalid_setting, InvalidInput;
    InvalidQuery => invalid_query, InvalidInput;
    InvalidDataset => invalid_dataset, InvalidInput;
    ToolNotFound => tool_not_found, NotFound;
    ToolExists => tool_exists, InvalidInput;
    InvalidTool => invalid_tool, InvalidInput;
    ToolSource => invalid_tool_source, InvalidInput;
    ToolInUse => tool_in_use, InvalidInput;
    InvalidToolFile => invalid_tool_file, InvalidInput;
    ToolFailed => tool_failed, InvalidInput;
    ToolTimeout => tool_timeout, Unavailable;
    PythonUnavailable => python_unavailable, Unavailable;
    PipelineNotFound => pipeline_not_found, NotFound;
    PipelineExists => pipeline_exists, InvalidInput;
    PipelineNotReady => pipeline_not_ready, Unavailable;
    Unauthorized => unauthorized, InvalidInput;
    KeyNotFound => key_not_found, NotFound;
    EvidenceRejected => evidence_rejected, InvalidInput;
    LlmFailed => llm_failed, Unavailable;
    LlmUnavailable => llm_unavailable, Unavailable;
    ConversationNotFound => conversation_not_found, NotFound;
    OrchestratorNotReady => orchestrator_not_ready, InvalidInput;
    Cancelled => cancelled, InvalidInput;
    Internal => internal, Internal;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_code_table_is_stable() {
        let codes: Vec<&str> = ERROR_CODES.iter().map(|(c, _)| *c).collect();
        assert_eq!(
            codes.join(","),
            "collection_not_found,collection_exists,invalid_collection_name,unknown_language,\
source_not_found,source_exists,invalid_source_path,invalid_glob,document_not_found,ambiguous_document,writer_busy,\
schema_too_new,watch_failed,disk_full,database_error,fulltext_error,fulltext_out_of_sync,\
io_error,unknown_model,model_not_installed,model_file_bad,model_in_use,runtime_unavailable,invalid_model,\
model_mismatch,inference_failed,download_failed,invalid_setting,invalid_query,invalid_dataset,\
tool_not_found,\
tool_exists,invalid_tool,invalid_tool_source,tool_in_use,invalid_tool_file,tool_failed,tool_timeout,\
python_unavailable,pipeline_not_found,pipeline_exists,pipeline_not_ready,unauthorized,key_not_found,\
evidence_rejected,llm_failed,llm_unavailable,conversation_not_found,orchestrator_not_ready,\
cancelled,internal"
        );
    }

    #[test]
    fn every_code_is_unique_and_in_the_table_with_its_kind() {
        let mut seen = std::collections::HashSet::new();
        for (code, _) in ERROR_CODES {
            assert!(seen.insert(*code), "code `{code}` appears twice");
            assert!(
                code.chars().all(|c| c.is_ascii_lowercase() || c == '_'),
                "code `{code}` is not snake_case"
            );
        }
        // A sample of each shape of variant (tuple, struct, from a foreign error): the code a
        // value reports is in the table, with the same kind.
        let samples = [
            Error::CollectionNotFound("a".into()),
            Error::WriterBusy {
                data_dir: "/d".into(),
                holder: "pid 1".into(),
            },
            Error::Sqlite(rusqlite::Error::InvalidQuery),
            Error::io("/x", std::io::Error::other("boom")),
            Error::Internal("bug".into()),
        ];
        for error in samples {
            assert!(
                ERROR_CODES.contains(&(error.code(), error.kind())),
                "{} missing from ERROR_CODES",
                error.code()
            );
        }
    }

    #[test]
    fn full_disk_gets_its_own_code() {
        let err = Error::io("/x", std::io::Error::from_raw_os_error(28));
        assert_eq!(err.code(), "disk_full");
        assert_eq!(err.kind(), ErrorKind::Unavailable);
        assert_eq!(
            Error::CollectionNotFound("a".into()).kind(),
            ErrorKind::NotFound
        );
    }
}
