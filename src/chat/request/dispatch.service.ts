import type { RedisClient } from '../../infra/redis.js';
import type { Config } from '../../config.js';
import { AppError } from '../../errors.js';
import type { Queue } from '../../infra/queues.js';
import type { Limiter } from '../../limits/limiter.service.js';
import type { DispatchMetrics } from '../../metrics.js';
import { settlementOf, type CompletionJob, type PreparedJob } from '../relay/completion-job.js';
import { relayLogKey } from '../relay/protocol.js';
import type { RelayHub } from '../relay/hub.js';
import { readFleet } from '../relay/liveness.js';
import { traceDispatch, type DispatchOutcome } from '../relay/completion-tracing.js';
import {
  CompletionStream,
  failedEvent,
  silenceLimitMs,
  type CompletionEvent,
  type EndReason,
  type StreamState,
} from '../stream/completion-stream.js';
import { realTimers, type Timers } from '../../clock.js';
import { InOrderRelay } from '../relay/order.js';

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
  /** Tests move time by hand (the pickup and silence timeouts). */
  timers?: Timers;
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

const noWorker = (): AppError =>
  new AppError('unavailable', 'No completion worker is available right now; please retry shortly.', {
    code: 'no_worker_available',
    headers: { 'Retry-After': String(NO_WORKER_RETRY_AFTER_S) },
  });

/** How the dispatch span records an end. */
function outcomeOf(reason: EndReason, last: CompletionEvent | undefined, resumable: boolean): DispatchOutcome {
  switch (reason) {
    case 'completed':
      return last?.kind === 'final' ? 'final' : 'done';
    case 'failed':
      return 'error';
    case 'relay_gap':
    case 'redis_down':
      return 'gap';
    case 'silence':
      return 'silence';
    case 'no_worker':
      return 'no_worker';
    case 'client_left':
      return resumable ? 'detached' : 'cancelled';
  }
}

/**
 * Queues the job and returns the stream of what its worker publishes, in order. Throws 503 when
 * the queue cannot be reached; the stream ends with a 503 when no worker takes the job in time
 * (config.queue.pickupTimeoutMs; the job is then withdrawn, its reservation released).
 */
async function dispatch(app: DispatcherDeps, depth: QueueDepth, job: CompletionJob): Promise<CompletionStream> {
  const queue = app.queues[job.shard]!;
  // Before the job is queued: it carries this request's trace context to its worker.
  const spans = traceDispatch(job, queue.name);
  let resolvePickup!: (v: 'picked' | 'ended') => void;
  const pickup = new Promise<'picked' | 'ended'>((r) => (resolvePickup = r));
  const withdraw = () => withdrawJob(app, queue, job);
  let stopRelay = (): void => undefined;
  const stream = new CompletionStream(
    job.id,
    { model: job.model.id },
    {
      ended(reason, was, last) {
        stopRelay();
        resolvePickup('ended');
        spans.ended(outcomeOf(reason, last, job.resumable));
        release(app, job, reason, was, withdraw);
      },
    },
  );
  stopRelay = relayInOrder(app, job, stream, () => {
    spans.picked();
    resolvePickup('picked');
  });

  await app.hub.start();
  try {
    await queue.add('completion', job, { jobId: job.id });
  } catch (err) {
    stopRelay();
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
  void awaitPickup(
    app,
    pickup,
    withdraw,
    () => heldForALiveWorker(app, queue, job),
    () => stream.end('no_worker', failedEvent(noWorker(), false)),
  );
  return stream;
}

/** Takes a queued job back (a worker holds none it could not have); its reservation is released. */
async function withdrawJob(app: DispatcherDeps, queue: Queue<CompletionJob>, job: CompletionJob): Promise<boolean> {
  // remove() refuses a job a worker holds, so this never races with one that just started it.
  const removed = await queue.remove(job.id).catch(() => 0);
  if (removed === 1) await app.limiter.settle(settlementOf(job)).catch(() => undefined);
  return removed === 1;
}

/** What an ended stream leaves to do about its job. */
function release(
  app: DispatcherDeps,
  job: CompletionJob,
  reason: EndReason,
  was: StreamState,
  withdraw: () => Promise<boolean>,
): void {
  switch (reason) {
    case 'relay_gap':
    case 'silence':
      // The client is told its answer broke off: its worker stops too, and bills what it produced.
      void app.hub.cancel(job.id);
      return;
    case 'no_worker':
      app.metrics.rejected.inc({ reason: 'no_worker' });
      return;
    case 'client_left':
      // A queued job is withdrawn (nothing ran). A running one is stopped, unless the request is
      // resumable: then it goes on, and its worker starts the grace period. A background job is
      // left to run, queued or not: nobody was ever meant to stay attached to it.
      if (job.resumable) {
        void (async () => {
          if (was === 'queued' && job.wire?.background !== true && (await withdraw())) return;
          await app.hub.detach(job.id);
        })();
      } else {
        if (was === 'queued') void withdraw();
        void app.hub.cancel(job.id);
      }
      return;
    default:
      return;
  }
}

/** Feeds the stream from the relay hub, in order (see InOrderRelay). Returns what stops it. */
function relayInOrder(
  app: DispatcherDeps,
  job: CompletionJob,
  stream: CompletionStream,
  picked: () => void,
): () => void {
  const relay = new InOrderRelay(stream, {
    redis: app.redis,
    logKey: relayLogKey(app.config.redis.prefix, job.relayTo, job.id),
    timers: app.timers ?? realTimers,
    silenceLimitMs: silenceLimitMs(app.config),
    picked,
    gate: app.hub.acks.open(job.id),
  });
  const unregister = app.hub.register(job.id, relay);
  return () => {
    relay.stop();
    unregister();
  };
}

/**
 * Whether a job not announced in time is still bound for a worker that lives: BullMQ has handed it
 * out (it is active) and a live worker is registered. Either that worker has not announced it yet,
 * or the one that fetched it died before its claim, and once its lock lapses a stalled-job check
 * hands it to a live worker. Withdrawing such a job would answer `no_worker_available` with a
 * worker running (its lock may have lapsed before that check, and then the queue lets it go).
 * Read only when the pickup wait has run out: it costs a job no round trip otherwise.
 */
async function heldForALiveWorker(app: DispatcherDeps, queue: Queue<CompletionJob>, job: CompletionJob) {
  try {
    const [state, fleet] = await Promise.all([
      queue.getJobState(job.id),
      readFleet(app.redis, app.config.redis.prefix, Date.now()),
    ]);
    return state === 'active' && fleet.workers > 0;
  } catch {
    return false;
  }
}

/**
 * Waits for a worker to take the job; if none does in time, withdraws it and says so. A job held
 * by a worker that has not announced itself yet cannot be withdrawn, and one a dead worker fetched
 * is not while a live worker can take it over: either is waited for again.
 */
async function awaitPickup(
  app: DispatcherDeps,
  pickup: Promise<'picked' | 'ended'>,
  withdraw: () => Promise<boolean>,
  heldForALiveWorker: () => Promise<boolean>,
  noWorkerTookIt: () => void,
): Promise<void> {
  const timers = app.timers ?? realTimers;
  for (;;) {
    let timer: unknown;
    const timedOut = new Promise<'timeout'>(
      (r) => (timer = timers.setTimeout(() => r('timeout'), app.config.queue.pickupTimeoutMs)),
    );
    const outcome = await Promise.race([pickup, timedOut]);
    timers.clearTimeout(timer);
    if (outcome !== 'timeout') return;
    if (await heldForALiveWorker()) continue;
    if (await withdraw()) return noWorkerTookIt();
  }
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

  /** Queues the job on the next shard: the stream of what its worker publishes, in order. */
  dispatch(job: PreparedJob): Promise<CompletionStream> {
    const shard = this.nextShard++ % this.deps.queues.length;
    return dispatch(this.deps, this.depth, { ...job, shard, acks: true });
  }

  stop(): void {
    this.depth.stop();
  }
}
