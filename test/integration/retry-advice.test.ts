import { expect } from 'chai';
import { randomUUID } from 'node:crypto';
import OpenAI from 'openai';
import { ManualClock } from '../../src/clock.js';
import { boundedRetryHeaders, retryAdvice } from '../../src/errors.js';
import { createTestAccount, type TestAccount } from '../support/accounts.js';
import { isolatedPrefix } from '../support/env.js';
import { post } from '../support/http.js';
import { startTestWeb, type TestWeb } from '../support/web.js';

// 10 minutes past the hour: the hour window resets in 50 minutes, the day in 13 h 50 min.
const NOW = Date.parse('2026-11-02T10:10:00Z');

describe('Retry-After never asks a client to wait more than a minute', () => {
  describe('retryAdvice', () => {
    it('gives Retry-After in whole seconds for a wait of a minute or less', () => {
      expect(retryAdvice(400)).to.deep.equal({ 'Retry-After': '1' });
      expect(retryAdvice(60_000)).to.deep.equal({ 'Retry-After': '60' });
    });

    it('says x-should-retry: false, and no Retry-After, for a longer wait or when no wait helps', () => {
      expect(retryAdvice(60_001)).to.deep.equal({ 'x-should-retry': 'false' });
      expect(retryAdvice(null)).to.deep.equal({ 'x-should-retry': 'false' });
    });

    it('bounds a Retry-After decided elsewhere (an upstream asking for an hour)', () => {
      expect(boundedRetryHeaders({ 'Retry-After': '3600', 'X-Other': 'x' })).to.deep.equal({
        'X-Other': 'x',
        'x-should-retry': 'false',
      });
      expect(boundedRetryHeaders({ 'Retry-After': '30' })).to.deep.equal({ 'Retry-After': '30' });
    });
  });

  describe('on the chat endpoint, with the official SDK and its default retries', () => {
    const clock = new ManualClock(NOW);
    let web: TestWeb;
    let free: TestAccount;

    before(async () => {
      web = await startTestWeb({ clock, env: { REDIS_PREFIX: isolatedPrefix() } });
    });
    beforeEach(async () => {
      free = await createTestAccount(web.app, { tier: 'free' });
    });
    after(async () => web.close());

    const ask = { model: 'gemini-2.5-flash-lite', messages: [{ role: 'user' as const, content: 'hi' }], max_tokens: 5 };
    /** Fills the free tier's hour window (100 requests) without sending them through HTTP. */
    const spendHour = async (accountId: string) => {
      for (let minute = 0; minute < 5; minute++) {
        for (let i = 0; i < 20; i++) {
          const a = await web.app.limiter.admit({ accountId, tier: 'free', requestId: randomUUID(), reserveTokens: 0 });
          expect(a.allowed).to.equal(true);
        }
        clock.advance(60_000);
      }
      clock.set(NOW);
    };

    /** Calls the endpoint with the SDK's defaults (2 retries), counting what it sends. */
    async function sdkCall(apiKey: string, body: object): Promise<{ error: unknown; calls: number; ms: number }> {
      let calls = 0;
      const client = new OpenAI({
        apiKey,
        baseURL: `${web.url}/v1`,
        fetch: (input, init) => {
          calls++;
          return fetch(input, init);
        },
      });
      const start = performance.now();
      const error = await client.chat.completions.create(body as never).then(
        () => undefined,
        (e: unknown) => e,
      );
      return { error, calls, ms: performance.now() - start };
    }

    it('answers an exhausted hour window with x-should-retry: false, the reset in the message and headers, and no Retry-After', async () => {
      await spendHour(free.account.id);
      const r = await post(`${web.url}/v1/chat/completions`, ask, { bearer: free.apiKey });
      expect(r.status).to.equal(429);
      expect(r.headers.get('retry-after')).to.equal(null);
      expect(r.headers.get('x-should-retry')).to.equal('false');
      expect(r.headers.get('x-ratelimit-reset')).to.equal(String(50 * 60));
      expect(r.headers.get('x-ratelimit-reset-requests')).to.equal('50m0s');
      expect(r.body.error).to.include({ type: 'rate_limit_exceeded', code: 'rate_limit_exceeded' });
      expect(r.body.error.message).to.equal(
        'Rate limit reached for requests (100 per hour). Try again at 2026-11-02T11:00:00Z (in 50 min); retrying sooner will not succeed.',
      );
    });

    it('makes the SDK raise RateLimitError at once on an exhausted hour window, without retrying', async () => {
      await spendHour(free.account.id);
      const { error, calls, ms } = await sdkCall(free.apiKey, ask);
      expect(error).to.be.instanceOf(OpenAI.RateLimitError);
      expect(calls).to.equal(1);
      expect(ms).to.be.below(1000);
    });

    it('makes the SDK raise RateLimitError at once for a request larger than the whole daily token quota', async () => {
      // Ten messages of 50,000 characters and 5 × 8192 completion tokens: more than the free tier's 100,000 a day.
      const huge = {
        ...ask,
        max_tokens: 8192,
        n: 5,
        messages: Array.from({ length: 10 }, () => ({ role: 'user', content: 'hello '.repeat(8_333) })),
      };
      const { error, calls, ms } = await sdkCall(free.apiKey, huge);
      expect(error).to.be.instanceOf(OpenAI.RateLimitError);
      const e = error as InstanceType<typeof OpenAI.RateLimitError>;
      expect(e.code).to.equal('insufficient_quota');
      expect(e.headers.get('retry-after')).to.equal(null);
      expect(e.headers.get('x-should-retry')).to.equal('false');
      expect(e.headers.get('x-ratelimit-reset-tokens')).to.equal('13h50m0s');
      expect(e.message).to.match(/waiting will not help/);
      expect(calls).to.equal(1);
      expect(ms).to.be.below(1000);
    });

    it('makes the SDK raise RateLimitError at once when the day’s tokens are spent, naming when they reset', async () => {
      const id = randomUUID();
      const spent = await web.app.limiter.admit({
        accountId: free.account.id,
        tier: 'free',
        requestId: id,
        reserveTokens: 100_000,
      });
      expect(spent.allowed).to.equal(true);
      await web.app.limiter.settle({ accountId: free.account.id, requestId: id, actualTokens: 100_000 });
      const { error, calls } = await sdkCall(free.apiKey, ask);
      expect(error).to.be.instanceOf(OpenAI.RateLimitError);
      const e = error as InstanceType<typeof OpenAI.RateLimitError>;
      expect(e.code).to.equal('insufficient_quota');
      expect(e.headers.get('retry-after')).to.equal(null);
      expect(e.headers.get('x-should-retry')).to.equal('false');
      expect(e.message).to.match(/Try again at \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ \(in \d+ (min|h \d+ min)\)/);
      expect(calls).to.equal(1);
    });

    it('keeps Retry-After for an exhausted minute window, which the SDK may wait out', async () => {
      for (let i = 0; i < 20; i++)
        await web.app.limiter.admit({
          accountId: free.account.id,
          tier: 'free',
          requestId: randomUUID(),
          reserveTokens: 0,
        });
      const r = await post(`${web.url}/v1/chat/completions`, ask, { bearer: free.apiKey });
      expect(r.status).to.equal(429);
      expect(r.headers.get('retry-after')).to.equal('60');
      expect(r.headers.get('x-should-retry')).to.equal(null);
    });
  });
});
