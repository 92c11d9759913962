import type { Middleware } from 'koa';
import { AppError, boundedRetryHeaders, isAppError } from '../../errors.js';
import { dependencyDown, isDependencyDown } from '../../infra/outage.js';
import type { Logger } from '../../logger.js';
import type { AppState } from '../route.js';

/**
 * The one error mapper of the web tier: AppError to its status, headers and body; anything
 * else is a 500 with a generic message (the details go to the log, not to the client).
 */
export function errorHandler(log: Logger): Middleware<AppState> {
  return async (ctx, next) => {
    try {
      await next();
    } catch (err) {
      const appError = isAppError(err) ? err : fromHttpError(err);
      // An AppError is a refusal the service decided (a 4xx, a dependency down, billing not
      // configured): the access line records it with its code. Only what nobody decided, a bug or
      // an unforeseen failure, is an error with its stack for an operator to look at.
      if (!isAppError(err) && appError.status >= 500 && !isDependencyDown(err)) {
        log.error({ err, requestId: ctx.state.requestId, path: ctx.path }, 'request failed');
      }
      ctx.state.errorCode = appError.code ?? appError.type;
      if (ctx.headerSent || !ctx.writable) {
        // A stream that already started cannot change its status; end it instead of hanging.
        ctx.res.destroy();
        return;
      }
      ctx.status = appError.status;
      for (const [k, v] of Object.entries(boundedRetryHeaders(appError.headers))) ctx.set(k, v);
      ctx.body = appError.toBody();
    }
  };
}

/**
 * Errors thrown by Koa or its parsers carry a status; keep it when it is a client error. Postgres
 * or Redis out of reach is a 503 the client can retry, not a failure of the request.
 */
function fromHttpError(err: unknown): AppError {
  if (isDependencyDown(err)) {
    return dependencyDown(err);
  }
  const e = err as { status?: number; statusCode?: number; expose?: boolean; message?: string };
  const status = e?.status ?? e?.statusCode;
  if (typeof status === 'number' && status >= 400 && status < 500) {
    if (status === 413)
      return new AppError('payload_too_large', 'Request body is too large', { code: 'request_too_large' });
    return new AppError('invalid_request', e.expose && e.message ? e.message : 'Bad request', { status });
  }
  return new AppError(
    'internal',
    'The server had an error while processing your request. Please retry; if it persists, contact support with the request id.',
  );
}
