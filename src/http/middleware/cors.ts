import cors from '@koa/cors';
import type { Middleware } from 'koa';
import type { AppState } from '../route.js';

/**
 * Cross-origin access for the web frontend (the JWT endpoints exist for it, and it usually runs on
 * another origin): exactly the configured origins, no others, and no cookies, since every
 * credential is a bearer token. Headers a client reads (request id, rate limits, retry advice)
 * are exposed to it.
 */
export function corsFor(origins: readonly string[]): Middleware<AppState> {
  const allowed = new Set(origins);
  const full = cors({
    origin: (ctx) => (allowed.has(ctx.get('Origin')) ? ctx.get('Origin') : ''),
    allowMethods: ['GET', 'POST', 'PUT', 'DELETE'],
    // Last-Event-ID: a browser resuming a stream (GET /v1/chat/completions/{id}/stream) sends it.
    allowHeaders: ['Authorization', 'Content-Type', 'X-Request-Id', 'Last-Event-ID'],
    exposeHeaders: [
      'X-Request-Id',
      'Retry-After',
      'x-should-retry',
      'X-RateLimit-Limit',
      'X-RateLimit-Remaining',
      'X-RateLimit-Reset',
      'x-ratelimit-limit-requests',
      'x-ratelimit-remaining-requests',
      'x-ratelimit-reset-requests',
      'x-ratelimit-limit-tokens',
      'x-ratelimit-remaining-tokens',
      'x-ratelimit-reset-tokens',
    ],
    maxAge: 600,
  }) as Middleware<AppState>;
  // A request from no allowed origin (every API client, every request with no origin configured)
  // gets what @koa/cors gives it, the Vary header and nothing else, without its async step.
  return (ctx, next) => {
    if (allowed.has(ctx.get('Origin'))) return full(ctx, next) as Promise<void>;
    ctx.vary('Origin');
    return next();
  };
}
