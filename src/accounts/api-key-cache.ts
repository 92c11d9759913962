import { randomUUID } from 'node:crypto';
import type { Config } from '../config.js';
import { redisKey, type RedisClient } from '../infra/redis.js';
import type { KeyedAccount } from './key-grant.js';

const MAX_ENTRIES = 10_000;
/** Versions outlive any entry read under them (MAX_AGE_MS) by far; an expired one reads as null. */
const VERSION_TTL_SECONDS = 30 * 86_400;
/** A backstop only: entries are checked against their account's version on every use. */
const MAX_AGE_MS = 5 * 60_000;

interface Entry {
  /** Which account the key belongs to: a fact that never changes once the key exists. */
  accountId: string;
  /** The account as read from Postgres under `version`; absent until a read could be tied to one. */
  account?: KeyedAccount;
  version?: string | null;
  cachedAt: number;
}

/** A cached account together with the version it was read under, for a caller to confirm in Redis. */
export interface CachedAccount {
  account: KeyedAccount;
  /** The account's version key and the value it held when the account was read (null: no version yet). */
  versionKey: string;
  version: string | null;
}

/**
 * Accounts by API key hash, in each web process, so a request costs one Redis GET instead of a
 * Postgres query, or nothing at all where the caller confirms the version inside a script it runs
 * anyway (the chat route's admission). Every account has a version in Redis, bumped after each
 * change that matters to a request (a key revoked, the tier changed): an entry is used only while
 * the version it was read under is current, so a change applies to the next request on every
 * process. The version is read before Postgres, so a change committed in between leaves a stale
 * version behind, never a stale entry; that is why a key is first only tied to its account, and
 * the account is cached from the next read on. Redis forgets versions when it restarts, so a lost
 * connection empties the cache. Only what a request is decided on (the account id, its tier, that
 * it is verified, and the key's own settings: ApiKeyGrant) is kept current this way; handlers read
 * anything else by account id.
 */
export class ApiKeyCache {
  private readonly entries = new Map<string, Entry>();

  /** The account a key hash is known to belong to, if this process has seen it. */
  accountIdOf(hash: string): string | undefined {
    return this.entries.get(hash)?.accountId;
  }

  /** The cached account while `version` is still the one it was read under. */
  get(hash: string, version: string | null): KeyedAccount | undefined {
    const e = this.fresh(hash);
    if (!e?.account) return undefined;
    if (e.version !== version) {
      this.forget(hash);
      return undefined;
    }
    return e.account;
  }

  /** The cached account and its version, unconfirmed: the caller must check the version in Redis. */
  peek(config: Pick<Config, 'redis'>, hash: string): CachedAccount | undefined {
    const e = this.fresh(hash);
    if (!e?.account || e.version === undefined) return undefined;
    return { account: e.account, versionKey: accountVersionKey(config, e.accountId), version: e.version };
  }

  /** Ties a key to its account without caching the account (no version was read before it). */
  learn(hash: string, accountId: string): void {
    if (!this.entries.has(hash)) this.put(hash, { accountId, cachedAt: performance.now() });
  }

  set(hash: string, account: KeyedAccount, version: string | null): void {
    this.put(hash, { accountId: account.id, account, version, cachedAt: performance.now() });
  }

  /** Drops the cached account (its version moved on); the key stays tied to its account. */
  forget(hash: string): void {
    const e = this.entries.get(hash);
    if (e) this.entries.set(hash, { accountId: e.accountId, cachedAt: e.cachedAt });
  }

  clear(): void {
    this.entries.clear();
  }

  private fresh(hash: string): Entry | undefined {
    const e = this.entries.get(hash);
    if (e?.account && performance.now() - e.cachedAt > MAX_AGE_MS) {
      this.forget(hash);
      return undefined;
    }
    return e;
  }

  private put(hash: string, entry: Entry): void {
    // Oldest first out: a Map iterates in insertion order.
    if (this.entries.size >= MAX_ENTRIES && !this.entries.has(hash))
      this.entries.delete(this.entries.keys().next().value!);
    this.entries.set(hash, entry);
  }
}

/**
 * One version per account. The hash tag is the account id, as on the limiter's keys, so a script
 * can read it next to them on a Redis Cluster too.
 */
export function accountVersionKey(config: Pick<Config, 'redis'>, accountId: string): string {
  return redisKey(config.redis.prefix, 'authv', `{${accountId}}`);
}

/** What a version starts with while a change to the account is being committed. */
const CHANGING = 'changing:';
/** A changing mark outlives any transaction and every entry cached before it (MAX_AGE_MS). */
const CHANGING_TTL_SECONDS = 3600;

/** True for the mark of a change not yet settled: nothing is cached under it. */
export const isChangingVersion = (version: string | null): boolean => version?.startsWith(CHANGING) ?? false;

/**
 * Before committing a change that must reach every process (a key revoked): a version no entry
 * was read under, and under which no process caches the account, so a read racing the commit
 * caches nothing. Throws when Redis refuses it, so the caller can abandon the change; the
 * version set after the commit ends the mark, and if that fails the account is simply not
 * cached until the mark expires.
 */
export async function markAccountChanging(
  deps: { redis: RedisClient; config: Pick<Config, 'redis'> },
  accountId: string,
): Promise<void> {
  await deps.redis.set(
    accountVersionKey(deps.config, accountId),
    `${CHANGING}${randomUUID()}`,
    'EX',
    CHANGING_TTL_SECONDS,
  );
}

/**
 * After a committed change to what an account's keys grant: every process re-reads them on next
 * use. A new random value rather than a counter: a version that expired and was set again can
 * never come back equal to one an entry was read under.
 */
export async function bumpAccountVersion(
  deps: { redis: RedisClient; config: Pick<Config, 'redis'> },
  accountId: string,
): Promise<void> {
  await deps.redis.set(accountVersionKey(deps.config, accountId), randomUUID(), 'EX', VERSION_TTL_SECONDS);
}
