//! Embeddings from the same servers: `POST {base}/embeddings` (OpenAI-compatible: llama-server
//! with `--embedding`, vLLM, text-embeddings-inference, LM Studio) or Ollama's
//! `POST {root}/api/embed`. One request per call; batching, retries and the model's identity
//! are the caller's (`embed::served`).

use serde_json::{json, Value};

use super::{cut, ollama_root, status_message, Dialect, OpenAiBackend, MAX_ERROR_BODY};

/// The answer to one embeddings request.
#[derive(Debug, Clone)]
pub struct EmbeddingsAnswer {
    /// One vector per text, in the order sent, as the server gave them.
    pub vectors: Vec<Vec<f32>>,
    /// Tokens the server read, when it says (`usage.prompt_tokens`, Ollama's
    /// `prompt_eval_count`).
    pub prompt_tokens: Option<usize>,
}

/// A request that failed, and whether trying again may help (the connection, a timeout, 429,
/// a 5xx: a server still loading its model answers 503).
#[derive(Debug, Clone)]
pub struct EmbeddingsFailure {
    /// What happened, with the URL.
    pub message: String,
    /// Worth another try.
    pub transient: bool,
}

impl OpenAiBackend {
    /// Embeds `texts` in one request.
    pub fn embeddings(
        &self,
        texts: &[&str],
    ) -> std::result::Result<EmbeddingsAnswer, EmbeddingsFailure> {
        let (url, body) = match self.config.dialect {
            Dialect::OpenAi => (
                format!("{}/embeddings", self.base()),
                json!({"model": self.config.model, "input": texts, "encoding_format": "float"}),
            ),
            Dialect::OllamaNative => (
                format!("{}/api/embed", ollama_root(self.base())),
                json!({"model": self.config.model, "input": texts, "truncate": true}),
            ),
        };
        let mut response = self.post_json(&url, &body).map_err(|e| EmbeddingsFailure {
            message: self.transport_message(&url, &e),
            transient: true,
        })?;
        let status = response.status().as_u16();
        let limit = if status >= 400 {
            MAX_ERROR_BODY
        } else {
            256 * 1024 * 1024
        };
        let text = response
            .body_mut()
            .with_config()
            .limit(limit)
            .lossy_utf8(true)
            .read_to_string()
            .map_err(|e| EmbeddingsFailure {
                message: format!("reading the answer of {url} failed: {e}"),
                transient: true,
            })?;
        if status >= 400 {
            return Err(EmbeddingsFailure {
                message: status_message(&url, status, &text),
                transient: status == 429 || status >= 500,
            });
        }
        let refused = |message: String| EmbeddingsFailure {
            message,
            transient: false,
        };
        let body: Value = serde_json::from_str(&text).map_err(|e| {
            refused(format!(
                "{url} did not answer with JSON ({e}): {}",
                cut(&text, 200)
            ))
        })?;
        let vectors = match self.config.dialect {
            Dialect::OpenAi => openai_vectors(&body),
            Dialect::OllamaNative => body["embeddings"]
                .as_array()
                .and_then(|rows| rows.iter().map(numbers).collect()),
        }
        .ok_or_else(|| {
            refused(format!(
                "{url} answered without embeddings: {}",
                cut(&text, 200)
            ))
        })?;
        if vectors.len() != texts.len() {
            return Err(refused(format!(
                "{url} answered {} vectors for {} texts",
                vectors.len(),
                texts.len()
            )));
        }
        let prompt_tokens = body["usage"]["prompt_tokens"]
            .as_u64()
            .or_else(|| body["prompt_eval_count"].as_u64())
            .map(|n| n as usize);
        Ok(EmbeddingsAnswer {
            vectors,
            prompt_tokens,
        })
    }
}

/// `data[*].embedding`, put in input order by each item's `index` (servers may answer out of
/// order).
fn openai_vectors(body: &Value) -> Option<Vec<Vec<f32>>> {
    let data = body["data"].as_array()?;
    let mut out: Vec<Option<Vec<f32>>> = vec![None; data.len()];
    for (position, item) in data.iter().enumerate() {
        let index = item["index"].as_u64().map_or(position, |i| i as usize);
        *out.get_mut(index)? = Some(numbers(&item["embedding"])?);
    }
    out.into_iter().collect()
}

fn numbers(v: &Value) -> Option<Vec<f32>> {
    v.as_array()?
        .iter()
        .map(|x| x.as_f64().map(|f| f as f32))
        .collect()
}
