/** Time comes from here wherever behaviour depends on it, so tests can move it without waiting. */
export interface Clock {
  now(): Date;
}

export const systemClock: Clock = { now: () => new Date() };

/**
 * Timers for waits measured in milliseconds (silence limits, keep-alives), injectable so a test
 * moves them by hand. `now` is monotonic, unlike the wall clock above. The real timers are unref'd:
 * a wait never holds the process open by itself.
 */
export interface Timers {
  now(): number;
  setTimeout(fn: () => void, ms: number): unknown;
  clearTimeout(handle: unknown): void;
}

export const realTimers: Timers = {
  now: () => performance.now(),
  setTimeout: (fn, ms) => setTimeout(fn, ms).unref(),
  clearTimeout: (handle) => clearTimeout(handle as NodeJS.Timeout),
};

/**
 * The one sleep: waits `ms` on a real timer, or less if `signal` aborts first. It never rejects, so
 * a caller that passes a signal checks `signal.aborted` after it.
 */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise<void>((resolve) => {
    if (signal?.aborted) return resolve();
    const aborted = () => {
      clearTimeout(timer);
      resolve();
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', aborted);
      resolve();
    }, ms);
    signal?.addEventListener('abort', aborted, { once: true });
  });
}

/** A clock a test sets and advances by hand. */
export class ManualClock implements Clock {
  private t: number;
  constructor(start: Date | string | number = '2026-11-01T00:00:00Z') {
    this.t = new Date(start).getTime();
  }
  now(): Date {
    return new Date(this.t);
  }
  set(to: Date | string | number): void {
    this.t = new Date(to).getTime();
  }
  advance(ms: number): void {
    this.t += ms;
  }
}
