import type { Timers } from '../../src/clock.js';

/** Timers a test moves by hand: `advance` runs every timer due, in order, at its own time. */
export class ManualTimers implements Timers {
  private t = 0;
  private queue: { at: number; fn: () => void; id: number }[] = [];
  private nextId = 0;
  now = (): number => this.t;
  setTimeout = (fn: () => void, ms: number): unknown => {
    const id = this.nextId++;
    this.queue.push({ at: this.t + ms, fn, id });
    return id;
  };
  clearTimeout = (handle: unknown): void => {
    this.queue = this.queue.filter((e) => e.id !== handle);
  };
  advance(ms: number): void {
    const until = this.t + ms;
    for (;;) {
      this.queue.sort((a, b) => a.at - b.at);
      const next = this.queue[0];
      if (!next || next.at > until) break;
      this.queue.shift();
      this.t = next.at;
      next.fn();
    }
    this.t = until;
  }
  get pending(): number {
    return this.queue.length;
  }
}
