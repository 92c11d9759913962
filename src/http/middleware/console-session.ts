import type { Context, Middleware } from 'koa';
import type { AppContext } from '../../context.js';
import type { Config } from '../../config.js';
import { AppError } from '../../errors.js';
import { csrfMatches, liveSession } from '../../console-identity/sessions.service.js';
import type { AppState } from '../route.js';

// The console's cookie and the checks on requests that change state (docs/console.md#sessions-and-security).

const secure = (config: Pick<Config, 'http'>): boolean => config.http.publicBaseUrl.startsWith('https:');

/** `__Host-svc_session` behind https (Secure, Path=/, no Domain: bound to this host), `svc_session` on plain http. */
export const sessionCookieName = (config: Pick<Config, 'http'>): string =>
  secure(config) ? '__Host-svc_session' : 'svc_session';

/** The session cookie's value as the browser sent it, if any. */
export function sessionCookie(ctx: Pick<Context, 'cookies'>, config: Pick<Config, 'http'>): string | undefined {
  return ctx.cookies.get(sessionCookieName(config)) || undefined;
}

function cookieLine(config: Pick<Config, 'http'>, value: string, maxAgeSeconds: number): string {
  const attrs = [`${sessionCookieName(config)}=${value}`, 'Path=/', 'HttpOnly', 'SameSite=Lax'];
  if (secure(config)) attrs.push('Secure');
  attrs.push(`Max-Age=${maxAgeSeconds}`);
  return attrs.join('; ');
}

/** The cookie of a session just started: it lives as long as the session may (the server ends it sooner when idle). */
export function setSessionCookie(ctx: Context, config: Pick<Config, 'http' | 'console'>, value: string): void {
  ctx.append('Set-Cookie', cookieLine(config, value, Math.floor(config.console.sessionMaxMs / 1000)));
}

export function clearSessionCookie(ctx: Context, config: Pick<Config, 'http'>): void {
  ctx.append('Set-Cookie', cookieLine(config, '', 0));
}

/**
 * True when the request's Origin is this service's own: the public base URL's origin, or the
 * origin the request was addressed to (Host, and X-Forwarded-Proto behind a trusted proxy).
 * A request with no Origin is not same-origin: browsers send one with every POST.
 */
export function sameOrigin(ctx: Pick<Context, 'get' | 'protocol' | 'host'>, config: Pick<Config, 'http'>): boolean {
  const origin = ctx.get('origin');
  if (!origin || origin === 'null') return false;
  // Not ctx.origin: since Koa 3 that is the Origin header itself.
  return origin === new URL(config.http.publicBaseUrl).origin || origin === `${ctx.protocol}://${ctx.host}`;
}

export function requireSameOrigin(ctx: Pick<Context, 'get' | 'protocol' | 'host'>, config: Pick<Config, 'http'>): void {
  if (!sameOrigin(ctx, config))
    throw new AppError(
      'permission',
      "Refused: this request changes state and did not come from the console's own pages (its Origin header is missing or another site's).",
      { code: 'cross_site_request' },
    );
}

const SAFE = new Set(['GET', 'HEAD', 'OPTIONS']);

/**
 * auth: 'session' — the signed-in console. Puts the session's account on ctx.state, or 401
 * not_signed_in. A state-changing request must also come from our own origin and carry the
 * session's CSRF token in X-CSRF-Token, or it is refused with 403 before anything happens.
 */
export function sessionAuth(app: AppContext): Middleware<AppState> {
  return async (ctx, next) => {
    const value = sessionCookie(ctx, app.config);
    const live = await liveSession(app, value);
    if (!live || value === undefined)
      throw new AppError('authentication', 'Not signed in, or the session has ended: sign in again.', {
        code: 'not_signed_in',
      });
    if (!SAFE.has(ctx.method)) {
      requireSameOrigin(ctx, app.config);
      if (!csrfMatches(live, ctx.get('x-csrf-token') || undefined))
        throw new AppError(
          'permission',
          "Refused: the X-CSRF-Token header is missing or not this session's (read it from GET /console/session).",
          { code: 'csrf_token_invalid' },
        );
    }
    ctx.state.account = live.account;
    ctx.state.session = { live, value };
    await next();
  };
}
