//! Embedding on a server the user runs (see `models::served`): texts go in batches, a few
//! requests at once, with transient failures (the connection, 429, a 5xx while the server
//! loads) tried again; every vector is checked for size and scaled to unit length, and the
//! server's model is checked against the identity recorded when it was registered.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use super::embedder::{normalized, Embedded};
use crate::error::{Error, Result};
use crate::llm::openai::{Dialect, EmbeddingsAnswer, OpenAiBackend, OpenAiConfig};
use crate::models::{InstalledModel, Models, ServedApi, ServedModel};

/// The text whose vector identifies a served model.
pub const PROBE_TEXT: &str =
    "Quarry asks which model answers: a river crossed by a stone bridge in the autumn rain.";

/// Tries per request before its failure is the lane's.
const ATTEMPTS: u32 = 4;
/// The wait after the first failure; doubled after each next one.
const FIRST_BACKOFF: Duration = Duration::from_millis(250);
/// How long a request may wait for the server.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(120);
/// The probe's vector now and at registration are this alike (cosine) when the same model
/// answers: servers batch and round differently from run to run, a different model is far
/// below.
const SAME_MODEL_COSINE: f32 = 0.98;

/// Registers the model a server runs under `id`, after asking the server for one vector: its
/// size becomes the model's dimension, the vector its identity. An id already installed is
/// refused (its vectors are another model's).
pub fn register_served(models: &Models, id: &str, served: ServedModel) -> Result<InstalledModel> {
    models.check_served(id, &served)?;
    let probe = ServedEmbedder::connect(id, &served, None)?.probe()?;
    models.install_served(id, served, probe)
}

/// A served embedding model, ready to ask.
pub struct ServedEmbedder {
    id: String,
    served: ServedModel,
    backend: OpenAiBackend,
    /// The registered vector size (`None` while registering).
    dimension: Option<usize>,
}

impl ServedEmbedder {
    /// A client for the model `id` served as `served`, expecting vectors of `dimension`.
    pub fn connect(id: &str, served: &ServedModel, dimension: Option<usize>) -> Result<Self> {
        let dialect = match served.api {
            ServedApi::Openai => Dialect::OpenAi,
            ServedApi::Ollama => Dialect::OllamaNative,
        };
        let mut config =
            OpenAiConfig::new(&served.url, &served.model, dialect).with_timeout(REQUEST_TIMEOUT);
        if let Some(var) = &served.api_key_env {
            let key = crate::environment::configured_secret(var).ok_or_else(|| {
                Error::InvalidSetting {
                    field: "api_key_env".into(),
                    reason: format!(
                        "the served model `{id}` takes its API key from ${var}, which is not set"
                    ),
                }
            })?;
            config = config.with_api_key(key);
        }
        Ok(ServedEmbedder {
            id: id.to_string(),
            served: served.clone(),
            backend: OpenAiBackend::new(config)?,
            dimension,
        })
    }

    /// The server's unit vector for [`PROBE_TEXT`].
    pub fn probe(&self) -> Result<Vec<f32>> {
        let mut answer = self.request(&[PROBE_TEXT])?;
        let vector = answer.vectors.pop().unwrap_or_default();
        if vector.is_empty() {
            return Err(self.failed("it answered an empty vector".into()));
        }
        Ok(normalized(vector))
    }

    /// Refuses a server that now runs another model than the one registered: its vectors
    /// would sit beside this model's and rank by nonsense.
    pub fn check_identity(&self) -> Result<()> {
        let now = self.probe()?;
        let then = &self.served.probe;
        let cosine: f32 = now.iter().zip(then).map(|(a, b)| a * b).sum();
        if now.len() != then.len() || cosine < SAME_MODEL_COSINE {
            return Err(self.failed(format!(
                "the server now answers with another model than the one registered as `{}` \
                 (its vector for the probe text has {} numbers, was {}; cosine {cosine:.3}); \
                 register the new model under a new id (`quarry models serve NEW-ID …`) so the \
                 two models' vectors never mix",
                self.id,
                now.len(),
                then.len()
            )));
        }
        Ok(())
    }

    /// Embeds `texts` in batches, up to the registered concurrency at once; vectors in the
    /// order given, at unit length. Token counts are the server's (`usage`), shared among a
    /// batch's texts by length, or estimated at four characters a token where it says none.
    pub fn embed_counted(&self, texts: &[&str]) -> Result<Embedded> {
        let batches: Vec<(usize, &[&str])> = texts
            .chunks(self.served.batch.max(1))
            .enumerate()
            .map(|(i, b)| (i * self.served.batch.max(1), b))
            .collect();
        let next = AtomicUsize::new(0);
        let answers: Mutex<Vec<Option<EmbeddingsAnswer>>> = Mutex::new(vec![None; batches.len()]);
        let first_error: Mutex<Option<Error>> = Mutex::new(None);
        let workers = self.served.concurrency.clamp(1, batches.len().max(1));
        std::thread::scope(|scope| {
            for _ in 0..workers {
                scope.spawn(|| loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some((_, batch)) = batches.get(i) else {
                        return;
                    };
                    if first_error
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .is_some()
                    {
                        return;
                    }
                    match self.request(batch) {
                        Ok(answer) => {
                            answers.lock().unwrap_or_else(|e| e.into_inner())[i] = Some(answer)
                        }
                        Err(e) => {
                            first_error
                                .lock()
                                .unwrap_or_else(|e| e.into_inner())
                                .get_or_insert(e);
                            return;
                        }
                    }
                });
            }
        });
        if let Some(e) = first_error.into_inner().unwrap_or_else(|e| e.into_inner()) {
            return Err(e);
        }
        let mut out = Embedded {
            vectors: Vec::with_capacity(texts.len()),
            tokens: 0,
            lengths: Vec::with_capacity(texts.len()),
        };
        let answers = answers.into_inner().unwrap_or_else(|e| e.into_inner());
        for ((_, batch), answer) in batches.iter().zip(answers) {
            let answer = answer.ok_or_else(|| Error::Internal("a batch went unanswered".into()))?;
            out.lengths
                .extend(token_shares(batch, answer.prompt_tokens));
            for vector in answer.vectors {
                if self.dimension.is_some_and(|d| d != vector.len()) {
                    return Err(self.failed(format!(
                        "it answered vectors of {} numbers; the model was registered with {}",
                        vector.len(),
                        self.dimension.unwrap_or_default()
                    )));
                }
                out.vectors.push(normalized(vector));
            }
        }
        out.tokens = out.lengths.iter().sum();
        Ok(out)
    }

    /// One batch, tried again after transient failures.
    fn request(&self, batch: &[&str]) -> Result<EmbeddingsAnswer> {
        let mut wait = FIRST_BACKOFF;
        let mut attempt = 1;
        loop {
            match self.backend.embeddings(batch) {
                Ok(answer) => return Ok(answer),
                Err(failure) if failure.transient && attempt < ATTEMPTS => {
                    tracing::warn!(model = %self.id, attempt, "{}; trying again", failure.message);
                    std::thread::sleep(wait);
                    wait *= 2;
                    attempt += 1;
                }
                Err(failure) => {
                    let tries = if failure.transient {
                        format!(" (tried {attempt} times)")
                    } else {
                        String::new()
                    };
                    return Err(self.failed(format!("{}{tries}", failure.message)));
                }
            }
        }
    }

    fn failed(&self, reason: String) -> Error {
        Error::Inference {
            model: self.id.clone(),
            reason: format!("served at {}: {reason}", self.served.url),
        }
    }
}

/// Each text's tokens: the batch's count shared by characters, else four characters a token.
fn token_shares(batch: &[&str], prompt_tokens: Option<usize>) -> Vec<usize> {
    let chars: Vec<usize> = batch.iter().map(|t| t.chars().count().max(1)).collect();
    let total_chars: usize = chars.iter().sum();
    match prompt_tokens {
        Some(tokens) => chars
            .iter()
            .map(|&c| (tokens as f64 * c as f64 / total_chars as f64).round() as usize)
            .collect(),
        None => chars.iter().map(|&c| c.div_ceil(4)).collect(),
    }
}

#[cfg(test)]
mod tests {
    use std::net::TcpListener;
    use std::sync::Arc;

    use serde_json::{json, Value};

    use super::*;
    use crate::models::test_http::{read_request, Request};
    use crate::models::DEFAULT_SERVED_BATCH;

    /// A loopback server answering every request with `answer`, recording what it was sent.
    struct Server {
        url: String,
        seen: Arc<Mutex<Vec<Request>>>,
    }

    fn serve(answer: impl Fn(&Request, usize) -> (u16, Value) + Send + Sync + 'static) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let seen: Arc<Mutex<Vec<Request>>> = Arc::default();
        let answer = Arc::new(answer);
        let record = seen.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (record, answer) = (record.clone(), answer.clone());
                std::thread::spawn(move || {
                    use std::io::Write;
                    let Some(request) = read_request(&stream) else {
                        return;
                    };
                    let n = {
                        let mut seen = record.lock().unwrap();
                        seen.push(request.clone());
                        seen.len()
                    };
                    let (status, body) = answer(&request, n);
                    let body = body.to_string();
                    let _ = write!(
                        &stream,
                        "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    );
                });
            }
        });
        Server { url, seen }
    }

    fn inputs(request: &Request) -> Vec<String> {
        let body: Value = serde_json::from_slice(&request.body).unwrap();
        body["input"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_str().unwrap().to_string())
            .collect()
    }

    /// A vector that says which text it is for: its length in characters, then 1 and 0.
    fn vector_for(text: &str) -> Value {
        json!([text.chars().count() as f64, 1.0, 0.0])
    }

    /// An OpenAI-style answer, its items listed last to first (their `index` says where each
    /// goes).
    fn openai_answer(request: &Request) -> Value {
        let texts = inputs(request);
        let data: Vec<Value> = texts
            .iter()
            .enumerate()
            .rev()
            .map(|(i, t)| json!({"object": "embedding", "index": i, "embedding": vector_for(t)}))
            .collect();
        json!({"object": "list", "data": data, "model": "m", "usage": {"prompt_tokens": 10 * texts.len()}})
    }

    fn served(url: &str, api: ServedApi, batch: usize, concurrency: usize) -> ServedModel {
        ServedModel {
            url: url.to_string(),
            api,
            model: "m".into(),
            api_key_env: None,
            batch,
            concurrency,
            probe: normalized(vec![PROBE_TEXT.chars().count() as f32, 1.0, 0.0]),
        }
    }

    #[test]
    fn texts_go_in_batches_side_by_side_and_come_back_in_their_order() {
        let server = serve(|r, _| (200, openai_answer(r)));
        let model = served(&format!("{}/v1", server.url), ServedApi::Openai, 2, 2);
        let embedder = ServedEmbedder::connect("m", &model, Some(3)).unwrap();
        let texts = ["a", "bb", "ccc", "dddd", "eeeee"];
        let embedded = embedder.embed_counted(&texts).unwrap();
        for (text, vector) in texts.iter().zip(&embedded.vectors) {
            let expected = normalized(vec![text.len() as f32, 1.0, 0.0]);
            assert_eq!(vector, &expected, "{text}");
        }
        assert_eq!(embedded.tokens, 50, "the server's own counts");
        let seen = server.seen.lock().unwrap();
        assert_eq!(seen.len(), 3, "5 texts in batches of 2");
        assert!(seen
            .iter()
            .all(|r| r.path == "/v1/embeddings" && r.method == "POST"));
        let mut sent: Vec<String> = seen.iter().flat_map(inputs).collect();
        sent.sort();
        assert_eq!(sent, texts);
    }

    #[test]
    fn ollama_is_asked_through_its_own_api() {
        let server = serve(|r, _| {
            let texts = inputs(r);
            let rows: Vec<Value> = texts.iter().map(|t| vector_for(t)).collect();
            (
                200,
                json!({"model": "m", "embeddings": rows, "prompt_eval_count": 7}),
            )
        });
        let model = served(&server.url, ServedApi::Ollama, DEFAULT_SERVED_BATCH, 1);
        let embedder = ServedEmbedder::connect("m", &model, Some(3)).unwrap();
        embedder.check_identity().unwrap();
        let embedded = embedder.embed_counted(&["one"]).unwrap();
        assert_eq!(embedded.vectors[0], normalized(vec![3.0, 1.0, 0.0]));
        assert_eq!(embedded.tokens, 7);
        let seen = server.seen.lock().unwrap();
        assert_eq!(seen[0].path, "/api/embed");
        let body: Value = serde_json::from_slice(&seen[0].body).unwrap();
        assert_eq!(body["model"], "m");
        assert_eq!(body["truncate"], true);
    }

    #[test]
    fn a_busy_server_is_asked_again_and_a_refusal_is_reported_at_once() {
        // 503 twice (a server still loading its model), then the answer.
        let server = serve(|r, n| match n {
            1 | 2 => (503, json!({"error": {"message": "Loading model"}})),
            _ => (200, openai_answer(r)),
        });
        let model = served(&server.url, ServedApi::Openai, 8, 1);
        let embedder = ServedEmbedder::connect("m", &model, Some(3)).unwrap();
        assert_eq!(embedder.embed_counted(&["x"]).unwrap().vectors.len(), 1);
        assert_eq!(server.seen.lock().unwrap().len(), 3);

        let refusing = serve(|_, _| {
            (
                400,
                json!({"error": {"message": "input is too large to process"}}),
            )
        });
        let model = served(&refusing.url, ServedApi::Openai, 8, 1);
        let embedder = ServedEmbedder::connect("m", &model, Some(3)).unwrap();
        let err = embedder.embed_counted(&["x"]).unwrap_err().to_string();
        assert!(err.contains("input is too large to process"), "{err}");
        assert!(err.contains(&refusing.url), "{err}");
        assert_eq!(
            refusing.seen.lock().unwrap().len(),
            1,
            "a 400 is not tried again"
        );
    }

    #[test]
    fn a_server_that_now_runs_another_model_is_refused_and_so_are_vectors_of_another_size() {
        let other = serve(|r, _| {
            let data: Vec<Value> = inputs(r)
                .iter()
                .enumerate()
                .map(|(i, _)| json!({"index": i, "embedding": [0.0, 0.0, 1.0]}))
                .collect();
            (200, json!({"data": data}))
        });
        let model = served(&other.url, ServedApi::Openai, 8, 1);
        let embedder = ServedEmbedder::connect("m", &model, Some(3)).unwrap();
        let err = embedder.check_identity().unwrap_err().to_string();
        assert!(err.contains("another model"), "{err}");

        let wider = ServedEmbedder::connect("m", &model, Some(4)).unwrap();
        let err = wider.embed_counted(&["x"]).unwrap_err().to_string();
        assert!(err.contains("registered with 4"), "{err}");
    }

    #[test]
    fn registering_records_the_size_and_identity_and_an_id_in_use_is_refused() {
        let server = serve(|r, _| (200, openai_answer(r)));
        let dir = tempfile::tempdir().unwrap();
        let models = Models::at(vec![dir.path().to_path_buf()]);
        let mut model = served(&server.url, ServedApi::Openai, 16, 2);
        model.probe = Vec::new();
        let added = register_served(&models, "my-server", model.clone()).unwrap();
        assert_eq!(added.dimension, Some(3));
        let recorded = added.served.clone().unwrap();
        assert_eq!(recorded.probe.len(), 3);
        assert_eq!(models.find("my-server").unwrap().served, Some(recorded));

        let err = register_served(&models, "my-server", model.clone()).unwrap_err();
        assert!(err.to_string().contains("already installed"), "{err}");
        let err = register_served(&models, "all-minilm-l6-v2-int8", model).unwrap_err();
        assert!(err.to_string().contains("catalogue model"), "{err}");
    }

    #[test]
    fn a_batch_s_tokens_are_shared_by_length_or_estimated() {
        assert_eq!(token_shares(&["abcd", "abcdabcdabcd"], Some(40)), [10, 30]);
        assert_eq!(token_shares(&["abcdefghi"], None), [3]);
    }
}
