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

  return { registry, httpRequests, httpDuration };
}

export type Metrics = ReturnType<typeof createMetrics>;
export { client as promClient };
