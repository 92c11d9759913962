import { expect } from 'chai';
import { ManualClock } from '../../src/clock.js';
import { createTestAccount } from '../support/accounts.js';
import { recordUsage } from '../support/billing.js';
import { get, request } from '../support/http.js';
import { startTestWeb, type TestWeb } from '../support/web.js';

// GET, PUT and DELETE /v1/billing/spend-limit through real HTTP over real Postgres and Redis, with
// the web tier's clock set by hand to April 2017 (a month no other test uses).

describe('the monthly spending limit endpoints', () => {
  const clock = new ManualClock('2017-04-10T09:30:00Z');
  let web: TestWeb;

  before(async () => {
    web = await startTestWeb({ clock });
  });
  after(() => web.close());

  const url = () => `${web.url}/v1/billing/spend-limit`;
  const put = (jwt: string, json: unknown) => request('PUT', url(), { bearer: jwt, json });
  const putRaw = (jwt: string, raw: string) =>
    request('PUT', url(), { bearer: jwt, raw, headers: { 'content-type': 'application/json' } });

  it('sets, reads and removes a paid account’s limit with the frontend JWT', async () => {
    const who = await createTestAccount(web.app, { tier: 'paid' });
    const none = await get(url(), { bearer: who.jwt });
    expect(none.status, none.text).to.equal(200);
    expect(none.body).to.deep.equal({
      object: 'billing.spend_limit',
      monthly_limit_usd: null,
      enforced: false,
      month: '2017-04',
      spent_usd: '0.00',
      reserved_usd: '0.00',
      remaining_usd: null,
      resets_at: '2017-05-01T00:00:00.000Z',
    });

    const set = await put(who.jwt, { monthly_limit_usd: '25.5' });
    expect(set.status, set.text).to.equal(200);
    expect(set.body).to.include({ monthly_limit_usd: '25.50', enforced: true, remaining_usd: '25.50' });
    expect((await get(url(), { bearer: who.jwt })).body).to.deep.equal(set.body);

    const removed = await request('DELETE', url(), { bearer: who.jwt });
    expect(removed.status, removed.text).to.equal(200);
    expect(removed.body).to.include({ monthly_limit_usd: null, enforced: false, remaining_usd: null });
    expect((await get(url(), { bearer: who.jwt })).body.monthly_limit_usd).to.equal(null);
  });

  it('counts this month’s paid-tier spend from the ledger in what is left', async () => {
    const who = await createTestAccount(web.app, { tier: 'paid' });
    await recordUsage(web.app, [
      // gpt-4.1 at 2.00 in / 8.00 out per 1M tokens: 2.00 + 0.80 = 2.80 USD this month.
      {
        accountId: who.account.id,
        model: 'gpt-4.1',
        tier: 'paid',
        prompt: 1_000_000,
        completion: 100_000,
        at: '2017-04-02T00:00:00Z',
      },
      // Free-tier usage costs nothing, and last month's is not this month's.
      {
        accountId: who.account.id,
        model: 'gemini-2.5-flash',
        tier: 'free',
        prompt: 1_000_000,
        completion: 0,
        at: '2017-04-01T00:00:00Z',
      },
      {
        accountId: who.account.id,
        model: 'gpt-4.1',
        tier: 'paid',
        prompt: 1_000_000,
        completion: 0,
        at: '2017-03-31T23:59:59Z',
      },
    ]);
    const r = await put(who.jwt, { monthly_limit_usd: '10.00' });
    expect(r.body).to.include({ spent_usd: '2.80', reserved_usd: '0.00', remaining_usd: '7.20' });
  });

  it('shows the limit and what is left of it in subscription info and billing usage too', async () => {
    const who = await createTestAccount(web.app, { tier: 'paid' });
    const set = await put(who.jwt, { monthly_limit_usd: '40' });
    expect(set.status, set.text).to.equal(200);
    const info = await get(`${web.url}/v1/subscription/info`, { bearer: who.apiKey });
    expect(info.status, info.text).to.equal(200);
    expect(info.body.spend_limit).to.deep.equal(set.body);
    const usage = await get(`${web.url}/v1/billing/usage`, { bearer: who.apiKey });
    expect(usage.status, usage.text).to.equal(200);
    expect(usage.body.spend_limit).to.deep.equal(set.body);
  });

  it('refuses a free account’s PUT with 403 in the OpenAI error envelope, and changes nothing', async () => {
    const who = await createTestAccount(web.app, { tier: 'free' });
    const r = await put(who.jwt, { monthly_limit_usd: '25.00' });
    expect(r.status).to.equal(403);
    expect(r.body).to.deep.equal({
      error: {
        message:
          'A spending limit is for the paid tier: free-tier usage costs nothing. Upgrade with POST /v1/subscription/upgrade first.',
        type: 'permission_error',
        code: 'spend_limit_requires_paid_tier',
        param: 'monthly_limit_usd',
      },
    });
    expect((await get(url(), { bearer: who.jwt })).body.monthly_limit_usd).to.equal(null);
  });

  it('answers 422 at monthly_limit_usd for anything but a decimal string from 0.01 to 1000000 with at most two decimals', async () => {
    const who = await createTestAccount(web.app, { tier: 'paid' });
    const cases: [unknown, string][] = [
      [25, 'string_type'],
      [25.5, 'string_type'],
      [null, 'string_type'],
      ['-5.00', 'string_pattern_mismatch'],
      ['25.001', 'string_pattern_mismatch'],
      ['1e3', 'string_pattern_mismatch'],
      ['25,00', 'string_pattern_mismatch'],
      [' 25', 'string_pattern_mismatch'],
      ['025', 'string_pattern_mismatch'],
      ['', 'string_pattern_mismatch'],
      ['99999999999', 'string_too_long'],
      ['0', 'greater_than_equal'],
      ['0.00', 'greater_than_equal'],
      ['1000000.01', 'less_than_equal'],
      ['9999999', 'less_than_equal'],
    ];
    for (const [value, type] of cases) {
      const r = await put(who.jwt, { monthly_limit_usd: value });
      expect(r.status, `${JSON.stringify(value)} -> ${r.text}`).to.equal(422);
      expect(
        r.body.detail.map((d: { loc: unknown; type: string }) => [d.loc, d.type]),
        JSON.stringify(value),
      ).to.deep.include([['body', 'monthly_limit_usd'], type]);
      expect(r.body.error).to.include({ type: 'invalid_request_error', param: 'monthly_limit_usd' });
    }
    expect((await put(who.jwt, { monthly_limit_usd: '1000000' })).status).to.equal(200);
    expect((await put(who.jwt, { monthly_limit_usd: '0.01' })).status).to.equal(200);
  });

  it('answers 422 for an extra field, a missing field and a body that is not an object', async () => {
    const who = await createTestAccount(web.app, { tier: 'paid' });
    const extra = await put(who.jwt, { monthly_limit_usd: '25.00', currency: 'eur' });
    expect(extra.status).to.equal(422);
    expect(extra.body.detail).to.deep.include({
      loc: ['body', 'currency'],
      msg: 'Extra inputs are not permitted',
      type: 'extra_forbidden',
    });
    const missing = await put(who.jwt, {});
    expect(missing.status).to.equal(422);
    expect(missing.body.detail).to.deep.include({
      loc: ['body', 'monthly_limit_usd'],
      msg: 'Field required',
      type: 'missing',
    });
    for (const raw of ['"25.00"', '[]', '']) {
      const r = await putRaw(who.jwt, raw);
      expect(r.status, `${raw} -> ${r.text}`).to.equal(422);
    }
    expect((await get(url(), { bearer: who.jwt })).body.monthly_limit_usd).to.equal(null);
  });

  it('takes only the frontend JWT, not an API key', async () => {
    const who = await createTestAccount(web.app, { tier: 'paid' });
    for (const method of ['GET', 'PUT', 'DELETE']) {
      const r = await request(method, url(), {
        bearer: who.apiKey,
        json: method === 'PUT' ? { monthly_limit_usd: '5' } : undefined,
      });
      expect(r.status, method).to.equal(401);
      expect(r.body.error.code).to.equal('invalid_token');
    }
  });
});
