// Shared, reactive app state (Svelte 5 runes). Views are mounted only while visible, so what
// must survive a view switch (the search, the add-folder draft) lives here.
import type { UnlistenFn } from '@tauri-apps/api/event';
import { fileName } from './format';
import {
  api,
  errorMessage,
  events,
  type Activity,
  type SearchMode,
  type SearchResults,
  type Settings,
} from './api';

export type View =
  | 'library'
  | 'search'
  | 'chat'
  | 'models'
  | 'status'
  | 'keys'
  | 'audit'
  | 'orchestrator'
  | 'tools'
  | 'pipelines';
export type ThemeChoice = Settings['theme'];

/** The views in sidebar order, each with its Ctrl+digit key and the words the command palette
 *  also finds it by. The sidebar, the shortcuts and the palette all read this one list. */
export const VIEWS: { view: View; label: string; key: string; keywords: string[] }[] = [
  { view: 'library', label: 'Library', key: '1', keywords: ['folders', 'sources', 'indexing'] },
  { view: 'search', label: 'Search', key: '2', keywords: ['find'] },
  { view: 'status', label: 'Status', key: '3', keywords: ['settings', 'theme', 'mcp'] },
  { view: 'keys', label: 'Keys', key: '4', keywords: ['api keys'] },
  { view: 'audit', label: 'Audit', key: '5', keywords: ['log'] },
  { view: 'orchestrator', label: 'Orchestrator', key: '6', keywords: ['modes'] },
  { view: 'chat', label: 'Chat', key: '7', keywords: ['assistant', 'ask'] },
  { view: 'models', label: 'Models', key: '8', keywords: ['embedding', 'reranker', 'llm'] },
  { view: 'tools', label: 'Tools', key: '9', keywords: ['code tools'] },
  { view: 'pipelines', label: 'Pipelines', key: '0', keywords: ['tester', 'evaluate'] },
];

export const ui = $state({
  view: 'library' as View,
  /** Bumped to ask the search view to focus its input. */
  searchFocusTick: 0,
  /** The desktop's `prefers-color-scheme`. */
  systemDark: false,
  /** A theme being tried in the settings form, before it is saved. */
  themePreview: null as ThemeChoice | null,
  /** Whether the command palette (Ctrl+Shift+P) is open. */
  paletteOpen: false,
});

export const settings = $state({
  value: null as Settings | null,
  error: null as string | null,
});

/** What the shell pushes: the indexer's activity, and counters bumped by its events. */
export const live = $state({
  activity: null as Activity | null,
  /** Bumped on every activity event (components throttle their refreshes on it). */
  activityVersion: 0,
  /** Bumped when sources were added, removed or rescanned. */
  sourcesVersion: 0,
  /** Bumped when indexed content changed. */
  indexVersion: 0,
  /** Why the events or the first activity could not be read (no shell, say). */
  error: null as string | null,
});

/** The audit view's filters ('' means any), kept across view switches. */
export const auditFilter = $state({ principal: '', action: '', target: '', outcome: '' });

/** The search view's state, kept across view switches. */
export const search = $state({
  query: '',
  /** The mode picked in the view; null: the default from the settings. */
  mode: null as SearchMode | null,
  /** A collection name; '' searches all. */
  collection: '',
  explain: false,
  /** Deep search: after the plain results, the local chat model judges an unsure ranking. */
  deep: false,
  /** The deep search is running (the plain results are shown meanwhile). */
  deepPending: false,
  results: null as SearchResults | null,
  /** The query the shown results are for. */
  resultsQuery: '',
  selected: -1,
  error: null as string | null,
  pending: false,
});

/** The add-folder form's draft. */
export const addDraft = $state({
  path: '',
  collection: 'documents',
  include: '',
  exclude: '',
});

export const toast = $state({
  id: 0,
  text: '',
  /** A second, quieter line (the command that ran, say). */
  detail: '',
  kind: 'info' as 'info' | 'error',
  visible: false,
});

let toastTimer: ReturnType<typeof setTimeout> | null = null;

/** A short, self-dismissing message at the bottom of the window. */
export function showToast(
  text: string,
  kind: 'info' | 'error' = 'info',
  ms = 4000,
  detail = '',
): void {
  toast.id++;
  toast.text = text;
  toast.detail = detail;
  toast.kind = kind;
  toast.visible = true;
  if (toastTimer !== null) clearTimeout(toastTimer);
  toastTimer = setTimeout(() => {
    toast.visible = false;
    toastTimer = null;
  }, ms);
}

/** Opens the indexed file of a chunk (at its line where the open command allows) and says so. */
export async function openIndexedFile(chunkId: number, path: string): Promise<void> {
  const name = fileName(path);
  try {
    const ran = await api.openResult(chunkId);
    showToast(`Opened ${name}`, 'info', 4000, ran);
  } catch (e) {
    showToast(`Could not open ${name}: ${errorMessage(e)}`, 'error', 6000);
  }
}

export function dismissToast(): void {
  if (toastTimer !== null) clearTimeout(toastTimer);
  toastTimer = null;
  toast.visible = false;
}

/** Asked before the view changes: a view with unsaved edits registers one that returns false
 *  when the user chooses to stay. */
let leaveGuard: (() => boolean) | null = null;

export function setLeaveGuard(guard: (() => boolean) | null): void {
  leaveGuard = guard;
}

/** Whether the view may change now (asks the view with unsaved edits, if any). */
export function mayLeave(): boolean {
  return leaveGuard === null || leaveGuard();
}

export function setView(view: View): void {
  if (view === ui.view || !mayLeave()) return;
  ui.view = view;
}

/** Opens `view`; the search view with its input focused. */
export function goTo(view: View): void {
  if (view === 'search') focusSearch();
  else setView(view);
}

/** Switches to the search view and focuses its input. */
export function focusSearch(): void {
  if (ui.view !== 'search' && !mayLeave()) return;
  ui.view = 'search';
  ui.searchFocusTick++;
}

/** The theme in effect: a preview, else the saved choice, else the system's. */
export function themeChoice(): ThemeChoice {
  return ui.themePreview ?? settings.value?.theme ?? 'system';
}

export function effectiveMode(): SearchMode {
  return search.mode ?? settings.value?.search_mode ?? 'hybrid';
}

export async function loadSettings(): Promise<void> {
  try {
    settings.value = await api.getSettings();
    settings.error = null;
  } catch (e) {
    settings.error = errorMessage(e);
  }
}

/** Saves the settings; throws the shell's error. */
export async function saveSettings(next: Settings): Promise<Settings> {
  const saved = await api.saveSettings(next);
  settings.value = saved;
  settings.error = null;
  return saved;
}

/**
 * Shows an activity snapshot, from an event or a command's reply. One older than the one shown
 * (a lower `seq`) is ignored, so a late reply cannot overwrite a newer event.
 */
export function setActivity(a: Activity): void {
  const shown = live.activity;
  if (shown && a.seq < shown.seq) return;
  live.activity = a;
  live.activityVersion++;
}

/**
 * Subscribes to the shell's events, then reads the activity once (after the subscriptions are in
 * place, so no change falls between the two); returns the unsubscribe.
 */
export function startLive(): () => void {
  let disposed = false;
  const unlisteners: UnlistenFn[] = [];
  const keep = (p: Promise<UnlistenFn>): Promise<void> =>
    p
      .then((u) => {
        if (disposed) u();
        else unlisteners.push(u);
      })
      .catch((e: unknown) => {
        if (!disposed) live.error = errorMessage(e);
      });

  const registered = Promise.all([
    keep(events.onActivity((a) => setActivity(a))),
    keep(
      events.onSourcesChanged(() => {
        live.sourcesVersion++;
      }),
    ),
    keep(
      events.onIndexChanged(() => {
        live.indexVersion++;
      }),
    ),
  ]);

  void registered.then(async () => {
    if (disposed) return;
    try {
      const a = await api.activity();
      // An event that arrived meanwhile has a higher `seq`: setActivity keeps it.
      if (!disposed) setActivity(a);
    } catch (e) {
      if (!disposed) live.error = errorMessage(e);
    }
  });

  return () => {
    disposed = true;
    for (const u of unlisteners.splice(0)) u();
  };
}
