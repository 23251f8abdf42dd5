//! Retrieval quality on a labelled set in the BEIR layout (`corpus.jsonl`, `queries.jsonl`,
//! `qrels/test.tsv`): nDCG@10, Recall@100 and MRR@10 at document level, as `pytrec_eval`
//! computes them (linear gains; queries without judgements are left out).
//!
//! A set may name a folder of real files instead of `corpus.jsonl` (`corpus-folder.json`:
//! `{"folder": …, "include": [globs]}`): its documents are the files, indexed as they are, and a
//! document's id is its path relative to the folder. So a set over files that ship elsewhere
//! (the toolchain's HTML books: `{rustc_sysroot}` in `folder` is `rustc --print sysroot`)
//! commits only its questions and judgements.

use std::collections::HashMap;
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::Serialize;

use crate::auth::Principal;
use crate::cancel::Cancel;
use crate::context::{EngineContext, Retrieval};
use crate::error::{Error, Result};
use crate::pipeline::{run_resolved, ResolvedPipeline};
use crate::retrieve::{RetrievalSettings, SearchRequest};

/// A loaded BEIR-layout set.
#[derive(Debug, Clone)]
pub struct BeirSet {
    /// `(id, title, text)` per document (empty when the corpus is a folder).
    pub corpus: Vec<(String, String, String)>,
    /// The folder of files the documents are, when the set names one.
    pub corpus_folder: Option<CorpusFolder>,
    /// `(id, text)` per query that has judgements.
    pub queries: Vec<(String, String)>,
    /// Query id → document id → graded relevance (> 0 only).
    pub qrels: HashMap<String, HashMap<String, u32>>,
    /// Query id → the groups it is scored in besides the whole set: its `metadata.split`
    /// (`tuning`, `held_out`), its `metadata.style` (`no_overlap`, …) and both
    /// (`held_out/no_overlap`).
    pub groups: HashMap<String, Vec<String>>,
}

/// A corpus of real files: the files under `folder` that match `include`.
#[derive(Debug, Clone)]
pub struct CorpusFolder {
    /// The folder, resolved and canonical.
    pub folder: PathBuf,
    /// Globs relative to it (empty: every file).
    pub include: Vec<String>,
}

impl CorpusFolder {
    const FILE: &'static str = "corpus-folder.json";

    /// Reads `corpus-folder.json`; the folder must exist.
    fn load(path: &Path) -> Result<CorpusFolder> {
        #[derive(serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Spec {
            folder: String,
            #[serde(default)]
            include: Vec<String>,
            #[serde(default, rename = "about")]
            _about: String,
        }
        let text = std::fs::read_to_string(path).map_err(|e| bad(path, e.to_string()))?;
        let spec: Spec = serde_json::from_str(&text).map_err(|e| bad(path, e.to_string()))?;
        CorpusFolder::resolve(path, &spec.folder, spec.include)
    }

    /// The folder `written` in the spec file `spec`: `{rustc_sysroot}` expanded, a relative
    /// path taken from the spec file's folder; it must exist.
    pub(crate) fn resolve(
        spec: &Path,
        written: &str,
        include: Vec<String>,
    ) -> Result<CorpusFolder> {
        let mut folder = written.to_string();
        if folder.contains("{rustc_sysroot}") {
            folder = folder.replace("{rustc_sysroot}", &rustc_sysroot(spec)?);
        }
        let base = spec.parent().unwrap_or(Path::new("."));
        let folder = base
            .join(folder)
            .canonicalize()
            .map_err(|e| bad(spec, format!("folder `{written}`: {e}")))?;
        Ok(CorpusFolder { folder, include })
    }
}

/// `rustc --print sysroot`, for sets over the documentation that ships with the toolchain.
fn rustc_sysroot(spec: &Path) -> Result<String> {
    let output = std::process::Command::new("rustc")
        .args(["--print", "sysroot"])
        .output()
        .map_err(|e| {
            bad(
                spec,
                format!("`{{rustc_sysroot}}` needs rustc on PATH: {e}"),
            )
        })?;
    if !output.status.success() {
        return Err(bad(spec, "`rustc --print sysroot` failed"));
    }
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_string())
}

/// Scores of one configuration.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "specta", derive(specta::Type))]
pub struct EvalScores {
    /// What was run (the mode, or a name).
    pub name: String,
    /// Mean nDCG@10.
    pub ndcg_at_10: f64,
    /// Mean Recall@100.
    pub recall_at_100: f64,
    /// Mean MRR@10.
    pub mrr_at_10: f64,
    /// Queries scored.
    pub queries: usize,
    /// Queries per second (search only).
    pub queries_per_sec: f64,
    /// The same scores per group of queries the set names (its split, the questions' style),
    /// by group name.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<GroupScores>,
    /// Queries on which a chat model judged the candidates (a deep search).
    pub model_runs: usize,
    /// The chat model's milliseconds per query, over every query (0 on those it skipped).
    pub model_ms_per_query: f64,
    /// Each judged query's scores, in the set's order (empty unless asked for).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub per_query: Vec<QueryScore>,
}

/// The mean scores of one group of a set's queries.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "specta", derive(specta::Type))]
pub struct GroupScores {
    /// `tuning`, `held_out`, `no_overlap`, `held_out/no_overlap`, …
    pub name: String,
    /// Queries in it.
    pub queries: usize,
    /// Mean nDCG@10.
    pub ndcg_at_10: f64,
    /// Mean Recall@100.
    pub recall_at_100: f64,
    /// Mean MRR@10.
    pub mrr_at_10: f64,
}

/// One query's ranking, and what a chat model spent on it.
pub(crate) struct QueryRanking {
    /// Documents' files, best first.
    pub paths: Vec<PathBuf>,
    /// Milliseconds a chat model spent judging, when it ran.
    pub model_ms: Option<f64>,
}

impl From<Vec<PathBuf>> for QueryRanking {
    fn from(paths: Vec<PathBuf>) -> Self {
        QueryRanking {
            paths,
            model_ms: None,
        }
    }
}

/// One query's scores.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "specta", derive(specta::Type))]
pub struct QueryScore {
    /// The query's id in the set.
    pub id: String,
    /// Its text.
    pub text: String,
    /// nDCG@10.
    pub ndcg_at_10: f64,
    /// Recall@100.
    pub recall_at_100: f64,
    /// MRR@10.
    pub mrr_at_10: f64,
    /// Milliseconds a chat model spent judging its candidates, when it ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model_ms: Option<f64>,
}

/// How a scoring run reports and stops: `on_query(done, total)` after each query; a pressed
/// `cancel` ends it with [`Error::Cancelled`] at the next query.
#[derive(Clone, Copy)]
pub struct ScoringControl<'a> {
    /// Called after each query.
    pub on_query: &'a (dyn Fn(usize, usize) + Sync),
    /// Checked before each query.
    pub cancel: &'a Cancel,
}

pub(crate) fn bad(path: &Path, reason: impl Into<String>) -> Error {
    Error::InvalidDataset {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

pub(crate) fn read_jsonl(
    path: &Path,
    mut each: impl FnMut(serde_json::Value) -> Result<()>,
) -> Result<()> {
    let file = std::fs::File::open(path).map_err(|e| bad(path, e.to_string()))?;
    for (i, line) in std::io::BufReader::new(file).lines().enumerate() {
        let line = line.map_err(|e| bad(path, format!("line {}: {e}", i + 1)))?;
        if line.trim().is_empty() {
            continue;
        }
        let value =
            serde_json::from_str(&line).map_err(|e| bad(path, format!("line {}: {e}", i + 1)))?;
        each(value).map_err(|e| match e {
            Error::InvalidDataset { reason, .. } => bad(path, format!("line {}: {reason}", i + 1)),
            other => other,
        })?;
    }
    Ok(())
}

fn field(v: &serde_json::Value, name: &str, path: &Path) -> Result<String> {
    match v.get(name) {
        Some(serde_json::Value::String(s)) => Ok(s.clone()),
        Some(serde_json::Value::Number(n)) => Ok(n.to_string()),
        Some(serde_json::Value::Null) | None if name == "title" => Ok(String::new()),
        _ => Err(bad(path, format!("no string field `{name}`"))),
    }
}

impl BeirSet {
    /// Reads a BEIR folder; every problem names the file (and line).
    pub fn load(dir: &Path) -> Result<BeirSet> {
        let corpus_path = dir.join("corpus.jsonl");
        let folder_path = dir.join(CorpusFolder::FILE);
        let mut corpus = Vec::new();
        let corpus_folder = if !corpus_path.exists() && folder_path.exists() {
            Some(CorpusFolder::load(&folder_path)?)
        } else {
            read_jsonl(&corpus_path, |v| {
                corpus.push((
                    field(&v, "_id", &corpus_path)?,
                    field(&v, "title", &corpus_path)?,
                    field(&v, "text", &corpus_path)?,
                ));
                Ok(())
            })?;
            None
        };
        let qrels_path = ["test.tsv", "dev.tsv", "train.tsv"]
            .iter()
            .map(|f| dir.join("qrels").join(f))
            .find(|p| p.is_file())
            .ok_or_else(|| bad(&dir.join("qrels/test.tsv"), "missing"))?;
        let mut qrels: HashMap<String, HashMap<String, u32>> = HashMap::new();
        let text =
            std::fs::read_to_string(&qrels_path).map_err(|e| bad(&qrels_path, e.to_string()))?;
        for (i, line) in text.lines().enumerate() {
            let cols: Vec<&str> = line.split('\t').collect();
            if i == 0 && cols.first() == Some(&"query-id") {
                continue;
            }
            if line.trim().is_empty() {
                continue;
            }
            let [q, d, score] = cols[..] else {
                return Err(bad(
                    &qrels_path,
                    format!("line {}: expected 3 tab-separated columns", i + 1),
                ));
            };
            let score: i64 = score.trim().parse().map_err(|_| {
                bad(
                    &qrels_path,
                    format!("line {}: score `{score}` is not a number", i + 1),
                )
            })?;
            if score > 0 {
                qrels
                    .entry(q.to_string())
                    .or_default()
                    .insert(d.to_string(), score as u32);
            }
        }
        let queries_path = dir.join("queries.jsonl");
        let mut queries = Vec::new();
        let mut groups = HashMap::new();
        read_jsonl(&queries_path, |v| {
            let id = field(&v, "_id", &queries_path)?;
            if qrels.contains_key(&id) {
                groups.insert(id.clone(), query_groups(&v));
                queries.push((id, field(&v, "text", &queries_path)?));
            }
            Ok(())
        })?;
        if (corpus.is_empty() && corpus_folder.is_none()) || queries.is_empty() {
            return Err(bad(dir, "no documents or no judged queries"));
        }
        Ok(BeirSet {
            corpus,
            corpus_folder,
            queries,
            qrels,
            groups,
        })
    }

    /// The id of the document a hit's file is: its path below the corpus folder, or the id
    /// its written file name encodes.
    pub fn document_id(&self, path: &Path) -> Option<String> {
        match &self.corpus_folder {
            Some(c) => {
                let relative = path.strip_prefix(&c.folder).ok()?;
                let parts: Vec<_> = relative.iter().map(|p| p.to_string_lossy()).collect();
                Some(parts.join("/"))
            }
            None => id_from_path(path),
        }
    }

    /// Writes each document as `<id>.md` (title as its heading) for the normal indexer.
    pub fn write_corpus(&self, folder: &Path) -> Result<()> {
        std::fs::create_dir_all(folder).map_err(|e| Error::io(folder, e))?;
        for (id, title, text) in &self.corpus {
            let path = folder.join(format!("{}.md", file_stem_for(id)));
            let body = if title.trim().is_empty() {
                text.clone()
            } else {
                format!("# {}\n\n{}\n", title.trim(), text)
            };
            std::fs::write(&path, body).map_err(|e| Error::io(&path, e))?;
        }
        Ok(())
    }
}

/// The groups a query's metadata puts it in: its split, its style, and the two together.
fn query_groups(query: &serde_json::Value) -> Vec<String> {
    let label = |key: &str| {
        query
            .pointer(&format!("/metadata/{key}"))
            .and_then(|v| v.as_str())
            .filter(|s| !s.is_empty())
            .map(str::to_string)
    };
    let (split, style) = (label("split"), label("style"));
    let both = split
        .as_ref()
        .zip(style.as_ref())
        .map(|(a, b)| format!("{a}/{b}"));
    [split, style, both].into_iter().flatten().collect()
}

/// Document ids become file names: anything but letters, digits, `-`, `_` and `.` is escaped.
fn file_stem_for(id: &str) -> String {
    id.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c.to_string()
            } else {
                format!("%{:02X}", c as u32)
            }
        })
        .collect()
}

fn id_from_path(path: &Path) -> Option<String> {
    let stem = path.file_stem()?.to_str()?;
    let mut out = String::new();
    let mut chars = stem.chars();
    while let Some(c) = chars.next() {
        if c == '%' {
            let hex: String = chars.by_ref().take(2).collect();
            out.push(char::from_u32(u32::from_str_radix(&hex, 16).ok()?)?);
        } else {
            out.push(c);
        }
    }
    Some(out)
}

/// nDCG@10, Recall@100 and MRR@10 of one ranking.
pub fn score_ranking(ranking: &[String], relevant: &HashMap<String, u32>) -> (f64, f64, f64) {
    let dcg: f64 = ranking
        .iter()
        .take(10)
        .enumerate()
        .map(|(i, d)| relevant.get(d).copied().unwrap_or(0) as f64 / (i as f64 + 2.0).log2())
        .sum();
    let mut ideal: Vec<u32> = relevant.values().copied().collect();
    ideal.sort_unstable_by(|a, b| b.cmp(a));
    let idcg: f64 = ideal
        .iter()
        .take(10)
        .enumerate()
        .map(|(i, g)| *g as f64 / (i as f64 + 2.0).log2())
        .sum();
    let found = ranking
        .iter()
        .take(100)
        .filter(|d| relevant.contains_key(*d))
        .count();
    let recall = if relevant.is_empty() {
        0.0
    } else {
        found as f64 / relevant.len() as f64
    };
    let mrr = ranking
        .iter()
        .take(10)
        .position(|d| relevant.contains_key(d))
        .map(|p| 1.0 / (p as f64 + 1.0))
        .unwrap_or(0.0);
    (if idcg > 0.0 { dcg / idcg } else { 0.0 }, recall, mrr)
}

/// Scores `rank` (query text → documents' files, best first) over every judged query.
pub(crate) fn evaluate_ranked(
    set: &BeirSet,
    name: &str,
    control: ScoringControl<'_>,
    mut rank: impl FnMut(&str) -> Result<QueryRanking>,
) -> Result<EvalScores> {
    let mut per_query = Vec::with_capacity(set.queries.len());
    let started = Instant::now();
    for (done, (qid, text)) in set.queries.iter().enumerate() {
        if control.cancel.is_cancelled() {
            return Err(Error::Cancelled);
        }
        let mut seen = std::collections::HashSet::new();
        let ranked = rank(text)?;
        let ranking: Vec<String> = ranked
            .paths
            .iter()
            .filter_map(|p| set.document_id(p))
            .filter(|id| seen.insert(id.clone()))
            .collect();
        let (n, r, m) = score_ranking(&ranking, &set.qrels[qid]);
        per_query.push(QueryScore {
            id: qid.clone(),
            text: text.clone(),
            ndcg_at_10: n,
            recall_at_100: r,
            mrr_at_10: m,
            model_ms: ranked.model_ms,
        });
        (control.on_query)(done + 1, set.queries.len());
    }
    let secs = started.elapsed().as_secs_f64().max(1e-9);
    let all = group_scores(name, per_query.iter());
    let model_ms: Vec<f64> = per_query.iter().filter_map(|q| q.model_ms).collect();
    Ok(EvalScores {
        name: name.to_string(),
        ndcg_at_10: all.ndcg_at_10,
        recall_at_100: all.recall_at_100,
        mrr_at_10: all.mrr_at_10,
        queries: set.queries.len(),
        queries_per_sec: set.queries.len() as f64 / secs,
        groups: groups(set, &per_query),
        model_runs: model_ms.len(),
        model_ms_per_query: model_ms.iter().sum::<f64>() / set.queries.len().max(1) as f64,
        per_query,
    })
}

/// The mean scores of `queries`.
fn group_scores<'q>(name: &str, queries: impl Iterator<Item = &'q QueryScore>) -> GroupScores {
    let queries: Vec<&QueryScore> = queries.collect();
    let count = queries.len().max(1) as f64;
    let mean =
        |metric: fn(&QueryScore) -> f64| queries.iter().map(|q| metric(q)).sum::<f64>() / count;
    GroupScores {
        name: name.to_string(),
        queries: queries.len(),
        ndcg_at_10: mean(|q| q.ndcg_at_10),
        recall_at_100: mean(|q| q.recall_at_100),
        mrr_at_10: mean(|q| q.mrr_at_10),
    }
}

/// Scores per group the set's queries name, by name.
fn groups(set: &BeirSet, per_query: &[QueryScore]) -> Vec<GroupScores> {
    let mut names: Vec<&String> = set.groups.values().flatten().collect();
    names.sort();
    names.dedup();
    names
        .into_iter()
        .map(|name| {
            let members = per_query
                .iter()
                .filter(|q| set.groups.get(&q.id).is_some_and(|g| g.contains(name)));
            group_scores(name, members)
        })
        .collect()
}

/// Scores retrieval settings on `set`, already indexed into the library `retrieval` searches.
/// Pools are widened to rank 100 documents, so Recall@100 measures the settings' ranking, not
/// their limit.
pub fn evaluate(
    retrieval: &dyn Retrieval,
    set: &BeirSet,
    name: &str,
    settings: &RetrievalSettings,
    control: ScoringControl<'_>,
) -> Result<EvalScores> {
    let mut settings = settings.clone();
    settings.limit = settings.limit.max(100);
    settings.max_per_document = 1;
    settings.lexical_candidates = settings.lexical_candidates.max(300);
    settings.vector_candidates = settings.vector_candidates.max(300);
    evaluate_ranked(set, name, control, |text| {
        let mut request = SearchRequest::new(text);
        request.settings = settings.clone();
        let results = retrieval.search(&request)?;
        Ok(QueryRanking {
            model_ms: model_ms(&results.trace),
            paths: results.hits.into_iter().map(|h| h.path).collect(),
        })
    })
}

/// The time a chat model spent judging in a search, when it did (a rerank stage by a chat
/// model that was not skipped).
fn model_ms(trace: &[crate::retrieve::StageTrace]) -> Option<f64> {
    trace
        .iter()
        .find(|t| t.stage == "rerank" && t.detail.starts_with("chat model"))
        .map(|t| t.took_us as f64 / 1000.0)
}

/// Scores a whole pipeline (query tools, retrieval, chunk tools) on `set`, already indexed into
/// the engine's library, by the order of the evidence it admits. Its own limits apply, so
/// Recall@100 is bounded by its evidence budget.
pub fn evaluate_pipeline(
    engine: &EngineContext<'_>,
    set: &BeirSet,
    pipeline: &ResolvedPipeline,
    control: ScoringControl<'_>,
) -> Result<EvalScores> {
    let admin = Principal::administrator();
    // The evaluation library has one collection; the pipeline's own names mean nothing here.
    let mut pipeline = pipeline.clone();
    pipeline.pipeline.collections.clear();
    evaluate_ranked(
        set,
        &format!("pipeline {}", pipeline.name),
        control,
        |text| {
            let run = run_resolved(engine, &pipeline, text, &admin, &Default::default())?;
            let paths: Vec<PathBuf> = run.evidence.entries.into_iter().map(|e| e.path).collect();
            Ok(paths.into())
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::tests::{lexical_pipeline, Fixture};
    use std::path::PathBuf;

    fn quiet(cancel: &Cancel) -> ScoringControl<'_> {
        ScoringControl {
            on_query: &|_, _| {},
            cancel,
        }
    }

    #[test]
    fn metrics_match_hand_computed_values() {
        let rel = HashMap::from([("a".to_string(), 2), ("b".to_string(), 1)]);
        let ranking: Vec<String> = ["x", "a", "b"].iter().map(|s| s.to_string()).collect();
        let (ndcg, recall, mrr) = score_ranking(&ranking, &rel);
        let dcg = 2.0 / 3f64.log2() + 1.0 / 4f64.log2();
        let idcg = 2.0 + 1.0 / 3f64.log2();
        assert!((ndcg - dcg / idcg).abs() < 1e-12);
        assert_eq!(recall, 1.0);
        assert_eq!(mrr, 0.5);
        let (n0, r0, m0) = score_ranking(&["x".to_string()], &rel);
        assert_eq!((n0, r0, m0), (0.0, 0.0, 0.0));
    }

    #[test]
    fn ids_survive_the_trip_through_file_names() {
        for id in ["184", "doc/7", "a b", "MED-10"] {
            let p = PathBuf::from(format!("/c/{}.md", file_stem_for(id)));
            assert_eq!(id_from_path(&p).as_deref(), Some(id));
        }
    }

    /// Documents `note` and `secret` (the stub fixture's files), one query judging `secret`.
    fn two_document_set() -> BeirSet {
        BeirSet {
            corpus: vec![
                ("note".into(), String::new(), "note".into()),
                ("secret".into(), String::new(), "secret".into()),
            ],
            corpus_folder: None,
            queries: vec![("q1".into(), "turbine".into())],
            qrels: HashMap::from([("q1".to_string(), HashMap::from([("secret".to_string(), 1)]))]),
            groups: HashMap::new(),
        }
    }

    #[test]
    fn settings_are_scored_with_pools_widened_to_a_hundred_documents() {
        let f = Fixture::new();
        let stub = f.stub(&[f.notes[0], f.notes[1], f.secret]);
        let settings = RetrievalSettings {
            limit: 10,
            ..Default::default()
        };
        let scores = evaluate(
            &stub,
            &two_document_set(),
            "lexical",
            &settings,
            quiet(&Cancel::new()),
        )
        .unwrap();
        let request = &stub.requests.borrow()[0];
        assert_eq!(request.query, "turbine");
        assert_eq!(request.settings.limit, 100);
        assert_eq!(request.settings.max_per_document, 1);
        assert!(request.settings.lexical_candidates >= 300);
        assert!(request.settings.vector_candidates >= 300);
        // Ranking note, note, secret counts `note` once: `secret` is second.
        assert_eq!(scores.name, "lexical");
        assert_eq!(scores.queries, 1);
        assert_eq!(scores.mrr_at_10, 0.5);
        assert_eq!(scores.recall_at_100, 1.0);
        assert!((scores.ndcg_at_10 - 1.0 / 3f64.log2()).abs() < 1e-12);
    }

    #[test]
    fn a_pipeline_is_scored_by_its_admitted_evidence_over_the_evaluation_library() {
        let f = Fixture::new();
        let stub = f.stub(&[f.secret, f.notes[0]]);
        // Its own collections name the user's library, not the evaluation one: ignored.
        let pipeline = lexical_pipeline(&["nowhere"], 1);
        let scores = evaluate_pipeline(
            &f.engine(&stub),
            &two_document_set(),
            &pipeline,
            quiet(&Cancel::new()),
        )
        .unwrap();
        assert!(stub.requests.borrow()[0].collections.is_empty());
        assert_eq!(scores.name, "pipeline lex");
        // A budget of one admits `secret` alone, the judged document, first.
        assert_eq!(
            (scores.ndcg_at_10, scores.recall_at_100, scores.mrr_at_10),
            (1.0, 1.0, 1.0)
        );
    }

    #[test]
    fn queries_are_scored_per_split_and_style_as_well_as_together() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("qrels")).unwrap();
        std::fs::write(
            dir.path().join("corpus.jsonl"),
            "{\"_id\":\"a\",\"text\":\"x\"}\n{\"_id\":\"b\",\"text\":\"y\"}\n",
        )
        .unwrap();
        let query = |id: &str, split: &str, style: &str| {
            serde_json::json!({"_id": id, "text": id, "metadata": {"split": split, "style": style}})
                .to_string()
        };
        let queries = [
            query("q1", "tuning", "paraphrase"),
            query("q2", "held_out", "paraphrase"),
            query("q3", "held_out", "no_overlap"),
        ];
        std::fs::write(dir.path().join("queries.jsonl"), queries.join("\n")).unwrap();
        std::fs::write(
            dir.path().join("qrels/test.tsv"),
            "query-id\tcorpus-id\tscore\nq1\ta\t1\nq2\ta\t1\nq3\ta\t1\n",
        )
        .unwrap();
        let set = BeirSet::load(dir.path()).unwrap();
        // q3 finds its page second, the others first.
        let scores = evaluate_ranked(&set, "fixed", quiet(&Cancel::new()), |text| {
            let order = if text == "q3" { ["b", "a"] } else { ["a", "b"] };
            Ok(QueryRanking {
                paths: order
                    .iter()
                    .map(|d| PathBuf::from(format!("/c/{d}.md")))
                    .collect(),
                model_ms: (text == "q1").then_some(40.0),
            })
        })
        .unwrap();
        let group = |name: &str| scores.groups.iter().find(|g| g.name == name).unwrap();
        assert_eq!(group("tuning").mrr_at_10, 1.0);
        assert_eq!(
            (group("held_out").queries, group("held_out").mrr_at_10),
            (2, 0.75)
        );
        assert_eq!(group("held_out/no_overlap").mrr_at_10, 0.5);
        assert_eq!(group("paraphrase").queries, 2);
        assert_eq!(scores.groups.len(), 7);
        assert!((scores.mrr_at_10 - 2.5 / 3.0).abs() < 1e-12);
        assert_eq!(scores.model_runs, 1);
        assert!((scores.model_ms_per_query - 40.0 / 3.0).abs() < 1e-9);
    }

    /// A set over a folder of real files, judging `guide/install.md`.
    fn folder_set(spec: &str) -> (tempfile::TempDir, Result<BeirSet>) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("qrels")).unwrap();
        std::fs::write(dir.path().join("corpus-folder.json"), spec).unwrap();
        std::fs::write(
            dir.path().join("queries.jsonl"),
            "{\"_id\":\"q1\",\"text\":\"install\"}\n",
        )
        .unwrap();
        std::fs::write(
            dir.path().join("qrels/test.tsv"),
            "query-id\tcorpus-id\tscore\nq1\tguide/install.md\t2\n",
        )
        .unwrap();
        let set = BeirSet::load(dir.path());
        (dir, set)
    }

    #[test]
    fn a_set_over_a_folder_names_documents_by_their_path_below_it() {
        let docs = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(docs.path().join("guide")).unwrap();
        let spec = serde_json::json!({
            "about": "two guides",
            "folder": docs.path(),
            "include": ["guide/**/*.md"],
        });
        let (_dir, set) = folder_set(&spec.to_string());
        let set = set.unwrap();
        let folder = set.corpus_folder.as_ref().unwrap();
        assert_eq!(folder.include, ["guide/**/*.md"]);
        assert!(set.corpus.is_empty());
        let hit = docs.path().canonicalize().unwrap().join("guide/install.md");
        assert_eq!(set.document_id(&hit).as_deref(), Some("guide/install.md"));
        assert_eq!(set.document_id(Path::new("/elsewhere/install.md")), None);
        // The toolchain's own folder is found through rustc.
        let (_dir, sysroot) = folder_set(r#"{"folder": "{rustc_sysroot}"}"#);
        assert!(sysroot
            .unwrap()
            .corpus_folder
            .unwrap()
            .folder
            .join("lib")
            .is_dir());
    }

    #[test]
    fn a_folder_set_that_cannot_be_read_says_which_file_and_why() {
        let (_dir, missing) = folder_set(r#"{"folder": "/no/such/folder"}"#);
        let err = missing.unwrap_err();
        assert_eq!(err.code(), "invalid_dataset");
        assert!(
            err.to_string().contains("corpus-folder.json")
                && err.to_string().contains("/no/such/folder"),
            "{err}"
        );
        let (_dir, typo) = folder_set(r#"{"foldr": "/tmp"}"#);
        let err = typo.unwrap_err().to_string();
        assert!(
            err.contains("corpus-folder.json") && err.contains("foldr"),
            "{err}"
        );
    }

    #[test]
    fn broken_files_are_named_with_their_line() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("corpus.jsonl"),
            "{\"_id\":\"1\",\"text\":\"x\"}\n{oops\n",
        )
        .unwrap();
        let err = BeirSet::load(dir.path()).unwrap_err();
        assert_eq!(err.code(), "invalid_dataset");
        assert!(err.to_string().contains("corpus.jsonl"), "{err}");
        assert!(err.to_string().contains("line 2"), "{err}");
        std::fs::write(
            dir.path().join("corpus.jsonl"),
            "{\"_id\":\"1\",\"text\":\"x\"}\n",
        )
        .unwrap();
        std::fs::create_dir_all(dir.path().join("qrels")).unwrap();
        std::fs::write(
            dir.path().join("qrels/test.tsv"),
            "query-id\tcorpus-id\tscore\n1\t1\n",
        )
        .unwrap();
        let err = BeirSet::load(dir.path()).unwrap_err();
        assert!(
            err.to_string().contains("test.tsv") && err.to_string().contains("line 2"),
            "{err}"
        );
    }
}
