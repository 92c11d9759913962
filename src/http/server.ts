import http from 'node:http';
import type { Socket } from 'node:net';
import type { AppContext } from '../context.js';
import { isMain, runProcess } from '../lifecycle.js';
import { createHttpApp } from './app.js';
import type { RouteSpec } from './route.js';

export interface RunningServer {
  server: http.Server;
  url: string;
  /** Stop accepting and let in-flight requests finish up to the deadline; the caller closes the context. */
  readonly stop: () => Promise<void>;
}

/** Starts the web tier on the configured host and port (PORT=0 picks a free one). */
export async function startWebServer(app: AppContext, routes?: RouteSpec[]): Promise<RunningServer> {
  // A bad model catalog stops start-up here, naming the file and field, not on the first request.
  app.checkCatalog();
  const koa = createHttpApp(app, routes);
  await app.warmUp([app.redis, app.redisConnection('queue-producer')]);
  // The relay's subscription to this process's channel is in place before the first request can be queued.
  await app.relayHub.start();
  const { headersTimeoutMs, requestTimeoutMs } = app.config.http;
  // Node's request timeouts bound only receiving a request (its headers, then its body): a client
  // that declares 1000 bytes and sends 8 is answered 408 and closed, while responses and streams,
  // which can last minutes, are never cut. The checks run a few times per timeout.
  const callback = koa.callback();
  // Koa's handler settles its own errors (onerror); the promise it returns carries nothing.
  const handle: http.RequestListener = (req, res) => void callback(req, res);
  const server = http.createServer(
    {
      headersTimeout: headersTimeoutMs,
      requestTimeout: requestTimeoutMs,
      connectionsCheckingInterval: Math.min(30_000, Math.ceil(headersTimeoutMs / 4)),
    },
    handle,
  );
  // Longer than the 60 s idle timeout of common load balancers, so they close idle connections first.
  server.keepAliveTimeout = 65_000;

  const sockets = new Set<Socket>();
  server.on('connection', (s) => {
    sockets.add(s);
    s.once('close', () => sockets.delete(s));
  });

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(app.config.http.port, app.config.http.host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const addr = server.address();
  const port = typeof addr === 'object' && addr ? addr.port : app.config.http.port;
  const host = app.config.http.host.includes(':') ? `[${app.config.http.host}]` : app.config.http.host;
  const url = `http://${host === '0.0.0.0' || host === '[::]' ? '127.0.0.1' : host}:${port}`;

  let stopping: Promise<void> | undefined;
  const stop = () =>
    (stopping ??= (async () => {
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      // Idle keep-alive sockets would hold close() open; busy ones finish their request first and
      // are closed as soon as they turn idle, not when the client's keep-alive timer fires.
      server.closeIdleConnections();
      const sweep = setInterval(() => server.closeIdleConnections(), 50);
      const deadline = new Promise<void>((resolve) => setTimeout(resolve, app.config.http.shutdownTimeoutMs).unref());
      await Promise.race([closed, deadline]);
      clearInterval(sweep);
      for (const s of sockets) s.destroy();
    })());

  return { server, url, stop };
}

if (isMain(import.meta.url)) {
  runProcess('web', async (app) => {
    const running = await startWebServer(app);
    return { stop: running.stop, ready: `web tier listening on ${running.url}` };
  });
}
