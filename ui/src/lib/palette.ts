// The command palette's matching: every view and action by name, ranked as the user types.
// Pure, so it is unit-tested; the component (components/shell/CommandPalette.svelte) holds the
// commands and runs the chosen one.

export type PaletteCommand = {
  id: string;
  /** What the list shows ("Go to Models", "Pause indexing"). */
  label: string;
  /** Where it belongs, shown beside the label ("View", "Indexing"). */
  group: string;
  /** The keyboard shortcut, when there is one ("Ctrl+8"). */
  shortcut?: string;
  /** Other words it answers to ("settings" for Status). */
  keywords?: string[];
};

/**
 * How well `query` matches `text`: every query character in order (case-insensitive), scored
 * so that a match at the start of a word, and consecutive characters, rank higher. `null` when
 * some character is missing.
 */
export function matchScore(query: string, text: string): number | null {
  const q = query.toLowerCase();
  const t = text.toLowerCase();
  if (q.length === 0) return 0;
  let score = 0;
  let at = 0;
  let previous = -2;
  for (const ch of q) {
    if (ch === ' ') continue;
    const found = t.indexOf(ch, at);
    if (found < 0) return null;
    const wordStart = found === 0 || /[\s/\-_.]/.test(t[found - 1]);
    score += 1 + (wordStart ? 4 : 0) + (found === previous + 1 ? 3 : 0);
    previous = found;
    at = found + 1;
  }
  // Of equal matches, the shorter text is the closer one.
  return score - t.length / 100;
}

/** The commands that match `query`, best first; all of them, in order, for an empty query. */
export function filterCommands<T extends PaletteCommand>(commands: T[], query: string): T[] {
  const q = query.trim();
  if (q === '') return commands;
  const scored: { command: T; score: number; index: number }[] = [];
  commands.forEach((command, index) => {
    const names = [command.label, `${command.group} ${command.label}`, ...(command.keywords ?? [])];
    const best = names
      .map((name) => matchScore(q, name))
      .filter((s): s is number => s !== null)
      .reduce<number | null>((a, b) => (a === null || b > a ? b : a), null);
    if (best !== null) scored.push({ command, score: best, index });
  });
  scored.sort((a, b) => b.score - a.score || a.index - b.index);
  return scored.map((s) => s.command);
}
