import type { RedisClient } from '../infra/redis.js';
import type { Config } from '../config.js';
import type { Db } from '../infra/db.js';
import type { Queue } from '../infra/queues.js';
import { pingDatabase } from './health.repository.js';
import { readFleet } from '../chat/relay/liveness.js';

export type CheckStatus = 'ok' | 'down';

export interface HealthReport {
  status: 'ok' | 'unavailable';
  checks: {
    postgres: { status: CheckStatus; latency_ms?: number; error?: string };
    redis: { status: CheckStatus; latency_ms?: number; error?: string };
    queue: {
      status: CheckStatus;
      waiting?: number;
      active?: number;
      workers?: number;
      capacity?: number;
      error?: string;
    };
    /** Whether a live completion worker is registered whose event loop keeps up. */
    workers: { status: CheckStatus; live?: number; least_lag_ms?: number; max_lag_ms: number; error?: string };
  };
  down: string[];
  /** Extra facts other features add (for example which model backend serves completions). */
  info: Record<string, unknown>;
}

const CHECK_TIMEOUT_MS = 1500;

async function timed<T>(fn: () => Promise<T>): Promise<{ value: T; ms: number }> {
  const start = performance.now();
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no answer within ${CHECK_TIMEOUT_MS} ms`)), CHECK_TIMEOUT_MS);
  });
  try {
    const value = await Promise.race([fn(), timeout]);
    return { value, ms: Math.round((performance.now() - start) * 10) / 10 };
  } finally {
    clearTimeout(timer);
  }
}

const message = (err: unknown): string => (err instanceof Error ? err.message : String(err)) || 'unreachable';

/** Each dependency is checked with a short timeout, in parallel, so /health itself never hangs. */
/** What /health checks: Postgres, Redis and the completion queue with its workers. */
export interface HealthDeps {
  db: Db;
  redis: RedisClient;
  completionQueues: Queue[];
  config: Pick<Config, 'redis' | 'lifecycle'>;
}

/** Resolves once the database answers a query; rejects when it cannot be reached. */
export async function databaseAnswers(db: Db): Promise<void> {
  await pingDatabase(db);
}

export async function checkHealth(app: HealthDeps, info: Record<string, unknown> = {}): Promise<HealthReport> {
  const [pg, redis, queue] = await Promise.allSettled([
    timed(() => pingDatabase(app.db)),
    timed(() => app.redis.ping()),
    timed(async () => {
      const [counts, fleet] = await Promise.all([
        Promise.all(app.completionQueues.map((q) => q.getJobCounts('waiting', 'active'))),
        readFleet(app.redis, app.config.redis.prefix, Date.now()),
      ]);
      const sum = (state: 'waiting' | 'active') => counts.reduce((n, c) => n + (c[state] ?? 0), 0);
      return {
        counts: { waiting: sum('waiting'), active: sum('active'), workers: fleet.workers, capacity: fleet.concurrency },
        leastLagMs: fleet.leastLagMs,
      };
    }),
  ]);
  const maxLagMs = app.config.lifecycle.healthMaxLagMs;
  const report: HealthReport = {
    status: 'ok',
    checks: {
      postgres:
        pg.status === 'fulfilled'
          ? { status: 'ok', latency_ms: pg.value.ms }
          : { status: 'down', error: message(pg.reason) },
      redis:
        redis.status === 'fulfilled'
          ? { status: 'ok', latency_ms: redis.value.ms }
          : { status: 'down', error: message(redis.reason) },
      queue:
        queue.status === 'fulfilled'
          ? { status: 'ok', ...queue.value.value.counts }
          : { status: 'down', error: message(queue.reason) },
      workers:
        queue.status === 'fulfilled'
          ? workersCheck(queue.value.value.counts.workers, queue.value.value.leastLagMs, maxLagMs)
          : { status: 'down', max_lag_ms: maxLagMs, error: 'the workers registry could not be read' },
    },
    down: [],
    info,
  };
  for (const [name, check] of Object.entries(report.checks)) if (check.status === 'down') report.down.push(name);
  if (report.down.length > 0) report.status = 'unavailable';
  return report;
}

/**
 * Down when no completion can be answered: no live worker is registered (each renews its entry four
 * times per LIVENESS_TTL_MS, so a worker whose event loop is blocked drops out within one TTL), or
 * every live worker's event loop lags past HEALTH_MAX_EVENT_LOOP_LAG_MS.
 */
function workersCheck(
  live: number,
  leastLagMs: number | undefined,
  maxLagMs: number,
): HealthReport['checks']['workers'] {
  if (live === 0)
    return {
      status: 'down',
      live,
      max_lag_ms: maxLagMs,
      error: 'no live completion worker is registered: completions answer 503 no_worker_available',
    };
  const lag = leastLagMs ?? 0;
  if (lag > maxLagMs)
    return {
      status: 'down',
      live,
      least_lag_ms: lag,
      max_lag_ms: maxLagMs,
      error: `every live worker's event loop lags past ${maxLagMs} ms (the least: ${lag} ms)`,
    };
  return { status: 'ok', live, least_lag_ms: lag, max_lag_ms: maxLagMs };
}
