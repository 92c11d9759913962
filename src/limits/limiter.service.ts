import type { Config, TierLimits } from '../config.js';
import type { Clock } from '../clock.js';
import type { LimiterMetrics } from '../metrics.js';
import { dependencyDown, type OutageLog } from '../infra/outage.js';
import type { Tier } from '../../db/schema/index.js';
import { systemClock } from '../clock.js';
import type { Db } from '../infra/db.js';
import { AppError, describeReset, retryAdvice } from '../errors.js';
import { redisKey, type RedisClient } from '../infra/redis.js';
import { redisScript, runScript } from '../infra/redis-scripts.js';
import { monthOf, type Month } from '../calendar.js';
import { ledgerSpendNanoUsd } from '../usage/month-spend.service.js';
import { usdOfNano } from '../usage/usage-cost.js';
import { limitsForTier } from './tier-limits.js';
import { rateLimitHeaders, ceilSeconds, nearestWindow, windowHeaders, type RequestWindow } from './limit-headers.js';
import { ADMIT_LUA, COOLDOWN_LUA, SETTLE_LUA, WINDOW_COUNT_LUA } from './limiter.scripts.js';

// Fixed UTC windows (see limiter.scripts.ts): exact counts, O(1) state per account, and resets a
// client can predict. The known cost is a burst at a boundary: up to twice a window's limit in a
// short span around it (for example 20 requests at 12:00:59 and 20 more at 12:01:00).

const MINUTE = 60_000;
const HOUR = 3_600_000;
const DAY = 86_400_000;

/**
 * The wait asked for when only reservations of requests in flight fill a quota: they free it as
 * they end, usually within seconds, and nothing tells when. Short enough that the SDKs' default
 * two retries cover a few seconds of it.
 */
export const IN_FLIGHT_RETRY_MS = 2_000;

export type RejectionReason = 'requests' | 'tokens' | 'spend';

export interface Admission {
  allowed: boolean;
  reason?: RejectionReason;
  /** 0 when allowed; otherwise whole seconds (>= 1) until a retry can succeed. */
  retryAfterSeconds: number;
  /** On a refusal: the limiter's time (epoch ms), for messages that name the reset time. */
  now?: number;
  /** On a refusal for requests (or by a held spending limit, when one is spent too): the window. */
  window?: { name: RequestWindow['name']; limit: number; ofKey?: boolean };
  /**
   * Refused for tokens or spend that settled usage leaves room for but reservations of requests
   * in flight fill: a retry succeeds once enough of them end, so the wait asked for is short.
   */
  heldInFlight?: boolean;
  /**
   * Refused because the request alone needs more tokens than the tier's whole daily quota: no
   * wait helps, only a smaller request. Retry-After still says when the quota next resets.
   */
  exceedsDailyQuota?: { requested: number; quota: number };
  /**
   * Refused by the monthly spending limit (reason 'spend'): the limit, what the month's settled
   * spend and live reservations already hold of it, and what this request would have reserved.
   */
  spend?: SpendRefusal;
  /** Put every one on the response, admitted or not; on a rejection it includes Retry-After. */
  headers: Record<string, string>;
}

export interface SpendRefusal {
  limitNanoUsd: bigint;
  usedNanoUsd: bigint;
  reserveNanoUsd: bigint;
  month: Month;
  /** Refused by the API key's own limit (within the account's), not the account's. */
  ofKey?: boolean;
  /**
   * The month's first refusal by the limit of a request that would fit an unspent limit: the
   * moment to tell the account its limit is reached (alertSpendLimitReached, billing/spend-alerts.service.ts).
   */
  firstThisMonth: boolean;
}

/**
 * The monthly spending limits an admission checks, on the paid tier: the account's, when it set
 * one, and the API key's own (AdmitInput.key), when it has one.
 */
export interface SpendCheck {
  /** The account's limit; null when only the key has one. */
  limitNanoUsd: bigint | null;
  /** The most the request can cost: its prompt tokens and completion budget at the model's prices. */
  reserveNanoUsd: bigint;
  /** When the request was admitted (epoch ms, the ledger's created_at): its month is the one charged. */
  admittedAt: number;
}

export interface AdmitInput {
  accountId: string;
  tier: Tier;
  /** Identifies this request's token reservation; settle() with the same id releases it. */
  requestId: string;
  /** Tokens held until settle(): prompt tokens + (max_tokens ?? default reservation) x n. */
  reserveTokens: number;
  /**
   * Admit only while this key holds this value (null: the key is absent), checked in the same
   * script, so a caller can act on something it cached without a round trip of its own. The key
   * must share the account's hash tag ({accountId}). Otherwise admit() throws GuardChanged.
   */
  guard?: { key: string; value: string | null };
  /** The account's monthly spending limit, when it has one that applies. */
  spend?: SpendCheck;
  /**
   * The API key's own limits: requests per minute, counted beside the tier's windows, and a monthly
   * spending limit, checked within the account's (which, with the tier, stays the ceiling). The
   * spending limit applies only with `spend`, which carries the request's most possible cost.
   */
  key?: { id: string; requestsPerMinute?: number; spendLimitNanoUsd?: bigint };
}

/** The admission's guard key no longer held the expected value; nothing was counted or reserved. */
export class GuardChanged extends Error {
  constructor() {
    super('the admission guard changed');
    this.name = 'GuardChanged';
  }
}

export interface SettleInput {
  accountId: string;
  requestId: string;
  /** Prompt plus completion tokens actually used (0 if none were produced). */
  actualTokens: number;
  /**
   * What the request actually cost (0 if nothing) and when it was admitted, which names the month
   * its spend reservation was held in. Without it only the tokens are settled.
   */
  spend?: { costNanoUsd: bigint; admittedAt: number };
  /** The API key that made the request: its own month's spend gets the cost too. */
  keyId?: string;
}

/** One month of an account's spend as the limiter holds it (nano-USD). */
export interface MonthSpend {
  /** Settled this month (seeded from the ledger, then every settlement added). */
  spentNanoUsd: bigint;
  /** Held by the reservations of requests in flight. */
  heldNanoUsd: bigint;
}

/** What the limiter works with: Redis, the clock its windows use, its configuration, its metrics. */
export interface LimiterDeps {
  redis: RedisClient;
  /** The ledger, read when a month's spend is missing from Redis. */
  db: Db;
  clock: Clock;
  config: Pick<Config, 'redis' | 'limits' | 'auth'>;
  metrics: { limiter: LimiterMetrics };
  outages: { redis: OutageLog; postgres: OutageLog };
}

const ADMIT = redisScript('limits-admit', ADMIT_LUA);
const SETTLE = redisScript('limits-settle', SETTLE_LUA);
const COOLDOWN = redisScript('limits-cooldown', COOLDOWN_LUA);
const WINDOW_COUNT = redisScript('limits-window-count', WINDOW_COUNT_LUA);

/** '' tells the scripts to read Redis's TIME: production processes then share one clock. */
export const scriptNow = (app: Pick<LimiterDeps, 'clock'>): string =>
  app.clock === systemClock ? '' : String(app.clock.now().getTime());

// The hash tag keeps every key of one account in one cluster slot, as a multi-key script needs.
const accountKey = (config: Pick<Config, 'redis'>, accountId: string, ...parts: string[]): string =>
  redisKey(config.redis.prefix, 'limits', `{${accountId}}`, ...parts);

export function usageKeys(
  config: Pick<Config, 'redis'>,
  accountId: string,
): [counters: string, reservations: string, reserved: string] {
  return [
    accountKey(config, accountId, 'counters'),
    accountKey(config, accountId, 'reservations'),
    accountKey(config, accountId, 'reserved'),
  ];
}

/** The hash holding an account's spend of one UTC month (see SPEND in limiter.scripts.ts). */
const spendKey = (config: Pick<Config, 'redis'>, accountId: string, month: Month): string =>
  accountKey(config, accountId, 'spend', month.key);

function unavailable(app: LimiterDeps, err: unknown): AppError {
  app.metrics.limiter.unavailable.inc();
  return dependencyDown(err, { log: app.outages.redis, source: 'rate limiter' });
}

function requireId(name: string, value: string): void {
  if (typeof value !== 'string' || value.length === 0) throw new TypeError(`${name} must be a non-empty string`);
}

function requireTokenCount(name: string, value: number): void {
  if (!Number.isSafeInteger(value) || value < 0)
    throw new TypeError(`${name} must be a non-negative integer (got ${value})`);
}

/**
 * Admits or refuses one chat completion request for an account, counting it in the minute, hour
 * and day windows, reserving its tokens against the day's quota and, with a spending limit, its
 * most possible cost against what is left of the month's, all in one atomic script (one round
 * trip; a second, after a read of the ledger, only when Redis has no figure for the month).
 * Throws AppError 'unavailable' (503) when Redis (or, for that read, Postgres) cannot be reached,
 * and GuardChanged when the input's guard no longer holds.
 */
async function admit(app: LimiterDeps, input: AdmitInput): Promise<Admission> {
  requireId('accountId', input.accountId);
  requireId('requestId', input.requestId);
  requireTokenCount('reserveTokens', input.reserveTokens);
  if (input.spend) {
    if (input.spend.limitNanoUsd !== null) requireNano('spend.limitNanoUsd', input.spend.limitNanoUsd);
    requireNano('spend.reserveNanoUsd', input.spend.reserveNanoUsd);
  }
  const key = input.key;
  if (key) requireId('key.id', key.id);
  if (key?.spendLimitNanoUsd !== undefined) requireNano('key.spendLimitNanoUsd', key.spendLimitNanoUsd);
  const accountLimit = input.spend?.limitNanoUsd ?? null;
  const keyLimit = input.spend ? (key?.spendLimitNanoUsd ?? null) : null;
  const limits = limitsForTier(app.config, input.tier);
  const keys = usageKeys(app.config, input.accountId);
  const month = monthOf(input.spend ? new Date(input.spend.admittedAt) : app.clock.now());
  const scriptKeys = [
    ...keys,
    // Unguarded, the fourth key is only a placeholder in the same slot; the script does not read it.
    input.guard?.key ?? keys[0],
    spendKey(app.config, input.accountId, month),
    // Without a key's own minute, a placeholder in the same slot; the script does not read it.
    key?.requestsPerMinute !== undefined ? accountKey(app.config, input.accountId, 'key', key.id) : keys[0],
  ];
  const call = (seed: { account?: bigint; key?: bigint }) =>
    runScript(app.redis, ADMIT, scriptKeys, [
      scriptNow(app),
      limits.requestsPerMinute,
      limits.requestsPerHour,
      limits.requestsPerDay,
      limits.tokensPerDay,
      input.requestId,
      input.reserveTokens,
      app.config.limits.reservationTtlMs,
      input.guard ? '1' : '0',
      input.guard?.value ?? '',
      accountLimit === null ? '' : accountLimit.toString(),
      input.spend ? input.spend.reserveNanoUsd.toString() : '0',
      month.end.getTime(),
      seed.account === undefined ? '' : seed.account.toString(),
      key?.requestsPerMinute ?? '',
      keyLimit === null ? '' : keyLimit.toString(),
      seed.key === undefined ? '' : seed.key.toString(),
      key?.id ?? '',
    ]) as Promise<(number | string)[]>;
  let reply: (number | string)[];
  try {
    reply = await call({});
  } catch (err) {
    throw unavailable(app, err);
  }
  if (Number(reply[0]) === -2) {
    // A month's spend is not in Redis (its first limited request, or Redis lost it): the ledger
    // has it, and the script keeps whichever figure arrived first if two processes race here.
    const [accountSeed, keySeed] = await Promise.all([
      Number(reply[1]) === 1 ? ledgerSpend(app, input.accountId, month) : undefined,
      Number(reply[2]) === 1 && key ? ledgerSpend(app, input.accountId, month, key.id) : undefined,
    ]);
    try {
      reply = await call({ account: accountSeed, key: keySeed });
    } catch (err) {
      throw unavailable(app, err);
    }
  }
  if (Number(reply[0]) === -1) throw new GuardChanged();
  const keyWindow = key?.requestsPerMinute !== undefined && { limit: key.requestsPerMinute, used: Number(reply[11]) };
  const admission = toAdmission(limits, reply.slice(0, 8).map(Number), Number(reply[10]) === 1, keyWindow || undefined);
  if (!admission.allowed) {
    app.metrics.limiter.rejections.inc({ reason: admission.reason, tier: input.tier });
    const ofKey = Number(reply[1]) === 4;
    const limitNanoUsd = ofKey ? keyLimit : accountLimit;
    if (admission.reason === 'spend' && input.spend && limitNanoUsd !== null) {
      admission.spend = {
        limitNanoUsd,
        usedNanoUsd: BigInt(reply[8]!),
        reserveNanoUsd: input.spend.reserveNanoUsd,
        month,
        ...(ofKey ? { ofKey } : {}),
        firstThisMonth: Number(reply[9]) === 1,
      };
      // Unless requests in flight hold it, nothing but a new month (or a higher limit) helps.
      if (!admission.heldInFlight) {
        const { 'Retry-After': _wait, ...rest } = admission.headers;
        admission.headers = { ...rest, ...retryAdvice(null) };
      }
    }
    if (admission.reason === 'tokens' && input.reserveTokens > limits.tokensPerDay) {
      admission.exceedsDailyQuota = { requested: input.reserveTokens, quota: limits.tokensPerDay };
      // No wait helps this request: the reset time stays in X-RateLimit-Reset*, not in Retry-After.
      const { 'Retry-After': _wait, ...rest } = admission.headers;
      admission.headers = { ...rest, ...retryAdvice(null) };
    }
  }
  return admission;
}

/** The month's paid spend in the ledger: the account's, or with `keyId` that one key's. */
async function ledgerSpend(app: LimiterDeps, accountId: string, month: Month, keyId?: string): Promise<bigint> {
  try {
    const spent = await ledgerSpendNanoUsd(app.db, accountId, month, keyId);
    app.outages.postgres.recovered();
    return spent;
  } catch (err) {
    throw dependencyDown(err, { log: app.outages.postgres, source: 'spending limit' });
  }
}

function requireNano(name: string, value: bigint): void {
  if (typeof value !== 'bigint' || value < 0n || value > BigInt(Number.MAX_SAFE_INTEGER))
    throw new TypeError(`${name} must be a bigint from 0 to 2^53 - 1 (got ${String(value)})`);
}

function toAdmission(
  limits: TierLimits,
  reply: number[],
  heldInFlight: boolean,
  keyWindow?: { limit: number; used: number },
): Admission {
  const [allowed, reason, retryAfterMs, now, minuteCount, hourCount, dayCount, tokensUsed] = reply.map(Number) as [
    number,
    number,
    number,
    number,
    number,
    number,
    number,
    number,
  ];
  const until = (size: number) => (Math.floor(now / size) + 1) * size - now;
  const windows: RequestWindow[] = [
    { name: 'minute', limit: limits.requestsPerMinute, used: minuteCount, resetMs: until(MINUTE) },
    { name: 'hour', limit: limits.requestsPerHour, used: hourCount, resetMs: until(HOUR) },
    { name: 'day', limit: limits.requestsPerDay, used: dayCount, resetMs: until(DAY) },
  ];
  // The key's own minute: the headers show whichever window is nearer to running out.
  const ofKey: RequestWindow | undefined = keyWindow && { name: 'minute', ...keyWindow, resetMs: until(MINUTE) };
  if (ofKey) windows.push(ofKey);
  const tokens = { limit: limits.tokensPerDay, used: tokensUsed, resetMs: until(DAY) };
  if (allowed === 1) return { allowed: true, retryAfterSeconds: 0, headers: rateLimitHeaders(windows, tokens) };
  const refusing = nearestWindow(windows);
  const window = {
    window: { name: refusing.name, limit: refusing.limit, ...(refusing === ofKey ? { ofKey: true } : {}) },
  };
  // 3: the account's spending limit; 4: the API key's own.
  const spend = reason === 3 || reason === 4;
  if (spend && !heldInFlight)
    return { allowed: false, reason: 'spend', retryAfterSeconds: 0, now, headers: rateLimitHeaders(windows, tokens) };
  // Held by requests in flight: the script's wait covers only the request windows.
  const waitMs = heldInFlight ? Math.max(retryAfterMs, IN_FLIGHT_RETRY_MS) : retryAfterMs;
  return {
    allowed: false,
    reason: spend ? 'spend' : reason === 2 ? 'tokens' : 'requests',
    retryAfterSeconds: ceilSeconds(waitMs),
    now,
    ...(reason === 1 || (spend && retryAfterMs > 0) ? window : {}),
    ...(heldInFlight ? { heldInFlight } : {}),
    headers: rateLimitHeaders(windows, tokens, waitMs),
  };
}

/**
 * The error a route throws for a refused admission: 429 with the OpenAI-style body
 * (`rate_limit_exceeded`, or `insufficient_quota` for the daily tokens) and every rate-limit header.
 */
export function admissionError(admission: Admission): AppError {
  if (admission.allowed) throw new Error('admissionError called for an admitted request');
  if (admission.spend) return spendLimitError(admission, admission.spend);
  const tooLarge = admission.exceedsDailyQuota;
  if (tooLarge) {
    return new AppError(
      'insufficient_quota',
      `This request may use up to ${tooLarge.requested} tokens (its messages plus max_tokens for each of n choices), more than the whole daily token quota of ${tooLarge.quota}. ` +
        'Lower max_tokens or n, or shorten the messages; waiting will not help.',
      { code: 'insufficient_quota', headers: admission.headers },
    );
  }
  const wait = waitAdvice(admission);
  if (admission.reason === 'tokens' && admission.heldInFlight) {
    return new AppError(
      'insufficient_quota',
      `Requests of yours still in flight hold the rest of your daily token quota (each holds its messages plus max_tokens for each of n choices until it ends), so this request does not fit beside them. ` +
        `The quota frees as they finish. ${wait}`,
      { code: 'insufficient_quota', headers: admission.headers },
    );
  }
  if (admission.reason === 'tokens') {
    return new AppError(
      'insufficient_quota',
      `You have used your daily token quota, or this request's token reservation does not fit in what is left of it. ${wait}`,
      {
        code: 'insufficient_quota',
        headers: admission.headers,
      },
    );
  }
  const short = 'Retry-After' in admission.headers;
  const w = admission.window;
  if (w?.ofKey)
    return new AppError(
      'rate_limited',
      `Rate limit reached for this API key's requests (its own limit of ${w.limit} per minute; change it with PATCH /v1/keys/{id}). ${wait}`,
      { code: 'rate_limit_exceeded', headers: admission.headers },
    );
  const per = w && !short ? ` (${w.limit} per ${w.name})` : '';
  return new AppError('rate_limited', `Rate limit reached for requests${per}. ${wait}`, {
    code: 'rate_limit_exceeded',
    headers: admission.headers,
  });
}

/**
 * A wait of a minute or less is said in seconds, as Retry-After says it; a longer one (no
 * Retry-After then, see retryAdvice) by the moment the window resets.
 */
function waitAdvice(admission: Admission): string {
  if ('Retry-After' in admission.headers) return `Please try again in ${admission.retryAfterSeconds}s.`;
  const waitMs = admission.retryAfterSeconds * 1000;
  return `Try again ${describeReset(admission.now ?? Date.now(), waitMs)}; retrying sooner will not succeed.`;
}

const atMinute = (d: Date): string => d.toISOString().replace(/:\d\d\.\d{3}Z$/, 'Z');

/**
 * 429 insufficient_quota naming the limit, what is left of it and when it resets. A request that
 * alone may cost more than the whole limit is told to be smaller instead; one refused while
 * requests in flight hold the rest is told that it frees as they finish.
 */
function spendLimitError(admission: Admission, s: SpendRefusal): AppError {
  const headers = admission.headers;
  const limit = `$${usdOfNano(s.limitNanoUsd)}`;
  const most = `$${usdOfNano(s.reserveNanoUsd)}`;
  // The key's own limit is named as the key's, so nobody raises the account's limit in vain.
  const whose = s.ofKey ? "this API key's own" : 'your';
  const change = s.ofKey
    ? "Raise or remove the key's limit (limits.monthly_spend_limit_usd) with PATCH /v1/keys/{id}, or use another key"
    : 'Raise or remove the limit with PUT or DELETE /v1/billing/spend-limit';
  if (s.reserveNanoUsd > s.limitNanoUsd) {
    return new AppError(
      'insufficient_quota',
      `This request may cost up to ${most} (its messages plus max_tokens for each of n choices, at the model's prices), more than ${whose} whole monthly spending limit of ${limit}. ` +
        `Lower max_tokens or n, or shorten the messages. ${change}.`,
      { code: 'insufficient_quota', headers },
    );
  }
  const left = s.limitNanoUsd > s.usedNanoUsd ? s.limitNanoUsd - s.usedNanoUsd : 0n;
  if (admission.heldInFlight) {
    const window = admission.window;
    const also = window ? ` Your limit of ${window.limit} requests per ${window.name} is reached as well.` : '';
    return new AppError(
      'insufficient_quota',
      `Requests ${s.ofKey ? 'of this API key' : 'of yours'} still in flight hold part of ${whose} monthly spending limit of ${limit} until they end (each holds the most it may cost, then keeps only what it cost): $${usdOfNano(left)} of it is free now, and this request may cost up to ${most}. ` +
        `It frees as they finish.${also} ${waitAdvice(admission)}`,
      { code: 'insufficient_quota', headers },
    );
  }
  return new AppError(
    'insufficient_quota',
    `${s.ofKey ? 'This API key has reached its own' : 'You have reached your'} monthly spending limit of ${limit}: $${usdOfNano(left)} of it is left this month (requests in flight included), and this request may cost up to ${most}. ` +
      `The limit resets at ${atMinute(s.month.end)} (UTC). ${change}, or lower max_tokens.`,
    { code: 'insufficient_quota', headers },
  );
}

function settleKeysAndArgs(app: LimiterDeps, input: SettleInput): [string[], (string | number)[]] {
  const keys = usageKeys(app.config, input.accountId);
  const scriptKeys = [
    ...keys,
    accountKey(app.config, input.accountId, 'settled', input.requestId),
    input.spend ? spendKey(app.config, input.accountId, monthOf(new Date(input.spend.admittedAt))) : keys[0],
  ];
  return [
    scriptKeys,
    [
      scriptNow(app),
      input.requestId,
      input.actualTokens,
      app.config.limits.settledMarkerTtlMs,
      input.spend ? input.spend.costNanoUsd.toString() : '',
      input.keyId ?? '',
    ],
  ];
}

/**
 * Replaces a request's reservation with the tokens it actually used (completed, cancelled or
 * failed). Idempotent per requestId. One round trip. Throws AppError 'unavailable' without Redis.
 */
async function settle(app: LimiterDeps, input: SettleInput): Promise<void> {
  requireId('accountId', input.accountId);
  requireId('requestId', input.requestId);
  requireTokenCount('actualTokens', input.actualTokens);
  if (input.spend) requireNano('spend.costNanoUsd', input.spend.costNanoUsd);
  if (input.keyId !== undefined) requireId('keyId', input.keyId);
  try {
    await runScript(app.redis, SETTLE, ...settleKeysAndArgs(app, input));
  } catch (err) {
    throw unavailable(app, err);
  }
}

/**
 * The month's spend as Redis holds it, or undefined when it was never seeded (or Redis lost it):
 * the account's, or with `keyId` that API key's own.
 */
async function monthSpend(
  app: LimiterDeps,
  accountId: string,
  month: Month,
  keyId?: string,
): Promise<MonthSpend | undefined> {
  requireId('accountId', accountId);
  const field = (name: string) => (keyId === undefined ? name : `k:${keyId}:${name}`);
  let fields: (string | null)[];
  try {
    fields = await app.redis.hmget(spendKey(app.config, accountId, month), field('spent'), field('held'));
  } catch (err) {
    throw unavailable(app, err);
  }
  const [spent, held] = fields;
  if (spent === null || spent === undefined) return undefined;
  return { spentNanoUsd: BigInt(spent), heldNanoUsd: BigInt(held ?? '0') };
}

/**
 * The key-regeneration limit: one per config.auth.regenerateWindowMs (2 hours) per account, as a
 * sliding cooldown: the next regeneration is allowed exactly that long after the last allowed one.
 * An allowed call counts at once, so call it just before regenerating.
 */
async function admitKeyRegeneration(
  app: LimiterDeps,
  accountId: string,
): Promise<{ allowed: boolean; retryAfterSeconds: number }> {
  requireId('accountId', accountId);
  let reply: number[];
  try {
    reply = (await runScript(
      app.redis,
      COOLDOWN,
      [accountKey(app.config, accountId, 'key-regeneration')],
      [scriptNow(app), app.config.auth.regenerateWindowMs],
    )) as number[];
  } catch (err) {
    throw unavailable(app, err);
  }
  const [allowed, retryAfterMs] = reply.map(Number) as [number, number];
  return allowed === 1
    ? { allowed: true, retryAfterSeconds: 0 }
    : { allowed: false, retryAfterSeconds: ceilSeconds(retryAfterMs) };
}

/** When the account may regenerate its key next: undefined when it may now (read without counting). */
async function nextKeyRegeneration(app: LimiterDeps, accountId: string): Promise<Date | undefined> {
  requireId('accountId', accountId);
  let last: string | null;
  try {
    last = await app.redis.get(accountKey(app.config, accountId, 'key-regeneration'));
  } catch (err) {
    throw unavailable(app, err);
  }
  if (last === null) return undefined;
  const next = new Date(Number(last) + app.config.auth.regenerateWindowMs);
  return next.getTime() > app.clock.now().getTime() ? next : undefined;
}

/**
 * Counts one read of a completion (a retrieval or a resumed stream) against the account's
 * COMPLETION_READS_PER_MINUTE, in fixed UTC minutes like the request windows, separate from
 * them: reading back spends no completion request. Resolves with the X-RateLimit-* headers;
 * refused, throws 429 `rate_limit_exceeded` carrying them and Retry-After (a minute's wait at most).
 */
async function admitCompletionRead(app: LimiterDeps, accountId: string): Promise<Record<string, string>> {
  requireId('accountId', accountId);
  const limit = app.config.limits.completionReads.perMinute;
  let reply: number[];
  try {
    reply = (await runScript(
      app.redis,
      WINDOW_COUNT,
      [accountKey(app.config, accountId, 'reads')],
      [scriptNow(app), limit, MINUTE],
    )) as number[];
  } catch (err) {
    throw unavailable(app, err);
  }
  const [allowed, used, resetMs] = reply.map(Number) as [number, number, number];
  if (allowed === 1) return windowHeaders({ limit, used, resetMs });
  throw new AppError(
    'rate_limited',
    `Rate limit reached for reading completions back (${limit} per minute, retrievals and resumed streams together). Please try again in ${ceilSeconds(resetMs)}s.`,
    { code: 'rate_limit_exceeded', headers: windowHeaders({ limit, used, resetMs }, resetMs) },
  );
}

/**
 * The rate limits, token quota and spending limit of every account, built once per process over
 * its command connection: admission, settlement and the key regeneration cooldown, each one Redis
 * round trip, each on the keys of one account (one hash slot).
 */
export class Limiter {
  constructor(private readonly deps: LimiterDeps) {}

  /** See admit() above: counts the request and reserves its tokens, or refuses it. */
  admit(input: AdmitInput): Promise<Admission> {
    return admit(this.deps, input);
  }

  /** Replaces a request's reservation with the tokens it used; idempotent per request. */
  settle(input: SettleInput): Promise<void> {
    return settle(this.deps, input);
  }

  /** One month of an account's (or one of its API keys') spend as the spending limits count it (one round trip). */
  monthSpend(accountId: string, month: Month, keyId?: string): Promise<MonthSpend | undefined> {
    return monthSpend(this.deps, accountId, month, keyId);
  }

  /**
   * Lets the next refusal by the spending limit count as the month's first again: for a caller
   * that could not record the first one (its alert is then not lost, only later).
   */
  async forgetSpendRefusal(accountId: string, month: Month): Promise<void> {
    await this.deps.redis.hdel(spendKey(this.deps.config, accountId, month), 'stop');
  }

  /** See admitCompletionRead() above: the headers when admitted; a 429 AppError when not. */
  admitCompletionRead(accountId: string): Promise<Record<string, string>> {
    return admitCompletionRead(this.deps, accountId);
  }

  admitKeyRegeneration(accountId: string): Promise<{ allowed: boolean; retryAfterSeconds: number }> {
    return admitKeyRegeneration(this.deps, accountId);
  }

  /** See nextKeyRegeneration() above. */
  nextKeyRegeneration(accountId: string): Promise<Date | undefined> {
    return nextKeyRegeneration(this.deps, accountId);
  }
}
