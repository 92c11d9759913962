import { Worker } from 'node:worker_threads';

// A process's own event loop cannot end it once that loop is blocked: its timers and signal
// handlers never run. A thread of its own, with its own event loop, can. It watches three things:
// the supervisor that started the process (gone: the process stops), the main thread's heartbeat
// (silent too long: the process is ended), and a deadline set when shutdown starts.

/** How often the main thread bumps the heartbeat, and the watchdog thread looks. */
export const WATCHDOG_TICK_MS = 100;

/**
 * How long a role whose supervisor is gone gets to stop by itself before its watchdog kills it; one
 * whose event loop does not even answer within a second is killed at once.
 */
export const ORPHAN_EXIT_MS = 3000;
export const ORPHAN_UNANSWERED_MS = 1000;

/** What the watchdog thread is started with (its workerData). */
export interface WatchdogData {
  role: string;
  heartbeat: SharedArrayBuffer;
  /** The supervisor's pid: once the parent is another process, the supervisor is gone. */
  supervisorPid: number | undefined;
  /** The main thread silent this long: the process is ended (0: never). */
  stallTimeoutMs: number;
}

/** Messages from the main thread to the watchdog thread. */
export type WatchdogCommand =
  | { kind: 'deadline'; inMs: number }
  /** A hash field to set (to '1') in Redis before a stalled process is ended: what its successors must know. */
  | { kind: 'mark'; id: string; key: string; field: string }
  | { kind: 'unmark'; id: string };

export interface WatchdogOptions {
  role: string;
  supervisorPid: number | undefined;
  stallTimeoutMs: number;
  /** Called on the main thread when the supervisor is gone: stop gracefully, now. */
  onOrphaned: () => void;
}

/** The main thread's side: starts the thread, keeps the heartbeat, passes on deadlines and marks. */
export class Watchdog {
  private readonly heartbeat = new Int32Array(new SharedArrayBuffer(4));
  private readonly thread: Worker;
  private readonly timer: NodeJS.Timeout;

  constructor(opts: WatchdogOptions) {
    const data: WatchdogData = {
      role: opts.role,
      heartbeat: this.heartbeat.buffer,
      supervisorPid: opts.supervisorPid,
      stallTimeoutMs: opts.stallTimeoutMs,
    };
    this.thread = new Worker(new URL('./watchdog-thread.js', import.meta.url), { workerData: data });
    // Neither the thread nor the heartbeat keeps the process alive.
    this.thread.unref();
    this.thread.on('message', (message: unknown) => {
      if (message === 'orphaned') opts.onOrphaned();
    });
    this.thread.on('error', (err) =>
      process.stderr.write(`${opts.role}: the watchdog thread failed: ${err.message}\n`),
    );
    this.timer = setInterval(() => Atomics.add(this.heartbeat, 0, 1), WATCHDOG_TICK_MS);
    this.timer.unref();
  }

  /** The process must have ended `inMs` from now: past it the watchdog kills it, event loop blocked or not. */
  deadline(inMs: number): void {
    this.send({ kind: 'deadline', inMs });
  }

  /** Should the process stall, the watchdog sets hash field `field` of `key` before ending it (until unmarked). */
  markOnStall(id: string, key: string, field: string): void {
    this.send({ kind: 'mark', id, key, field });
  }

  unmarkOnStall(id: string): void {
    this.send({ kind: 'unmark', id });
  }

  private send(command: WatchdogCommand): void {
    this.thread.postMessage(command);
  }
}
