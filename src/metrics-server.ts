import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { AppContext } from './context.js';
import type { BackgroundService } from './lifecycle.js';

/** The path a worker's or scheduler's liveness probe asks, as the web tier's. */
export const LIVENESS_PATH = '/health/live';

/**
 * Workers and the scheduler have no web tier: with WORKER_METRICS_PORT or SCHEDULER_METRICS_PORT
 * set, the process serves its Prometheus registry at GET /metrics on that port, for scraping, and
 * answers GET /health/live while its event loop turns.
 */
export async function startMetricsServer(app: AppContext, port: number): Promise<BackgroundService & { url: string }> {
  const registry = app.metrics.registry;
  const server = http.createServer((req, res) => {
    const route = (req.url ?? '').split('?')[0];
    // Liveness for the container runtime (Kubernetes' livenessProbe): this event loop answers.
    if (req.method === 'GET' && route === LIVENESS_PATH) {
      res.writeHead(200, { 'content-type': 'application/json', 'cache-control': 'no-store' }).end('{"status":"ok"}');
      return;
    }
    if (req.method !== 'GET' || route !== '/metrics') {
      res.writeHead(404, { 'content-type': 'text/plain' }).end('not found\n');
      return;
    }
    registry.metrics().then(
      (text) => res.writeHead(200, { 'content-type': registry.contentType }).end(text),
      (err: unknown) => res.writeHead(500, { 'content-type': 'text/plain' }).end(`${String(err)}\n`),
    );
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, app.config.http.host, () => resolve());
  });
  const url = `http://${app.config.http.host}:${(server.address() as AddressInfo).port}/metrics`;
  app.log.info({ url }, `${app.role} metrics listening`);
  return {
    name: 'metrics-server',
    url,
    stop: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
