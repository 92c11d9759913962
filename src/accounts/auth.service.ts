import type { AppContext } from '../context.js';
import { AppError } from '../errors.js';
import { hashApiKey, isWellFormedApiKey, sameHash, API_KEY_PREFIX } from './api-keys.js';
import { type Account, findAccountByApiKeyHash, findAccountByEmail, findAccountById, findActiveKeyHashes } from './accounts.repository.js';
import { apiKeyCacheOf, apiKeyVersionKey, bumpApiKeyVersions } from './api-key-cache.js';
import { createJwtVerifier, type JwtVerifier } from './jwt.js';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

export const looksLikeApiKey = (credential: string): boolean => credential.startsWith(API_KEY_PREFIX);

/**
 * The account a key belongs to: from this process's cache while the key's version in Redis says it
 * is current (see ApiKeyCache), otherwise from Postgres. With Redis unreachable Postgres decides
 * and nothing is cached, so a revoked key or a changed tier applies at once either way.
 */
export async function authenticateApiKey(app: AppContext, key: string): Promise<Account> {
  if (!isWellFormedApiKey(key)) {
    throw new AppError('authentication', 'Incorrect API key provided. Keys look like sk-svc-… and are shown once at verification.', { code: 'invalid_api_key' });
  }
  const hash = hashApiKey(key);
  const cache = apiKeyCacheOf(app);
  let version: string | null | undefined;
  try {
    version = await app.redis.get(apiKeyVersionKey(app, hash));
  } catch {
    version = undefined;
  }
  if (version !== undefined) {
    const cached = cache.get(hash, version);
    if (cached) return cached;
  }
  const row = await findAccountByApiKeyHash(app.db, hash);
  if (!row || !sameHash(row.key_hash, hash)) {
    throw new AppError('authentication', 'Incorrect API key provided, or the key was regenerated.', { code: 'invalid_api_key' });
  }
  const { key_hash: _omit, ...account } = row;
  assertVerified(account);
  if (version !== undefined) cache.set(hash, account, version);
  return account;
}

/**
 * After a committed change to what an account's keys grant (its tier, or the keys themselves):
 * every web process re-reads them on their next use. A failure is logged, not thrown: the change
 * is committed, and Redis being unreachable has already emptied every process's cache.
 */
export async function invalidateApiKeys(app: AppContext, hashes: string[]): Promise<void> {
  try {
    await bumpApiKeyVersions(app, hashes);
  } catch (err) {
    app.log.error({ err }, 'could not bump API key versions; cached accounts expire within 5 minutes');
  }
}

export async function invalidateAccountKeys(app: AppContext, accountId: string): Promise<void> {
  await invalidateApiKeys(app, await findActiveKeyHashes(app.db, accountId));
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
