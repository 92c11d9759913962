import type { RedisClient } from '../infra/redis.js';
import type { Config } from '../config.js';
import { AppError } from '../errors.js';
import type { Queue } from '../infra/queues.js';
import type { Limiter } from '../limits/limiter.service.js';
import type { DispatchMetrics } from '../metrics.js';
import { settlementOf, type CompletionJob, type PreparedJob } from './completion-job.js';
import { relayLogKey, type RelayError, type RelayMessage } from './relay-protocol.js';
import { readRelayLog } from './relay-log.js';
import type { RelayHub } from './relay-hub.js';
import { readFleet } from './liveness.js';
import { traceDispatch } from './completion-tracing.js';

export type DispatchEvent =
  | { kind: 'picked' }
  | { kind: 'sse'; payload: string }
  | { kind: 'final'; payload: string }
  | { kind: 'error'; error: RelayError }
  /** The stream is complete; `payload` holds any last SSE events (the usage chunk). */
  | { kind: 'done'; payload: string }
  /** A relay message was lost (sequence gap) or could not be read. */
  | { kind: 'gap' }
  /** Nothing arrived for too long after the job started (its worker died and nobody re-ran it). */
  | { kind: 'idle' };

export interface Dispatch {
  /**
   * Settles when a worker has the job (or the job already ended); rejects with 503 when none took
   * it within config.queue.pickupTimeoutMs (the job is then withdrawn, its reservation released).
   */
  pickedUp: Promise<void>;
  /** The client went away: stop the job wherever it is (waiting in the queue or running). */
  cancel(): void;
  /**
   * The client of a resumable request went away: a job still queued is withdrawn (nothing ran,
   * nothing to resume); a running one goes on, and its worker starts the grace period.
   */
  detach(): void;
  /** Stop listening (the response is complete). */
  close(): void;
}

const NO_WORKER_RETRY_AFTER_S = 30;
const QUEUE_FULL_RETRY_AFTER_S = 10;
const OVERLOADED_RETRY_AFTER_S = 2;
const DEPTH_REFRESH_MS = 250;

/**
 * The queue depth (every shard's waiting jobs) and the workers' capacity as last read, refreshed
 * in the background: checking them costs a request no round trip. Between refreshes each enqueue
 * counts itself, so a burst cannot overshoot by much.
 */
class QueueDepth {
  private waiting = 0;
  /** Enqueues since the process started; a refresh adds those made while it was in flight. */
  private adds = 0;
  private fleet = { workers: 0, concurrency: 0, active: 0 };
  private timer: NodeJS.Timeout | undefined;

  constructor(private readonly deps: DispatcherDeps) {}

  start(): void {
    if (this.timer) return;
    const refresh = () => {
      const addsBefore = this.adds;
      Promise.all([
        Promise.all(this.deps.queues.map((q) => q.getWaitingCount())),
        readFleet(this.deps.redis, this.deps.config.redis.prefix, Date.now()),
      ])
        .then(([counts, fleet]) => {
          const n = counts.reduce((a, b) => a + b, 0);
          // A job queued while the counts were read may be missing from them (each shard is read
          // at its own moment): count it, so a stale read never lets the queue past its bound. It
          // may be counted twice until the next refresh, which errs toward refusing.
          this.waiting = n + (this.adds - addsBefore);
          this.fleet = fleet;
          this.deps.metrics.depth.set(n);
        })
        .catch(() => undefined);
    };
    refresh();
    this.timer = setInterval(refresh, DEPTH_REFRESH_MS);
    this.timer.unref();
  }

  stop(): void {
    clearInterval(this.timer);
  }

  get current(): number {
    return this.waiting;
  }

  /**
   * True when live workers are all busy and more jobs wait for them than a tenth of their capacity
   * (at least one): a new job would wait for running ones to end, which for streams can be
   * minutes. With no worker alive at all the job is queued (one may be restarting) and the pickup
   * timeout decides.
   */
  get saturated(): boolean {
    const { workers, concurrency, active } = this.fleet;
    const headroom = Math.max(1, Math.ceil(concurrency / 10));
    return workers > 0 && active + this.waiting >= concurrency + headroom;
  }

  added(): void {
    this.waiting++;
    this.adds++;
  }
}

/** What dispatching works with: the queue's shards, the relay hub, the limiter (to release a reservation), Redis. */
export interface DispatcherDeps {
  redis: RedisClient;
  /** The completion queue's shards, in shard order. */
  queues: Queue<CompletionJob>[];
  hub: RelayHub;
  limiter: Limiter;
  metrics: DispatchMetrics;
  config: Pick<Config, 'redis' | 'queue' | 'providers'>;
}

/**
 * Refuses up front (503, no quota used) when the queue is deeper than its bound, or when every
 * worker is busy and jobs wait already: a client told at once can go elsewhere or come back,
 * rather than wait toward the pickup timeout.
 */
function assertQueueHasRoom(app: DispatcherDeps, depth: QueueDepth): void {
  if (depth.current >= app.config.queue.maxDepth) {
    app.metrics.rejected.inc({ reason: 'queue_full' });
    throw new AppError('unavailable', 'The service is at capacity right now; please retry shortly.', {
      code: 'queue_full',
      headers: { 'Retry-After': String(QUEUE_FULL_RETRY_AFTER_S) },
    });
  }
  if (depth.saturated) {
    app.metrics.rejected.inc({ reason: 'overloaded' });
    throw new AppError('unavailable', 'Every completion worker is busy right now; please retry shortly.', {
      code: 'server_overloaded',
      headers: { 'Retry-After': String(OVERLOADED_RETRY_AFTER_S) },
    });
  }
}

/**
 * Queues the job and relays what its worker publishes to `onEvent`, in order. Throws 503 when the
 * queue cannot be reached; `pickedUp` rejects with 503 when no worker takes the job in time.
 */
async function dispatch(
  app: DispatcherDeps,
  depth: QueueDepth,
  job: CompletionJob,
  onEvent: (e: DispatchEvent) => void,
): Promise<Dispatch> {
  const { hub } = app;
  const queue = app.queues[job.shard]!;
  let expected = 0;
  let picked = false;
  let ended = false;
  let idleTimer: NodeJS.Timeout | undefined;
  const idleMs = app.config.providers.requestTimeoutMs + 10_000;
  // Before the job is queued: it carries this request's trace context to its worker.
  const spans = traceDispatch(job, queue.name);

  let resolvePickup!: (v: 'picked' | 'ended') => void;
  const pickup = new Promise<'picked' | 'ended'>((r) => (resolvePickup = r));

  const end = (e: Exclude<DispatchEvent, { kind: 'picked' | 'sse' }>) => {
    if (ended) return;
    ended = true;
    clearTimeout(idleTimer);
    unregister();
    resolvePickup('ended');
    spans.ended(e.kind);
    // The client is told its answer broke off: its worker stops too, and bills what it produced.
    if (e.kind === 'gap' || e.kind === 'idle') void hub.cancel(job.id);
    onEvent(e);
  };
  const armIdle = () => {
    clearTimeout(idleTimer);
    idleTimer = setTimeout(() => end({ kind: 'idle' }), idleMs);
    idleTimer.unref();
  };

  // Messages are taken in sequence. One seen twice (sent again after a Redis restart) is dropped;
  // one that skips ahead means some were lost on the way, and they are read from the relay log.
  let highestSeen = -1;
  const take = (m: RelayMessage) => {
    expected = m.seq + 1;
    armIdle();
    if (!picked) {
      // 'picked' itself may be the message that was lost: any message means a worker has the job.
      picked = true;
      spans.picked();
      resolvePickup('picked');
      onEvent({ kind: 'picked' });
    }
    switch (m.kind) {
      case 'picked':
        return;
      case 'sse':
        return onEvent({ kind: 'sse', payload: m.payload });
      case 'final':
        return end({ kind: 'final', payload: m.payload });
      case 'done':
        return end({ kind: 'done', payload: m.payload });
      case 'error': {
        let error: RelayError;
        try {
          error = JSON.parse(m.payload) as RelayError;
        } catch {
          return end({ kind: 'gap' });
        }
        return end({ kind: 'error', error });
      }
    }
  };
  let resyncing: Promise<void> | undefined;
  let resyncAgain = false;
  const resync = (): void => {
    if (ended) return;
    if (resyncing) {
      resyncAgain = true;
      return;
    }
    resyncing = (async () => {
      do {
        resyncAgain = false;
        let entries;
        try {
          entries = await readRelayLog(app.redis, relayLogKey(app.config.redis.prefix, job.relayTo, job.id), expected);
        } catch {
          // Redis is not back for this connection yet; the hub asks again after its reconnect.
          return;
        }
        for (const e of entries) {
          if (ended) return;
          if (e.kind === 'usage' || e.seq < expected) continue;
          if (e.seq > expected) return end({ kind: 'gap' });
          take(e as RelayMessage);
        }
        // A message was seen that the log does not have: it cannot be filled any more.
        if (!ended && highestSeen >= expected) return end({ kind: 'gap' });
      } while (resyncAgain && !ended);
    })().finally(() => (resyncing = undefined));
  };

  const unregister = hub.register(job.id, {
    message: (m) => {
      if (ended) return;
      if (!m) return end({ kind: 'gap' });
      if (m.seq < expected) return;
      if (m.seq > expected) {
        highestSeen = Math.max(highestSeen, m.seq);
        return resync();
      }
      take(m);
    },
    resync,
  });

  await hub.start();
  try {
    await queue.add('completion', job, { jobId: job.id });
  } catch (err) {
    unregister();
    spans.ended('queue_unavailable');
    app.metrics.rejected.inc({ reason: 'queue_unavailable' });
    await app.limiter.settle(settlementOf(job)).catch(() => undefined);
    throw new AppError('unavailable', 'The completion queue is unreachable right now; please retry shortly.', {
      code: 'queue_unavailable',
      headers: { 'Retry-After': '5' },
      cause: err,
    });
  }
  depth.added();

  const withdraw = async (): Promise<boolean> => {
    // remove() refuses a job a worker holds, so this never races with one that just started it.
    const removed = await queue.remove(job.id).catch(() => 0);
    if (removed === 1) await app.limiter.settle(settlementOf(job)).catch(() => undefined);
    return removed === 1;
  };

  // Wait for a worker to take the job; if none does in time, withdraw it and say so.
  const pickedUp = (async () => {
    for (;;) {
      let timer: NodeJS.Timeout | undefined;
      const timedOut = new Promise<'timeout'>(
        (r) => (timer = setTimeout(() => r('timeout'), app.config.queue.pickupTimeoutMs)),
      );
      const outcome = await Promise.race([pickup, timedOut]);
      clearTimeout(timer);
      if (outcome !== 'timeout') return;
      if (await withdraw()) {
        ended = true;
        unregister();
        spans.ended('no_worker');
        app.metrics.rejected.inc({ reason: 'no_worker' });
        throw new AppError('unavailable', 'No completion worker is available right now; please retry shortly.', {
          code: 'no_worker_available',
          headers: { 'Retry-After': String(NO_WORKER_RETRY_AFTER_S) },
        });
      }
      // Held by a worker that has not announced itself yet: keep waiting.
    }
  })();

  return {
    pickedUp,
    cancel() {
      if (ended) return;
      ended = true;
      clearTimeout(idleTimer);
      unregister();
      resolvePickup('ended');
      spans.ended('cancelled');
      if (!picked) void withdraw();
      void hub.cancel(job.id);
    },
    detach() {
      if (ended) return;
      ended = true;
      clearTimeout(idleTimer);
      unregister();
      resolvePickup('ended');
      spans.ended('detached');
      const wasPicked = picked;
      void (async () => {
        if (!wasPicked && (await withdraw())) return;
        await hub.detach(job.id);
      })();
    },
    close() {
      spans.ended('closed');
      ended = true;
      clearTimeout(idleTimer);
      unregister();
    },
  };
}

/**
 * The web process's way to the workers: checks the queue has room (no round trip), queues a job
 * and relays what its worker publishes. Built once per web process.
 */
export class Dispatcher {
  private readonly depth: QueueDepth;
  /** Round robin over the queue's shards, from a random start so web processes do not move in step. */
  private nextShard = Math.floor(Math.random() * 1024);

  constructor(private readonly deps: DispatcherDeps) {
    this.depth = new QueueDepth(deps);
    this.depth.start();
  }

  /** Refuses up front (503, no quota used) when the queue is full or every worker is busy. */
  assertRoom(): void {
    assertQueueHasRoom(this.deps, this.depth);
  }

  /** Queues the job on the next shard and relays what its worker publishes to `onEvent`, in order. */
  dispatch(job: PreparedJob, onEvent: (e: DispatchEvent) => void): Promise<Dispatch> {
    const shard = this.nextShard++ % this.deps.queues.length;
    return dispatch(this.deps, this.depth, { ...job, shard }, onEvent);
  }

  stop(): void {
    this.depth.stop();
  }
}
