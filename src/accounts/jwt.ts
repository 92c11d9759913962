import {
  createRemoteJWKSet,
  errors as joseErrors,
  jwtVerify,
  SignJWT,
  type JWTPayload,
  type JWTVerifyGetKey,
} from 'jose';
import type { Config } from '../config.js';
import type { Clock } from '../clock.js';
import { AppError } from '../errors.js';

export interface JwtVerifier {
  verify(token: string): Promise<JWTPayload>;
  /**
   * The tokens come from an outside identity provider (JWT_JWKS_URL), whose users may name any
   * address: such a token binds to an account by email only when the provider says it verified it.
   */
  readonly external: boolean;
}

/**
 * Frontend-issued JWTs, verified against a shared secret (HS256 family) or a JWKS URL (RS256 or ES256 family). The
 * algorithms are pinned from configuration (jose would otherwise accept any algorithm that fits
 * the key) and `exp` is required (jose does not require it by default).
 */
export function createJwtVerifier(config: Config, clock: Clock): JwtVerifier {
  const jwt = config.auth.jwt;
  let key: Uint8Array | JWTVerifyGetKey;
  if (jwt.secret !== undefined) key = new TextEncoder().encode(jwt.secret);
  else if (jwt.jwksUrl !== undefined)
    key = createRemoteJWKSet(new URL(jwt.jwksUrl), { timeoutDuration: 3000, cooldownDuration: 30_000 });
  else {
    return {
      external: false,
      verify: () =>
        Promise.reject(
          new AppError(
            'unavailable',
            'JWT authentication is not configured on this server (set JWT_SECRET or JWT_JWKS_URL)',
            { code: 'jwt_not_configured' },
          ),
        ),
    };
  }
  return {
    external: jwt.jwksUrl !== undefined,
    async verify(token) {
      try {
        const { payload } = await jwtVerify(token, key as Uint8Array, {
          algorithms: jwt.algorithms,
          requiredClaims: ['exp'],
          ...(jwt.issuer !== undefined ? { issuer: jwt.issuer } : {}),
          ...(jwt.audience !== undefined ? { audience: jwt.audience } : {}),
          currentDate: clock.now(),
          clockTolerance: 5,
        });
        return payload;
      } catch (err) {
        // Our key set being unreachable says nothing about the token: 503, so the client retries
        // instead of discarding a good token.
        if (jwt.jwksUrl !== undefined && keySetUnavailable(err)) {
          throw new AppError(
            'unavailable',
            'The token cannot be checked right now (the signing key set is unreachable); retry shortly',
            {
              code: 'jwks_unavailable',
              headers: { 'Retry-After': '5' },
              cause: err,
            },
          );
        }
        throw new AppError('authentication', describeJwtError(err), { code: 'invalid_token', cause: err });
      }
    },
  };
}

function describeJwtError(err: unknown): string {
  if (err instanceof joseErrors.JWTExpired) return 'The token has expired';
  if (err instanceof joseErrors.JWTClaimValidationFailed)
    return `The token's "${err.claim}" claim is not valid (${err.reason})`;
  if (err instanceof joseErrors.JOSEAlgNotAllowed)
    return 'The token is signed with an algorithm this server does not accept';
  if (err instanceof joseErrors.JWSSignatureVerificationFailed) return 'The token signature is not valid';
  if (err instanceof joseErrors.JWKSNoMatchingKey) return 'No key matches the token';
  return 'The token is malformed or not valid';
}

/** Failures to fetch or parse the JWKS (jose raises a bare JOSEError for a non-200 or non-JSON answer). */
function keySetUnavailable(err: unknown): boolean {
  if (err instanceof joseErrors.JWKSTimeout || err instanceof joseErrors.JWKSInvalid) return true;
  if (err instanceof joseErrors.JOSEError) return err.code === 'ERR_JOSE_GENERIC';
  return err instanceof TypeError && /fetch failed/i.test(err.message);
}

/** Signs a token the configured verifier accepts (shared-secret configurations only), for JWT_MINT_TTL_SECONDS unless told. */
export async function mintJwt(
  config: Pick<Config, 'auth'>,
  clock: Clock,
  claims: { sub: string; email: string },
  ttlSeconds: number = config.auth.jwt.mintTtlSeconds,
): Promise<string> {
  const jwt = config.auth.jwt;
  if (jwt.secret === undefined)
    throw new Error('minting needs JWT_SECRET; with JWT_JWKS_URL tokens come from your identity provider');
  const now = Math.floor(clock.now().getTime() / 1000);
  let builder = new SignJWT({ email: claims.email })
    .setProtectedHeader({ alg: jwt.algorithms[0] ?? 'HS256', typ: 'JWT' })
    .setSubject(claims.sub)
    .setIssuedAt(now)
    .setExpirationTime(now + ttlSeconds);
  if (jwt.issuer !== undefined) builder = builder.setIssuer(jwt.issuer);
  if (jwt.audience !== undefined) builder = builder.setAudience(jwt.audience);
  return builder.sign(new TextEncoder().encode(jwt.secret));
}
