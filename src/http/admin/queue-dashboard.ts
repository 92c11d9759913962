import type { Middleware } from 'koa';
import { createBullBoard } from '@bull-board/api';
import { BullMQAdapter } from '@bull-board/api/bullMQAdapter';
import { KoaAdapter } from '@bull-board/koa';
import type { AppContext } from '../../context.js';
import { AppError } from '../../errors.js';
import { everyQueue } from '../../infra/queues.js';
import type { AppState } from '../route.js';
import { operatorGate } from './operator-gate.js';

export const QUEUE_DASHBOARD_PATH = '/admin/queues';

/** Methods that change nothing: every other one on the board's API is a write. */
const READS = new Set(['GET', 'HEAD', 'OPTIONS']);

/**
 * bull-board knows a queue by its name, and every shard of the completion queue has the same one:
 * each queue is shown, and addressed in the board's URLs, by its label (completions.0) instead.
 */
class LabelledQueue extends BullMQAdapter {
  constructor(
    queue: ConstructorParameters<typeof BullMQAdapter>[0],
    private readonly label: string,
    options: ConstructorParameters<typeof BullMQAdapter>[1],
  ) {
    super(queue, options);
  }

  override getName(): string {
    return this.label;
  }
}

// The board is a script-built page of its own scripts and styles (and inline styles); it loads
// nothing from elsewhere and no one may frame it.
const CONTENT_SECURITY_POLICY = [
  "default-src 'self'",
  "script-src 'self'",
  "style-src 'self' 'unsafe-inline'",
  "img-src 'self' data:",
  "font-src 'self'",
  "connect-src 'self'",
  "object-src 'none'",
  "base-uri 'self'",
  "form-action 'self'",
  "frame-ancestors 'none'",
].join('; ');

// The board's page asks Google Fonts for its typeface. The service serves nothing from a third
// party (and works offline), so the link is dropped: the page uses the system fonts.
const THIRD_PARTY_STYLESHEET = /<link\b[^>]*\bhref="https:\/\/fonts\.googleapis\.com\/[^"]*"[^>]*>\s*/g;

/**
 * bull-board (its Koa adapter, a Koa app of its own mounted at /admin/queues) over every queue of
 * the one queue factory, behind the operator token; read-only unless ADMIN_QUEUES_WRITABLE.
 * Undefined without ADMIN_TOKEN: the pages then do not exist.
 *
 * It runs before the API's router, so none of the API's per-route credential, rate limit or body
 * parsing applies: the gate checks the operator token and the board parses its own bodies.
 */
export function queueDashboard(app: AppContext): Middleware<AppState> | undefined {
  const { token, queuesWritable } = app.config.admin;
  if (token === undefined) return undefined;

  const server = new KoaAdapter().setBasePath(QUEUE_DASHBOARD_PATH);
  createBullBoard({
    queues: everyQueue(app.config).map(
      (q) => new LabelledQueue(app.queue(q.ref), q.label, { readOnlyMode: !queuesWritable, description: q.purpose }),
    ),
    serverAdapter: server,
    options: {
      uiConfig: {
        boardTitle: 'Queues',
        hideDocsLink: true,
        miscLinks: [{ text: 'Log out', url: `${QUEUE_DASHBOARD_PATH}/logout` }],
      },
    },
  });
  const board = server.registerPlugin() as Middleware<AppState>;
  const gate = operatorGate({ token, clock: app.clock, basePath: QUEUE_DASHBOARD_PATH, config: app.config });

  return async (ctx, next) => {
    if (ctx.path !== QUEUE_DASHBOARD_PATH && !ctx.path.startsWith(`${QUEUE_DASHBOARD_PATH}/`)) {
      await next();
      return;
    }
    ctx.state.route = QUEUE_DASHBOARD_PATH;
    ctx.set('Content-Security-Policy', CONTENT_SECURITY_POLICY);
    ctx.set('X-Content-Type-Options', 'nosniff');
    ctx.set('Referrer-Policy', 'no-referrer');
    // The board's scripts and styles carry a hash in their names; everything else shows live state.
    ctx.set(
      'Cache-Control',
      ctx.path.startsWith(`${QUEUE_DASHBOARD_PATH}/static/`) ? 'private, max-age=86400' : 'no-store',
    );
    await gate(ctx, async () => {
      // bull-board refuses a write in read-only mode with a body of its own ({error:{key}}): refused
      // here first, in the service's error envelope.
      if (!queuesWritable && ctx.path.startsWith(`${QUEUE_DASHBOARD_PATH}/api/`) && !READS.has(ctx.method)) {
        throw new AppError(
          'invalid_request',
          'The queue dashboard is read-only: it changes no queue or job (ADMIN_QUEUES_WRITABLE=true on the web tier allows it).',
          { status: 405, code: 'queue_dashboard_read_only', headers: { Allow: 'GET, HEAD' } },
        );
      }
      await board(ctx, next);
    });
    if (ctx.response.is('html') && typeof ctx.body === 'string')
      ctx.body = ctx.body.replace(THIRD_PARTY_STYLESHEET, '');
  };
}
