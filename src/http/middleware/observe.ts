import type { ServerResponse } from 'node:http';
import type { Middleware } from 'koa';
import type { AppContext } from '../../context.js';
import type { AppState } from '../route.js';

interface AccessRecord {
  method: string;
  route: string;
  path?: string;
  status: number;
  code?: string | undefined;
  requestId?: string | undefined;
  traceId?: string | undefined;
  seconds?: number;
}

/**
 * Responses Node wrote itself on the socket (see answeredByNode): their status, not Koa's, went
 * on the wire, and Koa's default 404 is what ctx.status still says.
 */
const answeredByNodeAs = new WeakMap<ServerResponse, { status: number; code: string }>();

/**
 * A connection closed before its response was complete (the client went away while it waited,
 * or in the middle of a stream): recorded as 499, nginx's "client closed request", since what
 * Koa's status says then (its default 404, or the 200 a stream started with) never fully reached
 * anyone.
 */
export const CLIENT_CLOSED_REQUEST = 499;

/** Counts and times one request and writes its access-log line. */
function record(app: AppContext, r: AccessRecord): void {
  const labels = { method: r.method, route: r.route, status: String(r.status) };
  app.metrics.http.requests.inc(labels);
  if (r.seconds !== undefined) app.metrics.http.duration.observe(labels, r.seconds);
  // A 5xx is worth a look, not a page: the error mapper logs the unforeseen ones as errors, with their stack.
  const level = r.status >= 500 ? 'warn' : r.status >= 400 ? 'info' : 'debug';
  if (!app.log.isLevelEnabled(level)) return;
  app.log[level](
    {
      ...(r.requestId ? { requestId: r.requestId } : {}),
      ...(r.traceId ? { traceId: r.traceId } : {}),
      method: r.method,
      ...(r.path !== undefined ? { path: r.path } : {}),
      status: r.status,
      ...(r.code ? { code: r.code } : {}),
      ...(r.seconds !== undefined ? { ms: Math.round(r.seconds * 1000) } : {}),
    },
    'request',
  );
}

/** Counts and times every request by route and status, and writes one access-log line when it ends. */
export function observe(app: AppContext): Middleware<AppState> {
  return async (ctx, next) => {
    const start = performance.now();
    ctx.state.arrivedAt = start;
    const done = () => {
      ctx.res.off('finish', done);
      ctx.res.off('close', done);
      const byNode = answeredByNodeAs.get(ctx.res);
      const cut = !byNode && !ctx.res.writableFinished;
      record(app, {
        method: ctx.method,
        route: ctx.state.route ?? 'unmatched',
        path: ctx.path,
        status: byNode?.status ?? (cut ? CLIENT_CLOSED_REQUEST : ctx.status),
        code: byNode?.code ?? (cut ? 'client_closed_request' : ctx.state.errorCode),
        requestId: ctx.state.requestId,
        traceId: ctx.state.traceId,
        seconds: (performance.now() - start) / 1000,
      });
    };
    // 'close' covers a client that went away before the end (a cancelled stream).
    ctx.res.once('finish', done);
    ctx.res.once('close', done);
    await next();
  };
}

/**
 * The server answered a request on its socket (Node's parser refused it, or it stopped arriving):
 * `res` is the response the application had under way, if the request got that far; its access
 * line then records this status. A request no handler saw is recorded here, as route 'unparsed'.
 */
export function answeredByNode(app: AppContext, res: ServerResponse | undefined, status: number, code: string): void {
  if (res) answeredByNodeAs.set(res, { status, code });
  else record(app, { method: 'UNKNOWN', route: 'unparsed', status, code });
}
