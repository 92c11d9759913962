// What a failed call to Postgres or Redis looks like when the server cannot be reached, as
// opposed to a query or command that is wrong. The web edge answers the first kind with 503 and
// Retry-After (a client can come back), never 500.

import { AppError, retryAdvice } from '../errors.js';

const NETWORK_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ETIMEDOUT',
  'EPIPE',
  'ENOTFOUND',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'EAI_AGAIN',
]);

// Postgres SQLSTATEs: class 08 (connection exception), shutting down or starting up, too many connections.
const PG_UNAVAILABLE = /^(08...|57P01|57P02|57P03|53300)$/;

const MESSAGES = [
  // pg
  'Connection terminated',
  'timeout exceeded when trying to connect',
  'Client has encountered a connection error',
  // ioredis
  'Connection is closed',
  "Stream isn't writeable",
  'Reached the max retries per request limit',
  'Command timed out',
  // ioredis on a Redis Cluster, and the cluster itself while a master fails over
  'CLUSTERDOWN',
  'TRYAGAIN',
  'MOVED',
  "Cluster isn't ready",
  'None of startup nodes is available',
  'Failed to refresh slots cache',
  'Too many Cluster redirections',
];

const REDIS_WORDS =
  /Connection is closed|Stream isn't writeable|max retries per request|MaxRetriesPerRequest|Command timed out|CLUSTERDOWN|TRYAGAIN|MOVED|Cluster isn't ready|startup nodes|slots cache|Cluster redirections|EXECABORT/;

/** True when `err` (or its cause) says Postgres or Redis could not be reached. */
export function isDependencyDown(err: unknown, depth = 0): boolean {
  if (!err || typeof err !== 'object' || depth > 3) return false;
  const e = err as { code?: unknown; message?: unknown; name?: unknown; cause?: unknown; errors?: unknown };
  if (typeof e.code === 'string' && (NETWORK_CODES.has(e.code) || PG_UNAVAILABLE.test(e.code))) return true;
  if (e.name === 'MaxRetriesPerRequestError') return true;
  if (typeof e.message === 'string' && MESSAGES.some((m) => (e.message as string).includes(m))) return true;
  // Node's AggregateError (a connect to several addresses) and errors wrapping a cause; a MULTI
  // Redis discarded (EXECABORT) because a queued command met a failover lists those in previousErrors.
  if (Array.isArray(e.errors) && e.errors.some((x) => isDependencyDown(x, depth + 1))) return true;
  const previous = (err as { previousErrors?: unknown }).previousErrors;
  if (Array.isArray(previous) && previous.length > 0 && previous.every((x) => isDependencyDown(x, depth + 1)))
    return true;
  return isDependencyDown(e.cause, depth + 1);
}

/** Which dependency a failure says is out of reach: ioredis reports a lost connection in its own words. */
export function dependencyOf(err: unknown): 'Redis' | 'Postgres' | undefined {
  if (!isDependencyDown(err)) return undefined;
  const e = err as { name?: unknown; message?: unknown };
  const text = `${String(e.name)} ${String(e.message)}`;
  return REDIS_WORDS.test(text) ? 'Redis' : 'Postgres';
}

export interface OutageLogger {
  warn(obj: object, msg: string): void;
}

/**
 * One warning when a dependency stops answering and one when it answers again, with what failed
 * meanwhile counted by source, instead of a line (or a stack) for every failed call: an outage is
 * something to see at a glance, and every process notices it dozens of times a second.
 */
export class OutageLog {
  private since: number | undefined;
  private counts: Record<string, number> = {};
  private lastFailure = 0;
  private settling: NodeJS.Timeout | undefined;

  constructor(
    private readonly log: OutageLogger,
    private readonly dependency: 'Redis' | 'Postgres' | 'OTLP endpoint',
    private readonly now: () => number = () => Date.now(),
    /** A recovery is reported once this long has passed without a failure: other connections reconnect a little later. */
    private readonly settleMs = 2000,
  ) {}

  get down(): boolean {
    return this.since !== undefined;
  }

  /** A call from `source` failed because the dependency is out of reach. */
  failure(source: string, err: unknown): void {
    this.counts[source] = (this.counts[source] ?? 0) + 1;
    this.lastFailure = this.now();
    if (this.since !== undefined) return;
    this.since = this.now();
    this.log.warn(
      { dependency: this.dependency, source, reason: err instanceof Error ? err.message : String(err) },
      `${this.dependency} is unreachable; failures are counted until it answers again`,
    );
  }

  /** The dependency answered: ends the outage, if there was one, with its length and counts. */
  recovered(): void {
    if (this.since === undefined || this.settling) return;
    if (this.settleMs === 0) return this.report();
    const check = () => {
      const quiet = this.now() - this.lastFailure;
      if (quiet >= this.settleMs) {
        this.settling = undefined;
        this.report();
      } else {
        this.settling = setTimeout(check, this.settleMs - quiet);
        this.settling.unref();
      }
    };
    this.settling = setTimeout(check, this.settleMs);
    this.settling.unref();
  }

  private report(): void {
    if (this.since === undefined) return;
    const seconds = Math.round((this.lastFailure - this.since) / 100) / 10;
    this.log.warn(
      { dependency: this.dependency, seconds, failures: this.counts },
      `${this.dependency} answers again after about ${seconds} s of failures`,
    );
    this.since = undefined;
    this.counts = {};
  }
}

/** How long a client is asked to wait before retrying a request that met Postgres or Redis out of reach. */
export const DEPENDENCY_DOWN_RETRY_MS = 5000;

/**
 * The one answer a client gets when Postgres or Redis cannot be reached: 503 service_unavailable
 * with a short Retry-After, never admitting unchecked traffic nor a 500. The failure is counted in
 * the dependency's outage log (by `source`) when one is given. `message` words it for the feature
 * that failed, where the general one would say less.
 */
export function dependencyDown(
  err: unknown,
  outage?: { log: Pick<OutageLog, 'failure'>; source: string },
  message = 'The service is temporarily unavailable. Please retry shortly.',
): AppError {
  outage?.log.failure(outage.source, err);
  return new AppError('unavailable', message, {
    code: 'service_unavailable',
    headers: retryAdvice(DEPENDENCY_DOWN_RETRY_MS),
    cause: err,
  });
}
