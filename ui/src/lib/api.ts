// The typed bridge to the Rust shell (src-tauri/src/commands.rs). Every call goes through
// `invoke`; every type here mirrors a serde type in quarry-core or the shell.
import { invoke } from '@tauri-apps/api/core';
import { listen, type UnlistenFn } from '@tauri-apps/api/event';

export type SearchMode = 'lexical' | 'vector' | 'hybrid';

/** Who can fix an error (quarry-core's `ErrorKind`). */
export type ErrorKind = 'invalid_input' | 'not_found' | 'unavailable' | 'internal';

/** A failed command: `code` is quarry-core's error code (or the shell's own), `kind` who can
 * fix it, `message` what happened and how to fix it. */
export interface CommandError {
  code: string;
  kind: ErrorKind;
  message: string;
}

export interface Collection {
  id: number;
  name: string;
  sensitivity: string;
  language: string;
  created_at: number;
  embedding_model: string | null;
  pending_model: string | null;
}

export interface Source {
  id: number;
  collection_id: number;
  collection: string;
  root: string;
  include: string[];
  exclude: string[];
  status: 'ok' | 'missing';
  last_error: string | null;
  /** Unix seconds of the last completed scan. */
  last_scan_at: number | null;
  documents_indexed: number;
  documents_not_indexed: number;
}

export interface IndexProgress {
  files_discovered: number;
  files_processed: number;
  files_indexed: number;
  files_unchanged: number;
  files_skipped: number;
  files_failed: number;
  files_removed: number;
  files_renamed: number;
  chunks_written: number;
  bytes_extracted: number;
  bytes_read: number;
  elapsed_ms: number;
  files_per_sec: number;
  extracted_mb_per_sec: number;
  eta_ms: number | null;
}

export interface EmbedProgress {
  collection: string;
  model: string;
  embedded: number;
  total: number;
  embedded_this_run: number;
  chunks_per_sec: number;
  eta_ms: number | null;
  done: boolean;
}

/** What the indexer is doing with one source. */
export interface SourceActivity {
  source_id: number;
  /** queued: waiting for its first scan; scanning: walking the folder; indexing: reading
   * files; done: current; missing: its folder is gone (documents kept). */
  phase: 'queued' | 'scanning' | 'indexing' | 'done' | 'missing';
  /** How changes are noticed: OS events, periodic rescans, or not at all (paused/missing). */
  watch: 'events' | 'poll' | null;
  /** Totals of the latest run over this source. */
  progress: IndexProgress | null;
  /** Why the watcher fell back to rescans, if it did. */
  degraded_reason: string | null;
}

/** The whole indexer state; sent as the `quarry://activity` event whenever it changes. */
export interface Activity {
  /** Grows with every change: a snapshot with a lower `seq` than the one shown is stale. */
  seq: number;
  state: 'starting' | 'running' | 'paused' | 'error';
  /** The error that stopped the indexer (state `error`). */
  error: CommandError | null;
  sources: SourceActivity[];
  /** Embedding lane progress per collection. */
  embedding: EmbedProgress[];
  /** Why vectors are not being computed (model or runtime missing), with the fix. */
  embedding_unavailable: string | null;
  /** Paths the watcher re-indexed most recently, and when (ms since the epoch). */
  last_change: { paths: string[]; at_ms: number } | null;
}

export interface DocumentRecord {
  id: number;
  source_id: number;
  collection: string;
  path: string;
  size: number | null;
  mtime_ns: number | null;
  content_hash: string | null;
  status: 'indexed' | 'skipped' | 'failed';
  reason: string | null;
  last_error: string | null;
  warning: string | null;
  title: string | null;
  format: string | null;
  revision_id: number | null;
  chunk_count: number;
  updated_at: number;
}

export interface ChunkLocation {
  page: number | null;
  line_start: number | null;
  line_end: number | null;
  byte_start: number | null;
  byte_end: number | null;
}

export interface ChunkRecord {
  id: number;
  document_id: number;
  revision_id: number;
  ordinal: number;
  text: string;
  heading_path: string;
  location: ChunkLocation;
  token_count: number;
  path: string;
  title: string | null;
  collection: string;
  mtime_ns: number | null;
}

export interface StageScores {
  lexical_rank: number | null;
  lexical_score: number | null;
  vector_rank: number | null;
  similarity: number | null;
  fused: number;
  freshness: number | null;
  rerank: number | null;
}

export interface Snippet {
  text: string;
  /** Byte ranges (UTF-8) of `text` that matched: use `highlightSegments` to render. */
  highlights: [number, number][];
}

export interface Hit {
  rank: number;
  score: number;
  scores: StageScores;
  chunk_id: number;
  document_id: number;
  path: string;
  title: string | null;
  collection: string;
  heading_path: string;
  location: ChunkLocation;
  snippet: Snippet;
  /** File modification time, ns since the epoch. */
  mtime_ns: number | null;
}

export interface StageTrace {
  stage: string;
  variant: number | null;
  candidates: number;
  took_us: number;
  detail: string;
}

export interface SearchResults {
  hits: Hit[];
  took_us: number;
  mode: SearchMode;
  trace: StageTrace[];
  /** What kept the search from being all it could be (e.g. no embedding model). */
  readiness: { component: string; message: string }[];
}

export interface SearchArgs {
  query: string;
  mode: SearchMode;
  /** Collection names; empty searches all. */
  collections: string[];
  limit: number;
}

/** A chunk in its document: the chunks around it, in order. */
export interface Preview {
  document: DocumentRecord;
  chunks: ChunkRecord[];
  focus_chunk_id: number;
}

export interface ModelListing {
  id: string;
  kind: 'embedding' | 'reranker' | 'llm';
  installed_at: string | null;
  in_catalogue: boolean;
  default: boolean;
  dimension: number | null;
  description: string;
  license: string;
}

export interface EmbeddingCoverage {
  collection: string;
  model: string | null;
  pending_model: string | null;
  embedded: number;
  total: number;
}

export interface Stats {
  collections: number;
  sources: number;
  documents_indexed: number;
  documents_skipped: number;
  documents_failed: number;
  documents_with_warnings: number;
  chunks: number;
  extracted_bytes: number;
  outbox_pending: number;
  not_indexed_by_reason: { status: string; reason: string; count: number }[];
}

export interface AppStatus {
  data_dir: string;
  disk_bytes: number;
  stats: Stats;
  embeddings: EmbeddingCoverage[];
  collections: Collection[];
  models: ModelListing[];
  /** ONNX Runtime: where it was found, or what is wrong and the command that fixes it. */
  runtime: { ok: boolean; detail: string };
  /** Missing pieces, each with the command that fixes it. */
  problems: { component: string; message: string; fix: string }[];
  activity: Activity;
}

export interface Settings {
  theme: 'system' | 'light' | 'dark';
  search_mode: SearchMode;
  /** Command that opens a file at a line, e.g. `code --goto {path}:{line}`; empty: the
   * system opener. Placeholders: {path} {line} {page}. */
  open_command: string;
}

export const api = {
  appStatus: () => invoke<AppStatus>('app_status'),
  listCollections: () => invoke<Collection[]>('list_collections'),
  listSources: () => invoke<Source[]>('list_sources'),
  addSource: (path: string, collection: string, include: string[], exclude: string[]) =>
    invoke<Source>('add_source', { path, collection, include, exclude }),
  removeSource: (id: number) => invoke<void>('remove_source', { id }),
  /** Opens the native folder dialog; null when cancelled. */
  pickFolder: () => invoke<string | null>('pick_folder'),
  activity: () => invoke<Activity>('activity'),
  setIndexingPaused: (paused: boolean) => invoke<Activity>('set_indexing_paused', { paused }),
  /** Skipped and failed files, newest first (optionally of one source). */
  listProblems: (sourceId: number | null) =>
    invoke<DocumentRecord[]>('list_problems', { sourceId }),
  /** Reads a failed file again (it is queued for the indexer). */
  retryFile: (documentId: number) => invoke<void>('retry_file', { documentId }),
  search: (args: SearchArgs) => invoke<SearchResults>('search', { args }),
  preview: (chunkId: number) => invoke<Preview>('preview', { chunkId }),
  /** Opens the file of an indexed chunk at its page/line; returns what was run. */
  openResult: (chunkId: number) => invoke<string>('open_result', { chunkId }),
  getSettings: () => invoke<Settings>('get_settings'),
  saveSettings: (settings: Settings) => invoke<Settings>('save_settings', { settings }),
};

export const events = {
  onActivity: (f: (a: Activity) => void): Promise<UnlistenFn> =>
    listen<Activity>('quarry://activity', (e) => f(e.payload)),
  /** Sources were added, removed or rescanned: refresh the lists. */
  onSourcesChanged: (f: () => void): Promise<UnlistenFn> =>
    listen('quarry://sources', () => f()),
  /** Indexed content changed (a scan or a watched edit finished): re-run the search. */
  onIndexChanged: (f: () => void): Promise<UnlistenFn> => listen('quarry://index', () => f()),
};

/** Splits `text` at the UTF-8 byte ranges of `highlights` into plain and marked pieces. */
export function highlightSegments(
  text: string,
  highlights: [number, number][],
): { text: string; marked: boolean }[] {
  const bytes = new TextEncoder().encode(text);
  const decode = (a: number, b: number) => new TextDecoder().decode(bytes.slice(a, b));
  const out: { text: string; marked: boolean }[] = [];
  let at = 0;
  for (const [start, end] of [...highlights].sort((x, y) => x[0] - y[0])) {
    if (start < at) continue;
    if (start > at) out.push({ text: decode(at, start), marked: false });
    out.push({ text: decode(start, end), marked: true });
    at = end;
  }
  if (at < bytes.length) out.push({ text: decode(at, bytes.length), marked: false });
  return out;
}

export function errorMessage(e: unknown): string {
  if (e && typeof e === 'object' && 'message' in e) return String((e as CommandError).message);
  return String(e);
}
