import type { AppContext } from '../context.js';
import { AppError } from '../errors.js';
import { hashApiKey, isWellFormedApiKey, sameHash, API_KEY_PREFIX } from './api-keys.js';
import { type Account, findAccountByApiKeyHash, findAccountByEmail, findAccountById } from './accounts.repository.js';
import { createJwtVerifier, type JwtVerifier } from './jwt.js';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

export const looksLikeApiKey = (credential: string): boolean => credential.startsWith(API_KEY_PREFIX);

/** One indexed lookup per request and no cache, so a revoked key stops working at once everywhere. */
export async function authenticateApiKey(app: AppContext, key: string): Promise<Account> {
  if (!isWellFormedApiKey(key)) {
    throw new AppError('authentication', 'Incorrect API key provided. Keys look like sk-svc-… and are shown once at verification.', { code: 'invalid_api_key' });
  }
  const hash = hashApiKey(key);
  const row = await findAccountByApiKeyHash(app.db, hash);
  if (!row || !sameHash(row.key_hash, hash)) {
    throw new AppError('authentication', 'Incorrect API key provided, or the key was regenerated.', { code: 'invalid_api_key' });
  }
  const { key_hash: _omit, ...account } = row;
  assertVerified(account);
  return account;
}

/** An unverified account cannot use the API, whatever credential it holds. */
function assertVerified(account: Account): void {
  if (account.verified_at === null) {
    throw new AppError('permission', 'Verify your email address before using the API', { code: 'email_not_verified' });
  }
}

function verifier(app: AppContext): JwtVerifier {
  return app.once('jwt-verifier', () => createJwtVerifier(app.config, app.clock));
}

/** The account is the token's `sub` (account id) or, failing that, its `email` claim. */
export async function authenticateJwt(app: AppContext, token: string): Promise<Account> {
  const claims = await verifier(app).verify(token);
  let account: Account | undefined;
  if (typeof claims.sub === 'string' && UUID.test(claims.sub)) account = await findAccountById(app.db, claims.sub);
  if (!account && typeof claims.email === 'string') account = await findAccountByEmail(app.db, claims.email);
  if (!account) throw new AppError('authentication', 'The token does not name a known account', { code: 'unknown_account' });
  assertVerified(account);
  return account;
}
