import http from 'node:http';
import type { Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import type { AppContext } from '../context.js';
import { isMain, runProcess } from '../lifecycle.js';
import { createHttpApp } from './app.js';
import { answeredByNode } from './middleware/observe.js';
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
  answerClientErrors(app, server);

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

// Node's own answers to what its parser refuses or what stops arriving (_http_server.js socketOnError).
const CLIENT_ERROR_STATUS: Record<string, number> = {
  HPE_HEADER_OVERFLOW: 431,
  HPE_CHUNK_EXTENSIONS_OVERFLOW: 413,
  ERR_HTTP_REQUEST_TIMEOUT: 408,
};

/**
 * Answers a client error as Node does by default (the same bytes, then the socket closed), and
 * tells the access log and metrics the status that went on the wire: without this, a request
 * already routed was recorded with Koa's default 404, and one never routed not at all.
 */
function answerClientErrors(app: AppContext, server: http.Server): void {
  const inFlight = new WeakMap<Duplex, http.ServerResponse>();
  server.on('request', (req: http.IncomingMessage, res: http.ServerResponse) => {
    inFlight.set(req.socket, res);
    res.once('finish', () => {
      if (inFlight.get(req.socket) === res) inFlight.delete(req.socket);
    });
  });
  server.on('clientError', (err: NodeJS.ErrnoException, socket: Duplex) => {
    const res = inFlight.get(socket);
    if (socket.writable && !res?.headersSent) {
      const status = CLIENT_ERROR_STATUS[err.code ?? ''] ?? 400;
      socket.write(`HTTP/1.1 ${status} ${http.STATUS_CODES[status]}\r\nConnection: close\r\n\r\n`);
      answeredByNode(app, res, status, err.code ?? 'client_error');
    }
    socket.destroy(err);
  });
}

if (isMain(import.meta.url)) {
  runProcess('web', async (app) => {
    const running = await startWebServer(app);
    return { stop: running.stop, ready: `web tier listening on ${running.url}` };
  });
}
