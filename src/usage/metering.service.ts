import { hostname } from 'node:os';
import type { Config } from '../config.js';
import type { Db } from '../infra/db.js';
import type { RedisClient } from '../infra/redis.js';
import type { Logger } from '../logger.js';
import type { MeteringMetrics } from '../metrics.js';
import { insertUsageEvents } from './usage.repository.js';
import { requestCostUsd } from './usage-cost.js';
import { METERING_GROUP, parseUsageEntry, usageStreamKeys } from './usage-stream.js';
import type { UsageEvent } from './usage-event.js';

/** An entry another consumer took but never acknowledged (it crashed) is taken over after this long. */
const RECLAIM_IDLE_MS = 30_000;

/** The metering group on every shard's stream (from the start: entries appended before it existed are metered too). */
export async function ensureMeteringGroups(redis: RedisClient, config: Pick<Config, 'redis'>): Promise<void> {
  for (const key of usageStreamKeys(config)) {
    try {
      await redis.xgroup('CREATE', key, METERING_GROUP, '0', 'MKSTREAM');
    } catch (err) {
      if (!String(err).includes('BUSYGROUP')) throw err;
    }
  }
}

export interface DrainOptions {
  consumer?: string;
  count?: number;
  /** With nothing on any stream, wait this long for new entries on one of them (turn by turn). */
  blockMs?: number;
}

let blockTurn = 0;

/** The oldest entry a pass read, from any shard's stream (stream ids begin with Redis's time in ms). */
interface Pass {
  oldestMs?: number;
}

/**
 * One pass over every shard's stream (see drainStream); when none had anything and `blockMs` is
 * given, waits that long on one stream, a different one each time, so a consumer never holds
 * several blocking reads (on a cluster they would be on several masters). Returns the entries drained.
 * The lag it reports is the age of the oldest entry it read, whether or not the ledger took it, so
 * the lag grows while Postgres refuses the batch; it is 0 after a pass that found nothing.
 */
export async function drainUsageOnce(app: MeteringDeps, redis: RedisClient, opts: DrainOptions = {}): Promise<number> {
  const keys = usageStreamKeys(app.config);
  const pass: Pass = {};
  let finished = false;
  try {
    let total = 0;
    for (const key of keys) total += await drainStream(app, redis, key, { ...opts, blockMs: undefined }, pass);
    if (total === 0 && opts.blockMs !== undefined)
      total = await drainStream(app, redis, keys[blockTurn++ % keys.length]!, opts, pass);
    finished = true;
    return total;
  } finally {
    // A pass that could not read the streams (Redis away) knows nothing new: the last value stands.
    if (pass.oldestMs !== undefined) app.metrics.metering.lag.set(Math.max(0, (Date.now() - pass.oldestMs) / 1000));
    else if (finished) app.metrics.metering.lag.set(0);
  }
}

type Entries = [id: string, fields: string[]][];

/**
 * Told of each batch metering writes to the ledger (copies the ledger already held included), before
 * the batch is acknowledged: a listener that throws has the batch delivered again, so none is lost.
 * Usage raises it and knows nothing of who listens; the process's context registers billing's
 * spending-limit alerts.
 */
export type UsageRecordedListener = (events: readonly UsageEvent[]) => Promise<unknown>;

/** What metering works with: the ledger, its configuration, its metrics and log, and the listener it tells. */
export interface MeteringDeps {
  db: Db;
  log: Logger;
  metrics: { metering: MeteringMetrics };
  config: Pick<Config, 'redis'>;
  onUsageRecorded: UsageRecordedListener;
}

/**
 * Drains up to `count` usage events of one stream into the ledger: first this consumer's own
 * unacknowledged entries, then entries a dead consumer left behind, then new ones (waiting up to
 * `blockMs`). Inserted with ON CONFLICT DO NOTHING, then acknowledged and deleted, so a crash at
 * any point re-delivers and never double counts. Before the acknowledgement the batch's listener
 * runs (onUsageRecorded): a failure there re-delivers the batch too.
 */
async function drainStream(
  app: MeteringDeps,
  redis: RedisClient,
  key: string,
  opts: DrainOptions,
  pass: Pass,
): Promise<number> {
  const consumer = opts.consumer ?? `${hostname()}-${process.pid}`;
  const count = opts.count ?? 500;

  // This consumer's own entries that a failed batch left unacknowledged come first (a Postgres
  // outage): they are retried at once when Postgres answers, not after the reclaim wait.
  const own = (await (redis.xreadgroup as (...a: (string | number)[]) => Promise<unknown>)(
    'GROUP',
    METERING_GROUP,
    consumer,
    'COUNT',
    count,
    'STREAMS',
    key,
    '0',
  )) as [string, Entries][] | null;
  let entries: Entries = (own?.[0]?.[1] ?? []).filter(([, fields]) => fields !== null);
  if (entries.length === 0) {
    const claimed = (await redis.xautoclaim(key, METERING_GROUP, consumer, RECLAIM_IDLE_MS, '0-0', 'COUNT', count)) as [
      string,
      Entries,
      string[]?,
    ];
    entries = claimed[1] ?? [];
  }
  if (entries.length === 0) {
    const args: (string | number)[] = ['GROUP', METERING_GROUP, consumer, 'COUNT', count];
    if (opts.blockMs !== undefined) args.push('BLOCK', opts.blockMs);
    args.push('STREAMS', key, '>');
    const reply = (await (redis.xreadgroup as (...a: (string | number)[]) => Promise<unknown>)(...args)) as
      [string, Entries][] | null;
    entries = reply?.[0]?.[1] ?? [];
  }
  if (entries.length === 0) return 0;
  const oldestMs = Number(entries[0]![0].split('-')[0]);
  pass.oldestMs = Math.min(pass.oldestMs ?? oldestMs, oldestMs);
  const events: UsageEvent[] = [];
  for (const [, fields] of entries) {
    const e = parseUsageEntry(fields);
    if (e) events.push(e);
    else app.log.error({ fields }, 'unreadable usage entry; dropping it');
  }
  const inserted = await insertUsageEvents(app.db, events);
  await app.onUsageRecorded(events);
  const ids = entries.map(([id]) => id);
  await redis
    .multi()
    .xack(key, METERING_GROUP, ...ids)
    .xdel(key, ...ids)
    .exec();
  countLedgerRows(app.metrics.metering, inserted);
  return entries.length;
}

/**
 * Writes one request's usage straight to the ledger, for a worker that could not reach the usage
 * stream in time. The ledger is keyed by request id, so a later copy from the stream is dropped.
 */
export async function recordUsageDirectly(
  app: Pick<MeteringDeps, 'db' | 'metrics' | 'onUsageRecorded'>,
  usage: UsageEvent,
): Promise<void> {
  countLedgerRows(app.metrics.metering, await insertUsageEvents(app.db, [usage]));
  await app.onUsageRecorded([usage]);
}

/** Rows new to the ledger, and what they cost at catalog prices. */
function countLedgerRows(m: MeteringMetrics, inserted: UsageEvent[]): void {
  m.recorded.inc(inserted.length);
  // The ledger's cost_usd, which is the catalog price on either tier (requestCostUsd answers what
  // is billed, nothing on the free tier): the free tier's is what it gives away.
  for (const e of inserted)
    m.costUsd.inc({ tier: e.tier, model: e.model }, Number(requestCostUsd({ ...e, tier: 'paid' })));
}

/** Drains until no stream has anything new (for invoices and tests). */
export async function flushUsage(
  app: MeteringDeps & { redis: RedisClient },
  redis: RedisClient = app.redis,
): Promise<number> {
  await ensureMeteringGroups(redis, app.config);
  let total = 0;
  for (;;) {
    const n = await drainUsageOnce(app, redis);
    total += n;
    if (n === 0) return total;
  }
}
