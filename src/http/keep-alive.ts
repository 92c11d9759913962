import { realTimers, type Timers } from '../clock.js';

/**
 * Keeps an idle connection alive: `beat` runs once nothing was written for `intervalMs`. The timer
 * is set for the moment the interval since the last write runs out (not on a fixed tick, which let
 * a write just after a tick stretch the gap to nearly two intervals), and writes only note the
 * time, so a busy stream pays nothing per chunk.
 */
export class KeepAlive {
  private lastWrite: number;
  private handle: unknown;
  private stopped = false;

  constructor(
    private readonly intervalMs: number,
    private readonly beat: () => void,
    private readonly timers: Timers = realTimers,
  ) {
    this.lastWrite = timers.now();
    this.arm(intervalMs);
  }

  /** Something was written: the next beat is due an interval from now. */
  wrote(): void {
    this.lastWrite = this.timers.now();
  }

  stop(): void {
    this.stopped = true;
    this.timers.clearTimeout(this.handle);
  }

  private arm(ms: number): void {
    if (!this.stopped) this.handle = this.timers.setTimeout(this.fire, ms);
  }

  private readonly fire = (): void => {
    const left = this.lastWrite + this.intervalMs - this.timers.now();
    // Within a millisecond: timers and the clock do not tick together, and a beat a moment early is harmless.
    if (left <= 1) {
      this.beat();
      this.lastWrite = this.timers.now();
      this.arm(this.intervalMs);
    } else this.arm(left);
  };
}
