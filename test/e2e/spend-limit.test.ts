import { expect } from 'chai';
import OpenAI from 'openai';
import { createContext, type AppContext } from '../../src/context.js';
import { nanoUsdOf, requestCostNanoUsd } from '../../src/usage/usage-cost.js';
import { createTestAccount, type TestAccount } from '../support/accounts.js';
import { isolatedPrefix, testConfig } from '../support/env.js';
import { eventually, get, post, request } from '../support/http.js';
import { startRole, type RoleProcess } from '../support/processes.js';
import { openStream } from '../support/sse.js';

// The spending limit across a fleet: two web processes and a worker on one Redis and Postgres, the
// built-in local model standing in for gpt-4.1 (2.00 in / 8.00 out per 1M tokens). Every process's
// clock stands still in September 2017, so no request straddles a month or a rate-limit window.

describe('the monthly spending limit across two web processes', () => {
  const env = {
    REDIS_PREFIX: isolatedPrefix(),
    TEST_CLOCK_AT: '2017-09-15T12:00:00Z',
    WORKER_CONCURRENCY: '200',
    LOCAL_MODEL_TTFT_MS: '0',
    LOCAL_MODEL_TOKENS_PER_SECOND: '50',
  };
  let app: AppContext;
  let webs: RoleProcess[];
  let worker: RoleProcess;

  before(async () => {
    app = createContext(testConfig(env), { role: 'test' });
    [webs, worker] = await Promise.all([
      Promise.all([startRole('web', env), startRole('web', env)]),
      startRole('worker', env),
    ]);
  });
  after(async () => {
    await Promise.all([...(webs ?? []), worker].filter(Boolean).map((p) => p.stop()));
    await app?.close();
  });

  async function limited(limit: string): Promise<TestAccount> {
    const who = await createTestAccount(app, { tier: 'paid' });
    const r = await request('PUT', `${webs[0]!.url}/v1/billing/spend-limit`, {
      bearer: who.jwt,
      json: { monthly_limit_usd: limit },
    });
    expect(r.status, r.text).to.equal(200);
    return who;
  }

  // About 1,000 prompt tokens and 10 completion tokens: 0.0021 USD each, which the answer uses in full.
  const ask = {
    model: 'gpt-4.1',
    messages: [{ role: 'user', content: `Summarise this: ${'apple pie recipe '.repeat(330)}` }],
    max_tokens: 10,
  };

  const ledgerRows = (accountId: string) =>
    app.db
      .selectFrom('usage_events')
      .select(['request_id', 'status', 'cost_usd'])
      .where('account_id', '=', accountId)
      .execute();
  const spendLimit = (who: TestAccount) => get(`${webs[1]!.url}/v1/billing/spend-limit`, { bearer: who.jwt });

  it('admits what fits of 100 concurrent requests, bills no more than the limit plus one reservation, then admits nothing', async () => {
    const who = await limited('0.10');
    const results = await Promise.all(
      Array.from({ length: 100 }, (_, i) =>
        post(`${webs[i % 2]!.url}/v1/chat/completions`, ask, { bearer: who.apiKey }),
      ),
    );
    const admitted = results.filter((r) => r.status === 200);
    const refused = results.filter((r) => r.status !== 200);
    expect(admitted.length).to.be.greaterThan(0);
    expect(refused.length).to.be.greaterThan(0);
    for (const r of refused) {
      expect(r.status, r.text).to.equal(429);
      expect(r.body.error).to.include({ type: 'insufficient_quota', code: 'insufficient_quota' });
      expect(r.body.error.message).to.include('monthly spending limit of $0.10');
      // While admitted requests still hold part of the limit, a retry may fit once they end.
      if (r.body.error.message.includes('in flight hold')) expect(r.headers.get('retry-after')).to.equal('2');
      else expect(r.headers.get('x-should-retry')).to.equal('false');
    }

    const usage = admitted[0]!.body.usage as { prompt_tokens: number; completion_tokens: number };
    const reservation = requestCostNanoUsd({
      tier: 'paid',
      ...usage,
      input_price_per_million: '2.00',
      output_price_per_million: '8.00',
    });
    const rows = await eventually(async () => {
      const r = await ledgerRows(who.account.id);
      return r.length >= admitted.length ? r : undefined;
    }, 'every admitted request in the ledger');
    expect(rows).to.have.length(admitted.length);
    const billed = rows.reduce((sum, r) => sum + nanoUsdOf(r.cost_usd), 0n);
    expect(billed <= nanoUsdOf('0.10') + reservation, `billed ${billed} nano-USD`).to.equal(true);
    // What is left is less than one more request: each web process refuses the next one, and with
    // nothing in flight no retry can succeed this month.
    for (const web of webs) {
      const r = await post(`${web.url}/v1/chat/completions`, ask, { bearer: who.apiKey });
      expect(r.status).to.equal(429);
      expect(r.headers.get('x-should-retry')).to.equal('false');
      expect(r.headers.get('retry-after')).to.equal(null);
    }
  });

  it("keeps an API key within its own limit under 50 concurrent requests, naming the key's limit, while the account's other key still answers", async () => {
    const who = await createTestAccount(app, { tier: 'paid' });
    const created = await request('POST', `${webs[0]!.url}/v1/keys`, {
      bearer: who.jwt,
      json: { name: 'Capped batch job', limits: { monthly_spend_limit_usd: '0.05' } },
    });
    expect(created.status, created.text).to.equal(201);
    const capped = created.body as { id: string; api_key: string };
    const results = await Promise.all(
      Array.from({ length: 50 }, (_, i) =>
        post(`${webs[i % 2]!.url}/v1/chat/completions`, ask, { bearer: capped.api_key }),
      ),
    );
    const admitted = results.filter((r) => r.status === 200);
    const refused = results.filter((r) => r.status !== 200);
    expect(admitted.length).to.be.greaterThan(0);
    expect(refused.length).to.be.greaterThan(0);
    for (const r of refused) {
      expect(r.status, r.text).to.equal(429);
      expect(r.body.error).to.include({ type: 'insufficient_quota', code: 'insufficient_quota' });
      expect(r.body.error.message).to.include("API key's own monthly spending limit of $0.05");
    }
    const rows = await eventually(async () => {
      const r = await ledgerRows(who.account.id);
      return r.length >= admitted.length ? r : undefined;
    }, 'every admitted request in the ledger');
    expect(rows).to.have.length(admitted.length);
    const billed = rows.reduce((sum, r) => sum + nanoUsdOf(r.cost_usd), 0n);
    expect(billed <= nanoUsdOf('0.05'), `billed ${billed} nano-USD`).to.equal(true);
    const keys = await app.db
      .selectFrom('usage_events')
      .select('key_id')
      .where('account_id', '=', who.account.id)
      .execute();
    expect(new Set(keys.map((k) => k.key_id))).to.deep.equal(new Set([capped.id]));
    // The account has no limit of its own: its default key still answers.
    const other = await post(`${webs[1]!.url}/v1/chat/completions`, ask, { bearer: who.apiKey });
    expect(other.status, other.text).to.equal(200);
  });

  it('makes the official openai SDK raise RateLimitError insufficient_quota at once, without retrying', async () => {
    const who = await limited('0.01');
    let calls = 0;
    const client = new OpenAI({
      apiKey: who.apiKey,
      baseURL: `${webs[0]!.url}/v1`,
      maxRetries: 3,
      fetch: (url, init) => {
        calls++;
        return fetch(url, init);
      },
    });
    // 8192 completion tokens of gpt-4.1 may cost 0.066 USD, more than the whole limit.
    const err = await client.chat.completions
      .create({ model: 'gpt-4.1', messages: [{ role: 'user', content: 'hi' }], max_tokens: 8192 })
      .then(
        () => expect.fail('429 expected'),
        (e: unknown) => e,
      );
    expect(err).to.be.instanceOf(OpenAI.RateLimitError);
    expect((err as InstanceType<typeof OpenAI.RateLimitError>).code).to.equal('insufficient_quota');
    expect(calls).to.equal(1);
  });

  it('releases a cancelled stream’s reservation and keeps only what it cost', async () => {
    const who = await limited('0.10');
    // Up to 8192 completion tokens: a reservation of about 0.066 USD, so two do not fit at once.
    const ask = {
      model: 'gpt-4.1',
      messages: [{ role: 'user', content: 'Tell me a long story about lighthouses' }],
      max_tokens: 8192,
    };
    const s = openStream(`${webs[0]!.url}/v1/chat/completions`, who.apiKey, ask);
    await s.waitFor(1);
    const held = await spendLimit(who);
    expect(nanoUsdOf(held.body.reserved_usd) > nanoUsdOf('0.06'), held.text).to.equal(true);
    expect((await post(`${webs[1]!.url}/v1/chat/completions`, ask, { bearer: who.apiKey })).status).to.equal(429);

    s.controller.abort();
    await s.finished;
    const [row] = await eventually(async () => {
      const r = await ledgerRows(who.account.id);
      return r.length === 1 ? r : undefined;
    }, 'the cancelled request in the ledger');
    expect(row!.status).to.equal('cancelled');
    const after = await eventually(async () => {
      const r = await spendLimit(who);
      return r.body.reserved_usd === '0.00' ? r : undefined;
    }, 'the reservation released');
    expect(nanoUsdOf(after.body.spent_usd)).to.equal(nanoUsdOf(row!.cost_usd));
    expect((await post(`${webs[1]!.url}/v1/chat/completions`, ask, { bearer: who.apiKey })).status).to.equal(200);
  });
});
