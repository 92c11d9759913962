import type { JsonSchema } from '../../validation.js';
import { readFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import path from 'node:path';
import { checkHealth } from '../../health/health.service.js';
import { HEALTH_REASONS, HealthCache, publicHealth, readiness } from '../../health/health-views.js';
import { AppError } from '../../errors.js';
import { isOperatorToken } from '../admin/operator-credential.js';
import { FAVICON_LINKS } from '../favicon.js';
import { authorizationHeader, BEARER } from '../middleware/auth.js';
import { defineRoutes, type HttpContext, type RouteSpec } from '../route.js';

const require = createRequire(import.meta.url);
const swaggerDir = path.dirname(require.resolve('swagger-ui-dist/package.json'));
const DOC_ASSETS: Record<string, string> = {
  'swagger-ui.css': 'text/css; charset=utf-8',
  'swagger-ui-bundle.js': 'application/javascript; charset=utf-8',
};

const DOCS_HTML = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>API documentation</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
${FAVICON_LINKS}
<link rel="stylesheet" href="/docs/assets/swagger-ui.css"></head>
<body><div id="ui"></div><script src="/docs/assets/swagger-ui-bundle.js"></script>
<script>window.ui = SwaggerUIBundle({ url: '/openapi.json', dom_id: '#ui', deepLinking: true });</script>
</body></html>`;

/** Accept asks for the Prometheus text format (text/plain) or OpenMetrics, as a Prometheus server does. */
function wantsPrometheusText(accept: string): boolean {
  return /text\/plain|application\/openmetrics-text/i.test(accept);
}

const check = (extra: Record<string, JsonSchema> = {}): JsonSchema => ({
  type: 'object',
  required: ['status'],
  properties: {
    status: { type: 'string', enum: ['ok', 'down'] },
    latency_ms: { type: 'number' },
    error: { type: 'string' },
    ...extra,
  },
});

const HealthReportSchema: JsonSchema = {
  type: 'object',
  required: ['status'],
  properties: {
    status: { type: 'string', enum: ['ok', 'unavailable'] },
    reason: {
      type: 'string',
      enum: [...HEALTH_REASONS],
      description:
        'Why the status is `unavailable` (absent when `ok`): the first dependency down, in the order postgres, redis, queue, workers',
    },
    checks: {
      description: 'Operator only (Authorization: Bearer <ADMIN_TOKEN>), as are `down` and `info`',
      type: 'object',
      properties: {
        postgres: check(),
        redis: check(),
        queue: check({
          waiting: { type: 'integer', description: 'Jobs waiting for a worker' },
          active: { type: 'integer', description: 'Jobs workers are running' },
          workers: { type: 'integer', description: 'Live completion workers' },
          capacity: { type: 'integer', description: 'Jobs the live workers take at once, in all' },
        }),
        workers: check({
          live: { type: 'integer', description: 'Live completion workers' },
          least_lag_ms: {
            type: 'integer',
            description: "The least lagging live worker's worst event-loop delay over its last renewal, in ms",
          },
          max_lag_ms: {
            type: 'integer',
            description: 'The bound past which a lagging worker counts as down (HEALTH_MAX_EVENT_LOOP_LAG_MS)',
          },
        }),
      },
    },
    down: {
      type: 'array',
      items: { type: 'string', enum: ['postgres', 'redis', 'queue', 'workers'] },
      description:
        'The dependencies that did not answer, and `workers` when no live worker is registered or every one lags (`checks.workers.error` says which)',
    },
    info: {
      type: 'object',
      properties: {
        model_backend: {
          type: 'string',
          enum: ['local', 'catalog'],
          description: "Who answers completions: the built-in local model, or each model's provider",
        },
        model_note: { type: 'string' },
      },
    },
  },
};

/** Whether the request carries the operator token (ADMIN_TOKEN) as its bearer credential. */
function fromOperator(ctx: HttpContext, token: string | undefined): boolean {
  if (token === undefined) return false;
  const m = BEARER.exec(authorizationHeader(ctx));
  return m !== null && isOperatorToken(token, m[1]!);
}

const ProbeSchema: JsonSchema = {
  type: 'object',
  required: ['status'],
  properties: {
    status: { type: 'string', enum: ['ok', 'unavailable'] },
    reason: { type: 'string', enum: [...HEALTH_REASONS] },
  },
};

/** /health (and its probes), /metrics, /openapi.json and /docs. `openApi` is filled in by the app once every route is known. */
export function opsRoutes(openApi: () => unknown): RouteSpec[] {
  let health: HealthCache | undefined;
  return defineRoutes([
    {
      method: 'get',
      path: '/health/live',
      operationId: 'healthLive',
      summary: "Liveness: the process's event loop answers",
      description:
        'Checks nothing outside the process, so an outage of Postgres or Redis never restarts the web tier: a liveness probe (Kubernetes `livenessProbe`, the image HEALTHCHECK) restarts only a process that stopped answering.',
      tag: 'operations',
      auth: 'none',
      responses: { 200: { description: 'The process answers', schema: ProbeSchema } },
      handler: (ctx) => {
        ctx.set('Cache-Control', 'no-store');
        ctx.body = { status: 'ok' };
      },
    },
    {
      method: 'get',
      path: '/health/ready',
      operationId: 'healthReady',
      summary: 'Readiness: this web process can serve (Postgres, Redis and the queue answer)',
      description:
        "For a load balancer or a Kubernetes `readinessProbe`. Unlike /health it leaves the workers out: with none live this process still answers completions with 503 `no_worker_available`, in the API's own error format. Shares /health's one round of checks a second.",
      tag: 'operations',
      auth: 'none',
      responses: {
        200: { description: 'Ready', schema: ProbeSchema },
        503: { description: "One of the process's dependencies is down; `reason` names it", schema: ProbeSchema },
      },
      handler: async (ctx, app) => {
        health ??= new HealthCache(app.clock);
        const ready = readiness(await health.read(() => checkHealth(app)));
        ctx.status = ready.status === 'ok' ? 200 : 503;
        ctx.set('Cache-Control', 'no-store');
        ctx.body = ready;
      },
    },
    {
      method: 'get',
      path: '/health',
      operationId: 'health',
      summary: 'State of Postgres, Redis and the completion queue',
      description:
        'Anyone gets `status` and, when unavailable, a `reason` code; the operator (Authorization: Bearer <ADMIN_TOKEN>) also gets each check with its error text, `down` and `info`. ' +
        'One round of checks a second per web process answers every request.',
      tag: 'operations',
      auth: 'none',
      responses: {
        200: { description: 'Every dependency answers', schema: HealthReportSchema },
        503: {
          description: 'A dependency is down, or no live worker keeps up; `down` names it',
          schema: HealthReportSchema,
        },
      },
      handler: async (ctx, app) => {
        const backend = app.config.providers.backend;
        health ??= new HealthCache(app.clock);
        const report = await health.read(() =>
          checkHealth(app, {
            model_backend: backend,
            ...(backend === 'local'
              ? { model_note: 'no provider keys configured: every catalog model is served by the built-in local model' }
              : {}),
          }),
        );
        ctx.status = report.status === 'ok' ? 200 : 503;
        ctx.set('Cache-Control', 'no-store');
        const seen = publicHealth(report);
        ctx.body = fromOperator(ctx, app.config.admin.token) ? { ...seen, ...report } : seen;
      },
    },
    {
      method: 'get',
      path: '/metrics',
      operationId: 'metrics',
      summary:
        'Process and HTTP metrics: JSON by default, Prometheus text when Accept asks for text/plain or OpenMetrics',
      tag: 'operations',
      auth: 'none',
      responses: { 200: { description: 'Metrics', alsoAs: ['text/plain'] } },
      handler: async (ctx, app) => {
        const registry = app.metrics.registry;
        if (wantsPrometheusText(ctx.get('accept'))) {
          ctx.type = registry.contentType;
          ctx.body = await registry.metrics();
        } else {
          ctx.body = await registry.getMetricsAsJSON();
        }
      },
    },
    {
      method: 'get',
      path: '/openapi.json',
      operationId: 'openapi',
      summary: 'This OpenAPI document',
      tag: 'operations',
      auth: 'none',
      responses: { 200: { description: 'OpenAPI 3.1 document' } },
      handler: (ctx) => {
        ctx.body = openApi();
      },
    },
    {
      method: 'get',
      path: '/docs',
      operationId: 'docs',
      summary: 'Rendered API documentation',
      tag: 'operations',
      auth: 'none',
      hidden: true,
      responses: { 200: { description: 'HTML page', alsoAs: ['text/html'] } },
      handler: (ctx) => {
        ctx.type = 'text/html; charset=utf-8';
        ctx.body = DOCS_HTML;
      },
    },
    {
      method: 'get',
      path: '/docs/assets/:file',
      operationId: 'docsAsset',
      summary: 'Static assets of the documentation page',
      tag: 'operations',
      auth: 'none',
      hidden: true,
      // Any name: one that is not an asset is a 404, not a 422.
      params: { type: 'object', required: ['file'], properties: { file: { type: 'string' } } },
      responses: { 200: { description: 'Asset' } },
      handler: async (ctx) => {
        const { file } = ctx.state.params as { file: string };
        const type = DOC_ASSETS[file];
        if (!type) throw new AppError('not_found', `No such asset: ${file}`);
        ctx.type = type;
        ctx.set('Cache-Control', 'public, max-age=86400');
        ctx.body = await readFile(path.join(swaggerDir, file));
      },
    },
  ]);
}
