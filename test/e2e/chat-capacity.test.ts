import { expect } from 'chai';
import { createContext, type AppContext } from '../../src/context.js';
import { startFakeOpenAI } from '../../src/providers/openai/openai.fake.js';
import { createTestAccount, type TestAccount } from '../support/accounts.js';
import { isolatedPrefix, OPERATOR_TOKEN, testConfig } from '../support/env.js';
import { eventually, get, post } from '../support/http.js';
import { rolesPerTest } from '../support/processes.js';
import { openStream } from '../support/sse.js';

describe('worker capacity: bursts absorbed, saturation refused at once', function () {
  this.timeout(90_000);
  let app: AppContext;
  let account: TestAccount;
  const start = rolesPerTest();
  before(async () => {
    app = createContext(testConfig(), { role: 'test' });
    account = await createTestAccount(app, { tier: 'paid' });
  });
  after(async () => app.close());

  const ask = { model: 'gemini-2.5-flash', messages: [{ role: 'user', content: 'A short tale' }], max_tokens: 30 };

  it('starts every stream of a 300-stream burst on one worker at its default concurrency before any of them ends, then completes them all', async () => {
    // The upstream holds every answer after its first token until all 300 clients have theirs, so
    // no stream can end (and free its slot) before the last one starts: with fewer slots than
    // streams (64 jobs at a time, the old default) the rest never start and the test times out.
    // The ordering is the behaviour; how fast the burst starts is the benchmark's to measure.
    const openai = await startFakeOpenAI();
    let release!: () => void;
    const released = new Promise<void>((resolve) => (release = resolve));
    openai.script({ tokens: ['Once', ' upon', ' a', ' time'], holdAfter: { tokens: 1, until: released } });
    try {
      const env = {
        REDIS_PREFIX: isolatedPrefix(),
        MODEL_BACKEND: 'catalog',
        OPENAI_BASE_URL: `${openai.url}/v1`,
        OPENAI_API_KEY: openai.apiKey,
      };
      const [web] = await Promise.all([start('web', env), start('worker', env)]);
      const streams = Array.from({ length: 300 }, () =>
        openStream(`${web.url}/v1/chat/completions`, account.apiKey, { ...ask, model: 'gpt-4.1-mini' }),
      );
      // Moments in order, not times: the count of streams started and ended so far.
      let moment = 0;
      const startedAt: number[] = [];
      const endedAt: number[] = [];
      const ended = Promise.all(
        streams.map(async (s) => {
          await s.waitFor(1);
          startedAt.push(moment++);
          if (startedAt.length === streams.length) release();
          await s.finished;
          endedAt.push(moment++);
          expect(s.events.at(-1)).to.equal('[DONE]');
        }),
      );
      await ended;
      expect(startedAt).to.have.length(300);
      expect(endedAt).to.have.length(300);
      expect(Math.max(...startedAt)).to.be.below(Math.min(...endedAt));
    } finally {
      release();
      await openai.close();
    }
  });

  it('answers 503 server_overloaded at once, with Retry-After, when every worker is busy and jobs already wait', async () => {
    const env = {
      REDIS_PREFIX: isolatedPrefix(),
      LOCAL_MODEL_TTFT_MS: '0',
      LOCAL_MODEL_TOKENS_PER_SECOND: '5',
      WORKER_CONCURRENCY: '2',
      QUEUE_PICKUP_TIMEOUT_MS: '30000',
    };
    const [web] = await Promise.all([start('web', { ...env, ADMIN_TOKEN: OPERATOR_TOKEN }), start('worker', env)]);
    const busy = [0, 1].map(() =>
      openStream(`${web.url}/v1/chat/completions`, account.apiKey, { ...ask, max_tokens: 100 }),
    );
    await Promise.all(busy.map((s) => s.waitFor(1)));
    await eventually(async () => {
      const h = await get(`${web.url}/health`, { bearer: OPERATOR_TOKEN });
      return h.body.checks.queue.capacity === 2 && h.body.checks.queue.active === 2 ? true : undefined;
    }, 'the fleet to show both slots busy');
    // One more may wait in the queue (a tenth of the capacity, at least one); the next is refused
    // at once instead of waiting toward the pickup timeout.
    const waiting = openStream(`${web.url}/v1/chat/completions`, account.apiKey, ask);
    await eventually(async () => {
      const h = await get(`${web.url}/health`, { bearer: OPERATOR_TOKEN });
      return h.body.checks.queue.waiting === 1 ? true : undefined;
    }, 'the third job to wait in the queue');
    // A probe sent before the web process's own view caught up is queued; it gives up (and its job
    // is withdrawn) rather than wait for a slot.
    const refused = await eventually(async () => {
      const r = await post(`${web.url}/v1/chat/completions`, ask, {
        bearer: account.apiKey,
        signal: AbortSignal.timeout(500),
      }).catch(() => undefined);
      return r?.status === 503 ? r : undefined;
    }, 'the web process to see the queue and refuse');
    expect(refused.body.error.code).to.equal('server_overloaded');
    expect(refused.headers.get('retry-after')).to.equal('2');
    for (const s of [...busy, waiting]) s.controller.abort();
  });
});
