import { gzipSync } from 'node:zlib';
import { expect } from 'chai';
import { createTestAccount } from '../support/accounts.js';
import { isolatedPrefix } from '../support/env.js';
import { post, request } from '../support/http.js';
import { metricValue } from '../support/metrics.js';
import { startTestWeb, type TestWeb } from '../support/web.js';

// The abuse budget (issue 30): every request counts before its body is read, whatever its answer,
// per account and, without a valid credential, per client network. Small budgets, each test on a
// Redis prefix of its own so its counters start at zero.

const CHAT = '/v1/chat/completions';
const MIB = 1024 * 1024;

describe('the abuse budget', () => {
  let web: TestWeb | undefined;
  afterEach(async () => {
    await web?.close();
    web = undefined;
  });
  const start = async (env: Record<string, string>) =>
    (web = await startTestWeb({ env: { REDIS_PREFIX: isolatedPrefix(), ...env } }));
  const parsedBytes = (w: TestWeb, route: string) =>
    metricValue(w.app.metrics.registry, 'http_request_body_parsed_bytes_total', { route });

  it("counts requests that fail validation: a free account's 21st invalid request in a minute gets 429 with Retry-After, its body unread", async () => {
    const w = await start({ ABUSE_BUDGET_FREE_REQUESTS_PER_MINUTE: '20' });
    const { apiKey } = await createTestAccount(w.app, { tier: 'free' });
    const invalid = { model: 'gemini-2.5-flash', messages: [{ role: 'user', content: 'x' }], temperature: 9 };
    for (let i = 0; i < 20; i++) {
      const r = await post(`${w.url}${CHAT}`, invalid, { bearer: apiKey });
      expect(r.status, `request ${i + 1}`).to.equal(422);
    }
    const parsed = await parsedBytes(w, CHAT);

    const r = await post(`${w.url}${CHAT}`, invalid, { bearer: apiKey });

    expect(r.status).to.equal(429);
    expect(r.body.error).to.deep.include({ type: 'rate_limit_exceeded', code: 'rate_limit_exceeded', param: null });
    expect(r.body.error.message).to.match(
      /^Too many requests: this account sent more than 20 requests in a minute \(every request counts, refused ones too\)\. Retry in \d+ s\.$/,
    );
    expect(Number(r.headers.get('retry-after'))).to.be.within(1, 60);
    expect(r.headers.get('x-ratelimit-limit')).to.equal('20');
    expect(r.headers.get('x-ratelimit-remaining')).to.equal('0');
    expect(await parsedBytes(w, CHAT), 'bytes parsed after the refusal').to.equal(parsed);
    expect(
      await metricValue(w.app.metrics.registry, 'abuse_budget_refusals_total', { budget: 'free', spent: 'requests' }),
    ).to.equal(1);
  });

  it("keeps accounts apart: another account's request is read while one account's budget is spent", async () => {
    const w = await start({ ABUSE_BUDGET_FREE_REQUESTS_PER_MINUTE: '20' });
    const [spent, other] = await Promise.all([
      createTestAccount(w.app, { tier: 'free' }),
      createTestAccount(w.app, { tier: 'free' }),
    ]);
    const invalid = { model: 'gemini-2.5-flash', messages: [] };
    for (let i = 0; i < 21; i++) await post(`${w.url}${CHAT}`, invalid, { bearer: spent.apiKey });
    expect((await post(`${w.url}${CHAT}`, invalid, { bearer: spent.apiKey })).status).to.equal(429);

    const r = await post(`${w.url}${CHAT}`, invalid, { bearer: other.apiKey });
    expect(r.status).to.equal(422);
  });

  it("answers a network's refused credentials 429 with Retry-After once its budget is spent, and still serves a valid key from it", async () => {
    const w = await start({ ABUSE_BUDGET_CLIENT_REQUESTS_PER_MINUTE: '5' });
    const { apiKey } = await createTestAccount(w.app, { tier: 'free' });
    const ask = { model: 'gemini-2.5-flash', messages: [] };
    const wrongKey = `sk-svc-${'x'.repeat(43)}`;
    for (let i = 0; i < 5; i++) {
      const r = await post(`${w.url}${CHAT}`, ask, { bearer: wrongKey });
      expect(r.status, `attempt ${i + 1}`).to.equal(401);
    }

    const r = await post(`${w.url}${CHAT}`, ask, { bearer: wrongKey });
    expect(r.status).to.equal(429);
    expect(r.body.error.code).to.equal('rate_limit_exceeded');
    expect(r.body.error.message).to.match(
      /^Too many requests: your network, without a valid credential, sent more than 5 requests in a minute/,
    );
    expect(Number(r.headers.get('retry-after'))).to.be.within(1, 60);
    // The account's budget is its own.
    expect((await post(`${w.url}${CHAT}`, ask, { bearer: apiKey })).status).to.equal(422);
  });

  it('counts a compressed body by its decompressed bytes: after 900 KiB inflated from 1 KB, the next body over the 1 MiB budget is refused unread', async () => {
    const w = await start({ ABUSE_BUDGET_CLIENT_BYTES_PER_MINUTE: String(MIB) });
    const hook = `${w.url}/v1/webhooks/processor`;
    const inflated = `{"type":"ping"${' '.repeat(900 * 1024)}}`;
    const first = await request('POST', hook, {
      raw: gzipSync(inflated),
      headers: { 'content-type': 'application/json', 'content-encoding': 'gzip' },
    });
    // Read and parsed in full (what the webhook answers then does not matter): the budget holds its 900 KiB.
    expect(first.status).to.not.equal(429);
    const parsed = await parsedBytes(w, '/v1/webhooks/processor');
    expect(parsed).to.equal(Buffer.byteLength(inflated));

    const second = await request('POST', hook, {
      raw: `{"type":"ping"${' '.repeat(200 * 1024)}}`,
      headers: { 'content-type': 'application/json' },
    });

    expect(second.status).to.equal(429);
    expect(second.body.error.message).to.match(/more than 1 MiB of request bodies in a minute/);
    expect(await parsedBytes(w, '/v1/webhooks/processor')).to.equal(parsed);
  });
});
