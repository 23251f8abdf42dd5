import { describe, expect, it } from 'vitest';
import { filterCommands, matchScore, type PaletteCommand } from './palette';

const commands: PaletteCommand[] = [
  { id: 'view-library', label: 'Go to Library', group: 'View', shortcut: 'Ctrl+1' },
  { id: 'view-models', label: 'Go to Models', group: 'View', shortcut: 'Ctrl+8' },
  { id: 'view-status', label: 'Go to Status', group: 'View', keywords: ['settings', 'theme'] },
  { id: 'pause', label: 'Pause indexing', group: 'Indexing' },
  { id: 'chat-new', label: 'New conversation', group: 'Chat' },
  { id: 'theme-dark', label: 'Theme: dark', group: 'Appearance' },
];

const ids = (query: string) => filterCommands(commands, query).map((c) => c.id);

describe('matchScore', () => {
  it('needs every character, in order', () => {
    expect(matchScore('mdl', 'Go to Models')).not.toBeNull();
    expect(matchScore('lmd', 'Go to Models')).toBeNull();
    expect(matchScore('zzz', 'Go to Models')).toBeNull();
  });

  it('ranks word starts and runs above scattered letters', () => {
    const wordStart = matchScore('mod', 'Go to Models')!;
    const scattered = matchScore('mod', 'Go to thermodynamics')!;
    expect(wordStart).toBeGreaterThan(scattered);
  });

  it('ignores case and spaces in the query', () => {
    expect(matchScore('NEW CONV', 'New conversation')).not.toBeNull();
  });
});

describe('filterCommands', () => {
  it('keeps the given order for an empty query', () => {
    expect(ids('')).toEqual(commands.map((c) => c.id));
    expect(ids('   ')).toEqual(commands.map((c) => c.id));
  });

  it('puts the closest command first', () => {
    expect(ids('models')[0]).toBe('view-models');
    expect(ids('pause')[0]).toBe('pause');
    expect(ids('new')[0]).toBe('chat-new');
  });

  it('finds a command by its keywords and its group', () => {
    expect(ids('settings')).toContain('view-status');
    expect(ids('appearance')).toEqual(['theme-dark']);
  });

  it('returns nothing when nothing matches', () => {
    expect(ids('xylophone')).toEqual([]);
  });
});
