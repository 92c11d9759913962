import type { Middleware } from 'koa';
import type { AppContext } from '../../context.js';
import { AppError } from '../../errors.js';
import { authenticateApiKey, authenticateJwt, looksLikeApiKey } from '../../accounts/auth.service.js';
import type { AppState, AuthMode } from '../route.js';

const BEARER = /^Bearer\s+(\S+)\s*$/i;
const CHALLENGE = { 'WWW-Authenticate': 'Bearer error="invalid_token"' };

const WANTS: Record<Exclude<AuthMode, 'none'>, string> = {
  api_key: 'an API key (Authorization: Bearer sk-svc-…)',
  jwt: 'a JWT (Authorization: Bearer <token>); API keys are not accepted here',
  api_key_or_jwt: 'an API key or a JWT (Authorization: Bearer …)',
};

/** Puts the authenticated account on ctx.state, or answers 401 saying which credential is expected. */
export function authenticate(mode: AuthMode, app: AppContext): Middleware<AppState> {
  return async (ctx, next) => {
    if (mode === 'none') return next();
    const header = ctx.get('authorization');
    const m = BEARER.exec(header);
    if (!m) {
      throw new AppError('authentication', `Missing credential: this endpoint needs ${WANTS[mode]}`, {
        code: 'missing_credential',
        headers: { 'WWW-Authenticate': 'Bearer' },
      });
    }
    const credential = m[1]!;
    const isKey = looksLikeApiKey(credential);
    if (mode === 'api_key' && !isKey) {
      throw new AppError('authentication', `Wrong credential: this endpoint needs ${WANTS.api_key}`, { code: 'invalid_api_key', headers: CHALLENGE });
    }
    if (mode === 'jwt' && isKey) {
      throw new AppError('authentication', `Wrong credential: this endpoint needs ${WANTS.jwt}`, { code: 'invalid_token', headers: CHALLENGE });
    }
    try {
      ctx.state.account = isKey ? await authenticateApiKey(app, credential) : await authenticateJwt(app, credential);
    } catch (err) {
      // RFC 6750: a refused bearer credential is answered with the challenge and its reason.
      if (err instanceof AppError && err.status === 401) ctx.set('WWW-Authenticate', 'Bearer error="invalid_token"');
      throw err;
    }
    ctx.state.credential = isKey ? 'api_key' : 'jwt';
    await next();
  };
}
