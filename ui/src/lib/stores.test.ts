import { afterEach, expect, test, vi } from 'vitest';
import {
  dismissToast,
  effectiveMode,
  focusSearch,
  search,
  setLeaveGuard,
  setView,
  settings,
  showToast,
  themeChoice,
  toast,
  ui,
} from './stores.svelte';

afterEach(() => {
  setLeaveGuard(null);
  vi.useRealTimers();
});

test('a view with unsaved edits can keep the user where they are', () => {
  ui.view = 'tools';
  let stay = true;
  setLeaveGuard(() => !stay);
  setView('search');
  expect(ui.view).toBe('tools');
  const tick = ui.searchFocusTick;
  focusSearch();
  expect(ui.view).toBe('tools');
  expect(ui.searchFocusTick).toBe(tick);
  stay = false;
  focusSearch();
  expect(ui.view).toBe('search');
  expect(ui.searchFocusTick).toBe(tick + 1);
});

test('a toast dismisses itself, and a newer one restarts the clock', () => {
  vi.useFakeTimers();
  showToast('first', 'info', 1000);
  vi.advanceTimersByTime(900);
  showToast('second', 'error', 1000, 'quarry models install x');
  vi.advanceTimersByTime(900);
  expect(toast).toMatchObject({ visible: true, text: 'second', kind: 'error', detail: 'quarry models install x' });
  vi.advanceTimersByTime(100);
  expect(toast.visible).toBe(false);
  showToast('third');
  dismissToast();
  expect(toast.visible).toBe(false);
});

test('the theme and the search mode fall back from a preview or a choice to the saved default', () => {
  expect(themeChoice()).toBe('system');
  settings.value = { theme: 'dark', search_mode: 'lexical' } as never;
  expect(themeChoice()).toBe('dark');
  ui.themePreview = 'light';
  expect(themeChoice()).toBe('light');
  expect(effectiveMode()).toBe('lexical');
  search.mode = 'vector';
  expect(effectiveMode()).toBe('vector');
});
