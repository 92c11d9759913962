import { expect } from 'chai';
import { randomUUID } from 'node:crypto';
import { createContext, type AppContext } from '../../src/context.js';
import { ManualClock } from '../../src/clock.js';
import type { Tier } from '../../db/schema/index.js';
import type { Admission } from '../../src/limits/limiter.service.js';
import { windowsRemaining } from '../../src/limits/limits-remaining.service.js';
import { usageKeys } from '../../src/limits/limiter.service.js';
import { createTestAccount } from '../support/accounts.js';
import { isolatedPrefix, testConfig } from '../support/env.js';
import { get } from '../support/http.js';
import { startTestWeb, type TestWeb } from '../support/web.js';

// What is left of an account's windows, read from the admission's own counters without spending
// anything (GET /v1/subscription/info's limits.remaining). Runs on one Redis server and on the
// Redis Cluster (scripts/test.mjs), where every read stays in the account's hash slot.

const MINUTE = 60_000;
const MIDNIGHT = Date.parse('2026-11-02T00:00:00Z');

describe('rate-limit windows remaining', () => {
  let clock: ManualClock;
  let app: AppContext;

  beforeEach(async () => {
    clock = new ManualClock(MIDNIGHT + 15_000);
    app = createContext(testConfig({ REDIS_PREFIX: isolatedPrefix() }), { role: 'web', clock });
    await app.warmUp([app.redis]);
  });
  afterEach(async () => app.close());

  const admit = (accountId: string, reserve = 10, tier: Tier = 'free', requestId = randomUUID()) =>
    app.limiter.admit({ accountId, tier, requestId, reserveTokens: reserve });
  const remaining = (accountId: string, tier: Tier = 'free') => windowsRemaining(app, accountId, tier);
  /** Every key of the account's limits with its value, to show a read changed nothing. */
  const snapshot = async (accountId: string) => {
    const [counters, reservations, reserved] = usageKeys(app.config, accountId);
    return {
      counters: await app.redis.hgetall(counters),
      reservations: await app.redis.zrange(reservations, 0, -1, 'WITHSCORES'),
      reserved: await app.redis.hgetall(reserved),
      // The expiry as an absolute time (a TTL shrinks as the test runs).
      expiresAt: await app.redis.call('PEXPIRETIME', counters),
    };
  };

  it('reports what is left of each window and of the token quota, as the X-RateLimit headers count it', async () => {
    const account = randomUUID();
    let last: Admission | undefined;
    for (let i = 0; i < 3; i++) last = await admit(account, 1_000);
    const now = await remaining(account);
    expect(now.remaining).to.deep.equal({
      requests_per_minute: 17,
      requests_per_hour: 97,
      requests_per_day: 497,
      // Three live reservations of 1,000 tokens each.
      tokens_per_day: 97_000,
    });
    expect(String(now.remaining.requests_per_minute)).to.equal(last!.headers['X-RateLimit-Remaining']);
    expect(String(now.remaining.tokens_per_day)).to.equal(last!.headers['x-ratelimit-remaining-tokens']);
    expect(now.resets_at).to.deep.equal({
      requests_per_minute: '2026-11-02T00:01:00.000Z',
      requests_per_hour: '2026-11-02T01:00:00.000Z',
      requests_per_day: '2026-11-03T00:00:00.000Z',
      tokens_per_day: '2026-11-03T00:00:00.000Z',
    });
  });

  it('counts settled tokens instead of the reservation once a request ends', async () => {
    const account = randomUUID();
    const requestId = randomUUID();
    await admit(account, 1_000, 'free', requestId);
    await app.limiter.settle({ accountId: account, requestId, actualTokens: 123 });
    expect((await remaining(account)).remaining.tokens_per_day).to.equal(100_000 - 123);
  });

  it('spends nothing: a read changes no counter, reservation or expiry, however often it is made', async () => {
    const account = randomUUID();
    await admit(account, 500);
    const before = await snapshot(account);
    for (let i = 0; i < 30; i++) await remaining(account);
    expect(await snapshot(account)).to.deep.equal(before);
    // The next admission is the account's second of the minute, not its 32nd.
    const next = await admit(account);
    expect(next.headers['X-RateLimit-Remaining']).to.equal('18');
  });

  it('counts a reservation past its expiry as free, as the next admission would, without freeing it itself', async () => {
    const account = randomUUID();
    await admit(account, 5_000);
    clock.advance(app.config.limits.reservationTtlMs + 1);
    const before = await snapshot(account);
    expect((await remaining(account)).remaining.tokens_per_day).to.equal(100_000);
    expect(await snapshot(account)).to.deep.equal(before);
    const next = await admit(account, 0);
    expect(next.headers['x-ratelimit-remaining-tokens']).to.equal('100000');
  });

  it('starts a window again at its UTC boundary', async () => {
    const account = randomUUID();
    for (let i = 0; i < 20; i++) await admit(account);
    expect((await remaining(account)).remaining).to.include({ requests_per_minute: 0, requests_per_hour: 80 });
    clock.set(MIDNIGHT + MINUTE);
    const next = await remaining(account);
    expect(next.remaining).to.include({ requests_per_minute: 20, requests_per_hour: 80 });
    expect(next.resets_at.requests_per_minute).to.equal('2026-11-02T00:02:00.000Z');
  });

  it("measures a paid account against the paid tier's limits", async () => {
    const account = randomUUID();
    await admit(account, 10, 'paid');
    const paid = app.config.limits.paid;
    expect((await remaining(account, 'paid')).remaining).to.deep.equal({
      requests_per_minute: paid.requestsPerMinute - 1,
      requests_per_hour: paid.requestsPerHour - 1,
      requests_per_day: paid.requestsPerDay - 1,
      tokens_per_day: paid.tokensPerDay - 10,
    });
  });

  describe('in GET /v1/subscription/info', () => {
    let web: TestWeb;
    beforeEach(async () => {
      web = await startTestWeb({ env: { REDIS_PREFIX: isolatedPrefix() }, clock });
    });
    afterEach(async () => web.close());

    it('shows limits.remaining and limits.resets_at from the same counters the admissions wrote', async () => {
      const who = await createTestAccount(web.app);
      for (let i = 0; i < 4; i++)
        await web.app.limiter.admit({
          accountId: who.account.id,
          tier: 'free',
          requestId: randomUUID(),
          reserveTokens: 250,
        });
      const r = await get(`${web.url}/v1/subscription/info`, { bearer: who.jwt });
      expect(r.status, r.text).to.equal(200);
      expect(r.body.limits.remaining).to.deep.equal({
        requests_per_minute: 16,
        requests_per_hour: 96,
        requests_per_day: 496,
        tokens_per_day: 99_000,
      });
      expect(r.body.limits.resets_at.requests_per_minute).to.equal('2026-11-02T00:01:00.000Z');
      // Reading the page counted nothing.
      const again = await get(`${web.url}/v1/subscription/info`, { bearer: who.apiKey });
      expect(again.body.limits.remaining.requests_per_minute).to.equal(16);
    });
  });
});
