import Koa from 'koa';
import { Router } from '@koa/router';
import type { AppContext } from '../context.js';
import { AppError, validationError } from '../errors.js';
import { validate } from '../validation.js';
import { queueDashboard } from './admin/queue-dashboard.js';
import { authenticate } from './middleware/auth.js';
import { authenticateWithinBudget } from './middleware/abuse-budget.js';
import { BodyBytesGate } from './body-reader.js';
import { jsonBody, jsonOrFormBody } from './middleware/body.js';
import { requireSameOrigin } from './middleware/console-session.js';
import { corsFor } from './middleware/cors.js';
import { errorHandler } from './middleware/errors.js';
import { badlyEncodedQueryParam } from './middleware/utf8-check.js';
import { observe } from './middleware/observe.js';
import { requestId } from './middleware/request-id.js';
import { traceRequests } from './middleware/trace.js';
import { tracingEnabled } from '../infra/tracing.js';
import { buildOpenApi } from './openapi.js';
import { checkPathParams, DEFAULT_BODY_LIMIT_BYTES, type AppState, type HttpContext, type RouteSpec } from './route.js';
import { allRoutes } from './routes/index.js';

/**
 * The web tier, in the order a request meets it: request id, the server span (tracing on), metrics
 * and access log, the one error mapper, the queue dashboard under /admin/queues (with ADMIN_TOKEN),
 * then per route: credential and abuse budget, body parsing, path, query and body validation, handler.
 */
export function createHttpApp(app: AppContext, only?: RouteSpec[]): Koa<AppState> {
  // `only` serves a chosen set of routes (middleware tests); by default, every endpoint. The
  // document route reads the document built from those routes when it is asked, after this line.
  const routes = only ?? allRoutes(() => openApiDoc);
  const openApiDoc: unknown = buildOpenApi(routes, app.config.http.publicBaseUrl);

  const router = new Router<AppState>();
  const bodies = new BodyBytesGate(app.config.http.bodyBytesInFlight, app.metrics.http.bodyBytesInFlight);
  for (const spec of routes) {
    checkPathParams(spec);
    // Few links per route (credential, same origin, body parsing, the rest): each link of a Koa chain
    // is an async call and a promise per request, and the checks after the body need no chain.
    const readsBody =
      (spec.method === 'post' || spec.method === 'put' || spec.method === 'patch') &&
      Boolean(spec.body || spec.rawBody);
    const auth = authenticateWithinBudget(
      app,
      authenticate(spec.auth, app, { deferKeyCheck: spec.deferKeyCheck ?? false }),
      readsBody,
    );
    const stack: Koa.Middleware<AppState>[] = [
      (ctx, next) => {
        ctx.state.route = spec.path;
        return auth(ctx, next) as Promise<void>;
      },
    ];
    if (spec.sameOrigin)
      stack.push(async (ctx, next) => {
        requireSameOrigin(ctx, app.config);
        await next();
      });
    if (readsBody) {
      const limit = spec.bodyLimitBytes ?? DEFAULT_BODY_LIMIT_BYTES;
      stack.push(spec.formBody ? jsonOrFormBody(app, bodies, limit) : jsonBody(app, bodies, limit, spec.rawBody));
    }
    const checks = inputChecks(spec);
    stack.push(async (ctx) => {
      for (const check of checks) check(ctx);
      await spec.handler(ctx as HttpContext, app);
    });
    router[spec.method](spec.path, ...(stack as Parameters<typeof router.get>[1][]));
  }

  // Behind a proxy only the last X-Forwarded-For entry (the one the proxy added) is trusted: the
  // ones before it are whatever the client sent, and limits keyed on the client would be escaped.
  const koa = new Koa<AppState>({ proxy: app.config.http.trustProxy, maxIpsCount: 1 });
  // Errors are logged once, by the error mapper; Koa's own stderr printing would repeat them.
  koa.silent = true;
  koa.use(requestId());
  if (tracingEnabled()) koa.use(traceRequests());
  koa.use(observe(app));
  koa.use(corsFor(app.config.http.corsOrigins));
  koa.use(errorHandler(app.log));
  // The operators' queue dashboard (with ADMIN_TOKEN): its own credential and body parsing, none of the API's.
  const dashboard = queueDashboard(app);
  if (dashboard) koa.use(dashboard);
  koa.use(router.routes());
  koa.use(
    router.allowedMethods({
      throw: true,
      methodNotAllowed: () =>
        new AppError('invalid_request', 'Method not allowed for this URL', { status: 405, code: 'method_not_allowed' }),
      notImplemented: () =>
        new AppError('invalid_request', 'Method not implemented', { status: 501, code: 'not_implemented' }),
    }),
  );
  // Sets (rather than throws) the 404, so allowedMethods above can still turn it into a 405.
  koa.use((ctx) => {
    const notFound = new AppError('not_found', `Unknown request URL: ${ctx.method} ${ctx.path}`, {
      code: 'unknown_url',
    });
    ctx.status = notFound.status;
    ctx.body = notFound.toBody();
  });
  return koa;
}

type InputCheck = (ctx: Koa.ParameterizedContext<AppState>) => void;

/**
 * A route's checks after its body is read, in this order: path parameters, query, declared
 * headers, body. Each throws the 422 it finds.
 */
function inputChecks(spec: RouteSpec): InputCheck[] {
  const checks: InputCheck[] = [];
  if (spec.params) {
    const schema = spec.params;
    checks.push((ctx) => {
      ctx.state.params = validate(schema, { ...(ctx as HttpContext).params }, 'path');
    });
  }
  if (spec.query) {
    const schema = spec.query;
    checks.push((ctx) => {
      const bad = badlyEncodedQueryParam(ctx.querystring);
      if (bad !== undefined)
        throw validationError([
          { loc: ['query', bad], msg: 'Value is not valid UTF-8 once percent-decoded', type: 'string_unicode' },
        ]);
      ctx.state.query = validate(schema, { ...ctx.query }, 'query');
    });
  }
  if (spec.headers) {
    const schema = spec.headers;
    const names = Object.keys(schema.properties ?? {});
    checks.push((ctx) => {
      const present = names.filter((name) => ctx.headers[name] !== undefined).map((name) => [name, ctx.headers[name]]);
      ctx.state.headers = validate(schema, Object.fromEntries(present), 'header');
    });
  }
  if (spec.body) {
    const schema = spec.body;
    const required = spec.bodyRequired ?? true;
    checks.push((ctx) => {
      const body = ctx.state.body;
      if (body === undefined) {
        if (required)
          throw new AppError('validation', 'Body required', {
            detail: [{ loc: ['body'], msg: 'Field required', type: 'missing' }],
          });
      } else {
        ctx.state.body = validate(schema, body, 'body');
      }
    });
  }
  return checks;
}
