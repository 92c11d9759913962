/** Time comes from here wherever behaviour depends on it, so tests can move it without waiting. */
export interface Clock {
  now(): Date;
}

export const systemClock: Clock = { now: () => new Date() };

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
