import { monitorEventLoopDelay } from 'node:perf_hooks';
import client from 'prom-client';

// Every metric the service exports, declared here and nowhere else. Each process builds one
// registry (not prom-client's global one), so several apps in one test process never collide.
// Every family is registered in every process: a counter a role never moves stays at zero.

function httpMetrics(registers: client.Registry[]) {
  return {
    requests: new client.Counter({
      name: 'http_requests_total',
      help: 'HTTP requests by method, route and status',
      labelNames: ['method', 'route', 'status'] as const,
      registers,
    }),
    duration: new client.Histogram({
      name: 'http_request_duration_seconds',
      help: 'HTTP request duration until the response is finished (for streams, until the stream ends)',
      labelNames: ['method', 'route', 'status'] as const,
      buckets: [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120],
      registers,
    }),
    bodyBytesInFlight: new client.Gauge({
      name: 'http_request_body_bytes_in_flight',
      help: 'Decompressed bytes of the request bodies this process is reading or holding now (bounded by HTTP_BODY_BYTES_IN_FLIGHT)',
      registers,
    }),
    bodyRefusals: new client.Counter({
      name: 'http_request_body_refusals_total',
      help: 'Request bodies refused before they were parsed, by route and reason (too_large, inflate_ratio, busy)',
      labelNames: ['route', 'reason'] as const,
      registers,
    }),
    bodyRefusedBytes: new client.Counter({
      name: 'http_request_body_refused_bytes_total',
      help: 'Bytes of the refused request bodies read (decompressed) before the refusal, by route and reason: how far a refused body got',
      labelNames: ['route', 'reason'] as const,
      registers,
    }),
    bodyParsedBytes: new client.Counter({
      name: 'http_request_body_parsed_bytes_total',
      help: 'Bytes of request bodies parsed as JSON, by route',
      labelNames: ['route'] as const,
      registers,
    }),
  };
}

/** Why a web process refuses a completion before it runs. */
export const DISPATCH_REJECTIONS = ['queue_full', 'overloaded', 'no_worker', 'queue_unavailable'] as const;

function dispatchMetrics(registers: client.Registry[]) {
  const rejected = new client.Counter({
    name: 'completion_dispatch_rejected_total',
    help: 'Completion requests refused before running, by reason (queue_full, overloaded, no_worker, queue_unavailable)',
    labelNames: ['reason'] as const,
    registers,
  });
  // Present at zero from the start, so that increase() counts a process's first refusal too.
  for (const reason of DISPATCH_REJECTIONS) rejected.inc({ reason }, 0);
  return {
    rejected,
    depth: new client.Gauge({
      name: 'completion_queue_waiting',
      help: 'Jobs waiting for a worker, as last seen by this web process',
      registers,
    }),
    maxDepth: new client.Gauge({
      name: 'completion_queue_max_depth',
      help: 'QUEUE_MAX_DEPTH: the waiting jobs beyond which web processes refuse completions with 503 queue_full',
      registers,
    }),
    clientTtft: new client.Histogram({
      name: 'completion_client_ttft_seconds',
      help: "Time from a streamed completion request's arrival at the web process to the first events of its answer written to the client (admission, queue, worker, upstream and relay), by catalog model",
      labelNames: ['model'] as const,
      buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30],
      registers,
    }),
    relaying: new client.Gauge({
      name: 'completion_requests_relaying',
      help: 'Completion requests this web process is waiting on or streaming now (each holds a client connection)',
      registers,
    }),
  };
}

function limiterMetrics(registers: client.Registry[]) {
  return {
    rejections: new client.Counter({
      name: 'rate_limit_rejections_total',
      help: 'Chat completion requests refused by the rate limiter, by reason (requests, tokens or spend) and tier',
      labelNames: ['reason', 'tier'] as const,
      registers,
    }),
    unavailable: new client.Counter({
      name: 'rate_limiter_unavailable_total',
      help: 'Limiter calls refused with 503 because Redis could not be reached',
      registers,
    }),
    abuseBudgetRefusals: new client.Counter({
      name: 'abuse_budget_refusals_total',
      help: 'Requests refused by an abuse budget before their body was read, by whose budget (free, paid, client) and what ran out (requests, bytes)',
      labelNames: ['budget', 'spent'] as const,
      registers,
    }),
  };
}

/** What a worker's completion jobs do, for operators scaling workers. */
function completionMetrics(registers: client.Registry[]) {
  return {
    active: new client.Gauge({
      name: 'completion_jobs_active',
      help: 'Completion jobs this worker is running now',
      registers,
    }),
    started: new client.Counter({
      name: 'completion_jobs_started_total',
      help: 'Completion jobs this worker has started',
      registers,
    }),
    finished: new client.Counter({
      name: 'completion_jobs_finished_total',
      help: "Completion jobs ended, by outcome: completed, cancelled, failed, interrupted (a re-run ended a dead worker's stream), declined (another live worker holds it), expired (handed out again long after its request ended)",
      labelNames: ['outcome'] as const,
      registers,
    }),
    cancellations: new client.Counter({
      name: 'completion_cancellations_total',
      help: 'Jobs stopped before their end, by cause: client_cancelled (the client went away), client_gone (its web process died), resume_grace_expired (a resumable stream with no reader for RESUME_GRACE_SECONDS), relay_backlog (Redis unreachable too long)',
      labelNames: ['cause'] as const,
      registers,
    }),
    queueWait: new client.Histogram({
      name: 'completion_queue_wait_seconds',
      help: 'Time a completion job waited in the queue, from its request being queued to a worker starting it (first runs only)',
      buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
      registers,
    }),
    upstreamTtft: new client.Histogram({
      name: 'completion_upstream_ttft_seconds',
      help: 'Time from sending the upstream request to its first token, by provider and catalog model',
      labelNames: ['provider', 'model'] as const,
      buckets: [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30],
      registers,
    }),
    upstreamTokensPerSecond: new client.Histogram({
      name: 'completion_upstream_tokens_per_second',
      help: 'Completion tokens per second after the first token, by provider and catalog model',
      labelNames: ['provider', 'model'] as const,
      buckets: [5, 10, 20, 40, 80, 160, 320, 640, 1280],
      registers,
    }),
    relayPublishFailures: new client.Counter({
      name: 'relay_publish_failures_total',
      help: 'Relay batches Redis did not take (kept and sent again once it answers)',
      registers,
    }),
  };
}

function meteringMetrics(registers: client.Registry[]) {
  return {
    recorded: new client.Counter({
      name: 'usage_events_recorded_total',
      help: 'Usage events written to the ledger (duplicates excluded)',
      registers,
    }),
    lag: new client.Gauge({
      name: 'usage_metering_lag_seconds',
      help: 'Age of the oldest usage event in the last batch metering read, written or not (0 when the streams are empty): it grows while the ledger cannot be written',
      registers,
    }),
    costUsd: new client.Counter({
      name: 'usage_cost_usd_total',
      help: 'Cost at catalog prices of the usage written to the ledger, in USD, by tier and model (only the paid tier is invoiced)',
      labelNames: ['tier', 'model'] as const,
      registers,
    }),
  };
}

function schedulerMetrics(registers: client.Registry[]) {
  return {
    enqueued: new client.Counter({
      name: 'scheduler_jobs_enqueued_total',
      help: 'Due job periods the scheduler handed to the workers, by job (a period already queued is not queued twice)',
      labelNames: ['job'] as const,
      registers,
    }),
    runs: new client.Counter({
      name: 'scheduler_job_runs_total',
      help: 'Scheduled job attempts by job and outcome (succeeded, failed, busy: another replica holds it, already_done)',
      labelNames: ['job', 'outcome'] as const,
      registers,
    }),
    lastSuccess: new client.Gauge({
      name: 'scheduler_job_last_success_timestamp_seconds',
      help: 'When each job last finished successfully (alert when it is too old)',
      labelNames: ['job'] as const,
      registers,
    }),
  };
}

function billingMetrics(registers: client.Registry[]) {
  return {
    invoicesCreated: new client.Counter({
      name: 'billing_invoices_created_total',
      help: 'Invoices issued in Stripe (finalized and sent), by kind (monthly, on_demand)',
      labelNames: ['kind'] as const,
      registers,
    }),
    invoicedCents: new client.Counter({
      name: 'billing_invoiced_amount_cents_total',
      help: 'Sum of issued invoice totals in minor units (cents), by kind',
      labelNames: ['kind'] as const,
      registers,
    }),
    invoiceFailures: new client.Counter({
      name: 'billing_invoice_failures_total',
      help: 'Accounts whose invoicing failed in a run (retried by the next run; nothing is billed twice)',
      registers,
    }),
    stripeRateLimited: new client.Counter({
      name: 'billing_stripe_rate_limited_total',
      help: 'Account invoicing jobs that met a Stripe 429 and paused the invoicing queue (the job is retried)',
      registers,
    }),
    reconciliationFixes: new client.Counter({
      name: 'billing_reconciliation_fixes_total',
      help: "Drift between an account and Stripe's subscription state repaired by reconciliation, by what was fixed",
      labelNames: ['fix'] as const,
      registers,
    }),
    reconciliationFailures: new client.Counter({
      name: 'billing_reconciliation_failures_total',
      help: 'Accounts reconciliation could not check (Stripe error, unknown customer)',
      registers,
    }),
    totalsRepairs: new client.Counter({
      name: 'billing_usage_totals_repairs_total',
      help: 'Usage totals (monthly or daily) found different from the ledger and rebuilt by the rollup audit',
      registers,
    }),
  };
}

/** Stripe's answers, whatever call made them: failures there stop upgrades and invoices alike. */
function stripeMetrics(registers: client.Registry[]) {
  return {
    requests: new client.Counter({
      name: 'stripe_requests_total',
      help: "HTTP requests to Stripe's API (each attempt, retries included), by the answer's status code, or unreachable when none came (refused, reset, timed out)",
      labelNames: ['status'] as const,
      registers,
    }),
  };
}

function emailMetrics(registers: client.Registry[]) {
  return {
    sends: new client.Counter({
      name: 'email_sends_total',
      help: 'Email send attempts by transport (postmark, dev-outbox) and outcome: sent, retry (failed, tried again later), failed (given up)',
      labelNames: ['transport', 'outcome'] as const,
      registers,
    }),
  };
}

export function createMetrics(role: string) {
  const registry = new client.Registry();
  registry.setDefaultLabels({ role });
  // The event-loop lag monitor samples every eventLoopMonitoringPrecision ms; prom-client's 10 ms
  // woke every idle process about 200 times a second (2% of a core each on this kind of VM).
  // 100 ms still catches any stall worth an alert.
  client.collectDefaultMetrics({ register: registry, eventLoopMonitoringPrecision: 100 });
  const registers = [registry];
  return {
    registry,
    http: httpMetrics(registers),
    dispatch: dispatchMetrics(registers),
    limiter: limiterMetrics(registers),
    completion: completionMetrics(registers),
    metering: meteringMetrics(registers),
    scheduler: schedulerMetrics(registers),
    billing: billingMetrics(registers),
    stripe: stripeMetrics(registers),
    email: emailMetrics(registers),
  };
}

export type Metrics = ReturnType<typeof createMetrics>;
export type CompletionMetrics = Metrics['completion'];
export type BillingMetrics = Metrics['billing'];
export type SchedulerMetrics = Metrics['scheduler'];
export type MeteringMetrics = Metrics['metering'];
export type LimiterMetrics = Metrics['limiter'];
export type DispatchMetrics = Metrics['dispatch'];
export type StripeMetrics = Metrics['stripe'];
export type EmailMetrics = Metrics['email'];

/**
 * The event loop's worst delay since the last reading, in ms, sampled every `resolutionMs`: what a
 * worker publishes with its presence, so /health sees a worker that is alive but too slow to serve.
 * (The per-role series on /metrics come from prom-client's own monitor, reset at each scrape.)
 */
export function eventLoopLag(resolutionMs = 100): { takeMaxMs(): number; stop(): void } {
  const histogram = monitorEventLoopDelay({ resolution: resolutionMs });
  histogram.enable();
  return {
    takeMaxMs() {
      // The histogram counts the sampling interval itself in each delay.
      const max = histogram.count > 0 ? Math.max(0, histogram.max / 1e6 - resolutionMs) : 0;
      histogram.reset();
      return Math.round(max);
    },
    stop: () => histogram.disable(),
  };
}
