import {
  hashTag,
  onNodeChange,
  redisKey,
  RECONNECT_MAX_DELAY_MS,
  shardSubscribers,
  type RedisClient,
} from '../../infra/redis.js';
import { redisScript, runScript } from '../../infra/redis-scripts.js';
import { relayChannel } from './protocol.js';

// Processes say they are alive with a key that expires unless renewed: a worker learns that the
// web process holding a client is gone (and stops working for it), and a re-run of a stalled job
// learns whether the worker that started it is still at it. A key read as missing right after a
// Redis restart may only mean its owner has not reconnected and written it again yet, so absence
// counts only once the reader's own connection has been up for as long as any process can take
// to reconnect, plus a whole TTL.

/** How long a reader's connection must have been up before a missing liveness key means its owner is gone. */
export const settledAfterMs = (ttlMs: number): number => ttlMs + RECONNECT_MAX_DELAY_MS;

// Every liveness key and the workers registry share one hash tag, so a worker reads the liveness
// of all the web processes it serves in one MGET, on a cluster too. Their traffic is a few small
// writes per process per TTL.
const fleetTag = (prefix: string): string => hashTag(prefix, 'fleet');
export const webAliveKey = (prefix: string, instance: string): string =>
  redisKey(prefix, 'alive', fleetTag(prefix), 'web', instance);
export const workerAliveKey = (prefix: string, workerId: string): string =>
  redisKey(prefix, 'alive', fleetTag(prefix), 'worker', workerId);
/** When a worker last wrote its liveness key, by Redis's clock: outlives the key, so a reader knows how long it has been missing. */
export const workerSeenKey = (prefix: string, workerId: string): string =>
  redisKey(prefix, 'alive', fleetTag(prefix), 'seen', workerId);

/** How long a worker's last-seen time is kept: long past any take-over, short enough to leave nothing behind. */
const SEEN_TTL_MS = 600_000;

// Redis's clock in milliseconds, as a string (Lua numbers print large integers in exponent form).
const REDIS_NOW_MS = "local t = redis.call('TIME') local now = t[1] .. string.format('%03d', math.floor(t[2] / 1000))";

/** KEYS: the liveness key, the last-seen key. ARGV: value, TTL ms, last-seen TTL ms. */
const BEAT_AND_STAMP = redisScript(
  'liveness-beat',
  `${REDIS_NOW_MS}
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('SET', KEYS[2], now, 'PX', ARGV[3])`,
);

/** KEYS: the liveness key, the last-seen key. Reply: { 1 if the key is there, last seen ms or '', Redis's now ms }. */
const READ_SEEN = redisScript(
  'liveness-read-seen',
  `${REDIS_NOW_MS}
return { redis.call('EXISTS', KEYS[1]), redis.call('GET', KEYS[2]) or '', now }`,
);

/** Whether a worker is alive, and if not, how long since it last wrote its liveness key (undefined when that is not known). */
export interface WorkerSeen {
  alive: boolean;
  silentMs?: number;
}

/** Reads a worker's liveness and last-seen time in one call (both keys share the fleet's hash tag). */
export async function readWorkerSeen(redis: RedisClient, prefix: string, workerId: string): Promise<WorkerSeen> {
  const [alive, seen, now] = (await runScript(redis, READ_SEEN, [
    workerAliveKey(prefix, workerId),
    workerSeenKey(prefix, workerId),
  ])) as [number, string, string];
  if (alive === 1) return { alive: true };
  return seen === '' ? { alive: false } : { alive: false, silentMs: Math.max(0, Number(now) - Number(seen)) };
}

/** Writes `key` with a TTL, renewed four times per TTL and at once after a reconnect; deleted on stop. */
export class Heartbeat {
  private timer: NodeJS.Timeout | undefined;
  private readonly onReady = () => void this.beat();

  constructor(
    private readonly redis: RedisClient,
    private readonly key: string,
    private readonly ttlMs: number,
    private readonly value: () => string = () => '1',
    /** Where to note the time of each write (by Redis's clock), kept after the key expires. */
    private readonly seenKey?: string,
  ) {}

  start(): Promise<void> {
    this.redis.on('ready', this.onReady);
    this.timer = setInterval(() => void this.beat(), Math.max(50, Math.floor(this.ttlMs / 4)));
    this.timer.unref();
    return this.beat();
  }

  async stop(): Promise<void> {
    clearInterval(this.timer);
    this.redis.off('ready', this.onReady);
    await this.redis.del(this.key).catch(() => undefined);
  }

  private async beat(): Promise<void> {
    const write =
      this.seenKey === undefined
        ? this.redis.set(this.key, this.value(), 'PX', this.ttlMs)
        : runScript(this.redis, BEAT_AND_STAMP, [this.key, this.seenKey], [this.value(), this.ttlMs, SEEN_TTL_MS]);
    await write.catch(() => undefined);
  }
}

/**
 * Since when a connection has been ready without interruption (undefined while it is not). On a
 * Redis Cluster the client stays ready while one master fails over, so a node lost or added, or
 * failing, counts as an interruption too: the keys that master held may be missing for a moment.
 */
export class ConnectionStability {
  private since: number | undefined;

  constructor(
    redis: RedisClient,
    private readonly now: () => number = () => performance.now(),
  ) {
    if (redis.status === 'ready') this.since = this.now();
    redis.on('ready', () => (this.since = this.now()));
    redis.on('close', () => (this.since = undefined));
    onNodeChange(redis, () => {
      if (this.since !== undefined) this.since = this.now();
    });
  }

  /** True once the connection has been up for at least `ms`: a missing key then really is missing. */
  stableFor(ms: number): boolean {
    return this.since !== undefined && this.now() - this.since >= ms;
  }
}

/** The abort reason of a job stopped because the web process holding its client died. */
export const WEB_PROCESS_GONE = 'client_gone';

/** How often a worker counts the subscribers of the channels its jobs publish on. */
export const RECEIVER_CHECK_MS = 50;

/** What the watch reads of a running job. */
export interface WatchedJob {
  controller: AbortController;
  relayTo: string;
  resumable?: boolean;
}

/**
 * A worker's watch on the web processes its jobs answer to, two ways. Every RECEIVER_CHECK_MS it
 * counts the subscribers of their relay channels: a web process that dies (SIGKILL, a crash) has
 * its connection closed by the kernel, Redis drops its subscription at once, and its jobs stop
 * within a fraction of a second, before they produce much nobody receives. Every quarter of a TTL
 * it reads their liveness keys, for a host lost without its connections being closed. A web
 * process that shuts down cleanly deletes its key. A resumable job is not stopped: its client may
 * resume elsewhere, so it is handed to `onDetached` (the grace period). Neither way counts until
 * this worker's connection has been up long enough for every web process to have reconnected and
 * subscribed again after a Redis restart.
 */
export class ClientWatch {
  private timer: NodeJS.Timeout | undefined;
  private receiversTimer: NodeJS.Timeout | undefined;
  private busy = false;
  private countingReceivers = false;

  constructor(
    private readonly deps: {
      redis: RedisClient;
      /**
       * Whether this worker's connection has been up long enough (settledAfterMs) for a missing
       * key or subscriber to mean its web process is gone.
       */
      settled: () => boolean;
      /** The jobs this worker runs, by request id. */
      running: ReadonlyMap<string, WatchedJob>;
      ttlMs: number;
      prefix: string;
      /** A job that is not resumable was stopped: its web process is gone. */
      onGone: (requestId: string) => void;
      /** A resumable job's web process is gone: it runs on for its grace period. */
      onDetached: (requestId: string) => void;
    },
  ) {}

  start(): void {
    this.timer = setInterval(() => void this.check(), Math.max(50, Math.floor(this.deps.ttlMs / 4)));
    this.timer.unref();
    this.receiversTimer = setInterval(() => void this.countReceivers(), RECEIVER_CHECK_MS);
    this.receiversTimer.unref();
  }

  stop(): void {
    clearInterval(this.timer);
    clearInterval(this.receiversTimer);
  }

  private get settled(): boolean {
    return this.deps.running.size > 0 && this.deps.settled();
  }

  private get instances(): string[] {
    return [...new Set([...this.deps.running.values()].map((j) => j.relayTo))];
  }

  private async check(): Promise<void> {
    if (this.busy || !this.settled) return;
    this.busy = true;
    try {
      const instances = this.instances;
      const alive = await this.deps.redis.mget(...instances.map((i) => webAliveKey(this.deps.prefix, i)));
      this.stopJobsOf(new Set(instances.filter((_, i) => alive[i] === null)));
    } catch {
      // Redis went away mid-check: the next check, once it is back and settled, decides.
    } finally {
      this.busy = false;
    }
  }

  private async countReceivers(): Promise<void> {
    if (this.countingReceivers || !this.settled) return;
    this.countingReceivers = true;
    try {
      const instances = this.instances;
      const counts = await Promise.all(
        instances.map((i) => shardSubscribers(this.deps.redis, relayChannel(this.deps.prefix, i))),
      );
      // Asked again only if the connection stayed up throughout: a reply from just before a restart proves nothing.
      // Resumable jobs wait for the liveness key: a subscription lost for a moment must not stop
      // their publishing for good (the grace period only starts once the key says so).
      if (this.settled) this.stopJobsOf(new Set(instances.filter((_, i) => counts[i] === 0)), false);
    } catch {
      // As above.
    } finally {
      this.countingReceivers = false;
    }
  }

  private stopJobsOf(gone: Set<string>, resumableToo = true): void {
    if (gone.size === 0) return;
    for (const [requestId, job] of this.deps.running) {
      if (!gone.has(job.relayTo) || job.controller.signal.aborted || (job.resumable && !resumableToo)) continue;
      if (job.resumable) {
        this.deps.onDetached(requestId);
      } else {
        job.controller.abort(WEB_PROCESS_GONE);
        this.deps.onGone(requestId);
      }
    }
  }
}

/** What a worker offers: how many jobs it takes at once and how many it holds now. */
export interface WorkerCapacity {
  concurrency: number;
  active: number;
  /** The worker's worst event-loop delay since its previous renewal, in ms. */
  lagMs?: number;
  /** Epoch ms after which the entry is stale (its worker stopped renewing it). */
  until: number;
}

export const workerRegistryKey = (prefix: string): string => redisKey(prefix, 'workers', fleetTag(prefix));

/**
 * A worker's liveness key and its entry in the workers registry (one hash for every worker, so a
 * web process reads the whole fleet's capacity in one command), renewed together.
 */
export class WorkerPresence {
  private readonly heartbeat: Heartbeat;

  constructor(
    private readonly deps: {
      redis: RedisClient;
      prefix: string;
      workerId: string;
      ttlMs: number;
      /** What the worker offers now, written with each renewal. */
      capacity: () => { concurrency: number; active: number; lagMs: number };
      now?: () => number;
    },
  ) {
    const { redis, prefix, workerId, ttlMs, capacity, now = () => Date.now() } = deps;
    this.heartbeat = new Heartbeat(
      redis,
      workerAliveKey(prefix, workerId),
      ttlMs,
      () => {
        const entry: WorkerCapacity = { ...capacity(), until: now() + ttlMs };
        void redis.hset(workerRegistryKey(prefix), workerId, JSON.stringify(entry)).catch(() => undefined);
        return '1';
      },
      workerSeenKey(prefix, workerId),
    );
  }

  start(): Promise<void> {
    return this.heartbeat.start();
  }

  async stop(): Promise<void> {
    const { redis, prefix, workerId } = this.deps;
    await this.heartbeat.stop();
    await redis.hdel(workerRegistryKey(prefix), workerId).catch(() => undefined);
  }
}

/** The live workers' capacity, and the event-loop lag of the least lagging one (undefined with no worker). */
export interface Fleet {
  workers: number;
  concurrency: number;
  active: number;
  leastLagMs: number | undefined;
}

/** The fleet's capacity from the registry, dropping (and deleting) entries whose worker stopped renewing them. */
export async function readFleet(redis: RedisClient, prefix: string, now: number): Promise<Fleet> {
  const entries = await redis.hgetall(workerRegistryKey(prefix));
  let workers = 0;
  let concurrency = 0;
  let active = 0;
  let leastLagMs: number | undefined;
  const stale: string[] = [];
  for (const [id, raw] of Object.entries(entries)) {
    let entry: WorkerCapacity | undefined;
    try {
      entry = JSON.parse(raw) as WorkerCapacity;
    } catch {
      entry = undefined;
    }
    if (!entry || entry.until < now) {
      stale.push(id);
      continue;
    }
    workers++;
    concurrency += entry.concurrency;
    active += entry.active;
    leastLagMs = Math.min(leastLagMs ?? Infinity, entry.lagMs ?? 0);
  }
  if (stale.length > 0) await redis.hdel(workerRegistryKey(prefix), ...stale).catch(() => undefined);
  return { workers, concurrency, active, leastLagMs };
}
