import { describe, expect, test } from 'vitest';
import {
  codeSegments,
  embeddingLine,
  fileName,
  fixCommands,
  formatBytes,
  formatDuration,
  formatLocation,
  formatMicros,
  formatRate,
  formatRelativeSecs,
  formatScore,
  markTerms,
  percent,
  splitList,
} from './format';

describe('sizes, durations and rates', () => {
  test('bytes use binary multiples, and nonsense is a dash', () => {
    expect(formatBytes(512)).toBe('512 B');
    expect(formatBytes(1536)).toBe('1.5 KB');
    expect(formatBytes(300 * 1024 * 1024)).toBe('300 MB');
    expect(formatBytes(-1)).toBe('—');
    expect(formatBytes(Number.NaN)).toBe('—');
  });

  test('durations read as a person would say them', () => {
    expect(formatDuration(400)).toBe('<1 s');
    expect(formatDuration(3_000)).toBe('3 s');
    expect(formatDuration(125_000)).toBe('2 min 5 s');
    expect(formatDuration(120_000)).toBe('2 min');
    expect(formatDuration(3_840_000)).toBe('1 h 4 min');
    expect(formatDuration(-5)).toBe('—');
  });

  test('microseconds pick their unit', () => {
    expect(formatMicros(850)).toBe('850 µs');
    expect(formatMicros(3_400)).toBe('3.4 ms');
    expect(formatMicros(45_000)).toBe('45 ms');
    expect(formatMicros(1_200_000)).toBe('1.20 s');
  });

  test('a rate with no time elapsed yet is zero, not NaN', () => {
    expect(formatRate(null, 'files')).toBe('0 files/s');
    expect(formatRate(Number.POSITIVE_INFINITY, 'files')).toBe('0 files/s');
    expect(formatRate(5.14, 'files')).toMatch(/^5[.,]1 files\/s$/);
  });

  test('scores keep a sensible number of digits', () => {
    expect(formatScore(0.12345)).toBe('0.123');
    expect(formatScore(0.0000123)).toBe('1.23e-5');
    expect(formatScore(123.456)).toBe('123.5');
    expect(formatScore(null)).toBe('—');
  });

  test('percent is clamped, and unknown without a total', () => {
    expect(percent(5, 10)).toBe(50);
    expect(percent(15, 10)).toBe(100);
    expect(percent(1, 0)).toBeNull();
  });

  test('relative times count from now', () => {
    const now = 1_000_000_000_000;
    expect(formatRelativeSecs(null, now)).toBe('never');
    expect(formatRelativeSecs(now / 1000 - 10, now)).toBe('just now');
    expect(formatRelativeSecs(now / 1000 - 300, now)).toBe('5 min ago');
    expect(formatRelativeSecs(now / 1000 - 3 * 3600, now)).toBe('3 h ago');
    expect(formatRelativeSecs(now / 1000 - 30 * 3600, now)).toBe('yesterday');
  });
});

describe('paths, lists and messages', () => {
  test('a location says page and lines', () => {
    expect(formatLocation({ page: 3, line_start: 10, line_end: 24 } as never)).toBe('p. 3 · lines 10–24');
    expect(formatLocation({ page: null, line_start: 7, line_end: 7 } as never)).toBe('line 7');
    expect(formatLocation(null)).toBe('');
    expect(formatLocation({ page: 2, line_start: null, line_end: null, ocr_confidence: 91 } as never)).toBe(
      'recognised text (OCR), page 2',
    );
    expect(formatLocation({ page: 1, line_start: null, line_end: null, ocr_confidence: 41 } as never)).toBe(
      'recognised text (OCR), page 1 · low confidence (41%)',
    );
  });

  test('file names from either separator, trailing ones ignored', () => {
    expect(fileName('/a/b/notes.md')).toBe('notes.md');
    expect(fileName('C:\\docs\\report.pdf')).toBe('report.pdf');
    expect(fileName('/a/folder/')).toBe('folder');
  });

  test('lists split on commas and newlines, blanks dropped', () => {
    expect(splitList('a, b\n\nc,')).toEqual(['a', 'b', 'c']);
  });

  test('backticks split code from prose; an unbalanced one is prose', () => {
    expect(codeSegments('run `quarry models install x` now')).toEqual([
      { text: 'run ', code: false },
      { text: 'quarry models install x', code: true },
      { text: ' now', code: false },
    ]);
    expect(codeSegments('a ` b')).toEqual([{ text: 'a ` b', code: false }]);
    expect(fixCommands('missing `model`: run `quarry models install x`')).toEqual(['quarry models install x']);
  });

  test('terms are marked case-insensitively, longest first, regex characters literal', () => {
    expect(markTerms('Cache and caches (c++)', ['cache', 'caches', 'c++'])).toEqual([
      { text: 'Cache', marked: true },
      { text: ' and ', marked: false },
      { text: 'caches', marked: true },
      { text: ' (', marked: false },
      { text: 'c++', marked: true },
      { text: ')', marked: false },
    ]);
    expect(markTerms('text', ['x'])).toEqual([{ text: 'text', marked: false }]);
  });
});

describe('the embedding lane', () => {
  const progress = {
    collection: 'book',
    model: 'all-minilm-l6-v2-int8',
    device: 'CPU' as string | null,
    embedded: 1200,
    total: 4000,
    embedded_this_run: 1200,
    chunks_per_sec: 42.5,
    tokens_this_run: 90000,
    model_tokens_this_run: 88000,
    tokens_per_sec: 9264,
    shared: 0,
    lexical_only: 0,
    eta_ms: 65_000,
    done: false,
  };

  test('says how far, how fast, when done, and where the model runs', () => {
    const line = embeddingLine(progress);
    expect(line.startsWith('Embedding 1,200 / 4,000 chunks · 42.5 chunks/s · ')).toBe(true);
    expect(line).toContain('ETA ');
    expect(line.endsWith(' · all-minilm-l6-v2-int8 on CPU')).toBe(true);
    expect(embeddingLine({ ...progress, device: 'CUDA 0' })).toContain('all-minilm-l6-v2-int8 on CUDA 0');
  });

  test('a served model names no device, and a finished lane says what was shared', () => {
    const done = embeddingLine({ ...progress, device: null, done: true, embedded: 4000, shared: 300, lexical_only: 700 });
    expect(done).toBe(
      "Embeddings up to date · 4,000 / 4,000 chunks (300 share a near-duplicate's vector, 700 full text only) · all-minilm-l6-v2-int8",
    );
  });
});
