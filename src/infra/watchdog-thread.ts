import { writeSync } from 'node:fs';
import { parentPort, workerData } from 'node:worker_threads';
import { loadConfig } from '../config.js';
import { createRedis } from './redis.js';
import {
  ORPHAN_EXIT_MS,
  ORPHAN_UNANSWERED_MS,
  WATCHDOG_TICK_MS,
  type WatchdogCommand,
  type WatchdogData,
} from './watchdog.js';

// The watchdog thread (see watchdog.ts). It ends the process with SIGKILL: the main thread's
// signal handlers and exit hooks cannot run while its event loop is blocked, and a thread's own
// process.exit() would end only the thread.

/** How long the marks of a stalled process may take to reach Redis before it is ended regardless. */
const MARK_TIMEOUT_MS = 2000;

const data = workerData as WatchdogData;
const heartbeat = new Int32Array(data.heartbeat);
// Straight to the file descriptor: a thread's process.stderr goes through the main thread, which may be blocked.
const say = (line: string) => writeSync(2, `${JSON.stringify({ level: 'error', role: data.role, msg: line })}\n`);
const kill = (why: string): never => {
  say(`watchdog: ${why}; killing the process`);
  process.kill(process.pid, 'SIGKILL');
  throw new Error('unreachable');
};

let lastCount = Atomics.load(heartbeat, 0);
let lastBeatAt = performance.now();
let deadlineAt: number | undefined;
let orphanedAt: number | undefined;
const marks = new Map<string, { key: string; field: string }>();
let ending = false;

parentPort!.on('message', (command: WatchdogCommand) => {
  if (command.kind === 'deadline') deadlineAt = Math.min(deadlineAt ?? Infinity, performance.now() + command.inMs);
  else if (command.kind === 'mark') marks.set(command.id, { key: command.key, field: command.field });
  else marks.delete(command.id);
});

/** Writes the marks (bounded), then kills: the process that takes over its jobs reads them. */
async function endStalled(silentMs: number): Promise<void> {
  ending = true;
  say(`watchdog: the event loop has not turned for ${Math.round(silentMs)} ms`);
  if (marks.size > 0) {
    const redis = createRedis(loadConfig(process.env), 'blocking', 'watchdog');
    const written = Promise.all([...marks.values()].map((m) => redis.hset(m.key, m.field, '1'))).then(
      () => `marked the ${marks.size} job(s) it was running as stalled`,
      (err: unknown) => `could not mark the running jobs: ${err instanceof Error ? err.message : String(err)}`,
    );
    const timeout = new Promise<string>((r) =>
      setTimeout(() => r('could not mark the running jobs in time'), MARK_TIMEOUT_MS),
    );
    say(`watchdog: ${await Promise.race([written, timeout])}`);
  }
  kill('stalled');
}

function look(): void {
  if (ending) return;
  const now = performance.now();
  const count = Atomics.load(heartbeat, 0);
  if (count !== lastCount) {
    lastCount = count;
    lastBeatAt = now;
  }
  const silentMs = now - lastBeatAt;
  if (deadlineAt !== undefined && now > deadlineAt) kill('the shutdown deadline passed');
  if (data.supervisorPid !== undefined && process.ppid !== data.supervisorPid) {
    if (orphanedAt === undefined) {
      orphanedAt = now;
      say(`watchdog: the supervisor (pid ${data.supervisorPid}) is gone; stopping`);
      parentPort!.postMessage('orphaned');
    } else if (now - orphanedAt > ORPHAN_EXIT_MS) kill('it did not stop after its supervisor went');
    else if (silentMs > ORPHAN_UNANSWERED_MS) kill('its supervisor is gone and its event loop does not answer');
  }
  if (data.stallTimeoutMs > 0 && silentMs > data.stallTimeoutMs) void endStalled(silentMs);
}

setInterval(look, WATCHDOG_TICK_MS);
