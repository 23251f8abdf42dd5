// Small, dependency-free formatting helpers for sizes, durations, rates and dates.
import type { ChunkLocation, EmbedProgress } from './api';

const nf0 = new Intl.NumberFormat(undefined, { maximumFractionDigits: 0 });
const nf1 = new Intl.NumberFormat(undefined, { maximumFractionDigits: 1 });

/** 1234 → "1,234" (locale grouping). */
export function formatCount(n: number): string {
  return nf0.format(n);
}

/** 1536 → "1.5 KB"; binary multiples, labelled the way file managers do. */
export function formatBytes(bytes: number): string {
  if (!Number.isFinite(bytes) || bytes < 0) return '—';
  const units = ['B', 'KB', 'MB', 'GB', 'TB', 'PB'];
  let v = bytes;
  let i = 0;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  if (i === 0) return `${formatCount(v)} B`;
  return `${v < 100 ? v.toFixed(1) : v.toFixed(0)} ${units[i]}`;
}

/** Milliseconds → "3 s", "2 min 5 s", "1 h 4 min"; under a second: "<1 s". */
export function formatDuration(ms: number): string {
  if (!Number.isFinite(ms) || ms < 0) return '—';
  const s = Math.round(ms / 1000);
  if (s < 1) return '<1 s';
  if (s < 60) return `${s} s`;
  const m = Math.floor(s / 60);
  const rs = s % 60;
  if (m < 60) return rs ? `${m} min ${rs} s` : `${m} min`;
  const h = Math.floor(m / 60);
  const rm = m % 60;
  return rm ? `${h} h ${rm} min` : `${h} h`;
}

/** Microseconds → "850 µs", "3.4 ms", "1.20 s". */
export function formatMicros(us: number): string {
  if (!Number.isFinite(us) || us < 0) return '—';
  if (us < 1000) return `${Math.round(us)} µs`;
  if (us < 1_000_000) return `${(us / 1000).toFixed(us < 10_000 ? 1 : 0)} ms`;
  return `${(us / 1_000_000).toFixed(2)} s`;
}

/** A per-second rate: "5.1 files/s", "240 chunks/s"; `null` is how JSON carries a rate that
 * is not a number yet (no time elapsed). */
export function formatRate(perSec: number | null, unit: string): string {
  if (perSec === null || !Number.isFinite(perSec) || perSec <= 0) return `0 ${unit}/s`;
  return `${perSec < 100 ? nf1.format(perSec) : nf0.format(perSec)} ${unit}/s`;
}

/** The embedding lane's line for a collection: how far, how fast, when done, and which
 * model runs where ("all-minilm-l6-v2-int8 on CPU"; a served model has no device). */
export function embeddingLine(e: EmbedProgress): string {
  const model = e.device ? `${e.model} on ${e.device}` : e.model;
  const kinds =
    e.shared + e.lexical_only > 0
      ? ` (${formatCount(e.shared)} share a near-duplicate's vector, ${formatCount(e.lexical_only)} full text only)`
      : '';
  if (e.done) {
    return `Embeddings up to date · ${formatCount(e.embedded)} / ${formatCount(e.total)} chunks${kinds} · ${model}`;
  }
  const parts = [
    `Embedding ${formatCount(e.embedded)} / ${formatCount(e.total)} chunks${kinds}`,
    formatRate(e.chunks_per_sec, 'chunks'),
    formatRate(e.tokens_per_sec, 'tokens'),
  ];
  if (e.eta_ms !== null) parts.push(`ETA ${formatDuration(e.eta_ms)}`);
  parts.push(model);
  return parts.join(' · ');
}

/** A score or similarity with a sensible number of digits. */
export function formatScore(x: number | null | undefined): string {
  if (x === null || x === undefined || !Number.isFinite(x)) return '—';
  const a = Math.abs(x);
  if (a !== 0 && a < 0.001) return x.toExponential(2);
  return a >= 100 ? x.toFixed(1) : x.toFixed(3);
}

/** Percentage of done / total, clamped to 0..100; null when the total is unknown. */
export function percent(done: number, total: number): number | null {
  if (!total || total <= 0) return null;
  return Math.max(0, Math.min(100, (done / total) * 100));
}

const dateFmt = new Intl.DateTimeFormat(undefined, { dateStyle: 'medium' });
const dateTimeFmt = new Intl.DateTimeFormat(undefined, { dateStyle: 'medium', timeStyle: 'short' });

/** A file time in nanoseconds since the epoch → "12 Mar 2025". */
export function formatDateNs(ns: number | null | undefined): string {
  if (ns === null || ns === undefined || !Number.isFinite(ns)) return '';
  return dateFmt.format(new Date(ns / 1_000_000));
}

/** The full date and time of a nanosecond timestamp (for tooltips). */
export function formatDateTimeNs(ns: number | null | undefined): string {
  if (ns === null || ns === undefined || !Number.isFinite(ns)) return '';
  return dateTimeFmt.format(new Date(ns / 1_000_000));
}

/** Unix seconds → the full local date and time. */
export function formatDateTimeSecs(secs: number | null | undefined): string {
  if (secs === null || secs === undefined) return '';
  return dateTimeFmt.format(new Date(secs * 1000));
}

/** Unix seconds → "just now", "5 min ago", "3 h ago", "yesterday", or a date. */
export function formatRelativeSecs(secs: number | null | undefined, nowMs = Date.now()): string {
  if (secs === null || secs === undefined) return 'never';
  const diff = Math.max(0, nowMs / 1000 - secs);
  if (diff < 45) return 'just now';
  if (diff < 3600) return `${Math.round(diff / 60)} min ago`;
  if (diff < 86_400) return `${Math.round(diff / 3600)} h ago`;
  if (diff < 2 * 86_400) return 'yesterday';
  return dateFmt.format(new Date(secs * 1000));
}

/** Below this OCR confidence a page is flagged (the engine's `LOW_OCR_CONFIDENCE`). */
const LOW_OCR_CONFIDENCE = 60;

/** "p. 3 · lines 10–24", "line 7", "recognised text (OCR), page 2", or "" when the chunk has no
 * location. Text read from a scan's pixels says so, and a page Tesseract was unsure of is flagged. */
export function formatLocation(loc: ChunkLocation | null | undefined): string {
  if (!loc) return '';
  const parts: string[] = [];
  const ocr = loc.ocr_confidence;
  if (ocr !== undefined && ocr !== null) {
    parts.push(loc.page !== null ? `recognised text (OCR), page ${loc.page}` : 'recognised text (OCR)');
    if (ocr < LOW_OCR_CONFIDENCE) parts.push(`low confidence (${ocr}%)`);
  } else if (loc.page !== null) parts.push(`p. ${loc.page}`);
  if (loc.line_start !== null) {
    if (loc.line_end !== null && loc.line_end !== loc.line_start) {
      parts.push(`lines ${loc.line_start}–${loc.line_end}`);
    } else {
      parts.push(`line ${loc.line_start}`);
    }
  }
  return parts.join(' · ');
}

/** The last component of a path ("/a/b/notes.md" → "notes.md"); handles `\` too. */
export function fileName(path: string): string {
  const trimmed = path.replace(/[\\/]+$/, '');
  const i = Math.max(trimmed.lastIndexOf('/'), trimmed.lastIndexOf('\\'));
  return i >= 0 ? trimmed.slice(i + 1) : trimmed;
}

/** "a, b\nc" → ["a", "b", "c"]: comma or newline separated, blanks dropped. */
export function splitList(text: string): string[] {
  return text
    .split(/[,\n]/)
    .map((s) => s.trim())
    .filter((s) => s.length > 0);
}

/** Splits a message at backticks: odd pieces were quoted code (`quarry models install x`). */
export function codeSegments(text: string): { text: string; code: boolean }[] {
  const parts = text.split('`');
  // An unbalanced backtick: treat the whole thing as prose.
  if (parts.length % 2 === 0) return [{ text, code: false }];
  return parts
    .map((t, i) => ({ text: t, code: i % 2 === 1 }))
    .filter((p) => p.text.length > 0);
}

/** The quoted commands in a message: backticked pieces that look like a command line. */
export function fixCommands(text: string): string[] {
  return codeSegments(text)
    .filter((p) => p.code && /\s/.test(p.text.trim()))
    .map((p) => p.text.trim());
}

/** Marks every case-insensitive occurrence of `terms` in `text` (for the preview's focus). */
export function markTerms(text: string, terms: string[]): { text: string; marked: boolean }[] {
  const unique = [...new Set(terms.map((t) => t.trim().toLowerCase()).filter((t) => t.length >= 2))];
  if (unique.length === 0) return [{ text, marked: false }];
  unique.sort((a, b) => b.length - a.length);
  const escaped = unique.map((t) => t.replace(/[.*+?^${}()|[\]\\]/g, '\\$&'));
  const re = new RegExp(`(${escaped.join('|')})`, 'giu');
  const out: { text: string; marked: boolean }[] = [];
  let at = 0;
  for (const m of text.matchAll(re)) {
    const i = m.index ?? 0;
    if (m[0].length === 0) continue;
    if (i > at) out.push({ text: text.slice(at, i), marked: false });
    out.push({ text: m[0], marked: true });
    at = i + m[0].length;
  }
  if (at < text.length) out.push({ text: text.slice(at), marked: false });
  return out;
}
