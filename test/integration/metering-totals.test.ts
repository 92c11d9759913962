import { expect } from 'chai';
import { randomUUID } from 'node:crypto';
import { ManualClock } from '../../src/clock.js';
import { createContext, type AppContext } from '../../src/context.js';
import { currentUsage } from '../../src/billing/billing.service.js';
import {
  drainUsageOnce,
  ensureMeteringGroups,
  flushUsage,
  type MeteringDeps,
} from '../../src/usage/metering.service.js';
import { appendUsage, usageStreamKey } from '../../src/usage/usage-stream.js';
import { TcpProxy } from '../support/tcp-proxy.js';
import type { UsageEvent } from '../../src/usage/usage-event.js';
import { createTestAccount } from '../support/accounts.js';
import { isolatedPrefix, testConfig } from '../support/env.js';
import { metricValue } from '../support/metrics.js';

// Usage travels worker -> Redis stream -> metering -> ledger -> monthly totals -> usage endpoint.

describe('metering into the ledger and the monthly totals', () => {
  let app: AppContext;
  before(() => {
    app = createContext(testConfig({ REDIS_PREFIX: isolatedPrefix() }), {
      role: 'test',
      clock: new ManualClock('2018-05-20T00:00:00Z'),
    });
  });
  after(async () => app.close());

  it('shows metered usage in the current month once, even when the stream delivers an event twice', async () => {
    const who = await createTestAccount(app, { tier: 'paid' });
    const event = (prompt: number, completion: number): UsageEvent => ({
      request_id: `chatcmpl-${randomUUID()}`,
      account_id: who.account.id,
      model: 'gpt-4.1',
      tier: 'paid',
      status: 'completed',
      prompt_tokens: prompt,
      completion_tokens: completion,
      input_price_per_million: '2.00',
      output_price_per_million: '8.00',
      created_at: '2018-05-19T10:00:00.000Z',
    });
    const first = event(100_000, 10_000);
    const second = event(50_000, 5_000);
    // The same request appended twice (a worker retried the MULTI that ends it).
    for (const e of [first, second, first]) await appendUsage(app.redis, app.config, 0, e);
    expect(await flushUsage(app)).to.equal(3);
    const usage = await currentUsage(app, { id: who.account.id, tier: 'paid', monthly_spend_limit_usd: null });
    expect(usage.total).to.include({
      requests: 2,
      prompt_tokens: 150_000,
      completion_tokens: 15_000,
      cost_usd: '0.42',
      cost_cents: 42,
    });
  });

  it('records the API an entry names, and reads one from a worker that predates it by its id (resp_… is the Responses API)', async () => {
    const who = await createTestAccount(app, { tier: 'paid' });
    const event = (request_id: string, api?: UsageEvent['api']): UsageEvent => ({
      request_id,
      account_id: who.account.id,
      model: 'gpt-4.1',
      tier: 'paid',
      status: 'completed',
      prompt_tokens: 1,
      completion_tokens: 1,
      input_price_per_million: '2.00',
      output_price_per_million: '8.00',
      created_at: '2018-05-19T10:00:00.000Z',
      ...(api ? { api } : {}),
    });
    const named = event(`resp_${randomUUID()}`, 'responses');
    const oldResponse = event(`resp_${randomUUID()}`);
    const oldChat = event(`chatcmpl-${randomUUID()}`);
    for (const e of [named, oldResponse, oldChat]) await appendUsage(app.redis, app.config, 0, e);
    await flushUsage(app);
    const rows = await app.db
      .selectFrom('usage_events')
      .select(['request_id', 'api'])
      .where('account_id', '=', who.account.id)
      .execute();
    expect(Object.fromEntries(rows.map((r) => [r.request_id, r.api]))).to.deep.equal({
      [named.request_id]: 'responses',
      [oldResponse.request_id]: 'responses',
      [oldChat.request_id]: 'chat.completions',
    });
  });

  it('records the API key an entry names in the ledger and in the daily totals, and none for an entry without one', async () => {
    const who = await createTestAccount(app, { tier: 'paid' });
    const keyId = randomUUID();
    const event = (key_id?: string): UsageEvent => ({
      request_id: `chatcmpl-${randomUUID()}`,
      account_id: who.account.id,
      model: 'gpt-4.1',
      tier: 'paid',
      status: 'completed',
      prompt_tokens: 10,
      completion_tokens: 5,
      input_price_per_million: '2.00',
      output_price_per_million: '8.00',
      created_at: '2018-05-19T10:00:00.000Z',
      ...(key_id ? { key_id } : {}),
    });
    for (const e of [event(keyId), event(keyId), event()]) await appendUsage(app.redis, app.config, 0, e);
    await flushUsage(app);
    const ledger = await app.db
      .selectFrom('usage_events')
      .select(['key_id'])
      .where('account_id', '=', who.account.id)
      .orderBy('key_id')
      .execute();
    expect(ledger.map((r) => r.key_id)).to.deep.equal([keyId, keyId, null]);
    const totals = await app.db
      .selectFrom('usage_daily_totals')
      .select(['key_id', 'requests', 'prompt_tokens'])
      .where('account_id', '=', who.account.id)
      .orderBy('key_id')
      .execute();
    expect(totals).to.deep.equal([
      { key_id: keyId, requests: '2', prompt_tokens: '20' },
      { key_id: null, requests: '1', prompt_tokens: '10' },
    ]);
  });

  it('adds what each new ledger row costs at catalog prices to usage_cost_usd_total, by tier and model, once per request', async () => {
    const paid = await createTestAccount(app, { tier: 'paid' });
    const free = await createTestAccount(app, { tier: 'free' });
    const event = (accountId: string, tier: 'paid' | 'free'): UsageEvent => ({
      request_id: `chatcmpl-${randomUUID()}`,
      account_id: accountId,
      model: 'gpt-4.1-mini',
      tier,
      status: 'completed',
      prompt_tokens: 100_000,
      completion_tokens: 10_000,
      input_price_per_million: '0.40',
      output_price_per_million: '1.60',
      created_at: '2018-05-19T10:00:00.000Z',
    });
    const cost = (tier: string) =>
      metricValue(app.metrics.registry, 'usage_cost_usd_total', { tier, model: 'gpt-4.1-mini' });
    const before = { paid: await cost('paid'), free: await cost('free') };
    const once = event(paid.account.id, 'paid');
    for (const e of [once, event(free.account.id, 'free'), once]) await appendUsage(app.redis, app.config, 0, e);
    await flushUsage(app);
    // 100,000 × 0.40 + 10,000 × 1.60 per million tokens: 0.056 USD a request, on either tier.
    expect((await cost('paid')) - before.paid).to.be.closeTo(0.056, 1e-9);
    expect((await cost('free')) - before.free).to.be.closeTo(0.056, 1e-9);
  });
  it('tells the usage-recorded listener of each batch before acknowledging it, and delivers the batch again when the listener fails', async () => {
    const who = await createTestAccount(app, { tier: 'paid' });
    const event: UsageEvent = {
      request_id: `chatcmpl-${randomUUID()}`,
      account_id: who.account.id,
      model: 'gpt-4.1',
      tier: 'paid',
      status: 'completed',
      prompt_tokens: 10,
      completion_tokens: 5,
      input_price_per_million: '2.00',
      output_price_per_million: '8.00',
      created_at: '2018-05-19T10:00:00.000Z',
    };
    const heard: string[][] = [];
    let failNext = true;
    const deps: MeteringDeps = {
      db: app.db,
      log: app.log,
      metrics: app.metrics,
      config: app.config,
      onUsageRecorded: async (events) => {
        heard.push(events.map((e) => e.request_id));
        if (failNext) {
          failNext = false;
          throw new Error('the listener is down');
        }
      },
    };
    await ensureMeteringGroups(app.redis, app.config);
    await appendUsage(app.redis, app.config, 0, event);
    const failed = await drainUsageOnce(deps, app.redis, { consumer: 'listener-test' }).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(failed).to.be.instanceOf(Error).with.property('message', 'the listener is down');
    expect(await drainUsageOnce(deps, app.redis, { consumer: 'listener-test' })).to.equal(1);
    expect(await drainUsageOnce(deps, app.redis, { consumer: 'listener-test' })).to.equal(0);
    expect(heard).to.deep.equal([[event.request_id], [event.request_id]]);
  });
});

describe('metering through a Postgres outage', () => {
  let proxy: TcpProxy;
  let app: AppContext;
  let direct: AppContext;
  /** DATABASE_URL through the proxy. */
  let via: URL;
  const more: AppContext[] = [];

  before(async () => {
    const pg = new URL(process.env.DATABASE_URL!);
    proxy = await new TcpProxy(pg.hostname, Number(pg.port || 5432)).start();
    via = new URL(process.env.DATABASE_URL!);
    via.hostname = '127.0.0.1';
    via.port = String(proxy.port);
    const prefix = isolatedPrefix();
    app = createContext(testConfig({ DATABASE_URL: via.toString(), REDIS_PREFIX: prefix }), { role: 'worker' });
    direct = createContext(testConfig({ REDIS_PREFIX: prefix }), { role: 'test' });
    await app.warmUp([app.redis]);
    await ensureMeteringGroups(app.redis, app.config);
  });
  after(async () => {
    await proxy.cut();
    await Promise.all([app.close(), direct.close(), ...more.map((c) => c.close())]);
  });

  it('writes what it read during the outage as soon as Postgres answers again, without the reclaim wait', async () => {
    const who = await createTestAccount(direct, { tier: 'paid' });
    const requestId = `chatcmpl-${randomUUID()}`;
    const event: UsageEvent = {
      request_id: requestId,
      account_id: who.account.id,
      model: 'gpt-4.1',
      tier: 'paid',
      status: 'completed',
      prompt_tokens: 10,
      completion_tokens: 5,
      input_price_per_million: '2.00',
      output_price_per_million: '8.00',
      created_at: new Date().toISOString(),
    };
    await appendUsage(app.redis, app.config, 0, event);
    await proxy.cut();
    const failed = await drainUsageOnce(app, app.redis, { consumer: 'outage-test' }).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(failed).to.be.instanceOf(Error);
    await proxy.restore();
    expect(await drainUsageOnce(app, app.redis, { consumer: 'outage-test' })).to.equal(1);
    const rows = await direct.db
      .selectFrom('usage_events')
      .select('request_id')
      .where('request_id', '=', requestId)
      .execute();
    expect(rows).to.have.length(1);
  });

  it('reports the age of the batch it could not write as the metering lag, and 0 once the streams are empty', async () => {
    // Streams of its own, so that an entry two minutes old can be appended (stream ids only grow).
    const worker = createContext(testConfig({ DATABASE_URL: via.toString(), REDIS_PREFIX: isolatedPrefix() }), {
      role: 'worker',
    });
    more.push(worker);
    await worker.warmUp([worker.redis]);
    await ensureMeteringGroups(worker.redis, worker.config);
    const who = await createTestAccount(direct, { tier: 'paid' });
    const event: UsageEvent = {
      request_id: `chatcmpl-${randomUUID()}`,
      account_id: who.account.id,
      model: 'gpt-4.1',
      tier: 'paid',
      status: 'completed',
      prompt_tokens: 10,
      completion_tokens: 5,
      input_price_per_million: '2.00',
      output_price_per_million: '8.00',
      created_at: new Date().toISOString(),
    };
    const appendedAt = Date.now() - 120_000;
    await worker.redis.xadd(usageStreamKey(worker.config, 0), `${appendedAt}-0`, 'e', JSON.stringify(event));
    const lag = () => metricValue(worker.metrics.registry, 'usage_metering_lag_seconds');

    await proxy.cut();
    const failed = await drainUsageOnce(worker, worker.redis, { consumer: 'lag-test' }).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(failed).to.be.instanceOf(Error);
    expect(await lag()).to.be.within(120, (Date.now() - appendedAt) / 1000);

    await proxy.restore();
    expect(await drainUsageOnce(worker, worker.redis, { consumer: 'lag-test' })).to.equal(1);
    expect(await drainUsageOnce(worker, worker.redis, { consumer: 'lag-test' })).to.equal(0);
    expect(await lag()).to.equal(0);
  });
});
