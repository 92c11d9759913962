import { expect } from 'chai';
import { randomUUID } from 'node:crypto';
import type { Redis } from 'ioredis';
import { createContext, type AppContext } from '../../src/context.js';
import { ManualClock } from '../../src/clock.js';
import type { Config } from '../../src/config.js';
import type { Tier } from '../../db/schema/index.js';
import { admissionError, IN_FLIGHT_RETRY_MS, type Admission } from '../../src/limits/limiter.service.js';
import { authenticateApiKey } from '../../src/accounts/auth.service.js';
import { generateApiKey } from '../../src/accounts/api-keys.js';
import { createTestAccount } from '../support/accounts.js';
import { isolatedPrefix, ONE_REDIS_SERVER, testConfig } from '../support/env.js';
import { eventually } from '../support/http.js';
import { keysEverywhere } from '../support/redis-cluster.js';
import { monitorRedis } from '../support/redis-monitor.js';

const MINUTE = 60_000;
const HOUR = 3_600_000;
const DAY = 86_400_000;
const MIDNIGHT = Date.parse('2026-11-02T00:00:00Z');

describe('rate limiter and token quota', () => {
  let config: Config;
  let clock: ManualClock;
  let app: AppContext;
  const extra: AppContext[] = [];

  const context = async (): Promise<AppContext> => {
    const c = createContext(config, { role: 'web', clock });
    extra.push(c);
    await c.warmUp([c.redis]);
    return c;
  };

  beforeEach(async () => {
    config = testConfig({ REDIS_PREFIX: isolatedPrefix() });
    clock = new ManualClock(MIDNIGHT);
    app = createContext(config, { role: 'web', clock });
    await app.warmUp([app.redis]);
  });
  afterEach(async () => {
    await Promise.all(extra.splice(0).map((c) => c.close()));
    await app.close();
  });

  const request = (
    accountId: string,
    opts: { tier?: Tier; reserve?: number; requestId?: string; on?: AppContext } = {},
  ): Promise<Admission> =>
    (opts.on ?? app).limiter.admit({
      accountId,
      tier: opts.tier ?? 'free',
      requestId: opts.requestId ?? randomUUID(),
      reserveTokens: opts.reserve ?? 10,
    });

  async function admitMany(accountId: string, count: number, opts: { tier?: Tier } = {}): Promise<Admission[]> {
    const out: Admission[] = [];
    for (let i = 0; i < count; i++) out.push(await request(accountId, opts));
    return out;
  }

  /** Fills `minutes` whole minutes of the current hour with 20 requests each. */
  async function fillMinutes(accountId: string, minutes: number): Promise<void> {
    for (let i = 0; i < minutes; i++) {
      const batch = await admitMany(accountId, 20);
      expect(
        batch.every((a) => a.allowed),
        `minute ${i} admits all 20`,
      ).to.equal(true);
      clock.advance(MINUTE);
    }
  }

  describe('request windows (free tier)', () => {
    it('admits exactly 20 requests in a minute, then answers 429 with the minute window in the headers', async () => {
      const account = randomUUID();
      clock.set(MIDNIGHT + 15_000);
      const admitted = await admitMany(account, 20);
      expect(admitted.every((a) => a.allowed)).to.equal(true);
      expect(admitted[0]!.headers).to.include({
        'X-RateLimit-Limit': '20',
        'X-RateLimit-Remaining': '19',
        'X-RateLimit-Reset': '45',
      });
      expect(admitted[19]!.headers).to.include({ 'X-RateLimit-Limit': '20', 'X-RateLimit-Remaining': '0' });
      expect(admitted[19]!.headers).not.to.have.property('Retry-After');

      clock.advance(5_500);
      const refused = await request(account);
      expect(refused).to.deep.include({ allowed: false, reason: 'requests', retryAfterSeconds: 40 });
      expect(refused.headers).to.deep.equal({
        'X-RateLimit-Limit': '20',
        'X-RateLimit-Remaining': '0',
        'X-RateLimit-Reset': '40',
        'x-ratelimit-limit-requests': '20',
        'x-ratelimit-remaining-requests': '0',
        'x-ratelimit-reset-requests': '40s',
        'x-ratelimit-limit-tokens': '100000',
        'x-ratelimit-remaining-tokens': String(100_000 - 20 * 10),
        'x-ratelimit-reset-tokens': '23h59m40s',
        'Retry-After': '40',
      });
    });

    it('opens the next minute window at the UTC minute boundary', async () => {
      const account = randomUUID();
      await admitMany(account, 20);
      clock.set(MIDNIGHT + MINUTE - 1);
      expect((await request(account)).allowed).to.equal(false);
      clock.set(MIDNIGHT + MINUTE);
      const next = await request(account);
      expect(next.allowed).to.equal(true);
      expect(next.headers['X-RateLimit-Remaining']).to.equal('19');
    });

    it('maps a refusal to a 429 rate_limit_exceeded error carrying every header', async () => {
      const account = randomUUID();
      await admitMany(account, 20);
      const err = admissionError(await request(account));
      expect(err.status).to.equal(429);
      expect(err.toBody()).to.deep.equal({
        error: {
          message: 'Rate limit reached for requests. Please try again in 60s.',
          type: 'rate_limit_exceeded',
          code: 'rate_limit_exceeded',
          param: null,
        },
      });
      expect(err.headers).to.include({ 'Retry-After': '60', 'X-RateLimit-Remaining': '0' });
    });

    it('admits exactly 100 requests in an hour and reports the hour window once it is the nearest to running out', async () => {
      const account = randomUUID();
      await fillMinutes(account, 5);
      const refused = await request(account);
      expect(refused).to.deep.include({ allowed: false, reason: 'requests', retryAfterSeconds: 55 * 60 });
      // A wait of 55 minutes is not a Retry-After (an SDK would sleep through it): x-should-retry: false instead.
      expect(refused.headers).to.include({
        'X-RateLimit-Limit': '100',
        'X-RateLimit-Remaining': '0',
        'X-RateLimit-Reset': String(55 * 60),
        'x-should-retry': 'false',
      });
      expect(refused.headers).not.to.have.property('Retry-After');
      expect(refused.headers['x-ratelimit-reset-requests']).to.equal('55m0s');
      clock.set(MIDNIGHT + HOUR);
      expect((await request(account)).allowed).to.equal(true);
    });

    it('admits exactly 500 requests in a UTC day, then refuses until midnight', async () => {
      const account = randomUUID();
      for (let hour = 0; hour < 5; hour++) {
        clock.set(MIDNIGHT + hour * HOUR);
        await fillMinutes(account, 5);
      }
      clock.set(MIDNIGHT + 5 * HOUR + 30 * MINUTE);
      const refused = await request(account);
      expect(refused).to.deep.include({
        allowed: false,
        reason: 'requests',
        retryAfterSeconds: DAY / 1000 - 5.5 * 3600,
      });
      expect(refused.headers).to.include({
        'X-RateLimit-Limit': '500',
        'X-RateLimit-Remaining': '0',
        'x-ratelimit-reset-requests': '18h30m0s',
      });
      clock.set(MIDNIGHT + DAY);
      const tomorrow = await request(account);
      expect(tomorrow.allowed).to.equal(true);
      expect(tomorrow.headers['X-RateLimit-Remaining']).to.equal('19');
    });

    it('counts refused requests in no window', async () => {
      const account = randomUUID();
      await admitMany(account, 20);
      for (let i = 0; i < 5; i++) expect((await request(account)).allowed).to.equal(false);
      clock.advance(MINUTE);
      const next = await request(account);
      expect(next.allowed).to.equal(true);
      // 21 admitted this hour: the 5 refusals were not counted.
      expect(next.headers['X-RateLimit-Remaining']).to.equal('19');
      await admitMany(account, 19);
      clock.advance(MINUTE);
      await admitMany(account, 20);
      clock.advance(MINUTE);
      await admitMany(account, 20);
      clock.advance(MINUTE);
      const last = await admitMany(account, 20);
      expect(last.map((a) => a.allowed).filter(Boolean)).to.have.length(20);
      expect(last[19]!.headers).to.include({ 'X-RateLimit-Limit': '100', 'X-RateLimit-Remaining': '0' });
    });

    it('counts rejections by reason and tier in the metrics registry', async () => {
      const account = randomUUID();
      await admitMany(account, 20);
      await request(account);
      await request(account);
      const metric = await app.metrics.registry.getSingleMetric('rate_limit_rejections_total')!.get();
      expect(metric.values).to.deep.include({ value: 2, labels: { reason: 'requests', tier: 'free' } });
    });
  });

  describe('accounts and tiers', () => {
    it('keeps separate counters for separate accounts', async () => {
      const a = randomUUID();
      await admitMany(a, 20);
      expect((await request(a)).allowed).to.equal(false);
      expect((await request(randomUUID())).allowed).to.equal(true);
    });

    it('keeps the counters when the account’s API key is replaced, because they belong to the account', async () => {
      const { apiKey, account } = await createTestAccount(app);
      const viaOldKey = await authenticateApiKey(app, apiKey);
      await admitMany(viaOldKey.id, 20, { tier: viaOldKey.tier });

      await app.db
        .updateTable('api_keys')
        .set({ revoked_at: clock.now() })
        .where('account_id', '=', account.id)
        .execute();
      const fresh = generateApiKey();
      await app.db
        .insertInto('api_keys')
        .values({ account_id: account.id, key_hash: fresh.hash, display_prefix: fresh.displayPrefix })
        .execute();
      const viaNewKey = await authenticateApiKey(app, fresh.key);

      const refused = await request(viaNewKey.id, { tier: viaNewKey.tier });
      expect(refused).to.deep.include({ allowed: false, reason: 'requests' });
    });

    it('applies a tier change from the next request, on the same counters', async () => {
      const account = randomUUID();
      await admitMany(account, 20);
      expect((await request(account, { tier: 'free' })).allowed).to.equal(false);
      const upgraded = await request(account, { tier: 'paid' });
      expect(upgraded.allowed).to.equal(true);
      expect(upgraded.headers).to.include({
        'X-RateLimit-Limit': String(config.limits.paid.requestsPerMinute),
        'X-RateLimit-Remaining': String(config.limits.paid.requestsPerMinute - 21),
      });
      expect(upgraded.headers['x-ratelimit-limit-tokens']).to.equal(String(config.limits.paid.tokensPerDay));
      const downgraded = await request(account, { tier: 'free' });
      expect(downgraded).to.deep.include({ allowed: false, reason: 'requests' });
    });
  });

  describe('daily token quota', () => {
    it('holds each reservation until settle, and refuses a request that does not fit beside them with a short Retry-After', async () => {
      const account = randomUUID();
      const first = await request(account, { reserve: 40_000 });
      expect(first.headers['x-ratelimit-remaining-tokens']).to.equal('60000');
      expect((await request(account, { reserve: 40_000 })).headers['x-ratelimit-remaining-tokens']).to.equal('20000');

      clock.advance(1000);
      const refused = await request(account, { reserve: 40_000 });
      // Nothing is settled: the two requests in flight hold the quota and free it as they end.
      expect(refused).to.deep.include({
        allowed: false,
        reason: 'tokens',
        heldInFlight: true,
        retryAfterSeconds: IN_FLIGHT_RETRY_MS / 1000,
      });
      expect(refused.headers).to.include({
        'x-ratelimit-limit-tokens': '100000',
        'x-ratelimit-remaining-tokens': '20000',
        'Retry-After': String(IN_FLIGHT_RETRY_MS / 1000),
      });
      expect(refused.headers).not.to.have.property('x-should-retry');
      const err = admissionError(refused);
      expect(err.status).to.equal(429);
      expect((err.toBody() as { error: { type: string; code: string } }).error).to.include({
        type: 'insufficient_quota',
        code: 'insufficient_quota',
      });
      expect(refused.exceedsDailyQuota).to.equal(undefined);
      expect(err.message).to.equal(
        'Requests of yours still in flight hold the rest of your daily token quota (each holds its messages plus max_tokens for each of n choices until it ends), ' +
          'so this request does not fit beside them. The quota frees as they finish. Please try again in 2s.',
      );
    });

    it('says no retry succeeds before midnight when settled usage alone leaves no room, whatever is in flight', async () => {
      const account = randomUUID();
      const settled = randomUUID();
      clock.set(MIDNIGHT + 20 * HOUR);
      await request(account, { reserve: 70_000, requestId: settled });
      await app.limiter.settle({ accountId: account, requestId: settled, actualTokens: 70_000 });
      await request(account, { reserve: 20_000 });
      const refused = await request(account, { reserve: 40_000 });
      expect(refused).to.deep.include({ allowed: false, reason: 'tokens', retryAfterSeconds: 4 * 3600 });
      expect(refused.heldInFlight).to.equal(undefined);
      expect(refused.headers).to.include({ 'x-should-retry': 'false' }).and.not.have.property('Retry-After');
      expect(admissionError(refused).message).to.match(
        /Try again at 2026-11-03T00:00:00Z \(in 4 h 0 min\); retrying sooner will not succeed\.$/,
      );
    });

    it('reports a spent request window, and waits for it, when it outlasts tokens held in flight', async () => {
      const account = randomUUID();
      clock.set(MIDNIGHT + 30_000);
      await request(account, { reserve: 95_000 });
      await admitMany(account, 19, { tier: 'free' });
      const refused = await request(account, { reserve: 10_000 });
      expect(refused).to.deep.include({
        allowed: false,
        reason: 'requests',
        heldInFlight: true,
        retryAfterSeconds: 30,
      });
      expect(refused.headers).to.include({ 'Retry-After': '30' });
    });

    it('frees tokens when a request settles below its reservation', async () => {
      const account = randomUUID();
      const id = randomUUID();
      await request(account, { reserve: 60_000, requestId: id });
      expect((await request(account, { reserve: 50_000 })).allowed).to.equal(false);
      await app.limiter.settle({ accountId: account, requestId: id, actualTokens: 10_000 });
      const after = await request(account, { reserve: 50_000 });
      expect(after.allowed).to.equal(true);
      expect(after.headers['x-ratelimit-remaining-tokens']).to.equal('40000');
    });

    it('charges more when a request settles above its reservation', async () => {
      const account = randomUUID();
      const id = randomUUID();
      await request(account, { reserve: 1_000, requestId: id });
      await app.limiter.settle({ accountId: account, requestId: id, actualTokens: 95_000 });
      const next = await request(account, { reserve: 5_000 });
      expect(next.allowed).to.equal(true);
      expect(next.headers['x-ratelimit-remaining-tokens']).to.equal('0');
      const refused = await request(account, { reserve: 1 });
      expect(refused).to.deep.include({ allowed: false, reason: 'tokens' });
    });

    it('replaces the reservation of a request admitted again (a retried admission) instead of holding both', async () => {
      const account = randomUUID();
      const id = randomUUID();
      await request(account, { reserve: 60_000, requestId: id });
      await request(account, { reserve: 30_000, requestId: id });
      const next = await request(account, { reserve: 0 });
      expect(next.headers['x-ratelimit-remaining-tokens']).to.equal('70000');
      await app.limiter.settle({ accountId: account, requestId: id, actualTokens: 0 });
      expect((await request(account, { reserve: 0 })).headers['x-ratelimit-remaining-tokens']).to.equal('100000');
    });

    it('counts a request settled twice only once', async () => {
      const account = randomUUID();
      const id = randomUUID();
      await request(account, { reserve: 30_000, requestId: id });
      await app.limiter.settle({ accountId: account, requestId: id, actualTokens: 30_000 });
      await app.limiter.settle({ accountId: account, requestId: id, actualTokens: 30_000 });
      const next = await request(account, { reserve: 0 });
      expect(next.headers['x-ratelimit-remaining-tokens']).to.equal('70000');
    });

    it('refuses for tokens until UTC midnight once settled usage has spent the day’s quota', async () => {
      const account = randomUUID();
      const id = randomUUID();
      clock.set(MIDNIGHT + 20 * HOUR);
      await request(account, { reserve: 100_000, requestId: id });
      await app.limiter.settle({ accountId: account, requestId: id, actualTokens: 100_000 });
      const refused = await request(account, { reserve: 1 });
      expect(refused).to.deep.include({ allowed: false, reason: 'tokens', retryAfterSeconds: 4 * 3600 });
      expect(refused.headers).to.include({
        'x-ratelimit-remaining-tokens': '0',
        'x-ratelimit-reset-tokens': '4h0m0s',
        'x-should-retry': 'false',
      });
      expect(refused.headers).not.to.have.property('Retry-After');
      clock.set(MIDNIGHT + DAY);
      const tomorrow = await request(account, { reserve: 100_000 });
      expect(tomorrow.allowed).to.equal(true);
    });

    it('releases the reservation of a request that never settles once it expires', async () => {
      const account = randomUUID();
      await request(account, { reserve: 100_000 });
      expect((await request(account, { reserve: 1 })).reason).to.equal('tokens');
      clock.advance(config.limits.reservationTtlMs - 1);
      expect((await request(account, { reserve: 1 })).reason).to.equal('tokens');
      clock.advance(1);
      const after = await request(account, { reserve: 1 });
      expect(after.allowed).to.equal(true);
      expect(after.headers['x-ratelimit-remaining-tokens']).to.equal('99999');
    });

    it('counts the actual tokens of a request that settles after its reservation expired', async () => {
      const account = randomUUID();
      const id = randomUUID();
      await request(account, { reserve: 50_000, requestId: id });
      clock.advance(config.limits.reservationTtlMs + 1);
      expect((await request(account, { reserve: 0 })).headers['x-ratelimit-remaining-tokens']).to.equal('100000');
      await app.limiter.settle({ accountId: account, requestId: id, actualTokens: 70_000 });
      expect((await request(account, { reserve: 0 })).headers['x-ratelimit-remaining-tokens']).to.equal('30000');
    });

    it('refuses a reservation larger than the whole daily quota', async () => {
      const refused = await request(randomUUID(), { reserve: 100_001 });
      expect(refused).to.deep.include({ allowed: false, reason: 'tokens', retryAfterSeconds: DAY / 1000 });
    });

    it('says a reservation larger than the whole daily quota needs a smaller request, since no wait helps', async () => {
      const refused = await request(randomUUID(), { reserve: 100_001 });
      expect(refused.exceedsDailyQuota).to.deep.equal({ requested: 100_001, quota: 100_000 });
      const err = admissionError(refused);
      expect(err.status).to.equal(429);
      expect(err.message).to.match(
        /up to 100001 tokens .* more than the whole daily token quota of 100000\. Lower max_tokens or n/,
      );
    });

    it('remembers a settled request for minutes (the settled-marker TTL), not a day', async () => {
      const account = randomUUID();
      const id = randomUUID();
      await request(account, { reserve: 60_000, requestId: id });
      await app.limiter.settle({ accountId: account, requestId: id, actualTokens: 12_000 });
      const marker = `${config.redis.prefix}:limits:{${account}}:settled:${id}`;
      const ttl = await app.redis.pttl(marker);
      expect(ttl).to.be.within(1, config.limits.settledMarkerTtlMs);
      expect(config.limits.settledMarkerTtlMs).to.be.below(10 * 60_000);
      // Within it, the same settlement again changes nothing.
      await app.limiter.settle({ accountId: account, requestId: id, actualTokens: 12_000 });
      expect((await request(account, { reserve: 0 })).headers['x-ratelimit-remaining-tokens']).to.equal('88000');
    });

    it('admits only what fits when concurrent requests race for the token quota', async () => {
      const account = randomUUID();
      const results = await Promise.all(Array.from({ length: 10 }, () => request(account, { reserve: 30_000 })));
      expect(results.filter((r) => r.allowed)).to.have.length(3);
      expect(results.filter((r) => !r.allowed).every((r) => r.reason === 'tokens')).to.equal(true);
    });
  });

  describe('across processes', () => {
    it('admits exactly 20 of 200 concurrent requests issued through two separate Redis connections', async () => {
      const [web1, web2] = [await context(), await context()];
      const account = randomUUID();
      const results = await Promise.all(
        Array.from({ length: 200 }, (_, i) => request(account, { on: i % 2 === 0 ? web1 : web2 })),
      );
      expect(results.filter((r) => r.allowed)).to.have.length(20);
      const refused = results.filter((r) => !r.allowed);
      expect(refused).to.have.length(180);
      for (const r of refused) {
        expect(r.reason).to.equal('requests');
        expect(r.headers).to.include({ 'X-RateLimit-Limit': '20', 'X-RateLimit-Remaining': '0', 'Retry-After': '60' });
      }
    });

    it('does the same on Redis’s own clock when no clock is injected', async () => {
      const processes = [0, 1].map(() => createContext(config, { role: 'web' }));
      extra.push(...processes);
      await Promise.all(processes.map((p) => p.warmUp([p.redis])));
      // Keep the burst inside one UTC minute of Redis's clock: wait while the minute is about to turn.
      await eventually(
        async () => {
          const [seconds] = await app.redis.time();
          return Number(seconds) % 60 < 50 ? true : undefined;
        },
        'a Redis minute with 10 seconds to spare',
        15_000,
        200,
      );
      const account = randomUUID();
      const results = await Promise.all(
        Array.from({ length: 200 }, (_, i) => request(account, { on: processes[i % 2]! })),
      );
      expect(results.filter((r) => r.allowed)).to.have.length(20);
      const retry = Number(results.find((r) => !r.allowed)!.headers['Retry-After']);
      expect(retry).to.be.within(1, 60);
    });

    it(`costs exactly one Redis command (one round trip) per admission ${ONE_REDIS_SERVER}`, async () => {
      const subject = await context();
      // A connection of its own in monitor mode; the subject's own connection stays untouched.
      const monitor = await monitorRedis(process.env.REDIS_URL!);
      try {
        const source = `127.0.0.1:${(subject.redis as Redis).stream.localPort}`;
        const seen: string[][] = [];
        monitor.on(({ source: from, args }) => {
          if (from === source) seen.push(args);
        });
        const account = randomUUID();
        for (let i = 0; i < 5; i++) await request(account, { on: subject });
        await request(account, { on: subject, tier: 'paid' });
        // MONITOR reports commands in execution order: once the marker shows, everything before it has.
        const marker = `limiter-marker-${randomUUID()}`;
        await subject.redis.echo(marker);
        await eventually(async () => (seen.some((a) => a[1] === marker) ? true : undefined), 'the marker on MONITOR');
        const commands = seen.filter((a) => a[1] !== marker).map((a) => a[0]!.toLowerCase());
        expect(commands).to.have.length(6);
        // Every call names the script by its SHA: the connection loaded it when it became ready.
        expect(commands).to.deep.equal(['evalsha', 'evalsha', 'evalsha', 'evalsha', 'evalsha', 'evalsha']);
      } finally {
        monitor.stop();
      }
    });
  });

  describe('key regeneration', () => {
    it('allows one regeneration per account every 2 hours, measured from the last one', async () => {
      const account = randomUUID();
      clock.set(MIDNIGHT + 10 * MINUTE + 30_000);
      expect(await app.limiter.admitKeyRegeneration(account)).to.deep.equal({ allowed: true, retryAfterSeconds: 0 });
      clock.advance(25 * MINUTE);
      expect(await app.limiter.admitKeyRegeneration(account)).to.deep.equal({
        allowed: false,
        retryAfterSeconds: 7200 - 25 * 60,
      });
      expect((await app.limiter.admitKeyRegeneration(randomUUID())).allowed).to.equal(true);
      clock.advance(95 * MINUTE - 1);
      expect(await app.limiter.admitKeyRegeneration(account)).to.deep.equal({ allowed: false, retryAfterSeconds: 1 });
      clock.advance(1);
      expect(await app.limiter.admitKeyRegeneration(account)).to.deep.equal({ allowed: true, retryAfterSeconds: 0 });
      expect((await app.limiter.admitKeyRegeneration(account)).allowed).to.equal(false);
    });

    it('does not touch the chat request counters', async () => {
      const account = randomUUID();
      await app.limiter.admitKeyRegeneration(account);
      expect((await request(account)).headers['X-RateLimit-Remaining']).to.equal('19');
    });
  });

  it('leaves no key without an expiry', async () => {
    const account = randomUUID();
    const id = randomUUID();
    await request(account, { reserve: 500, requestId: id });
    await app.limiter.settle({ accountId: account, requestId: id, actualTokens: 400 });
    await app.limiter.admitKeyRegeneration(account);
    await request(account, { reserve: 500 });
    const keys = await keysEverywhere(app.redis, `${config.redis.prefix}:limits:{${account}}:*`);
    expect(keys.length).to.be.at.least(5);
    for (const key of keys) expect(await app.redis.pttl(key), key).to.be.greaterThan(0);
  });
});
