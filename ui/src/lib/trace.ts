// What a chat turn's trace events say, in a line each, and for the answer's own stages the
// lines beneath it: every sentence the model was shown (its citation number and score), what
// the model wrote before the check, and each sentence the check dropped or re-pointed, and why.

type Detail = Record<string, unknown>;

function count(v: unknown): number {
  return Array.isArray(v) ? v.length : 0;
}

function list(v: unknown): Detail[] {
  return Array.isArray(v) ? (v as Detail[]) : [];
}

function score(v: unknown): string {
  return typeof v === 'number' ? v.toFixed(2) : '–';
}

/** One line for an event. */
export function traceSummary(kind: string, d: Detail): string {
  switch (kind) {
    case 'turn.start':
      return `mode ${d.mode}, ${d.backend}, revision ${d.revision} of ${d.config}`;
    case 'model.chosen':
      return `auto chose ${d.model}: ${d.why}`;
    case 'tool.invoke':
      return `${d.tool} by ${d.by} with ${JSON.stringify(d.arguments)}`;
    case 'tool.result': {
      const parts = [`${d.tool}: ${count(d.admitted)} admitted in ${d.took_ms} ms`];
      if (count(d.rejected)) parts.push(`${count(d.rejected)} references rejected`);
      if (d.vetoed) parts.push('vetoed by a gate');
      if (d.error) parts.push(String(d.error));
      for (const g of list(d.gates)) {
        parts.push(`gate ${g.gate ?? g.name ?? ''}: ${g.verdict ?? g.decision ?? ''}${g.reason ? ` (${g.reason})` : ''}`);
      }
      return parts.join('; ');
    }
    case 'evidence.selected': {
      const support = (d.support ?? {}) as Detail;
      const missing = count(support.missing) ? `; not in any passage: ${(support.missing as string[]).join(', ')}` : '';
      return (
        `${count(d.shown)} of ${d.considered} sentences shown from ${count(d.passages)} passages, ` +
        `${d.shown_chars} of ${d.admitted_chars} characters${d.semantic ? '' : ' (by words alone)'}` +
        `; evidence ${support.answers ? 'answers' : 'does not answer'}${missing}`
      );
    }
    case 'llm.generate': {
      const ms = Number(d.took_ms);
      const first = Number(d.first_token_ms);
      const tokens = Number(d.completion_tokens);
      const rate = ms > first && tokens ? ` · ${(tokens / ((ms - first) / 1000)).toFixed(1)} tokens/s` : '';
      const threads = d.threads as { prompt: number; generation: number } | null | undefined;
      const on = threads ? ` · prompt on ${threads.prompt} thread(s), generation on ${threads.generation}` : '';
      return `${tokens} tokens, first after ${first} ms, ${ms} ms in all (${d.finish_reason})${rate}${on}`;
    }
    case 'answer.checked': {
      const cut = list(d.changes).filter((c) => c.kept).length;
      return `${d.sentences} sentence(s) checked: ${d.dropped} dropped, ${d.citations_moved} re-pointed${cut ? `, ${cut} cut short` : ''}`;
    }
    case 'answer.refused':
      return `refused: ${d.reason}`;
    case 'answer.quoted':
      return `quoted [${d.n}]${d.chosen ? `, ${d.chosen}` : ''}: ${d.reason}`;
    case 'notice':
      return String(d.text);
    case 'citation.rejected':
      return `removed ${JSON.stringify(d.citations)}: ${d.reason}`;
    case 'answer':
      return `${d.chars} characters citing ${JSON.stringify(d.citations)} (${d.backend}${d.basis ? `, ${d.basis}` : ''})`;
    default:
      return JSON.stringify(d);
  }
}

/** The lines beneath an event: what the model read, wrote, and what the check did. */
export function traceLines(kind: string, d: Detail): string[] {
  switch (kind) {
    case 'evidence.selected':
      return list(d.shown).map((s) => `[${s.n}] ${score(s.score)} · ${s.text}`);
    case 'answer.checked':
      return [
        `draft: ${d.draft}`,
        ...list(d.changes).map((c) =>
          c.to === null || c.to === undefined
            ? `dropped “${c.sentence}” [${c.cited}]: ${c.reason}`
            : c.kept
              ? `cut “${c.sentence}” [${c.cited}] to “${c.kept}” [${c.to}]: ${c.reason}`
              : `re-pointed “${c.sentence}” [${c.cited}] → [${c.to}]: ${c.reason}`,
        ),
      ];
    default:
      return [];
  }
}
