//! The rerank stage: a cross-encoder scores the best candidates against the query, or a chat
//! model judges them (P("yes") to "does this answer the query?") and its judgement is
//! blended half and half with their fused score (over the best candidate's), so one odd
//! judgement cannot bury a page both streams agreed on. Half and half was the best of the
//! blends tried on the long pages' tuning half (qmd's by position among them: with judgements
//! as flat as a small model's, position always won and it changed nothing).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::certainty::Certainty;
use super::rank::Ranked;
use super::{elapsed_us, ReadinessIssue, RerankSettings, RerankWhen, SearchContext, StageTrace};
use crate::embed::Reranker;
use crate::error::Result;
use crate::ids::ChunkId;
use crate::llm::embedded::EmbeddedBackend;
use crate::models::{ModelKind, Models};
use crate::store::ChunkRecord;

/// The chat model a deep search judges with: the default one when it is installed, else the
/// smallest installed chat model.
pub fn deep_search_model(models: &Models) -> Result<String> {
    let default = crate::models::default_llm_model();
    let mut chat_models: Vec<_> = models
        .installed()
        .into_iter()
        .filter(|m| m.kind == ModelKind::Llm)
        .collect();
    if chat_models.iter().any(|m| m.id == default) {
        return Ok(default.to_string());
    }
    chat_models.sort_by_key(|m| m.files.iter().map(|f| f.bytes).sum::<u64>());
    match chat_models.first() {
        Some(m) => Ok(m.id.clone()),
        // None installed: the error says how to install the default.
        None => models.find_kind(default, ModelKind::Llm).map(|m| m.id),
    }
}

/// What scores the candidates.
#[derive(Clone)]
pub(crate) enum RerankScorer {
    /// An ONNX cross-encoder.
    CrossEncoder(Arc<Reranker>),
    /// A GGUF chat model, judging.
    ChatModel(Arc<EmbeddedBackend>),
}

/// Stage `rerank`: the best `candidates` reordered by the scorer, those below `min_score`
/// dropped. A reranker that cannot load leaves the ranking as it was and says so in the
/// trace and the readiness issue; with `when: unsure`, a sure first search is left as it is.
pub(super) fn stage(
    ctx: &SearchContext<'_>,
    ranked: &mut Ranked,
    chunks: &HashMap<ChunkId, ChunkRecord>,
    query: &str,
    settings: &RerankSettings,
    certainty: &Certainty,
) -> Result<(StageTrace, Option<ReadinessIssue>)> {
    let t = Instant::now();
    let trace = |detail: String, candidates: usize| StageTrace {
        stage: "rerank",
        variant: None,
        candidates,
        took_us: elapsed_us(t),
        detail,
    };
    if settings.when == RerankWhen::Unsure && certainty.value >= settings.unsure_below {
        let detail = format!(
            "skipped: the first search is sure ({certainty} ≥ {})",
            settings.unsure_below
        );
        return Ok((trace(detail, ranked.len()), None));
    }
    let scorer = match (ctx.reranker)(&settings.model) {
        Ok(scorer) => scorer,
        Err(e) => {
            let issue = ReadinessIssue {
                component: "reranker",
                message: e.to_string(),
            };
            return Ok((
                trace(format!("NOT APPLIED: {e}"), ranked.len()),
                Some(issue),
            ));
        }
    };
    let before = ranked.len().min(settings.candidates);
    let done = match &scorer {
        RerankScorer::CrossEncoder(reranker) => {
            ranked.truncate(settings.candidates);
            cross_encode(reranker, ranked, chunks, query)?;
            format!("cross-encoder {} over {before} candidate(s)", reranker.id())
        }
        RerankScorer::ChatModel(model) => judge(model, ranked, chunks, query, settings)?,
    };
    if let Some(min) = settings.min_score {
        ranked.retain(|(_, c)| c.scores.rerank.unwrap_or(f32::NEG_INFINITY) >= min);
    }
    // Reordered within the exact identifier matches and within the rest.
    super::rank::best_first(ranked, |c| c.scores.rerank.unwrap_or(f32::NEG_INFINITY));
    let detail = format!(
        "{done}; {} below min_score dropped; {certainty}",
        before - ranked.len()
    );
    Ok((trace(detail, ranked.len()), None))
}

fn cross_encode(
    reranker: &Reranker,
    ranked: &mut Ranked,
    chunks: &HashMap<ChunkId, ChunkRecord>,
    query: &str,
) -> Result<()> {
    let passages: Vec<&str> = ranked
        .iter()
        .map(|(id, _)| chunks[id].text.as_str())
        .collect();
    let scores = reranker.score(query, &passages)?;
    for ((_, c), s) in ranked.iter_mut().zip(&scores) {
        c.scores.rerank = Some(*s);
    }
    Ok(())
}

/// The chat model judges each candidate (its title, headings and text); the rerank score is
/// the judgement blended with the fused score. Returns the trace's account of it.
fn judge(
    model: &EmbeddedBackend,
    ranked: &mut Ranked,
    chunks: &HashMap<ChunkId, ChunkRecord>,
    query: &str,
    settings: &RerankSettings,
) -> Result<String> {
    let count = ranked.len().min(settings.candidates);
    let passages: Vec<String> = ranked[..count]
        .iter()
        .map(|(id, _)| passage(&chunks[id]))
        .collect();
    let budget = settings
        .time_budget_ms
        .map_or(Duration::MAX, Duration::from_millis);
    let judged = model.judge_relevance(query, &passages, settings.passage_tokens, budget)?;
    let best = ranked.iter().map(|(_, c)| c.total).fold(f32::MIN, f32::max);
    for (i, (_, c)) in ranked.iter_mut().enumerate() {
        let judgement = judged.scores.get(i).copied().flatten();
        c.scores.judged = judgement;
        // Beyond the judged candidates the rest keep their order, below every judged one
        // (a deep search still ranks as many pages as a plain one).
        let below = if i < count { 0.0 } else { 0.5 };
        c.scores.rerank = Some(blend(c.total, best, judgement.unwrap_or(0.0)) - below);
    }
    let unjudged = judged.scores.iter().filter(|s| s.is_none()).count();
    Ok(format!(
        "chat model {} judged {} of {count} candidate(s) ({} prompt tokens, on {} thread(s)){}",
        model.model_id(),
        count - unjudged,
        judged.tokens,
        judged.threads.prompt,
        if judged.superseded {
            format!("; {unjudged} left unjudged: a newer search took the model")
        } else if unjudged > 0 {
            format!("; {unjudged} left unjudged by the time budget")
        } else {
            String::new()
        }
    ))
}

/// What the model reads of a candidate: where it is, then what it says.
fn passage(chunk: &ChunkRecord) -> String {
    let mut text = String::new();
    if let Some(title) = chunk.title.as_deref().filter(|t| !t.is_empty()) {
        text.push_str(title);
        text.push('\n');
    }
    if !chunk.heading_path.is_empty() {
        text.push_str(&chunk.heading_path);
        text.push('\n');
    }
    text.push_str(&chunk.text);
    text
}

/// Half the fused score over the best candidate's, half the judgement.
fn blend(fused: f32, best: f32, judged: f32) -> f32 {
    let share = if best > 0.0 {
        (fused / best).clamp(0.0, 1.0)
    } else {
        0.0
    };
    0.5 * share + 0.5 * judged
}

#[cfg(test)]
mod tests {
    use super::blend;

    #[test]
    fn a_judgement_moves_a_candidate_as_far_as_its_fused_score_allows() {
        // The best fused candidate judged irrelevant against one at 0.8 of its score.
        assert!(blend(0.8, 1.0, 0.9) > blend(1.0, 1.0, 0.1));
        assert!(blend(0.05, 1.0, 1.0) < blend(1.0, 1.0, 0.1));
        assert_eq!(blend(1.0, 1.0, 1.0), 1.0);
        // Unjudged (a time budget) keeps half its fused share only; no score is NaN.
        assert_eq!(blend(0.5, 1.0, 0.0), 0.25);
        assert_eq!(blend(0.5, 0.0, 0.5), 0.25);
    }
}
