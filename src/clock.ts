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
