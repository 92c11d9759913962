import { expect } from 'chai';
import { randomUUID } from 'node:crypto';
import type { Redis } from 'ioredis';
import { ManualClock } from '../../src/clock.js';
import type { Config } from '../../src/config.js';
import { createContext, type AppContext } from '../../src/context.js';
import { admissionError, type Admission } from '../../src/limits/limiter.service.js';
import { nanoUsdOf } from '../../src/usage/usage-cost.js';
import { createTestAccount } from '../support/accounts.js';
import { recordUsage } from '../support/billing.js';
import { isolatedPrefix, ONE_REDIS_SERVER, testConfig } from '../support/env.js';
import { eventually } from '../support/http.js';
import { monitorRedis } from '../support/redis-monitor.js';

// The spending limit inside the admission script: reservations in nano-dollars against what is
// left of the month, settled with the real cost, over real Redis (and Postgres for the ledger the
// month starts from). June 2017 is a month no other test uses.

const JUNE = Date.parse('2017-06-15T12:00:00Z');
const usd = nanoUsdOf;

describe('the spending limit at admission', () => {
  let config: Config;
  let clock: ManualClock;
  let app: AppContext;
  const extra: AppContext[] = [];

  beforeEach(async () => {
    // Paid limits far away, so only the spending limit refuses.
    config = testConfig({
      REDIS_PREFIX: isolatedPrefix(),
      PAID_REQUESTS_PER_MINUTE: '100000',
      PAID_REQUESTS_PER_HOUR: '1000000',
      PAID_REQUESTS_PER_DAY: '1000000',
      PAID_TOKENS_PER_DAY: '1000000000',
    });
    clock = new ManualClock(JUNE);
    app = createContext(config, { role: 'web', clock });
    await app.warmUp([app.redis]);
  });
  afterEach(async () => {
    await Promise.all(extra.splice(0).map((c) => c.close()));
    await app.close();
  });

  const context = async (): Promise<AppContext> => {
    const c = createContext(config, { role: 'web', clock });
    extra.push(c);
    await c.warmUp([c.redis]);
    return c;
  };

  /** One request of an account with a limit: reserving `reserve` USD, admitted now. */
  const admit = (
    accountId: string,
    limit: string,
    reserve: string,
    opts: { requestId?: string; on?: AppContext } = {},
  ): Promise<Admission> =>
    (opts.on ?? app).limiter.admit({
      accountId,
      tier: 'paid',
      requestId: opts.requestId ?? randomUUID(),
      reserveTokens: 10,
      spend: { limitNanoUsd: usd(limit), reserveNanoUsd: usd(reserve), admittedAt: clock.now().getTime() },
    });
  const settle = (accountId: string, requestId: string, cost: string, admittedAt = clock.now().getTime()) =>
    app.limiter.settle({ accountId, requestId, actualTokens: 10, spend: { costNanoUsd: usd(cost), admittedAt } });
  const spendOf = async (accountId: string) =>
    app.limiter.monthSpend(accountId, {
      key: '2017-06',
      start: new Date('2017-06-01T00:00:00Z'),
      end: new Date('2017-07-01T00:00:00Z'),
    });
  const account = async () => (await createTestAccount(app, { tier: 'paid' })).account.id;

  it('holds each request’s most possible cost and refuses the one that does not fit in what is left', async () => {
    const id = await account();
    expect((await admit(id, '1.00', '0.40')).allowed).to.equal(true);
    expect((await admit(id, '1.00', '0.40')).allowed).to.equal(true);
    const refused = await admit(id, '1.00', '0.40');
    expect(refused).to.deep.include({ allowed: false, reason: 'spend', heldInFlight: true });
    expect(refused.spend).to.deep.include({
      limitNanoUsd: usd('1.00'),
      usedNanoUsd: usd('0.80'),
      reserveNanoUsd: usd('0.40'),
      firstThisMonth: false,
    });
    // What still fits is admitted.
    expect((await admit(id, '1.00', '0.20')).allowed).to.equal(true);
    expect(await spendOf(id)).to.deep.equal({ spentNanoUsd: 0n, heldNanoUsd: usd('1.00') });
  });

  it('answers a refusal once settled spend leaves no room with 429 insufficient_quota naming the limit, and x-should-retry: false', async () => {
    const id = await account();
    const request = randomUUID();
    await admit(id, '25.00', '24.99', { requestId: request });
    await settle(id, request, '24.99');
    const refused = await admit(id, '25.00', '0.05');
    expect(refused.heldInFlight).to.equal(undefined);
    const err = admissionError(refused);
    expect(err.status).to.equal(429);
    expect(err.toBody()).to.deep.include({
      error: { message: err.message, type: 'insufficient_quota', code: 'insufficient_quota', param: null },
    });
    expect(err.message).to.equal(
      'You have reached your monthly spending limit of $25.00: $0.01 of it is left this month (requests in flight included), and this request may cost up to $0.05. ' +
        'The limit resets at 2017-07-01T00:00Z (UTC). Raise or remove the limit with PUT or DELETE /v1/billing/spend-limit, or lower max_tokens.',
    );
    expect(err.headers['x-should-retry']).to.equal('false');
    expect(err.headers).not.to.have.property('Retry-After');
    expect(err.headers).to.have.property('x-ratelimit-limit-requests');
  });

  it('answers a refusal while requests in flight hold the rest of the limit with a short Retry-After, saying so', async () => {
    const id = await account();
    const request = randomUUID();
    await admit(id, '1.00', '0.30', { requestId: request });
    await settle(id, request, '0.30');
    await admit(id, '1.00', '0.60');
    const refused = await admit(id, '1.00', '0.20');
    expect(refused).to.deep.include({ allowed: false, reason: 'spend', heldInFlight: true, retryAfterSeconds: 2 });
    const err = admissionError(refused);
    expect(err.headers).to.include({ 'Retry-After': '2' }).and.not.have.property('x-should-retry');
    expect(err.message).to.equal(
      'Requests of yours still in flight hold part of your monthly spending limit of $1.00 until they end (each holds the most it may cost, then keeps only what it cost): ' +
        '$0.10 of it is free now, and this request may cost up to $0.20. It frees as they finish. Please try again in 2s.',
    );
    // Settled spend alone leaving no room is the other answer: 0.30 spent + 0.80 > 1.00.
    const too = await admit(id, '1.00', '0.80');
    expect(too.heldInFlight).to.equal(undefined);
    expect(too.headers['x-should-retry']).to.equal('false');
  });

  it('tells a request that alone may cost more than the whole limit to be smaller, without calling the limit reached', async () => {
    const id = await account();
    const refused = await admit(id, '1.00', '1.50');
    expect(refused.spend?.firstThisMonth).to.equal(false);
    expect(admissionError(refused).message).to.match(
      /^This request may cost up to \$1\.50 .* more than your whole monthly spending limit of \$1\.00\. Lower max_tokens or n/,
    );
    // A request that fits but finds the limit spent is the month's first refusal.
    const spent = randomUUID();
    await admit(id, '1.00', '0.90', { requestId: spent });
    await settle(id, spent, '0.90');
    expect((await admit(id, '1.00', '0.20')).spend?.firstThisMonth).to.equal(true);
    expect((await admit(id, '1.00', '0.20')).spend?.firstThisMonth).to.equal(false);
  });

  it('does not call the limit reached (no 100% email) while only requests in flight hold the rest, and does once their spend reaches it', async () => {
    const id = await account();
    const running = randomUUID();
    await admit(id, '1.00', '0.90', { requestId: running });
    const held = await admit(id, '1.00', '0.20');
    expect(held).to.deep.include({ allowed: false, reason: 'spend', heldInFlight: true });
    expect(held.spend?.firstThisMonth).to.equal(false);
    await settle(id, running, '0.85');
    const reached = await admit(id, '1.00', '0.20');
    expect(reached.heldInFlight).to.equal(undefined);
    expect(reached.spend?.firstThisMonth).to.equal(true);
  });

  it('replaces a reservation with the real cost when the request ends', async () => {
    const id = await account();
    const request = randomUUID();
    await admit(id, '1.00', '0.90', { requestId: request });
    expect((await admit(id, '1.00', '0.20')).allowed).to.equal(false);
    await settle(id, request, '0.123456789');
    expect(await spendOf(id)).to.deep.equal({ spentNanoUsd: 123_456_789n, heldNanoUsd: 0n });
    expect((await admit(id, '1.00', '0.80')).allowed).to.equal(true);
  });

  it('releases the whole reservation of a cancelled or failed request that cost nothing', async () => {
    const id = await account();
    const request = randomUUID();
    await admit(id, '1.00', '1.00', { requestId: request });
    expect((await admit(id, '1.00', '0.01')).allowed).to.equal(false);
    await settle(id, request, '0');
    expect(await spendOf(id)).to.deep.equal({ spentNanoUsd: 0n, heldNanoUsd: 0n });
    expect((await admit(id, '1.00', '1.00')).allowed).to.equal(true);
  });

  it('counts a request settled twice once', async () => {
    const id = await account();
    const request = randomUUID();
    await admit(id, '1.00', '0.50', { requestId: request });
    await settle(id, request, '0.30');
    await settle(id, request, '0.30');
    expect(await spendOf(id)).to.deep.equal({ spentNanoUsd: usd('0.30'), heldNanoUsd: 0n });
  });

  it('releases the reservation of a request that never settles once it expires', async () => {
    const id = await account();
    await admit(id, '1.00', '1.00');
    clock.advance(config.limits.reservationTtlMs + 1);
    expect((await admit(id, '1.00', '1.00')).allowed).to.equal(true);
  });

  it('starts again from nothing when the month turns, and charges a request to the month it was admitted in', async () => {
    const id = await account();
    clock.set('2017-06-30T23:59:59Z');
    const late = randomUUID();
    const lateAdmittedAt = clock.now().getTime();
    await admit(id, '1.00', '0.60', { requestId: late });
    expect((await admit(id, '1.00', '0.60')).allowed).to.equal(false);
    clock.set('2017-07-01T00:00:00Z');
    expect((await admit(id, '1.00', '0.60')).allowed).to.equal(true);
    // The late request ends in July: June is charged and releases its hold, July is untouched.
    await settle(id, late, '0.50', lateAdmittedAt);
    expect(await spendOf(id)).to.deep.equal({ spentNanoUsd: usd('0.50'), heldNanoUsd: 0n });
    const july = await app.limiter.monthSpend(id, {
      key: '2017-07',
      start: new Date('2017-07-01T00:00:00Z'),
      end: new Date('2017-08-01T00:00:00Z'),
    });
    expect(july).to.deep.equal({ spentNanoUsd: 0n, heldNanoUsd: usd('0.60') });
  });

  it('keeps a month’s figures past the month’s end by a day, and no longer', async () => {
    const id = await account();
    await admit(id, '1.00', '0.10');
    const key = `${config.redis.prefix}:limits:{${id}}:spend:2017-06`;
    const ttl = await app.redis.pttl(key);
    const untilJulySecond = Date.parse('2017-07-02T00:00:00Z') - JUNE;
    expect(ttl).to.be.within(untilJulySecond - 5_000, untilJulySecond);
  });

  it('starts a month Redis has no figure for from the ledger’s paid-tier spend', async () => {
    const id = await account();
    await recordUsage(app, [
      // gpt-4.1: 0.70 USD in June; the free-tier row and May's are not counted.
      { accountId: id, model: 'gpt-4.1', tier: 'paid', prompt: 350_000, completion: 0, at: '2017-06-01T00:00:00Z' },
      { accountId: id, model: 'gpt-4.1', tier: 'free', prompt: 350_000, completion: 0, at: '2017-06-02T00:00:00Z' },
      { accountId: id, model: 'gpt-4.1', tier: 'paid', prompt: 350_000, completion: 0, at: '2017-05-31T23:00:00Z' },
    ]);
    expect(await spendOf(id)).to.equal(undefined);
    expect((await admit(id, '1.00', '0.31')).allowed).to.equal(false);
    expect(await spendOf(id)).to.deep.equal({ spentNanoUsd: usd('0.70'), heldNanoUsd: 0n });
    expect((await admit(id, '1.00', '0.30')).allowed).to.equal(true);
    // Redis loses the figure (a restart without persistence): the ledger has it again.
    await app.redis.del(`${config.redis.prefix}:limits:{${id}}:spend:2017-06`);
    expect((await admit(id, '1.00', '0.31')).allowed).to.equal(false);
  });

  it('never overshoots when 100 requests race through two processes', async () => {
    const [web1, web2] = [await context(), await context()];
    const id = await account();
    const results = await Promise.all(
      Array.from({ length: 100 }, (_, i) => admit(id, '1.00', '0.03', { on: i % 2 === 0 ? web1 : web2 })),
    );
    // 0.03 fits 33 times in 1.00.
    expect(results.filter((r) => r.allowed)).to.have.length(33);
    expect(results.filter((r) => !r.allowed).every((r) => r.reason === 'spend')).to.equal(true);
    // Only reservations stand in the way: the limit is not reached yet.
    expect(results.filter((r) => r.spend?.firstThisMonth)).to.have.length(0);
    expect(await spendOf(id)).to.deep.equal({ spentNanoUsd: 0n, heldNanoUsd: usd('0.99') });
  });

  it('counts one first refusal of the month when 100 requests race through two processes past a limit their spend reached', async () => {
    const [web1, web2] = [await context(), await context()];
    const id = await account();
    const spent = randomUUID();
    await admit(id, '1.00', '0.99', { requestId: spent });
    await settle(id, spent, '0.99');
    const results = await Promise.all(
      Array.from({ length: 100 }, (_, i) => admit(id, '1.00', '0.03', { on: i % 2 === 0 ? web1 : web2 })),
    );
    expect(results.filter((r) => r.allowed)).to.have.length(0);
    expect(results.filter((r) => r.spend?.firstThisMonth)).to.have.length(1);
  });

  it('leaves an account without a limit no spend figures in Redis', async () => {
    const id = await account();
    const request = randomUUID();
    await app.limiter.admit({ accountId: id, tier: 'paid', requestId: request, reserveTokens: 10 });
    await settle(id, request, '0.50');
    expect(await spendOf(id)).to.equal(undefined);
  });

  it(`costs one Redis command per admission with a limit once the month is in Redis ${ONE_REDIS_SERVER}`, async () => {
    const subject = await context();
    const id = await account();
    await admit(id, '1.00', '0.01', { on: subject });
    const monitor = await monitorRedis(process.env.REDIS_URL!);
    try {
      const source = `127.0.0.1:${(subject.redis as Redis).stream.localPort}`;
      const seen: string[][] = [];
      monitor.on(({ source: from, args }) => {
        if (from === source) seen.push(args);
      });
      for (let i = 0; i < 3; i++) await admit(id, '1.00', '0.01', { on: subject });
      const marker = `spend-marker-${randomUUID()}`;
      await subject.redis.echo(marker);
      await eventually(async () => (seen.some((a) => a[1] === marker) ? true : undefined), 'the marker on MONITOR');
      expect(seen.filter((a) => a[1] !== marker).map((a) => a[0]!.toLowerCase())).to.deep.equal([
        'evalsha',
        'evalsha',
        'evalsha',
      ]);
    } finally {
      monitor.stop();
    }
  });
});
