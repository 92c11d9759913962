import type { Clock } from '../clock.js';
import type { Config } from '../config.js';
import { AppError } from '../errors.js';
import { mintJwt } from '../accounts/jwt.js';
import type { Account } from '../accounts/account.js';

/**
 * The console issues JWTs only when the service verifies them with its own secret: with an
 * external identity provider (JWT_JWKS_URL only) tokens come from that provider, and the console
 * stays off.
 */
export const consoleJwtAvailable = (config: Pick<Config, 'auth'>): boolean => config.auth.jwt.secret !== undefined;

/**
 * A short-lived JWT (CONSOLE_JWT_TTL_SECONDS) for the signed-in account, signed like any token the
 * /v1 JWT endpoints accept: the console calls the public API as any frontend would.
 */
export async function issueConsoleJwt(
  app: { config: Pick<Config, 'auth' | 'console'>; clock: Clock },
  account: Account,
): Promise<{ token: string; expires_at: string; expires_in: number }> {
  if (!consoleJwtAvailable(app.config)) {
    throw new AppError(
      'invalid_request',
      'This server verifies JWTs from an external identity provider (JWT_JWKS_URL), so the console cannot issue them; get a token from that provider.',
      { status: 501, code: 'console_jwt_unavailable' },
    );
  }
  const ttl = app.config.console.jwtTtlSeconds;
  const token = await mintJwt(app.config, app.clock, { sub: account.id, email: account.email }, ttl);
  const issuedAt = Math.floor(app.clock.now().getTime() / 1000);
  return { token, expires_at: new Date((issuedAt + ttl) * 1000).toISOString(), expires_in: ttl };
}
