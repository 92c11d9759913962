import { expect } from 'chai';
import OpenAI from 'openai';
import { ManualClock } from '../../src/clock.js';
import { createContext, type AppContext } from '../../src/context.js';
import { invalidateAccountKeys } from '../../src/accounts/auth.service.js';
import { transaction } from '../../src/infra/db.js';
import { changeTier } from '../../src/subscriptions/tier.service.js';
import { createTestAccount } from '../support/accounts.js';
import { isolatedPrefix, ONE_REDIS_SERVER, testConfig } from '../support/env.js';
import { post } from '../support/http.js';
import { startRole, type RoleProcess } from '../support/processes.js';
import { monitorRedis } from '../support/redis-monitor.js';
import { startTestWeb, type TestWeb } from '../support/web.js';

describe('rate limits at the chat endpoint', () => {
  const prefix = isolatedPrefix();
  const env = { REDIS_PREFIX: prefix, LOCAL_MODEL_TTFT_MS: '0', LOCAL_MODEL_TOKENS_PER_SECOND: '100000' };
  // Both web instances read one injected clock, 30 s into a minute: the burst cannot straddle a window.
  const clock = new ManualClock('2026-11-22T10:15:30Z');
  let app: AppContext;
  let webs: TestWeb[];
  let worker: RoleProcess;

  before(async () => {
    app = createContext(testConfig(env), { role: 'test' });
    webs = await Promise.all([startTestWeb({ env, clock }), startTestWeb({ env, clock })]);
    worker = await startRole('worker', env);
  });
  after(async () => {
    await Promise.all(webs.map((w) => w.close()));
    await worker.stop();
    await app.close();
  });

  const ask = { model: 'gemini-2.5-flash-lite', messages: [{ role: 'user', content: 'hi' }], max_tokens: 5 };

  it('admits exactly 20 of 200 concurrent requests from one free account across two web instances', async () => {
    const { apiKey } = await createTestAccount(app, { tier: 'free' });
    const results = await Promise.all(
      Array.from({ length: 200 }, (_, i) => post(`${webs[i % 2]!.url}/v1/chat/completions`, ask, { bearer: apiKey })),
    );
    const ok = results.filter((r) => r.status === 200);
    const limited = results.filter((r) => r.status === 429);
    expect(ok).to.have.length(20);
    expect(limited).to.have.length(180);
    for (const r of limited) {
      expect(r.body.error).to.include({ type: 'rate_limit_exceeded', code: 'rate_limit_exceeded' });
      expect(r.headers.get('retry-after')).to.equal('30');
      expect(r.headers.get('x-ratelimit-limit')).to.equal('20');
      expect(r.headers.get('x-ratelimit-remaining')).to.equal('0');
      expect(r.headers.get('x-ratelimit-reset')).to.equal('30');
      expect(r.headers.get('x-ratelimit-limit-requests')).to.equal('20');
      expect(r.headers.get('x-ratelimit-remaining-requests')).to.equal('0');
      expect(r.headers.get('x-ratelimit-limit-tokens')).to.equal('100000');
    }
    const remaining = ok.map((r) => Number(r.headers.get('x-ratelimit-remaining'))).sort((a, b) => a - b);
    expect(remaining).to.deep.equal(Array.from({ length: 20 }, (_, i) => i));
  });

  it('makes the official OpenAI SDK raise RateLimitError, with Retry-After, on a 429', async () => {
    const { apiKey } = await createTestAccount(app, { tier: 'free' });
    const client = new OpenAI({ apiKey, baseURL: `${webs[0]!.url}/v1`, maxRetries: 0 });
    for (let i = 0; i < 20; i++) await client.chat.completions.create(ask as never);
    await client.chat.completions.create(ask as never).then(
      () => expect.fail('429 expected'),
      (e) => {
        expect(e).to.be.instanceOf(OpenAI.RateLimitError);
        expect((e as InstanceType<typeof OpenAI.RateLimitError>).headers.get('retry-after')).to.equal('30');
      },
    );
  });

  it('admits again once the minute window has passed', async () => {
    const { apiKey } = await createTestAccount(app, { tier: 'free' });
    for (let i = 0; i < 20; i++)
      expect((await post(`${webs[0]!.url}/v1/chat/completions`, ask, { bearer: apiKey })).status).to.equal(200);
    expect((await post(`${webs[1]!.url}/v1/chat/completions`, ask, { bearer: apiKey })).status).to.equal(429);
    clock.advance(60_000);
    expect((await post(`${webs[1]!.url}/v1/chat/completions`, ask, { bearer: apiKey })).status).to.equal(200);
  });

  it('applies a tier change from the next request', async () => {
    const { apiKey, account } = await createTestAccount(app, { tier: 'free' });
    for (let i = 0; i < 20; i++) await post(`${webs[0]!.url}/v1/chat/completions`, ask, { bearer: apiKey });
    expect((await post(`${webs[0]!.url}/v1/chat/completions`, ask, { bearer: apiKey })).status).to.equal(429);
    await app.db.updateTable('accounts').set({ tier: 'paid' }).where('id', '=', account.id).execute();
    const r = await post(`${webs[1]!.url}/v1/chat/completions`, ask, { bearer: apiKey });
    expect(r.status).to.equal(200);
    expect(r.headers.get('x-ratelimit-limit-requests')).to.equal('600');
  });

  /** Two requests: the first ties the key to its account on that web instance, the second caches the account. */
  const cacheKeyOn = async (url: string, apiKey: string) => {
    for (let i = 0; i < 2; i++)
      expect((await post(`${url}/v1/chat/completions`, ask, { bearer: apiKey })).status).to.equal(200);
  };

  it('admits under the new tier on an instance that had the key cached, once the change has committed', async () => {
    const { apiKey, account } = await createTestAccount(app, { tier: 'free' });
    await cacheKeyOn(webs[0]!.url, apiKey);
    await transaction(app.db, (trx) => changeTier(app, trx, account.id, 'paid', 'test', app.clock.now()));
    const r = await post(`${webs[0]!.url}/v1/chat/completions`, ask, { bearer: apiKey });
    expect(r.status).to.equal(200);
    expect(r.headers.get('x-ratelimit-limit-requests')).to.equal('600');
  });

  it('serves a paid-only model after an upgrade on an instance that had the key cached as free', async () => {
    const { apiKey, account } = await createTestAccount(app, { tier: 'free' });
    await cacheKeyOn(webs[0]!.url, apiKey);
    await transaction(app.db, (trx) => changeTier(app, trx, account.id, 'paid', 'test', app.clock.now()));
    const r = await post(`${webs[0]!.url}/v1/chat/completions`, { ...ask, model: 'gpt-4.1' }, { bearer: apiKey });
    expect(r.status).to.equal(200);
    expect(r.body.model).to.equal('gpt-4.1');
  });

  it('refuses a cached key at once after it was regenerated, with 401 and the bearer challenge', async () => {
    const { apiKey, account } = await createTestAccount(app, { tier: 'free' });
    await cacheKeyOn(webs[0]!.url, apiKey);
    await app.db.updateTable('api_keys').set({ revoked_at: new Date() }).where('account_id', '=', account.id).execute();
    await invalidateAccountKeys(app, account.id);
    const r = await post(`${webs[0]!.url}/v1/chat/completions`, ask, { bearer: apiKey });
    expect(r.status).to.equal(401);
    expect(r.body.error.code).to.equal('invalid_api_key');
    expect(r.headers.get('www-authenticate')).to.equal('Bearer error="invalid_token"');
  });

  it(`confirms a cached key inside the admission script, with no Redis read of its own ${ONE_REDIS_SERVER}`, async () => {
    const { apiKey } = await createTestAccount(app, { tier: 'free' });
    await cacheKeyOn(webs[0]!.url, apiKey);
    const monitor = await monitorRedis(process.env.REDIS_URL!);
    const touched: string[] = [];
    monitor.on(({ source, args }) => {
      if (source !== 'lua' && args.some((x) => x.includes(`${prefix}:authv:`)))
        touched.push(String(args[0]).toLowerCase());
    });
    try {
      expect((await post(`${webs[0]!.url}/v1/chat/completions`, ask, { bearer: apiKey })).status).to.equal(200);
    } finally {
      monitor.stop();
    }
    expect(touched).to.deep.equal(['evalsha']);
  });

  it('refuses a request whose token reservation does not fit the day with 429 insufficient_quota', async () => {
    const { apiKey } = await createTestAccount(app, { tier: 'free' });
    // 15 messages of 50,000 characters: far more prompt tokens than the free tier's 100,000 a day.
    const huge = {
      ...ask,
      messages: Array.from({ length: 15 }, () => ({ role: 'user', content: 'hello '.repeat(8_333) })),
    };
    const r = await post(`${webs[0]!.url}/v1/chat/completions`, huge, { bearer: apiKey });
    expect(r.status).to.equal(429);
    expect(r.body.error).to.include({ type: 'insufficient_quota', code: 'insufficient_quota' });
    expect(r.headers.get('retry-after')).to.equal(null);
    expect(r.headers.get('x-should-retry')).to.equal('false');
    expect(r.headers.get('x-ratelimit-limit-tokens')).to.equal('100000');
    // It consumed nothing: a normal request is still admitted.
    expect((await post(`${webs[0]!.url}/v1/chat/completions`, ask, { bearer: apiKey })).status).to.equal(200);
  });

  it('says a request larger than the whole daily token quota must be made smaller, not retried', async () => {
    const { apiKey } = await createTestAccount(app, { tier: 'free' });
    // 15 messages of 50,000 characters: more prompt tokens than the free tier's 100,000 a day.
    const huge = {
      ...ask,
      messages: Array.from({ length: 15 }, () => ({ role: 'user', content: 'hello '.repeat(8_333) })),
    };
    const r = await post(`${webs[0]!.url}/v1/chat/completions`, huge, { bearer: apiKey });
    expect(r.status).to.equal(429);
    expect(r.body.error.code).to.equal('insufficient_quota');
    expect(r.body.error.message).to.match(/more than the whole daily token quota of 100000\. Lower max_tokens or n/);
  });

  it(`costs one Redis round trip for the limiter on the request path and one for the settlement at its end ${ONE_REDIS_SERVER}`, async () => {
    const { apiKey } = await createTestAccount(app, { tier: 'free' });
    const monitor = await monitorRedis(process.env.REDIS_URL!);
    const log: { source: string; cmd: string; limits: boolean }[] = [];
    monitor.on(({ source, args }) => {
      // Commands a script runs inside Redis show with source "lua": they are not round trips.
      if (source === 'lua') return;
      log.push({
        source,
        cmd: String(args[0]).toLowerCase(),
        limits: args.some((a) => a.includes(`${prefix}:limits:`)),
      });
    });
    try {
      const r = await post(`${webs[0]!.url}/v1/chat/completions`, ask, { bearer: apiKey });
      expect(r.status).to.equal(200);
      // The settlement is recorded just after the response; wait for it to show.
      const deadline = Date.now() + 5000;
      while (log.filter((l) => l.limits).length < 2 && Date.now() < deadline)
        await new Promise((res) => setTimeout(res, 20));
    } finally {
      monitor.stop();
    }
    const inMulti = new Map<string, boolean>();
    const outside: string[] = [];
    const inside: string[] = [];
    for (const l of log) {
      if (l.cmd === 'multi') inMulti.set(l.source, true);
      else if (l.cmd === 'exec') inMulti.set(l.source, false);
      else if (l.limits) (inMulti.get(l.source) ? inside : outside).push(l.cmd);
    }
    // The settlement is a command of its own, beside the usage append: on a cluster the account's
    // keys and the usage stream live in different slots, so they cannot share a MULTI.
    expect(outside).to.deep.equal(['evalsha', 'evalsha']);
    expect(inside).to.deep.equal([]);
  });
});
