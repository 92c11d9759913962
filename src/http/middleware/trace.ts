import { ROOT_CONTEXT } from '@opentelemetry/api';
import type { Middleware } from 'koa';
import { failSpan, sampledTraceId, SpanKind, startSpan, withSpan } from '../../infra/tracing.js';
import type { AppState } from '../route.js';

/**
 * The server span of every request, installed only when tracing is on: named for its route when
 * it matched one, with its status, the account that called and the X-Request-Id. The rest of the
 * request runs inside it, so its child spans (admission, the wait in the queue, the relay, the
 * worker's job) and its log lines join its trace. A trace starts here: a traceparent sent by a
 * client is not continued, since it would let any caller decide what is sampled.
 */
export function traceRequests(): Middleware<AppState> {
  return async (ctx, next) => {
    const span = startSpan(ctx.method, SpanKind.SERVER, ROOT_CONTEXT);
    span.setAttribute('http.request.method', ctx.method);
    span.setAttribute('url.path', ctx.path);
    span.setAttribute('url.scheme', ctx.protocol);
    span.setAttribute('http.response.header.x-request-id', [ctx.state.requestId]);
    ctx.state.traceId = sampledTraceId(span);
    const done = () => {
      ctx.res.off('finish', done);
      ctx.res.off('close', done);
      const route = ctx.state.route;
      if (route !== undefined) {
        span.updateName(`${ctx.method} ${route}`);
        span.setAttribute('http.route', route);
      }
      span.setAttribute('http.response.status_code', ctx.status);
      if (ctx.state.account) span.setAttribute('app.account.id', ctx.state.account.id);
      // A client that left before the end (a cancelled stream).
      if (!ctx.res.writableFinished) span.setAttribute('app.client_disconnected', true);
      if (ctx.status >= 500) failSpan(span, ctx.state.errorCode ?? String(ctx.status));
      span.end();
    };
    ctx.res.once('finish', done);
    ctx.res.once('close', done);
    await withSpan(span, next, ROOT_CONTEXT);
  };
}
