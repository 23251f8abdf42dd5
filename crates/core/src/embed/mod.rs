//! Embedding ([`Embedder`]) and reranking ([`Reranker`]) with installed models on ONNX
//! Runtime, loaded from the pinned shared library. The catalogue and installs are
//! [`crate::models`].

pub mod calibration;
mod embedder;
pub mod need;
mod optimized;
mod rerank;
mod runtime;

pub use embedder::{normalized, Embedder};
pub use rerank::Reranker;

#[cfg(test)]
mod tests;
