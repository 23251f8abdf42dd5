// Debounce and throttle for UI refreshes driven by frequent events.

export interface Cancelable<A extends unknown[]> {
  (...args: A): void;
  cancel(): void;
}

/** Calls `f` once the calls have paused for `ms`. */
export function debounce<A extends unknown[]>(f: (...args: A) => void, ms: number): Cancelable<A> {
  let timer: ReturnType<typeof setTimeout> | null = null;
  const d = (...args: A) => {
    if (timer !== null) clearTimeout(timer);
    timer = setTimeout(() => {
      timer = null;
      f(...args);
    }, ms);
  };
  d.cancel = () => {
    if (timer !== null) clearTimeout(timer);
    timer = null;
  };
  return d;
}

/** Calls `f` at most once per `ms`: at once when idle, then once more at the end (trailing). */
export function throttle<A extends unknown[]>(f: (...args: A) => void, ms: number): Cancelable<A> {
  let last = 0;
  let timer: ReturnType<typeof setTimeout> | null = null;
  let pending: A | null = null;
  const fire = (args: A) => {
    last = Date.now();
    f(...args);
  };
  const t = (...args: A) => {
    const wait = last + ms - Date.now();
    if (wait <= 0 && timer === null) {
      fire(args);
      return;
    }
    pending = args;
    if (timer === null) {
      timer = setTimeout(
        () => {
          timer = null;
          if (pending) {
            const p = pending;
            pending = null;
            fire(p);
          }
        },
        Math.max(0, wait),
      );
    }
  };
  t.cancel = () => {
    if (timer !== null) clearTimeout(timer);
    timer = null;
    pending = null;
  };
  return t;
}
