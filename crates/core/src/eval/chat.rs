//! Whether the assistant's answers are true: a grounded-QA set asked of each backend through
//! real chat turns, over a library of the set's own (never the user's).
//!
//! A set is a folder with `corpora.json` (the folders to index, one collection each; see
//! [`CorpusFolder`] for `{rustc_sysroot}` and relative paths) and `questions.jsonl`: per line
//! the question, the facts a right answer holds (any one of them, compared without case and
//! extra spaces) and the file that holds them, or no facts for a question the corpora cannot
//! answer, which the assistant should refuse.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::beir::{bad, read_jsonl, CorpusFolder};
use crate::cancel::Cancel;
use crate::error::{Error, Result};
use crate::orchestrator::sentences::flat;
use crate::orchestrator::{
    is_refusal, BackendConfig, ChatOptions, Citation, EvidenceItem, TurnEvent, TurnResult,
};
use crate::{IndexOptions, Library, Principal};

/// A loaded grounded-QA set.
#[derive(Debug, Clone)]
pub struct GroundedSet {
    /// The folders to index, by collection name.
    pub sources: Vec<(String, CorpusFolder)>,
    /// The questions, in the file's order.
    pub questions: Vec<GroundedQuestion>,
}

/// One question of a set.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GroundedQuestion {
    /// Its id.
    pub id: String,
    /// What is asked.
    pub question: String,
    /// A right answer holds one of these; none: the corpora cannot answer it.
    pub facts: Vec<String>,
    /// The collection (a source of `corpora.json`) that holds the answer.
    #[serde(default)]
    pub source: Option<String>,
    /// The file, relative to that source's folder.
    #[serde(default)]
    pub file: Option<String>,
}

impl GroundedQuestion {
    /// Whether the corpora answer it.
    pub fn answerable(&self) -> bool {
        !self.facts.is_empty()
    }

    /// Whether `text` holds one of the facts (compared flat: an answer that writes
    /// `**i32**` or splits a number over a line still holds it).
    pub fn holds_fact(&self, text: &str) -> bool {
        let text = flat(text);
        self.facts.iter().any(|f| text.contains(&flat(f)))
    }
}

impl GroundedSet {
    /// Reads `corpora.json` and `questions.jsonl` from `dir`; every problem names the file
    /// (and line).
    pub fn load(dir: &Path) -> Result<GroundedSet> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Corpora {
            #[serde(default, rename = "about")]
            _about: String,
            sources: Vec<SourceSpec>,
        }
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct SourceSpec {
            name: String,
            folder: String,
            #[serde(default)]
            include: Vec<String>,
        }
        let corpora_path = dir.join("corpora.json");
        let text = std::fs::read_to_string(&corpora_path)
            .map_err(|e| bad(&corpora_path, e.to_string()))?;
        let corpora: Corpora =
            serde_json::from_str(&text).map_err(|e| bad(&corpora_path, e.to_string()))?;
        let sources = corpora
            .sources
            .into_iter()
            .map(|s| {
                let folder = CorpusFolder::resolve(&corpora_path, &s.folder, s.include)?;
                Ok((s.name, folder))
            })
            .collect::<Result<Vec<_>>>()?;
        let questions_path = dir.join("questions.jsonl");
        let mut questions: Vec<GroundedQuestion> = Vec::new();
        let mut ids = HashSet::new();
        read_jsonl(&questions_path, |value| {
            let q: GroundedQuestion =
                serde_json::from_value(value).map_err(|e| bad(&questions_path, e.to_string()))?;
            if !ids.insert(q.id.clone()) {
                return Err(bad(&questions_path, format!("id `{}` repeats", q.id)));
            }
            if let Some(source) = &q.source {
                if !sources.iter().any(|(name, _)| name == source) {
                    return Err(bad(
                        &questions_path,
                        format!("`{}`: source `{source}` is not in corpora.json", q.id),
                    ));
                }
            }
            questions.push(q);
            Ok(())
        })?;
        if questions.is_empty() {
            return Err(bad(&questions_path, "no questions"));
        }
        Ok(GroundedSet { sources, questions })
    }
}

/// What one chat evaluation runs.
#[derive(Debug, Clone, Default)]
pub struct ChatEvalPlan {
    /// The set's folder.
    pub set: PathBuf,
    /// One row per backend; `None`: the mode's own backend.
    pub backends: Vec<Option<BackendConfig>>,
    /// The orchestrator mode the turns run in (`None`: the configuration's default).
    pub mode: Option<String>,
    /// Ask only N questions, spread evenly over the file (so every part of the set, the
    /// unanswerable questions too, keeps its share).
    pub limit: Option<usize>,
    /// Keep the set's library here (reused when it already holds the set); `None`: a
    /// temporary folder.
    pub keep: Option<PathBuf>,
}

/// Where a chat evaluation is.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "stage", rename_all = "snake_case")]
pub enum ChatEvalProgress {
    /// Indexing and embedding the corpora.
    Indexing,
    /// One question answered.
    Answered {
        /// The row's backend.
        backend: String,
        /// Questions done.
        done: usize,
        /// Questions in all.
        total: usize,
        /// Answerable questions so far.
        answerable: usize,
        /// Their answers that hold the fact.
        correct: usize,
        /// Unanswerable questions so far.
        unanswerable: usize,
        /// Those refused.
        refused: usize,
    },
}

/// One backend's figures.
#[derive(Debug, Clone, Serialize)]
pub struct ChatEvalRow {
    /// The backend asked (as the mode or override names it).
    pub backend: String,
    /// Answerable questions asked.
    pub answerable: usize,
    /// Answers that hold the fact.
    pub correct: usize,
    /// Answers that hold the fact and cite a passage that holds it.
    pub supported: usize,
    /// Of all citations in answers to answerable questions (refusals, whose citations are
    /// "see also", left out), the share whose passage holds the fact.
    pub citation_precision: f64,
    /// Answerable questions whose admitted evidence held the fact (what retrieval gave the
    /// backend to work with).
    pub fact_retrieved: usize,
    /// Answerable questions whose sentences shown to the model held the fact (after the
    /// sentence selection; `None` when no turn selected sentences, as in model-led modes).
    pub fact_shown: Option<usize>,
    /// Median characters of evidence admitted per turn.
    pub admitted_chars_p50: Option<u64>,
    /// Median characters of evidence shown to the model per turn.
    pub shown_chars_p50: Option<u64>,
    /// Answers that quote the best sentence because nothing the model wrote held.
    pub quoted: usize,
    /// Answers that quote the best sentence beneath the model's words, which left out what it
    /// names.
    pub quoted_beside: usize,
    /// Answerable questions the backend refused.
    pub false_refusals: usize,
    /// Questions the corpora cannot answer.
    pub unanswerable: usize,
    /// Of those, the ones refused.
    pub refused: usize,
    /// Median milliseconds to the first answer token (generating backends).
    pub first_token_ms_p50: Option<u64>,
    /// Slowest-tenth milliseconds to the first answer token.
    pub first_token_ms_p90: Option<u64>,
    /// Median milliseconds for the whole turn.
    pub total_ms_p50: u64,
    /// Turns answered by another backend than the one asked (a model that failed to load).
    pub fell_back: usize,
    /// Each question's answer.
    pub answers: Vec<ChatEvalAnswer>,
}

/// One question's answer, scored.
#[derive(Debug, Clone, Serialize)]
pub struct ChatEvalAnswer {
    /// The question's id.
    pub id: String,
    /// The answer as written.
    pub answer: String,
    /// Whether it holds a fact (answerable questions).
    pub correct: bool,
    /// Whether it is a refusal.
    pub refused: bool,
    /// Citations, and how many of them hold a fact.
    pub citations: usize,
    /// Citations whose passage holds a fact.
    pub supporting_citations: usize,
    /// Whether the admitted evidence held a fact.
    pub fact_retrieved: bool,
    /// Whether the sentences shown to the model held a fact (`None`: none were selected).
    pub fact_shown: Option<bool>,
    /// Characters admitted.
    pub admitted_chars: Option<u64>,
    /// Characters shown to the model.
    pub shown_chars: Option<u64>,
    /// Whether the answer quotes the best sentence (the model's words did not hold).
    pub quoted: bool,
    /// Whether the best sentence is quoted beneath the model's words.
    pub quoted_beside: bool,
    /// How well the evidence supported an answer (the `evidence.selected` event's `support`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub support: Option<serde_json::Value>,
    /// Milliseconds to the first answer token.
    pub first_token_ms: Option<u64>,
    /// Milliseconds for the turn.
    pub took_ms: u64,
    /// The backend that answered.
    pub answered_by: String,
}

/// A finished chat evaluation.
#[derive(Debug, Clone, Serialize)]
pub struct ChatEvalReport {
    /// The set's folder.
    pub set: String,
    /// Documents indexed.
    pub documents: u64,
    /// Seconds spent indexing and embedding (a kept library that holds the set is only
    /// checked for changes).
    pub indexed_secs: f64,
    /// Questions asked per backend.
    pub questions: usize,
    /// One row per backend, in the plan's order.
    pub rows: Vec<ChatEvalRow>,
}

/// Runs `plan`: the corpora are indexed and embedded into the set's own library, then every
/// question is asked of each backend in a conversation of its own, as the administrator.
pub fn run_chat_evaluation(
    plan: &ChatEvalPlan,
    on_progress: &(dyn Fn(ChatEvalProgress) + Sync),
    cancel: &Cancel,
) -> Result<ChatEvalReport> {
    let set = GroundedSet::load(&plan.set)?;
    let questions = spread(&set.questions, plan.limit);
    let temp = tempfile::tempdir().map_err(|e| Error::io(std::env::temp_dir(), e))?;
    let work = plan.keep.as_deref().unwrap_or(temp.path());
    on_progress(ChatEvalProgress::Indexing);
    let (library, indexed_secs) = index_corpora(&set, work, cancel)?;
    let mut rows = Vec::new();
    for backend in &plan.backends {
        let label = backend
            .as_ref()
            .map(BackendConfig::describe)
            .unwrap_or_else(|| "the mode's backend".into());
        let mut answers = Vec::new();
        for (done, question) in questions.iter().copied().enumerate() {
            if cancel.is_cancelled() {
                return Err(Error::Cancelled);
            }
            let mut options = ChatOptions::new(Principal::administrator());
            options.mode = plan.mode.clone();
            options.backend = backend.clone();
            let result = library.chat(&question.question, &options, &mut |_: TurnEvent<'_>| {})?;
            answers.push((question, score_answer(question, &result)));
            let (answerable, unanswerable): (Vec<_>, Vec<_>) =
                answers.iter().partition(|(q, _)| q.answerable());
            on_progress(ChatEvalProgress::Answered {
                backend: label.clone(),
                done: done + 1,
                total: questions.len(),
                answerable: answerable.len(),
                correct: answerable.iter().filter(|(_, a)| a.correct).count(),
                unanswerable: unanswerable.len(),
                refused: unanswerable.iter().filter(|(_, a)| a.refused).count(),
            });
        }
        // The mode's own backend is named by what answered.
        let label = match (backend, answers.first()) {
            (None, Some((_, first))) => format!("{} (the mode's)", first.answered_by),
            _ => label,
        };
        rows.push(row_of(label, backend.as_ref(), answers));
    }
    let documents = library.status()?.stats.documents_indexed as u64;
    drop(library);
    crate::memory::return_freed_memory();
    Ok(ChatEvalReport {
        set: plan.set.display().to_string(),
        documents,
        indexed_secs,
        questions: questions.len(),
        rows,
    })
}

/// `limit` questions taken at even steps through `questions` (all of them without a limit).
fn spread(questions: &[GroundedQuestion], limit: Option<usize>) -> Vec<&GroundedQuestion> {
    let n = limit.unwrap_or(questions.len()).min(questions.len());
    (0..n)
        .map(|i| &questions[i * questions.len() / n])
        .collect()
}

/// Opens the set's library in `work`, adds each corpus as a collection of its own unless
/// they are there already, and indexes and embeds them.
fn index_corpora(set: &GroundedSet, work: &Path, cancel: &Cancel) -> Result<(Library, f64)> {
    let mut library = Library::open(&work.join("library"))?;
    if library.sources()?.is_empty() {
        for (name, corpus) in &set.sources {
            library.add_source(&corpus.folder, name, &corpus.include, &[])?;
        }
    }
    let started = Instant::now();
    let mut writer = library.writer()?;
    writer.index_all(&IndexOptions::default(), &|_| {})?;
    writer.embed_pending(&|_| {}, cancel.flag())?;
    if cancel.is_cancelled() {
        return Err(Error::Cancelled);
    }
    drop(writer);
    Ok((library, started.elapsed().as_secs_f64()))
}

/// Whether an answer declines: one of the assistant's own refusals, or a model's sentence that
/// says the passages do not answer (small models word the refusal their own way).
fn refuses(answer: &str) -> bool {
    let answer = flat(answer);
    is_refusal(&answer)
        || [
            "does not answer",
            "do not answer",
            "doesn't answer",
            "don't answer",
        ]
        .iter()
        .any(|p| answer.contains(p))
}

/// Scores one turn's answer against its question.
fn score_answer(question: &GroundedQuestion, result: &TurnResult) -> ChatEvalAnswer {
    let passage = |c: &Citation| -> Option<&EvidenceItem> {
        result.evidence.iter().find(|e| e.chunk_id == c.chunk_id)
    };
    let supporting_citations = result
        .citations
        .iter()
        .filter(|c| passage(c).is_some_and(|e| question.holds_fact(&e.text)))
        .count();
    let selected = result
        .trace
        .iter()
        .rev()
        .find(|e| e.kind == "evidence.selected")
        .map(|e| &e.detail);
    let fact_shown = selected.map(|d| {
        d["shown"].as_array().is_some_and(|shown| {
            shown
                .iter()
                .any(|s| s["text"].as_str().is_some_and(|t| question.holds_fact(t)))
        })
    });
    let quoted = |beside: bool| {
        result.trace.iter().any(|e| {
            e.kind == "answer.quoted" && e.detail["beside"].as_bool().unwrap_or(false) == beside
        })
    };
    ChatEvalAnswer {
        fact_shown,
        admitted_chars: selected.and_then(|d| d["admitted_chars"].as_u64()),
        shown_chars: selected.and_then(|d| d["shown_chars"].as_u64()),
        quoted: quoted(false),
        quoted_beside: quoted(true),
        support: selected.map(|d| d["support"].clone()),
        id: question.id.clone(),
        answer: result.answer.clone(),
        correct: question.answerable() && question.holds_fact(&result.answer),
        refused: refuses(&result.answer),
        citations: result.citations.len(),
        supporting_citations,
        fact_retrieved: result.evidence.iter().any(|e| question.holds_fact(&e.text)),
        first_token_ms: result.first_token_ms,
        took_ms: result.took_ms,
        answered_by: result.backend.clone(),
    }
}

/// A backend's row from its scored answers.
fn row_of(
    label: String,
    asked: Option<&BackendConfig>,
    answers: Vec<(&GroundedQuestion, ChatEvalAnswer)>,
) -> ChatEvalRow {
    let answerable: Vec<&ChatEvalAnswer> = answers
        .iter()
        .filter(|(q, _)| q.answerable())
        .map(|(_, a)| a)
        .collect();
    let unanswerable: Vec<&ChatEvalAnswer> = answers
        .iter()
        .filter(|(q, _)| !q.answerable())
        .map(|(_, a)| a)
        .collect();
    // A refusal's "closest passages" are not attached to a claim: precision counts the
    // citations of answers.
    let claims = || answerable.iter().filter(|a| !a.refused);
    let citations: usize = claims().map(|a| a.citations).sum();
    let supporting: usize = claims().map(|a| a.supporting_citations).sum();
    let mut first_tokens: Vec<u64> = answers
        .iter()
        .filter_map(|(_, a)| a.first_token_ms)
        .collect();
    let mut totals: Vec<u64> = answers.iter().map(|(_, a)| a.took_ms).collect();
    // An extractive row is answered extractively on purpose: only a generating backend that
    // did not answer fell back.
    let fell_back = match asked {
        Some(BackendConfig::Extractive) => 0,
        _ => answers
            .iter()
            .filter(|(_, a)| a.answered_by == "extractive")
            .count(),
    };
    ChatEvalRow {
        backend: label,
        answerable: answerable.len(),
        correct: answerable.iter().filter(|a| a.correct).count(),
        supported: answerable
            .iter()
            .filter(|a| a.correct && a.supporting_citations > 0)
            .count(),
        citation_precision: if citations == 0 {
            0.0
        } else {
            supporting as f64 / citations as f64
        },
        fact_retrieved: answerable.iter().filter(|a| a.fact_retrieved).count(),
        fact_shown: answerable.iter().any(|a| a.fact_shown.is_some()).then(|| {
            answerable
                .iter()
                .filter(|a| a.fact_shown == Some(true))
                .count()
        }),
        admitted_chars_p50: percentile(
            &mut answers
                .iter()
                .filter_map(|(_, a)| a.admitted_chars)
                .collect::<Vec<_>>(),
            0.5,
        ),
        shown_chars_p50: percentile(
            &mut answers
                .iter()
                .filter_map(|(_, a)| a.shown_chars)
                .collect::<Vec<_>>(),
            0.5,
        ),
        quoted: answers.iter().filter(|(_, a)| a.quoted).count(),
        quoted_beside: answers.iter().filter(|(_, a)| a.quoted_beside).count(),
        false_refusals: answerable.iter().filter(|a| a.refused).count(),
        unanswerable: unanswerable.len(),
        refused: unanswerable.iter().filter(|a| a.refused).count(),
        first_token_ms_p50: percentile(&mut first_tokens, 0.5),
        first_token_ms_p90: percentile(&mut first_tokens, 0.9),
        total_ms_p50: percentile(&mut totals, 0.5).unwrap_or(0),
        fell_back,
        answers: answers.into_iter().map(|(_, a)| a).collect(),
    }
}

/// The `q` quantile (nearest rank) of `values`.
fn percentile(values: &mut [u64], q: f64) -> Option<u64> {
    if values.is_empty() {
        return None;
    }
    values.sort_unstable();
    let rank = ((values.len() as f64 * q).ceil() as usize).clamp(1, values.len());
    Some(values[rank - 1])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn question(facts: &[&str]) -> GroundedQuestion {
        GroundedQuestion {
            id: "q".into(),
            question: "?".into(),
            facts: facts.iter().map(|f| f.to_string()).collect(),
            source: None,
            file: None,
        }
    }

    #[test]
    fn facts_match_without_case_emphasis_or_extra_spaces() {
        let q = question(&["2,147,483,647", "Rc<T>"]);
        assert!(q.holds_fact("The largest is 2,147,483,647 [1]."));
        assert!(q.holds_fact("Use **rc<T>** here"));
        assert!(q.holds_fact("`Rc<T>`"));
        assert!(!q.holds_fact("2147483647"));
        assert!(!question(&[]).holds_fact("anything"));
    }

    #[test]
    fn a_limit_spreads_over_the_whole_set() {
        let questions: Vec<GroundedQuestion> = (0..10)
            .map(|i| GroundedQuestion {
                id: i.to_string(),
                ..question(&[])
            })
            .collect();
        let ids = |limit| -> Vec<String> {
            spread(&questions, limit)
                .iter()
                .map(|q| q.id.clone())
                .collect()
        };
        assert_eq!(ids(Some(4)), ["0", "2", "5", "7"]);
        assert_eq!(ids(None).len(), 10);
        assert_eq!(ids(Some(50)).len(), 10);
    }

    #[test]
    fn percentiles_take_the_nearest_rank() {
        assert_eq!(percentile(&mut [], 0.5), None);
        assert_eq!(percentile(&mut [30, 10, 20], 0.5), Some(20));
        assert_eq!(
            percentile(&mut [5, 1, 4, 2, 3, 6, 7, 8, 9, 10], 0.9),
            Some(9)
        );
    }

    fn set_dir(corpora: &str, questions: &str) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("docs")).unwrap();
        std::fs::write(dir.path().join("corpora.json"), corpora).unwrap();
        std::fs::write(dir.path().join("questions.jsonl"), questions).unwrap();
        dir
    }

    #[test]
    fn a_set_resolves_relative_folders_and_names_bad_lines() {
        let corpora = r#"{"sources": [{"name": "docs", "folder": "docs"}]}"#;
        let dir = set_dir(
            corpora,
            "{\"id\": \"a\", \"question\": \"?\", \"facts\": [\"x\"], \"source\": \"docs\", \"file\": \"a.md\"}\n{\"id\": \"b\", \"question\": \"?\", \"facts\": []}\n",
        );
        let set = GroundedSet::load(dir.path()).unwrap();
        assert_eq!(set.questions.len(), 2);
        assert_eq!(
            set.sources[0].1.folder,
            dir.path().join("docs").canonicalize().unwrap()
        );
        assert!(!set.questions[1].answerable());

        let dir = set_dir(
            corpora,
            "{\"id\": \"a\", \"question\": \"?\", \"facts\": [\"x\"], \"source\": \"web\"}\n",
        );
        let err = GroundedSet::load(dir.path()).unwrap_err().to_string();
        assert!(
            err.contains("questions.jsonl") && err.contains("line 1") && err.contains("`web`"),
            "{err}"
        );
        let dir = set_dir(corpora, "{\"id\": \"a\", \"question\": \"?\"}\n");
        let err = GroundedSet::load(dir.path()).unwrap_err().to_string();
        assert!(err.contains("line 1") && err.contains("facts"), "{err}");
        let dir = set_dir(r#"{"sources": [{"name": "d", "folder": "nowhere"}]}"#, "");
        let err = GroundedSet::load(dir.path()).unwrap_err().to_string();
        assert!(
            err.contains("corpora.json") && err.contains("nowhere"),
            "{err}"
        );
    }
}
