import type { RedisClient } from '../infra/redis.js';
import type { Config } from '../config.js';
import type { Db } from '../infra/db.js';
import type { Queue } from '../infra/queues.js';
import { pingDatabase } from './health.repository.js';
import { readFleet } from '../chat/liveness.js';

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
  config: Pick<Config, 'redis'>;
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
      return { waiting: sum('waiting'), active: sum('active'), workers: fleet.workers, capacity: fleet.concurrency };
    }),
  ]);
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
          ? { status: 'ok', ...queue.value.value }
          : { status: 'down', error: message(queue.reason) },
    },
    down: [],
    info,
  };
  for (const [name, check] of Object.entries(report.checks)) if (check.status === 'down') report.down.push(name);
  if (report.down.length > 0) report.status = 'unavailable';
  return report;
}
