import type { Redis } from 'ioredis';
import type { Queue } from 'bullmq';
import type { Config } from './config.js';
import { type Clock, systemClock } from './clock.js';
import { createLogger, type Logger } from './logger.js';
import { createMetrics, type Metrics } from './metrics.js';
import { createDb, type Db } from './infra/db.js';
import { createRedis, type RedisRole } from './infra/redis.js';
import { createQueue } from './infra/queues.js';
import { createStripe, type Stripe } from './infra/stripe.js';
import { AppError } from './errors.js';
import { OutageLog } from './infra/outage.js';

export interface ContextOptions {
  role: string;
  clock?: Clock;
  logger?: Logger;
}

/**
 * Builds every dependency of a process once and tears them all down in close(). Pieces a role
 * does not need (a subscriber, a queue) are created on first use, so web, worker and scheduler
 * share one context type without opening connections they never use.
 */
export class AppContext {
  readonly log: Logger;
  readonly metrics: Metrics;
  readonly clock: Clock;
  readonly db: Db;
  /** Fail-fast command connection for request paths (limits, health, publishing). */
  readonly redis: Redis;
  /** One warning when a dependency goes and one when it returns, instead of one per failed call. */
  readonly outages: { redis: OutageLog; postgres: OutageLog };
  private readonly lazy = new Map<string, unknown>();
  private readonly closers: (() => Promise<unknown>)[] = [];
  private closed = false;

  constructor(readonly config: Config, readonly opts: ContextOptions) {
    this.log = opts.logger ?? createLogger(config, opts.role);
    this.metrics = createMetrics(opts.role);
    this.clock = opts.clock ?? systemClock;
    this.db = createDb(config);
    this.redis = createRedis(config, 'command');
    this.outages = { redis: new OutageLog(this.log, 'Redis'), postgres: new OutageLog(this.log, 'Postgres') };
    this.redis.on('ready', () => this.outages.redis.recovered());
  }

  get role(): string {
    return this.opts.role;
  }

  /** Memoised construction of an optional dependency, closed with the context. */
  once<T>(key: string, make: () => T, close?: (value: T) => Promise<unknown>): T {
    if (this.closed) throw new Error(`context closed; cannot create ${key}`);
    if (!this.lazy.has(key)) {
      const value = make();
      this.lazy.set(key, value);
      if (close) this.closers.push(() => close(value));
    }
    return this.lazy.get(key) as T;
  }

  /** A further Redis connection of the given role (for example one shared subscriber per process). */
  redisConnection(role: RedisRole, name: string = role): Redis {
    return this.once(`redis:${name}`, () => createRedis(this.config, role, name), (r) => r.quit().catch(() => r.disconnect()));
  }

  queue<T = unknown>(name: string): Queue<T> {
    return this.once(`queue:${name}`, () => createQueue<T>(this.config, name, this.redisConnection('queue-producer')), (q) => q.close());
  }

  /**
   * Waits (bounded) until the given Redis connections are ready. Fail-fast connections refuse
   * commands while connecting, so a process warms them before it takes traffic; if Redis is down
   * it starts anyway and /health says so.
   */
  async warmUp(connections: Redis[], timeoutMs = 5000): Promise<boolean> {
    const pending = connections.filter((c) => c.status !== 'ready');
    if (pending.length === 0) return true;
    let timer: NodeJS.Timeout | undefined;
    const ready = Promise.all(pending.map((c) => new Promise<void>((resolve) => c.once('ready', () => resolve())))).then(() => true);
    const timeout = new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(false), timeoutMs)));
    const ok = await Promise.race([ready, timeout]);
    clearTimeout(timer);
    if (!ok) this.log.warn('Redis is not reachable yet; starting anyway (health reports it)');
    return ok;
  }

  /**
   * The process's one Stripe client. Without STRIPE_SECRET_KEY every Stripe-bound operation
   * answers 503 with this message, while the rest of the service keeps working.
   */
  get stripe(): Stripe {
    const client = this.once('stripe', () => createStripe(this.config) ?? null);
    if (client === null) {
      throw new AppError('unavailable', 'Billing is not configured on this server (STRIPE_SECRET_KEY is not set), so this operation cannot reach the payment processor.', {
        code: 'billing_not_configured',
      });
    }
    return client;
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    // Reverse order: things built later depend on things built earlier.
    for (const close of this.closers.reverse()) {
      await close().catch((err) => this.log.warn({ err }, 'error while closing a dependency'));
    }
    await this.redis.quit().catch(() => this.redis.disconnect());
    await this.db.destroy();
  }
}

export function createContext(config: Config, opts: ContextOptions): AppContext {
  return new AppContext(config, opts);
}
