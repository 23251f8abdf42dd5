//! Embedding ([`Embedder`]) and reranking ([`Reranker`]) with installed models on ONNX
//! Runtime, loaded from the pinned shared library. The catalogue and installs are
//! [`crate::models`].

pub mod calibration;
pub mod device;
mod embedder;
mod int8_matmul;
pub mod need;
mod optimized;
mod rerank;
mod runtime;
mod served;

pub use embedder::{normalized, Embedder};
pub use rerank::Reranker;
pub use served::register_served;

#[cfg(test)]
mod tests;
