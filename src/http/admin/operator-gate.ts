import type { Middleware, ParameterizedContext } from 'koa';
import type { Clock } from '../../clock.js';
import type { Config } from '../../config.js';
import { AppError } from '../../errors.js';
import { escapeHtml, prefersHtml, renderPage, sendPage } from '../html.js';
import { authorizationHeader, BEARER } from '../middleware/auth.js';
import { readForm } from '../middleware/body.js';
import { requireSameOrigin } from '../middleware/console-session.js';
import type { AppState } from '../route.js';
import { isOperatorSession, isOperatorToken, newOperatorSession, OPERATOR_SESSION_MS } from './operator-credential.js';

export const OPERATOR_COOKIE = 'admin_session';

/** A form with one field: far more than a token needs, far less than anyone could make us buffer. */
const LOGIN_FORM_LIMIT_BYTES = 4096;

export interface OperatorGateOptions {
  token: string;
  clock: Clock;
  /** Where the pages live (/admin/queues): the form posts to `${basePath}/login`, the cookie is scoped to it. */
  basePath: string;
  /** The public base URL: a same-origin check accepts its origin as well as the request's own. */
  config: Pick<Config, 'http'>;
}

type GateContext = ParameterizedContext<AppState>;

/**
 * Lets a request through to what it guards when it carries the operator token, as a bearer
 * credential or as the session cookie the login form sets; answers the form's POST
 * (`${basePath}/login`) and log-out (`${basePath}/logout`) itself. Log-out changes state, so it is a
 * POST from the dashboard's own origin (the cookie is SameSite=Strict, and the Origin check keeps
 * another site from signing an operator out); a GET there (the board's menu link) shows a page
 * whose button posts it. Refused: 401, with the login form for a browser asking for a page and the
 * error envelope for anything else.
 */
export function operatorGate(opts: OperatorGateOptions): Middleware<AppState> {
  const { token, clock, basePath, config } = opts;
  const cookieOptions = (ctx: GateContext) => ({
    httpOnly: true,
    sameSite: 'strict' as const,
    secure: ctx.secure,
    path: basePath,
    overwrite: true,
  });

  async function login(ctx: GateContext): Promise<void> {
    const form = await readForm(ctx, LOGIN_FORM_LIMIT_BYTES);
    if (typeof form.token === 'string' && isOperatorToken(token, form.token.trim())) {
      ctx.cookies.set(OPERATOR_COOKIE, newOperatorSession(token, clock), {
        ...cookieOptions(ctx),
        maxAge: OPERATOR_SESSION_MS,
      });
      // See Other: the browser follows with a GET, so a reload does not post the token again.
      ctx.redirect(basePath);
      ctx.status = 303;
      return;
    }
    refuse(ctx, 'wrong', 'That is not the operator token.');
  }

  function refuse(ctx: GateContext, why: 'missing' | 'wrong', note?: string): void {
    const challenge = why === 'wrong' ? 'Bearer error="invalid_token"' : 'Bearer';
    if (prefersHtml(ctx) && (ctx.method === 'GET' || ctx.method === 'HEAD' || ctx.path === `${basePath}/login`)) {
      ctx.set('WWW-Authenticate', challenge);
      sendPage(ctx, 401, loginPage(basePath, note));
      return;
    }
    throw new AppError(
      'authentication',
      why === 'wrong'
        ? 'Wrong credential: the queue dashboard needs the operator token (ADMIN_TOKEN)'
        : `Missing credential: the queue dashboard needs the operator token (Authorization: Bearer <ADMIN_TOKEN>, or sign in at ${basePath})`,
      { code: why === 'wrong' ? 'invalid_token' : 'missing_credential', headers: { 'WWW-Authenticate': challenge } },
    );
  }

  return async (ctx, next) => {
    if (ctx.path === `${basePath}/login` && ctx.method === 'POST') {
      await login(ctx);
      return;
    }
    if (ctx.path === `${basePath}/logout` && ctx.method === 'POST') {
      requireSameOrigin(ctx, config);
      ctx.cookies.set(OPERATOR_COOKIE, null, cookieOptions(ctx));
      ctx.redirect(basePath);
      ctx.status = 303;
      return;
    }
    if (ctx.path === `${basePath}/logout` && (ctx.method === 'GET' || ctx.method === 'HEAD')) {
      sendPage(ctx, 200, logoutPage(basePath));
      return;
    }
    if (ctx.path === `${basePath}/logout`) {
      throw new AppError('invalid_request', `Sign out with a POST to ${basePath}/logout.`, {
        status: 405,
        code: 'method_not_allowed',
        headers: { Allow: 'GET, HEAD, POST' },
      });
    }
    const header = authorizationHeader(ctx);
    if (header !== '') {
      const m = BEARER.exec(header);
      if (m && isOperatorToken(token, m[1]!)) await next();
      else refuse(ctx, 'wrong');
      return;
    }
    const session = ctx.cookies.get(OPERATOR_COOKIE);
    if (isOperatorSession(token, session, clock)) await next();
    else refuse(ctx, 'missing', session === undefined ? undefined : 'Your session has ended: sign in again.');
  };
}

function loginPage(basePath: string, note: string | undefined): string {
  return renderPage({
    title: 'Queue dashboard: sign in',
    body: `<h1>Queue dashboard</h1>
<p>Sign in with the operator token (<code>ADMIN_TOKEN</code>).</p>
${note ? `<p class="error" role="alert">${escapeHtml(note)}</p>` : ''}
<form method="post" action="${escapeHtml(`${basePath}/login`)}">
  <label for="token">Operator token</label><br>
  <input id="token" name="token" type="password" autocomplete="current-password" required autofocus size="48">
  <button type="submit">Sign in</button>
</form>`,
  });
}

function logoutPage(basePath: string): string {
  return renderPage({
    title: 'Queue dashboard: sign out',
    body: `<h1>Queue dashboard</h1>
<form method="post" action="${escapeHtml(`${basePath}/logout`)}">
  <button type="submit" autofocus>Sign out</button>
</form>
<p><a href="${escapeHtml(basePath)}">Back to the queues</a></p>`,
  });
}
