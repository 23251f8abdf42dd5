import { describe, expect, test } from 'vitest';
import { traceLines, traceSummary } from './trace';

describe('a turn trace in words', () => {
  test('the selection says what was shown and whether the evidence answers', () => {
    const d = {
      considered: 40,
      shown: [
        { n: 2, text: 'The ? operator returns the Err value.', score: 0.81 },
        { n: 5, text: 'It converts the error.', score: 0.4 },
      ],
      passages: [2, 5],
      shown_chars: 60,
      admitted_chars: 2400,
      semantic: true,
      support: { answers: false, missing: ['ethanol'] },
    };
    expect(traceSummary('evidence.selected', d)).toBe(
      '2 of 40 sentences shown from 2 passages, 60 of 2400 characters; evidence does not answer; not in any passage: ethanol',
    );
    expect(traceLines('evidence.selected', d)).toEqual([
      '[2] 0.81 · The ? operator returns the Err value.',
      '[5] 0.40 · It converts the error.',
    ]);
  });

  test('the automatic model choice names the model and why', () => {
    expect(traceSummary('model.chosen', { model: 'qwen-1.5b', why: 'fits the budget here' })).toBe(
      'auto chose qwen-1.5b: fits the budget here',
    );
  });

  test('a generation says how fast and on how many threads it read and wrote', () => {
    const d = { took_ms: 3000, first_token_ms: 1000, completion_tokens: 40, finish_reason: 'stop' };
    expect(traceSummary('llm.generate', { ...d, threads: { prompt: 2, generation: 1 } })).toBe(
      '40 tokens, first after 1000 ms, 3000 ms in all (stop) · 20.0 tokens/s · prompt on 2 thread(s), generation on 1',
    );
    // A server's own threads are not known.
    expect(traceSummary('llm.generate', { ...d, threads: null })).toBe(
      '40 tokens, first after 1000 ms, 3000 ms in all (stop) · 20.0 tokens/s',
    );
  });

  test('the check shows the draft and every sentence it dropped or re-pointed, with the reason', () => {
    const d = {
      draft: 'Set CARGO_FLAGS. [1] It is fast. [1]',
      sentences: 2,
      dropped: 1,
      citations_moved: 1,
      changes: [
        { sentence: 'Set CARGO_FLAGS.', cited: 1, to: null, reason: '`CARGO_FLAGS` in no passage shown' },
        { sentence: 'It is fast.', cited: 1, to: 3, reason: '[3] holds more of its words than [1]' },
      ],
    };
    expect(traceSummary('answer.checked', d)).toBe('2 sentence(s) checked: 1 dropped, 1 re-pointed');
    expect(traceLines('answer.checked', d)).toEqual([
      'draft: Set CARGO_FLAGS. [1] It is fast. [1]',
      'dropped “Set CARGO_FLAGS.” [1]: `CARGO_FLAGS` in no passage shown',
      're-pointed “It is fast.” [1] → [3]: [3] holds more of its words than [1]',
    ]);
  });

  test('a sentence cut short shows what was kept', () => {
    const d = {
      draft: 'It wraps past its maximum (255). [1]',
      sentences: 1,
      dropped: 0,
      citations_moved: 0,
      changes: [
        {
          sentence: 'It wraps past its maximum (255).',
          cited: 1,
          to: 1,
          reason: 'an aside left out: `255` in no passage shown',
          kept: 'It wraps past its maximum.',
        },
      ],
    };
    expect(traceSummary('answer.checked', d)).toBe('1 sentence(s) checked: 0 dropped, 0 re-pointed, 1 cut short');
    expect(traceLines('answer.checked', d)).toEqual([
      'draft: It wraps past its maximum (255). [1]',
      'cut “It wraps past its maximum (255).” [1] to “It wraps past its maximum.” [1]: an aside left out: `255` in no passage shown',
    ]);
  });

  test('the answer names its backend and basis; unknown events show their JSON', () => {
    expect(traceSummary('answer', { chars: 10, citations: [1], backend: 'embedded q', basis: 'found in 1 passage' })).toBe(
      '10 characters citing [1] (embedded q, found in 1 passage)',
    );
    expect(traceSummary('something.new', { a: 1 })).toBe('{"a":1}');
    expect(traceLines('notice', { text: 'x' })).toEqual([]);
  });
});
