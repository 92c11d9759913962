import { expect } from 'chai';
import OpenAI from 'openai';
import { createContext, type AppContext } from '../../src/context.js';
import { createTestAccount, type TestAccount } from '../support/accounts.js';
import { isolatedPrefix, testConfig } from '../support/env.js';
import { eventually, get, request } from '../support/http.js';
import { startRole, type RoleProcess } from '../support/processes.js';
import { openStream } from '../support/sse.js';

// Issue 22's reproduction: two big requests in flight hold what is left of a quota, and a third
// is refused. Once they end it fits, so the refusal must ask for a short wait (which the SDK's
// default retries honour), not say that no retry can succeed before the window resets.

type Stream = ReturnType<typeof openStream>;
type Refusal = { headers: Headers; body: { error: { code: string; message: string } } };

describe('a refusal while requests in flight hold the quota', () => {
  const env = {
    REDIS_PREFIX: isolatedPrefix(),
    // Every process's clock stands still mid-month and mid-day: no window turns during a test.
    TEST_CLOCK_AT: '2017-10-10T12:00:30Z',
    LOCAL_MODEL_TTFT_MS: '0',
    // The two streams' answers (about 100 tokens) take seconds: they are still running when the
    // third request arrives. The third stops at its first '.', so its answer takes about one.
    LOCAL_MODEL_TOKENS_PER_SECOND: '10',
  };
  let app: AppContext;
  let web: RoleProcess;
  let worker: RoleProcess;

  before(async () => {
    app = createContext(testConfig(env), { role: 'test' });
    [web, worker] = await Promise.all([startRole('web', env), startRole('worker', env), app.warmUp([app.redis])]);
  });
  after(async () => {
    await Promise.all([web, worker].filter(Boolean).map((p) => p.stop()));
    await app?.close();
  });

  /** Two streams of the given request, each running (first chunk received). */
  async function twoInFlight(who: TestAccount, body: object): Promise<Stream[]> {
    const streams = [0, 1].map(() => openStream(`${web.url}/v1/chat/completions`, who.apiKey, body));
    await Promise.all(streams.map((s) => s.waitFor(1)));
    return streams;
  }

  /**
   * The official SDK with its default retries (2). The first 429 it receives is recorded, and the
   * streams in flight are ended (`released` says when their hold is gone) before the SDK sees it.
   */
  async function sdkAfterRelease(
    who: TestAccount,
    streams: Stream[],
    released: () => Promise<boolean>,
    body: object,
  ): Promise<{ refusal: Refusal | undefined; calls: number; result: unknown }> {
    let calls = 0;
    let refusal: Refusal | undefined;
    const client = new OpenAI({
      apiKey: who.apiKey,
      baseURL: `${web.url}/v1`,
      fetch: async (url, init) => {
        calls++;
        const res = await fetch(url, init);
        if (res.status === 429 && !refusal) {
          // Read whole: the SDK cancels its copy of the body, which a tee completes only once both copies end.
          const copy = res.clone();
          refusal = { headers: copy.headers, body: (await copy.json()) as Refusal['body'] };
          for (const s of streams) s.controller.abort();
          await Promise.all(streams.map((s) => s.finished));
          await eventually(async () => ((await released()) ? true : undefined), 'the in-flight holds released');
        }
        return res;
      },
    });
    const result = await client.chat.completions.create(body as never).then(
      (r) => r,
      (e: unknown) => e,
    );
    return { refusal, calls, result };
  }

  it('answers a token-quota refusal with a short Retry-After, and the SDK’s retry succeeds', async () => {
    const who = await createTestAccount(app, { tier: 'free' });
    // Each reserves about 5 × 8192 tokens: two fit in the free tier's 100,000 a day, a third does not.
    const big = {
      model: 'gemini-2.5-flash-lite',
      messages: [{ role: 'user', content: 'hi' }],
      n: 5,
      max_tokens: 8192,
    };
    const streams = await twoInFlight(who, big);
    const tokensFree = async () => {
      const held = await app.redis.hget(`${env.REDIS_PREFIX}:limits:{${who.account.id}}:reserved`, 'total');
      return Number(held ?? 0) === 0;
    };
    const { refusal, calls, result } = await sdkAfterRelease(who, streams, tokensFree, { ...big, stop: ['.'] });

    expect(refusal, 'the first call was refused').not.to.equal(undefined);
    const body = refusal!.body;
    expect(body.error.code).to.equal('insufficient_quota');
    expect(body.error.message).to.match(/in flight/);
    expect(body.error.message).not.to.match(/will not succeed/);
    const wait = Number(refusal!.headers.get('retry-after'));
    expect(wait).to.be.within(1, 5);
    expect(refusal!.headers.get('x-should-retry')).to.equal(null);
    expect(result, String(result)).to.have.property('object', 'chat.completion');
    expect(calls).to.equal(2);
  });

  it('answers a spending-limit refusal the same way while requests in flight hold the limit', async () => {
    const who = await createTestAccount(app, { tier: 'paid' });
    const set = await request('PUT', `${web.url}/v1/billing/spend-limit`, {
      bearer: who.jwt,
      json: { monthly_limit_usd: '0.15' },
    });
    expect(set.status, set.text).to.equal(200);
    // gpt-4.1 at 8.00 per 1M completion tokens: 8192 may cost about 0.066 USD; two fit in 0.15, a third does not.
    const big = { model: 'gpt-4.1', messages: [{ role: 'user', content: 'hi' }], max_tokens: 8192 };
    const streams = await twoInFlight(who, big);
    const spendFree = async () => {
      const r = await get(`${web.url}/v1/billing/spend-limit`, { bearer: who.jwt });
      return r.body.reserved_usd === '0.00';
    };
    const { refusal, calls, result } = await sdkAfterRelease(who, streams, spendFree, { ...big, stop: ['.'] });

    expect(refusal, 'the first call was refused').not.to.equal(undefined);
    const body = refusal!.body;
    expect(body.error.code).to.equal('insufficient_quota');
    expect(body.error.message).to.match(/in flight/);
    expect(Number(refusal!.headers.get('retry-after'))).to.be.within(1, 5);
    expect(refusal!.headers.get('x-should-retry')).to.equal(null);
    expect(result, String(result)).to.have.property('object', 'chat.completion');
    expect(calls).to.equal(2);
  });
});
