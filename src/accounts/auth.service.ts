import type { RedisClient } from '../infra/redis.js';
import type { Config } from '../config.js';
import type { Db } from '../infra/db.js';
import type { Logger } from '../logger.js';
import { AppError } from '../errors.js';
import { dependencyDown } from '../infra/outage.js';
import { hashApiKey, isWellFormedApiKey, sameHash, API_KEY_PREFIX } from './api-keys.js';
import { findAccountByApiKeyHash, findAccountByEmail, findAccountById } from './accounts.repository.js';
import type { Account } from './account.js';
import {
  accountVersionKey,
  bumpAccountVersion,
  isChangingVersion,
  markAccountChanging,
  type ApiKeyCache,
  type CachedAccount,
} from './api-key-cache.js';
import type { JWTPayload } from 'jose';
import type { Clock } from '../clock.js';
import { assertKeyUsable, grantOf, type KeyedAccount } from './key-grant.js';
import type { JwtVerifier } from './jwt.js';

/** What authentication works with: the account lookups, the key cache and the versions that keep it honest. */
export interface AuthDeps {
  db: Db;
  redis: RedisClient;
  config: Pick<Config, 'redis'>;
  apiKeyCache: ApiKeyCache;
  jwtVerifier: JwtVerifier;
  /** What a key's expiry is compared with. */
  clock: Clock;
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

export const looksLikeApiKey = (credential: string): boolean => credential.startsWith(API_KEY_PREFIX);

function hashOfWellFormed(key: string): string {
  if (!isWellFormedApiKey(key)) {
    throw new AppError(
      'authentication',
      'Incorrect API key provided. Keys look like sk-svc-… and are shown once at verification.',
      { code: 'invalid_api_key' },
    );
  }
  return hashApiKey(key);
}

async function readVersion(
  app: Pick<AuthDeps, 'redis' | 'config'>,
  accountId: string,
): Promise<string | null | undefined> {
  try {
    return await app.redis.get(accountVersionKey(app.config, accountId));
  } catch {
    return undefined;
  }
}

async function loadAccount(app: Pick<AuthDeps, 'db'>, hash: string): Promise<KeyedAccount> {
  const row = await findAccountByApiKeyHash(app.db, hash);
  if (!row || !sameHash(row.key_hash, hash)) {
    throw new AppError('authentication', 'Incorrect API key provided, or the key was regenerated or revoked.', {
      code: 'invalid_api_key',
    });
  }
  const {
    key_hash: _hash,
    key_id: _id,
    key_expires_at: _expires,
    key_models: _models,
    key_requests_per_minute: _rpm,
    key_monthly_spend_limit_usd: _spend,
    key_disabled: _disabled,
    ...account
  } = row;
  assertVerified(account);
  return { ...account, apiKey: grantOf(row) };
}

/**
 * The account a key belongs to, with the key's own settings: from this process's cache while the
 * account's version in Redis says it is current (see ApiKeyCache), otherwise from Postgres. With
 * Redis unreachable Postgres decides and nothing is cached, so a revoked key or a changed tier
 * applies at once either way. A disabled or expired key is refused (401) like a revoked one.
 */
export async function authenticateApiKey(app: Omit<AuthDeps, 'jwtVerifier'>, key: string): Promise<KeyedAccount> {
  const account = await lookUpApiKey(app, key);
  assertKeyUsable(account.apiKey, app.clock.now());
  return account;
}

async function lookUpApiKey(app: Omit<AuthDeps, 'jwtVerifier'>, key: string): Promise<KeyedAccount> {
  const hash = hashOfWellFormed(key);
  const cache = app.apiKeyCache;
  const accountId = cache.accountIdOf(hash);
  if (accountId === undefined) {
    // The version can only be read once the account is known, and it must be read before
    // Postgres for the entry to be safe to cache: this first read only ties the key to its account.
    const account = await loadAccount(app, hash);
    cache.learn(hash, account.id);
    return account;
  }
  const version = await readVersion(app, accountId);
  if (version !== undefined) {
    const cached = cache.get(hash, version);
    if (cached) return cached;
  }
  const account = await loadAccount(app, hash);
  if (version !== undefined && !isChangingVersion(version)) cache.set(hash, account, version);
  return account;
}

/**
 * The cached account for a key without asking Redis, for a caller that confirms the version
 * atomically with its own Redis work (the chat route's admission script) and calls
 * authenticateApiKey when that finds it stale. Undefined when nothing usable is cached.
 */
export function cachedApiKey(app: Pick<AuthDeps, 'apiKeyCache' | 'config'>, key: string): CachedAccount | undefined {
  if (!isWellFormedApiKey(key)) return undefined;
  return app.apiKeyCache.peek(app.config, hashApiKey(key));
}

/** The cached account of this key is out of date: the next use reads it again. */
export function forgetCachedApiKey(app: Pick<AuthDeps, 'apiKeyCache'>, key: string): void {
  if (isWellFormedApiKey(key)) app.apiKeyCache.forget(hashApiKey(key));
}

/**
 * After a committed change to what an account's keys grant (its tier, or the keys themselves):
 * every web process re-reads them on their next use. A failure is logged, not thrown: the change
 * is committed, and Redis being unreachable has already emptied every process's cache.
 */
export async function invalidateAccountKeys(
  app: { redis: RedisClient; config: Pick<Config, 'redis'>; log: Logger },
  accountId: string,
): Promise<void> {
  try {
    await bumpAccountVersion(app, accountId);
  } catch (err) {
    app.log.error({ err, accountId }, 'could not bump the account version; cached accounts expire within 5 minutes');
  }
}

/**
 * Before committing a revocation (a regenerated key): marks the account changing in Redis (see
 * markAccountChanging), or throws 503 so the caller's transaction rolls back. A revocation that
 * could not reach every process's cache is not made: the old key must never outlive it.
 */
export async function prepareKeyRevocation(
  app: { redis: RedisClient; config: Pick<Config, 'redis'>; log: Logger },
  accountId: string,
): Promise<void> {
  try {
    await markAccountChanging(app, accountId);
  } catch (err) {
    app.log.error({ err, accountId }, 'could not mark the account changing in Redis; the key change is abandoned');
    throw dependencyDown(
      err,
      undefined,
      'The API key was not regenerated: the service could not make every server forget the current key. The current key still works; retry later.',
    );
  }
}

/** An unverified account cannot use the API, whatever credential it holds. */
function assertVerified(account: Account): void {
  if (account.verified_at === null) {
    throw new AppError('permission', 'Verify your email address before using the API', { code: 'email_not_verified' });
  }
}

/**
 * The account is the token's `sub` (account id) or, failing that, its `email` claim (from an
 * identity provider, only with `email_verified: true`).
 */
export async function authenticateJwt(app: Pick<AuthDeps, 'db' | 'jwtVerifier'>, token: string): Promise<Account> {
  const claims = await app.jwtVerifier.verify(token);
  let account: Account | undefined;
  if (typeof claims.sub === 'string' && UUID.test(claims.sub)) account = await findAccountById(app.db, claims.sub);
  // A claim Postgres could not even compare (a NUL, an absurd length) names no account.
  const email =
    typeof claims.email === 'string' && claims.email.length <= 254 && !claims.email.includes('\u0000')
      ? claims.email
      : undefined;
  if (!account && email !== undefined) {
    if (app.jwtVerifier.external && claims.email_verified !== true)
      throw new AppError(
        'authentication',
        'The token names its account by email, but its issuer does not say the address is verified (email_verified is not true)',
        { code: 'invalid_token' },
      );
    account = await findAccountByEmail(app.db, email);
  }
  if (!account)
    throw new AppError('authentication', 'The token does not name a known account', { code: 'unknown_account' });
  if (account.closed_at !== null)
    throw new AppError('authentication', 'The account was closed', { code: 'account_closed' });
  assertNotSignedOutSince(account, claims);
  assertVerified(account);
  return account;
}

/**
 * After "sign out everywhere", a token issued before it is refused. `iat` has whole seconds: a
 * token issued in the second of the sign-out, before or after it, is refused too (the safe side).
 */
function assertNotSignedOutSince(account: Account, claims: JWTPayload): void {
  const notBefore = account.tokens_not_before;
  if (notBefore === null) return;
  if (typeof claims.iat !== 'number' || claims.iat * 1000 < notBefore.getTime())
    throw new AppError(
      'authentication',
      'The token was issued before the account signed out everywhere; get a new one',
      { code: 'token_revoked' },
    );
}
