import type { Clock } from '../clock.js';
import type { HealthReport } from './health.service.js';

// /health is open to anyone, so what it costs and what it tells are bounded: one round of checks
// per second per process however many ask (the round's report answers every request until it is
// a second old, and requests that arrive while a round runs wait for it), and only an operator
// sees the checks themselves: their error text names hosts and ports, and `info` the model backend.

/** How long one round of checks answers /health. */
export const HEALTH_CACHE_MS = 1000;

/** Why /health is down, in a word, for anyone: the first dependency down, in the order they are checked. */
export type HealthReason =
  'postgres_unreachable' | 'redis_unreachable' | 'queue_unreachable' | 'no_live_worker' | 'workers_lagging';

export const HEALTH_REASONS: readonly HealthReason[] = [
  'postgres_unreachable',
  'redis_unreachable',
  'queue_unreachable',
  'no_live_worker',
  'workers_lagging',
];

/** What anyone is told: up, or down and why. */
export interface PublicHealth {
  status: HealthReport['status'];
  reason?: HealthReason;
}

export function publicHealth(report: HealthReport): PublicHealth {
  const first = report.down[0];
  if (report.status === 'ok' || first === undefined) return { status: report.status };
  return { status: report.status, reason: reasonOf(report, first) };
}

/**
 * Whether this web process can serve, for a load balancer's or Kubernetes' readiness probe: its own
 * dependencies (Postgres, Redis, the queue) answer. The workers are the fleet's concern, not this
 * process's: without one it still answers every request, a completion with 503 no_worker_available
 * in the API's own error envelope, which taking it out of rotation would replace with the proxy's.
 */
export function readiness(report: HealthReport): PublicHealth {
  const first = report.down.find((name) => name !== 'workers');
  if (first === undefined) return { status: 'ok' };
  return { status: 'unavailable', reason: reasonOf(report, first) };
}

function reasonOf(report: HealthReport, down: string): HealthReason {
  switch (down) {
    case 'postgres':
      return 'postgres_unreachable';
    case 'redis':
      return 'redis_unreachable';
    case 'queue':
      return 'queue_unreachable';
    default:
      return report.checks.workers.live === 0 ? 'no_live_worker' : 'workers_lagging';
  }
}

/**
 * One process's latest round of checks, shared by every request within HEALTH_CACHE_MS of its start
 * by the process's clock (a clock stopped with TEST_CLOCK_AT keeps the first round's report).
 */
export class HealthCache {
  private latest: { startedAt: number; report: HealthReport } | undefined;
  private running: Promise<HealthReport> | undefined;

  constructor(private readonly clock: Clock) {}

  read(check: () => Promise<HealthReport>): Promise<HealthReport> {
    const now = this.clock.now().getTime();
    const age = this.latest === undefined ? Infinity : now - this.latest.startedAt;
    // A clock set back (a negative age) starts a new round rather than keep an old report longer.
    if (this.latest && age < HEALTH_CACHE_MS && age >= 0) return Promise.resolve(this.latest.report);
    this.running ??= check()
      .then((report) => {
        this.latest = { startedAt: now, report };
        return report;
      })
      .finally(() => {
        this.running = undefined;
      });
    return this.running;
  }
}
