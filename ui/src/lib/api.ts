// The bridge to the Rust shell. Commands and the types they send are generated from Rust
// into ./bindings.ts (src-tauri/src/bindings.rs; a Rust test fails when it is stale): nothing
// here mirrors a Rust type by hand. A failed command rejects with a `CommandError`.
import type { UnlistenFn } from '@tauri-apps/api/event';
import {
  commands,
  events as shellEvents,
  type Activity,
  type ChunkInContext,
  type CommandError,
} from './bindings';

export type * from './bindings';

/** A chunk among its neighbours, as the preview pane shows it. */
export type Preview = ChunkInContext;

export const api = commands;

// The shell's events, typed in ./bindings.ts (src-tauri/src/events.rs).
export const events = {
  onActivity: (f: (a: Activity) => void): Promise<UnlistenFn> =>
    shellEvents.activityChanged.listen((e) => f(e.payload)),
  /** Sources were added, removed or rescanned: refresh the lists. */
  onSourcesChanged: (f: () => void): Promise<UnlistenFn> =>
    shellEvents.sourcesChanged.listen(() => f()),
  /** Indexed content changed (a scan or a watched edit finished): re-run the search. */
  onIndexChanged: (f: () => void): Promise<UnlistenFn> =>
    shellEvents.indexChanged.listen(() => f()),
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
