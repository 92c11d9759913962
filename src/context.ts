import { KeyLastUsed } from './accounts/key-last-used.js';
import type { Config } from './config.js';
import { type Clock, ManualClock, systemClock } from './clock.js';
import { createLogger, type Logger } from './logger.js';
import { createMetrics, type Metrics } from './metrics.js';
import { createDb, type Db } from './infra/db.js';
import { createRedis, whenReady, type RedisRole, type RedisClient } from './infra/redis.js';
import { completionShards, createQueue, type Queue, type QueueRef } from './infra/queues.js';
import { createStripe, type Stripe } from './infra/stripe.js';
import { StripePacer } from './infra/stripe-pacing.js';
import { OutageLog } from './infra/outage.js';
import { traceLogFields } from './infra/tracing.js';
import { AppError } from './errors.js';
import { catalogFile, loadCatalog, type Catalog } from './catalog/catalog.js';
import { ProviderRegistry } from './providers/registry.js';
import { ComputePool } from './providers/compute-pool.js';
import { Limiter } from './limits/limiter.service.js';
import { SignupLimits } from './accounts/signup-limits.js';
import { AbuseBudget } from './limits/abuse-budget.service.js';
import { StripeGuards } from './subscriptions/stripe-guards.service.js';
import { ApiKeyCache } from './accounts/api-key-cache.js';
import { createJwtVerifier, type JwtVerifier } from './accounts/jwt.js';
import { RelayHub } from './chat/relay/hub.js';
import { RelayLogTails } from './chat/relay/log-tail.js';
import { Dispatcher } from './chat/request/dispatch.service.js';
import type { CompletionJob } from './chat/relay/completion-job.js';
import type { UsageRecordedListener } from './usage/metering.service.js';
import { queueReachedSpendAlerts } from './billing/spend-alerts.service.js';

export interface ContextOptions {
  role: string;
  clock?: Clock;
  logger?: Logger;
}

/**
 * The one place a process's parts are built, each once, and torn down in close(). Features never
 * see this class: each function declares the narrow inputs it uses (a database handle, a Redis
 * client, a config section, a part built here), and the edges (the web tier, the workers, the
 * scripts) hand them over from here. Parts a role does not use (a subscriber, a queue, the relay
 * hub) are built on first use, so web, worker and scheduler share one context type without
 * opening connections they never use.
 */
export class AppContext {
  readonly log: Logger;
  readonly metrics: Metrics;
  readonly clock: Clock;
  readonly db: Db;
  /** Fail-fast command connection for request paths (limits, health, publishing). */
  readonly redis: RedisClient;
  /** One warning when a dependency goes and one when it returns, instead of one per failed call. */
  readonly outages: { redis: OutageLog; postgres: OutageLog };
  readonly apiKeyCache = new ApiKeyCache();
  readonly keyLastUsed = new KeyLastUsed();
  readonly limiter: Limiter;
  /** Usage metered into the ledger: billing queues the spending-limit alerts it reaches. */
  readonly onUsageRecorded: UsageRecordedListener = (events) => queueReachedSpendAlerts(this, events);
  private readonly connections = new Map<string, RedisClient>();
  private readonly queues = new Map<string, Queue>();
  private readonly closers: (() => Promise<unknown>)[] = [];
  private closed = false;
  private built: {
    catalog?: Catalog;
    providers?: ProviderRegistry;
    compute?: ComputePool;
    signupLimits?: SignupLimits;
    signInLimits?: SignupLimits;
    stripeGuards?: StripeGuards;
    abuseBudget?: AbuseBudget;
    jwtVerifier?: JwtVerifier;
    relayHub?: RelayHub;
    relayLogTails?: RelayLogTails;
    dispatcher?: Dispatcher;
    stripe?: Stripe | null;
  } = {};

  constructor(
    readonly config: Config,
    readonly opts: ContextOptions,
  ) {
    this.log = opts.logger ?? createLogger(config, opts.role, traceLogFields);
    this.metrics = createMetrics(opts.role);
    // A setting, exported so that an alert can compare the queue's depth with its bound.
    this.metrics.dispatch.maxDepth.set(config.queue.maxDepth);
    this.clock = opts.clock ?? (config.faults.clockAt ? new ManualClock(config.faults.clockAt) : systemClock);
    this.db = createDb(config);
    this.redis = createRedis(config, 'command');
    this.outages = { redis: new OutageLog(this.log, 'Redis'), postgres: new OutageLog(this.log, 'Postgres') };
    this.redis.on('ready', () => this.outages.redis.recovered());
    // A restarted Redis has forgotten the account versions the cache relies on.
    this.redis.on('close', () => this.apiKeyCache.clear());
    this.limiter = new Limiter({
      redis: this.redis,
      db: this.db,
      clock: this.clock,
      config,
      metrics: this.metrics,
      outages: this.outages,
    });
  }

  get role(): string {
    return this.opts.role;
  }

  /** The model catalog, loaded once; an invalid file throws (CatalogError) on first use. */
  get catalog(): Catalog {
    return (this.built.catalog ??= loadCatalog(
      catalogFile(this.config),
      this.config.providers.plugins.map((p) => p.name),
    ));
  }

  /** Loads the catalog now, so a bad file stops start-up instead of the first request. */
  checkCatalog(): void {
    void this.catalog;
  }

  get providers(): ProviderRegistry {
    return (this.built.providers ??= new ProviderRegistry(this.config, this.compute, this.clock));
  }

  /** The process's compute threads (COMPUTE_THREADS), started by their first task: none in a web process. */
  get compute(): ComputePool {
    return (this.built.compute ??= this.closing(
      new ComputePool({
        ...this.config.compute,
        onError: (err) => this.log.error({ err }, 'a compute thread failed'),
      }),
      (pool) => pool.close(),
    ));
  }

  get signupLimits(): SignupLimits {
    return (this.built.signupLimits ??= new SignupLimits({
      redis: this.redis,
      clock: this.clock,
      config: this.config,
      outages: this.outages,
    }));
  }

  /** Console sign-in links asked for, limited as sign-up is (with counters and limits of their own). */
  get signInLimits(): SignupLimits {
    return (this.built.signInLimits ??= new SignupLimits(
      { redis: this.redis, clock: this.clock, config: this.config, outages: this.outages },
      'sign-in',
    ));
  }

  /** Limits on the checkout returns and caps on an account's open setup intents and card-change sessions. */
  get stripeGuards(): StripeGuards {
    return (this.built.stripeGuards ??= new StripeGuards({
      redis: this.redis,
      clock: this.clock,
      config: this.config,
      outages: this.outages,
    }));
  }

  /** Every request counted per account and per client network before its body is read (web processes). */
  get abuseBudget(): AbuseBudget {
    return (this.built.abuseBudget ??= new AbuseBudget({
      redis: this.redis,
      config: this.config,
      metrics: this.metrics,
    }));
  }

  get jwtVerifier(): JwtVerifier {
    return (this.built.jwtVerifier ??= createJwtVerifier(this.config, this.clock));
  }

  /** The web process's end of the relay (one subscriber connection, its liveness key). */
  get relayHub(): RelayHub {
    return (this.built.relayHub ??= this.closing(
      new RelayHub({
        redis: this.redis,
        subscriber: this.redisConnection('subscriber', 'relay-subscriber'),
        config: this.config,
        metrics: this.metrics.dispatch,
      }),
      (hub) => hub.stop(),
    ));
  }

  /**
   * The relay logs this web process follows live for resumed streams: one blocking reader, on a
   * connection of its own, per log followed.
   */
  get relayLogTails(): RelayLogTails {
    return (this.built.relayLogTails ??= this.closing(
      new RelayLogTails({
        openBlocking: () => {
          this.assertOpen('relay log tail');
          return createRedis(this.config, 'blocking', 'relay-log-tail');
        },
        blockMs: this.config.queue.heartbeatMs,
      }),
      (tails) => Promise.resolve(tails.close()),
    ));
  }

  /** Queues completion jobs and relays what their workers publish (web processes). */
  get dispatcher(): Dispatcher {
    return (this.built.dispatcher ??= this.closing(
      new Dispatcher({
        redis: this.redis,
        queues: this.completionQueues,
        hub: this.relayHub,
        limiter: this.limiter,
        metrics: this.metrics.dispatch,
        config: this.config,
      }),
      (d) => Promise.resolve(d.stop()),
    ));
  }

  /**
   * The process's one Stripe client. Without STRIPE_SECRET_KEY every Stripe-bound operation
   * answers 503 with this message, while the rest of the service keeps working.
   */
  get stripe(): Stripe {
    if (this.built.stripe === undefined)
      this.built.stripe =
        createStripe(this.config, {
          // A web request waits a bounded time for its turn; workers wait as long as it takes.
          pacer: new StripePacer(
            this.redis,
            this.config,
            this.role === 'web' ? this.config.stripe.paceMaxWaitMs : undefined,
          ),
          metrics: this.metrics.stripe,
        }) ?? null;
    if (this.built.stripe === null) {
      throw new AppError(
        'unavailable',
        'Billing is not configured on this server (STRIPE_SECRET_KEY is not set), so this operation cannot reach the payment processor.',
        {
          code: 'billing_not_configured',
        },
      );
    }
    return this.built.stripe;
  }

  /** A further Redis connection of the given role, one per name (for example one shared subscriber per process). */
  redisConnection(role: RedisRole, name: string = role): RedisClient {
    let r = this.connections.get(name);
    if (!r) {
      this.assertOpen(name);
      r = this.closing(createRedis(this.config, role, name), (c) => c.quit().catch(() => c.disconnect()));
      this.connections.set(name, r);
    }
    return r;
  }

  /** The completion queue's shards (REDIS_SHARDS), in shard order. */
  get completionQueues(): Queue<CompletionJob>[] {
    return completionShards(this.config).map((shard) => this.queue<CompletionJob>(shard));
  }

  /** The one queue factory's queue (or queue shard), on the process's producer connection. */
  queue<T = unknown>(ref: QueueRef): Queue<T> {
    const key = typeof ref === 'string' ? ref : `${ref.name}#${ref.shard}`;
    let q = this.queues.get(key);
    if (!q) {
      this.assertOpen(key);
      q = this.closing(createQueue<T>(this.config, ref, this.redisConnection('queue-producer')) as Queue, (x) =>
        x.close(),
      );
      this.queues.set(key, q);
    }
    return q as Queue<T>;
  }

  /**
   * Waits (bounded) until the given Redis connections are ready. Fail-fast connections refuse
   * commands while connecting, so a process warms them before it takes traffic; if Redis is down
   * it starts anyway and /health says so.
   */
  async warmUp(connections: RedisClient[], timeoutMs = 5000): Promise<boolean> {
    let timer: NodeJS.Timeout | undefined;
    const ready = Promise.all(connections.map(whenReady)).then(() => true);
    const timeout = new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(false), timeoutMs)));
    const ok = await Promise.race([ready, timeout]);
    clearTimeout(timer);
    if (!ok) this.log.warn('Redis is not reachable yet; starting anyway (health reports it)');
    return ok;
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

  private closing<T>(part: T, close: (part: T) => Promise<unknown>): T {
    this.closers.push(() => close(part));
    return part;
  }

  private assertOpen(what: string): void {
    if (this.closed) throw new Error(`context closed; cannot create ${what}`);
  }
}

export function createContext(config: Config, opts: ContextOptions): AppContext {
  return new AppContext(config, opts);
}
