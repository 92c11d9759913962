import client from 'prom-client';

/**
 * Each process builds one registry (not prom-client's global one), so several apps in one test
 * process never collide. Features register what they count here, in one place.
 */
export function createMetrics(role: string) {
  const registry = new client.Registry();
  registry.setDefaultLabels({ role });
  // The event-loop lag monitor samples every eventLoopMonitoringPrecision ms; prom-client's 10 ms
  // woke every idle process about 200 times a second (2% of a core each on this kind of VM).
  // 100 ms still catches any stall worth an alert.
  client.collectDefaultMetrics({ register: registry, eventLoopMonitoringPrecision: 100 });

  const httpRequests = new client.Counter({
    name: 'http_requests_total',
    help: 'HTTP requests by method, route and status',
    labelNames: ['method', 'route', 'status'] as const,
    registers: [registry],
  });
  const httpDuration = new client.Histogram({
    name: 'http_request_duration_seconds',
    help: 'HTTP request duration until the response is finished (for streams, until the stream ends)',
    labelNames: ['method', 'route', 'status'] as const,
    buckets: [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120],
    registers: [registry],
  });

  return { registry, httpRequests, httpDuration, completion: role === 'worker' ? completionMetrics(registry) : undefined };
}

/** What a worker's completion jobs do, for operators scaling workers. */
function completionMetrics(registry: client.Registry) {
  const registers = [registry];
  return {
    active: new client.Gauge({ name: 'completion_jobs_active', help: 'Completion jobs this worker is running now', registers }),
    started: new client.Counter({ name: 'completion_jobs_started_total', help: 'Completion jobs this worker has started', registers }),
    finished: new client.Counter({
      name: 'completion_jobs_finished_total',
      help: 'Completion jobs ended, by outcome: completed, cancelled, failed, interrupted (a re-run ended a dead worker\'s stream), declined (another live worker holds it)',
      labelNames: ['outcome'] as const,
      registers,
    }),
    cancellations: new client.Counter({
      name: 'completion_cancellations_total',
      help: 'Jobs stopped before their end, by cause: client_cancelled (the client went away), client_gone (its web process died), relay_backlog (Redis unreachable too long)',
      labelNames: ['cause'] as const,
      registers,
    }),
    upstreamTtft: new client.Histogram({
      name: 'completion_upstream_ttft_seconds',
      help: 'Time from sending the upstream request to its first token, by provider',
      labelNames: ['provider'] as const,
      buckets: [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30],
      registers,
    }),
    upstreamTokensPerSecond: new client.Histogram({
      name: 'completion_upstream_tokens_per_second',
      help: 'Completion tokens per second after the first token, by provider',
      labelNames: ['provider'] as const,
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

export type CompletionMetrics = ReturnType<typeof completionMetrics>;

export type Metrics = ReturnType<typeof createMetrics>;
export { client as promClient };
