import type { AppContext } from '../context.js';
import { redisKey } from '../infra/redis.js';
import type { Account } from './accounts.repository.js';

const MAX_ENTRIES = 10_000;
/** A backstop only: entries are checked against their key's version on every use. */
const MAX_AGE_MS = 5 * 60_000;

interface Entry {
  account: Account;
  version: string | null;
  cachedAt: number;
}

/**
 * Accounts by API key hash, in each web process, so a request costs one Redis GET instead of a
 * Postgres query. Every key hash has a version in Redis, bumped after each change that matters to
 * a request (the key revoked, the account's tier changed): an entry is used only while the version
 * it was read under is current, so a change applies to the next request on every process. The
 * version is read before Postgres, so a change committed in between leaves a stale version behind,
 * never a stale entry. Redis forgets versions when it restarts, so a lost connection empties the cache.
 * Only what a request is decided on (the account id, its tier, that it is verified) is kept current
 * this way; handlers read anything else (Stripe state, billing) by account id.
 */
export class ApiKeyCache {
  private readonly entries = new Map<string, Entry>();

  get(hash: string, version: string | null): Account | undefined {
    const e = this.entries.get(hash);
    if (!e) return undefined;
    if (e.version !== version || performance.now() - e.cachedAt > MAX_AGE_MS) {
      this.entries.delete(hash);
      return undefined;
    }
    return e.account;
  }

  set(hash: string, account: Account, version: string | null): void {
    // Oldest first out: a Map iterates in insertion order.
    if (this.entries.size >= MAX_ENTRIES) this.entries.delete(this.entries.keys().next().value!);
    this.entries.set(hash, { account, version, cachedAt: performance.now() });
  }

  clear(): void {
    this.entries.clear();
  }
}

export function apiKeyVersionKey(app: AppContext, hash: string): string {
  return redisKey(app.config, 'authv', hash);
}

export function apiKeyCacheOf(app: AppContext): ApiKeyCache {
  return app.once('api-key-cache', () => {
    const cache = new ApiKeyCache();
    app.redis.on('close', () => cache.clear());
    return cache;
  });
}

/** After a committed change to what these keys grant: every process re-reads them on next use. */
export async function bumpApiKeyVersions(app: AppContext, hashes: string[]): Promise<void> {
  if (hashes.length === 0) return;
  const tx = app.redis.multi();
  for (const h of hashes) tx.incr(apiKeyVersionKey(app, h)).expire(apiKeyVersionKey(app, h), 86_400 * 30);
  const replies = await tx.exec();
  const failed = replies?.find(([err]) => err);
  if (failed) throw failed[0];
}
