import type { Middleware } from 'koa';
import type { AppContext } from '../../context.js';
import type { AppState } from '../route.js';

/** Counts and times every request by route and status, and writes one access-log line when it ends. */
export function observe(app: AppContext): Middleware<AppState> {
  const { requests: httpRequests, duration: httpDuration } = app.metrics.http;
  return async (ctx, next) => {
    const start = performance.now();
    const done = () => {
      ctx.res.off('finish', done);
      ctx.res.off('close', done);
      const seconds = (performance.now() - start) / 1000;
      const labels = { method: ctx.method, route: ctx.state.route ?? 'unmatched', status: String(ctx.status) };
      httpRequests.inc(labels);
      httpDuration.observe(labels, seconds);
      // A 5xx is worth a look, not a page: the error mapper logs the unforeseen ones as errors, with their stack.
      const level = ctx.status >= 500 ? 'warn' : ctx.status >= 400 ? 'info' : 'debug';
      if (app.log.isLevelEnabled(level)) {
        const code = ctx.state.errorCode;
        app.log[level](
          {
            requestId: ctx.state.requestId,
            ...(ctx.state.traceId ? { traceId: ctx.state.traceId } : {}),
            method: ctx.method,
            path: ctx.path,
            status: ctx.status,
            ...(code ? { code } : {}),
            ms: Math.round(seconds * 1000),
          },
          'request',
        );
      }
    };
    // 'close' covers a client that went away before the end (a cancelled stream).
    ctx.res.once('finish', done);
    ctx.res.once('close', done);
    await next();
  };
}
