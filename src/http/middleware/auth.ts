import type { Context, Middleware } from 'koa';
import type { AppContext } from '../../context.js';
import { AppError } from '../../errors.js';
import {
  authenticateApiKey,
  authenticateJwt,
  cachedApiKey,
  forgetCachedApiKey,
  looksLikeApiKey,
} from '../../accounts/auth.service.js';
import { assertKeyUsable } from '../../accounts/key-grant.js';
import type { AppState, AuthMode } from '../route.js';
import { sessionAuth } from './console-session.js';

/** An `Authorization: Bearer <credential>` header; the credential is the first group. */
export const BEARER = /^Bearer\s+(\S+)\s*$/i;
const CHALLENGE = { 'WWW-Authenticate': 'Bearer error="invalid_token"' };

type BearerMode = Exclude<AuthMode, 'none' | 'session'>;

const WANTS: Record<BearerMode, string> = {
  api_key: 'an API key (Authorization: Bearer sk-svc-…)',
  jwt: 'a JWT (Authorization: Bearer <token>); API keys are not accepted here',
  api_key_or_jwt: 'an API key or a JWT (Authorization: Bearer …)',
};

/**
 * The request's one Authorization header ('' without one). Node keeps the first of several; a
 * proxy in front may keep the last: two credentials in one request are refused rather than
 * guessed between.
 */
export function authorizationHeader(ctx: Pick<Context, 'req' | 'get'>): string {
  if (ctx.req.rawHeaders.filter((h, i) => i % 2 === 0 && h.toLowerCase() === 'authorization').length > 1) {
    throw new AppError('invalid_request', 'The request carries more than one Authorization header; send exactly one.', {
      code: 'duplicate_authorization',
    });
  }
  return ctx.get('authorization');
}

/**
 * The 401 for an Authorization header that is not `Bearer <credential>`, in words that match what
 * was sent: nothing, or a header of another shape. The header itself is never echoed (it may be a secret).
 */
function credentialRefusal(header: string, mode: BearerMode): AppError {
  const [scheme, ...rest] = header.trim().split(/\s+/);
  if (!scheme || (/^Bearer$/i.test(scheme) && rest.length === 0)) {
    const what = scheme
      ? 'the Authorization header has no credential after Bearer'
      : 'no Authorization header was sent';
    return new AppError('authentication', `Missing credential: ${what}; this endpoint needs ${WANTS[mode]}`, {
      code: 'missing_credential',
      headers: { 'WWW-Authenticate': 'Bearer' },
    });
  }
  const why = /^Bearer$/i.test(scheme)
    ? 'the credential after Bearer contains whitespace (a key or token is one unbroken string: look for a stray space or line break)'
    : 'it does not start with the Bearer scheme';
  return new AppError(
    'authentication',
    `Malformed credential: an Authorization header was sent, but ${why}. This endpoint needs ${WANTS[mode]}`,
    { code: 'malformed_credential', headers: { 'WWW-Authenticate': 'Bearer error="invalid_request"' } },
  );
}

/** Answers a refused bearer credential with the challenge and its reason (RFC 6750). */
async function challenged<T>(ctx: { set(field: string, value: string): void }, work: () => Promise<T>): Promise<T> {
  try {
    return await work();
  } catch (err) {
    if (err instanceof AppError && err.status === 401) ctx.set('WWW-Authenticate', 'Bearer error="invalid_token"');
    throw err;
  }
}

/**
 * Puts the authenticated account on ctx.state, or answers 401 saying which credential is expected.
 * With deferKeyCheck, an API key cached in this process is taken unconfirmed and ctx.state.keyCheck
 * tells the handler what to confirm (see RouteSpec.deferKeyCheck).
 */
export function authenticate(
  mode: AuthMode,
  app: AppContext,
  opts: { deferKeyCheck: boolean } = { deferKeyCheck: false },
): Middleware<AppState> {
  if (mode === 'session') return sessionAuth(app);
  return async (ctx, next) => {
    if (mode === 'none') {
      await next();
      return;
    }
    const header = authorizationHeader(ctx);
    const m = BEARER.exec(header);
    if (!m) throw credentialRefusal(header, mode);
    const credential = m[1]!;
    const isKey = looksLikeApiKey(credential);
    if (mode === 'api_key' && !isKey) {
      throw new AppError('authentication', `Wrong credential: this endpoint needs ${WANTS.api_key}`, {
        code: 'invalid_api_key',
        headers: CHALLENGE,
      });
    }
    if (mode === 'jwt' && isKey) {
      throw new AppError('authentication', `Wrong credential: this endpoint needs ${WANTS.jwt}`, {
        code: 'invalid_token',
        headers: CHALLENGE,
      });
    }
    const cached = isKey && opts.deferKeyCheck ? cachedApiKey(app, credential) : undefined;
    if (cached) {
      // The key's own settings came with the cached account; the script confirms they are current.
      await challenged(ctx, () =>
        Promise.resolve().then(() => assertKeyUsable(cached.account.apiKey, app.clock.now())),
      );
      ctx.state.account = cached.account;
      ctx.state.apiKey = cached.account.apiKey;
      ctx.state.keyCheck = {
        versionKey: cached.versionKey,
        version: cached.version,
        refresh: () =>
          challenged(ctx, async () => {
            forgetCachedApiKey(app, credential);
            const account = await authenticateApiKey(app, credential);
            ctx.state.apiKey = account.apiKey;
            return (ctx.state.account = account);
          }),
      };
    } else if (isKey) {
      const account = await challenged(ctx, () => authenticateApiKey(app, credential));
      ctx.state.account = account;
      ctx.state.apiKey = account.apiKey;
    } else {
      ctx.state.account = await challenged(ctx, () => authenticateJwt(app, credential));
    }
    if (ctx.state.apiKey) app.keyLastUsed.touch(app, ctx.state.apiKey.id);
    ctx.state.credential = isKey ? 'api_key' : 'jwt';
    await next();
  };
}
