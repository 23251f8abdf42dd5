import { afterEach, beforeEach, expect, test, vi } from 'vitest';
import { debounce, throttle } from './timing';

beforeEach(() => {
  vi.useFakeTimers();
});
afterEach(() => {
  vi.useRealTimers();
});

test('debounce calls once, with the last arguments, after the calls pause', () => {
  const f = vi.fn();
  const d = debounce(f, 100);
  d(1);
  vi.advanceTimersByTime(50);
  d(2);
  vi.advanceTimersByTime(99);
  expect(f).not.toHaveBeenCalled();
  vi.advanceTimersByTime(1);
  expect(f).toHaveBeenCalledExactlyOnceWith(2);
});

test('a cancelled debounce never fires', () => {
  const f = vi.fn();
  const d = debounce(f, 100);
  d(1);
  d.cancel();
  vi.advanceTimersByTime(500);
  expect(f).not.toHaveBeenCalled();
});

test('throttle fires at once, then once more at the end with the latest arguments', () => {
  const f = vi.fn();
  const t = throttle(f, 100);
  t('a');
  t('b');
  t('c');
  expect(f.mock.calls).toEqual([['a']]);
  vi.advanceTimersByTime(100);
  expect(f.mock.calls).toEqual([['a'], ['c']]);
  vi.advanceTimersByTime(1000);
  expect(f).toHaveBeenCalledTimes(2);
});
