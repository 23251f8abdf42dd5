//! How well Quarry does, measured on labelled sets:
//! - [`beir`]: retrieval quality on a BEIR-layout set (nDCG@10, Recall@100, MRR@10), scored as
//!   `pytrec_eval` scores it;
//! - `run`: the whole `quarry eval` run the CLI and the desktop tester share (index the set
//!   into a library of its own, embed it, score each mode and pipeline);
//! - [`chat`]: whether the assistant's answers hold their facts, on a grounded-QA set asked
//!   through real chat turns.
//!
//! Everything here sits above [`Library`](crate::Library): it builds libraries of its own and drives
//! them through the same calls the CLI and the window use.

pub mod beir;
pub mod chat;
mod run;

pub use beir::{BeirSet, CorpusFolder, EvalScores, QueryScore};
pub use chat::{
    run_chat_evaluation, ChatEvalAnswer, ChatEvalPlan, ChatEvalProgress, ChatEvalReport,
    ChatEvalRow, GroundedQuestion, GroundedSet,
};
pub use run::{run_evaluation, EvalPlan, EvalProgress, EvalReport};
