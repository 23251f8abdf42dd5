// @vitest-environment happy-dom
// The Tools view mounted against a stubbed shell: which tool and which tab end up on screen
// when loads finish out of order (what the desktop end-to-end test once raced on).
import { afterEach, beforeEach, expect, test, vi } from 'vitest';
import { flushSync, mount, tick, unmount } from 'svelte';
import type { ToolDetail, ToolSummary } from '../../lib/api';

const pending = new Map<string, (d: ToolDetail) => void>();

vi.mock('../../lib/api', async (importOriginal) => {
  const real = await importOriginal<typeof import('../../lib/api')>();
  const api = {
    toolsList: async (): Promise<ToolSummary[]> => [summary('first'), summary('second')],
    toolOpen: (slug: string) => new Promise<ToolDetail>((resolve) => pending.set(slug, resolve)),
    toolCheck: async () => ({ tool: null, problem: null }),
  } satisfies Partial<typeof real.api>;
  return { ...real, api };
});

const { default: ToolsView } = await import('./ToolsView.svelte');
const { workbench } = await import('../../lib/workbench.svelte');

function summary(slug: string): ToolSummary {
  return { slug, name: slug, type: 'retrieval', description: '', seeded: false, updated_at: 0, version: 1 };
}

function detail(slug: string): ToolDetail {
  return {
    tool: { slug, name: slug, type: 'retrieval', settings: {} },
    versions: [],
    used_by: [],
    test_template: {},
    llm_models: [],
    rerankers: [],
  };
}

async function settle() {
  for (let i = 0; i < 5; i++) await tick();
  flushSync();
}

function item(slug: string): HTMLElement {
  const found = document.querySelector<HTMLElement>(`[data-testid="tool-item"][data-slug="${slug}"]`);
  if (!found) throw new Error(`no list item for ${slug}`);
  return found;
}

let view: ReturnType<typeof mount> | null = null;
beforeEach(() => {
  workbench.tool = null; // the view opens the last-used tool, else the first listed
});
afterEach(() => {
  if (view) unmount(view);
  view = null;
  pending.clear();
  document.body.innerHTML = '';
});

test('a load that finishes after a later click is dropped: the last tool asked for is shown', async () => {
  view = mount(ToolsView, { target: document.body });
  await settle();
  expect(pending.has('first')).toBe(true); // the view opens the first tool by itself
  item('second').click();
  await settle();
  pending.get('second')!(detail('second'));
  await settle();
  pending.get('first')!(detail('first')); // the older load finishes last
  await settle();
  expect(document.querySelector<HTMLInputElement>('[data-testid="tool-name"]')?.value).toBe('second');
  expect(document.querySelector('.active')?.getAttribute('data-slug')).toBe('second');
});

test('a tab picked while the tool loads is kept when the load finishes', async () => {
  view = mount(ToolsView, { target: document.body });
  await settle();
  pending.get('first')!(detail('first'));
  await settle();
  item('second').click();
  await settle();
  document.querySelector<HTMLElement>('[data-testid="tool-tab-test"]')!.click();
  await settle();
  pending.get('second')!(detail('second'));
  await settle();
  expect(document.querySelector('.active')?.getAttribute('data-slug')).toBe('second');
  expect(document.querySelector('[data-testid="tool-tab-test"]')?.getAttribute('aria-selected')).toBe('true');
});
