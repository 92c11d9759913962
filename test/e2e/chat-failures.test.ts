import { expect } from 'chai';
import { createContext, type AppContext } from '../../src/context.js';
import { bullPrefix, COMPLETIONS_QUEUE, completionShards, createWorker } from '../../src/infra/queues.js';
import { startFakeOpenAI } from '../../src/providers/openai/openai.fake.js';
import { createTestAccount, type TestAccount } from '../support/accounts.js';
import { isolatedPrefix, testConfig } from '../support/env.js';
import { eventually, post } from '../support/http.js';
import { rolesPerTest } from '../support/processes.js';
import { openStream, readSse } from '../support/sse.js';

const usageRow = (app: AppContext, requestId: string) =>
  eventually(
    () => app.db.selectFrom('usage_events').selectAll().where('request_id', '=', requestId).executeTakeFirst(),
    `usage row ${requestId}`,
  );

const chunkId = (e: string) => (JSON.parse(e) as { id: string }).id;

/** Jobs waiting on every shard of the completion queue. */
const waitingJobs = async (ctx: AppContext): Promise<number> =>
  (await Promise.all(ctx.completionQueues.map((q) => q.getWaitingCount()))).reduce((a, b) => a + b, 0);

describe('chat completions when things go wrong', () => {
  let app: AppContext;
  let account: TestAccount;
  const start = rolesPerTest();

  before(async () => {
    app = createContext(testConfig(), { role: 'test' });
  });
  beforeEach(async () => {
    account = await createTestAccount(app, { tier: 'paid' });
  });
  after(async () => app.close());

  const ask = {
    model: 'gemini-2.5-flash',
    messages: [{ role: 'user', content: 'Tell me a long story' }],
    max_tokens: 400,
  };

  it('aborts the upstream and records only the tokens produced when the client disconnects', async () => {
    // 20 tokens a second: the answer would take 20 s; the client leaves after the first chunk.
    const env = { REDIS_PREFIX: isolatedPrefix(), LOCAL_MODEL_TTFT_MS: '0', LOCAL_MODEL_TOKENS_PER_SECOND: '20' };
    const [web] = await Promise.all([start('web', env), start('worker', env)]);
    const s = openStream(`${web.url}/v1/chat/completions`, account.apiKey, ask);
    await s.waitFor(2);
    const id = chunkId(s.events[0]!);
    s.controller.abort();
    await s.finished;
    const row = await usageRow(app, id);
    expect(row.status).to.equal('cancelled');
    // Aborted within a second: at 20 tokens/s at most ~20 more tokens than the client had seen.
    expect(row.completion_tokens)
      .to.be.greaterThan(0)
      .and.lessThan(2 + 25);
    expect(row.prompt_tokens).to.be.greaterThan(0);
  });

  it('answers 503 with Retry-After promptly when no worker takes the job, and withdraws it', async () => {
    const env = { REDIS_PREFIX: isolatedPrefix(), QUEUE_PICKUP_TIMEOUT_MS: '300' };
    const web = await start('web', env);
    const r = await post(`${web.url}/v1/chat/completions`, ask, { bearer: account.apiKey });
    expect(r.status).to.equal(503);
    expect(r.body.error.code).to.equal('no_worker_available');
    expect(Number(r.headers.get('retry-after'))).to.be.within(1, 60);
    const ctx = createContext(testConfig({ REDIS_PREFIX: env.REDIS_PREFIX }), { role: 'test' });
    try {
      expect(await waitingJobs(ctx)).to.equal(0);
    } finally {
      await ctx.close();
    }
    // The reservation was released: the next identical request sees the same tokens remaining.
    const next = await post(`${web.url}/v1/chat/completions`, ask, { bearer: account.apiKey });
    expect(next.status).to.equal(503);
    expect(next.headers.get('x-ratelimit-remaining-tokens')).to.equal(r.headers.get('x-ratelimit-remaining-tokens'));
  });

  it('answers a request whose worker died before announcing it once a live worker takes it over, never 503 no_worker_available', async function () {
    this.timeout(60_000);
    // The pickup wait runs out while the job is still with the dead worker, its lock lapsed, and
    // before the live worker's second stalled-job check (25 s after its first, at its start) hands
    // it over. The live worker must be registered before the wait runs out (20 s): a worker on a
    // Redis Cluster, started right after a build, once took more than 12 s.
    const env = {
      REDIS_PREFIX: isolatedPrefix(),
      QUEUE_PICKUP_TIMEOUT_MS: '20000',
      QUEUE_STALLED_INTERVAL_MS: '25000',
      LOCAL_MODEL_TTFT_MS: '0',
    };
    const ctx = createContext(testConfig(env), { role: 'test' });
    try {
      const web = await start('web', env);
      const answer = post(`${web.url}/v1/chat/completions`, { ...ask, max_tokens: 5 }, { bearer: account.apiKey });
      // A worker fetches the job and dies before its claim: it never says `picked`, its lock lapses.
      const fetchers = completionShards(ctx.config).map((shard, i) =>
        createWorker(
          ctx.config,
          shard,
          ctx.redisConnection('queue-worker', `dying-worker-${i}`),
          async () => undefined,
          {
            autorun: false,
            lockDuration: 300,
          },
        ),
      );
      try {
        await eventually(async () => {
          for (const f of fetchers) if (await f.getNextJob('dying-worker')) return true;
          return undefined;
        }, 'the dying worker to fetch the job');
      } finally {
        await Promise.all(fetchers.map((f) => f.close(true)));
      }
      await start('worker', env);

      const r = await answer;
      expect(r.status, r.text).to.equal(200);
      expect(r.body.choices[0].message.content).to.be.a('string').and.not.equal('');
      const row = await usageRow(app, r.body.id);
      expect(row.status).to.equal('completed');
    } finally {
      await ctx.close();
    }
  });

  it('answers 503 queue_full with Retry-After when the queue is deeper than its bound', async () => {
    const env = { REDIS_PREFIX: isolatedPrefix(), QUEUE_MAX_DEPTH: '2', QUEUE_PICKUP_TIMEOUT_MS: '20000' };
    const web = await start('web', env);
    // No worker: two requests wait in the queue and fill it.
    const waiting = [
      openStream(`${web.url}/v1/chat/completions`, account.apiKey, ask),
      openStream(`${web.url}/v1/chat/completions`, account.apiKey, ask),
    ];
    const ctx = createContext(testConfig({ REDIS_PREFIX: env.REDIS_PREFIX }), { role: 'test' });
    await eventually(async () => ((await waitingJobs(ctx)) === 2 ? true : undefined), 'two jobs waiting');
    await ctx.close();
    const full = await post(`${web.url}/v1/chat/completions`, ask, { bearer: account.apiKey });
    expect(full.status).to.equal(503);
    expect(full.body.error.code).to.equal('queue_full');
    expect(Number(full.headers.get('retry-after'))).to.be.within(1, 60);
    for (const w of waiting) w.controller.abort();
    await Promise.all(waiting.map((w) => w.finished));
  });

  it('answers 503 queue_unavailable with Retry-After when the queue refuses the job, and releases its reservation', async () => {
    const env = { REDIS_PREFIX: isolatedPrefix(), QUEUE_PICKUP_TIMEOUT_MS: '20000' };
    const config = testConfig({ REDIS_PREFIX: env.REDIS_PREFIX });
    const web = await start('web', env);
    const ctx = createContext(config, { role: 'test' });
    try {
      await ctx.warmUp([ctx.redis]);
      // A real Redis error inside BullMQ's add script: its event stream key holds a string, so XADD fails (WRONGTYPE).
      for (const shard of completionShards(config))
        await ctx.redis.set(`${bullPrefix(config, shard)}:${COMPLETIONS_QUEUE}:events`, 'not a stream');
      const r = await post(`${web.url}/v1/chat/completions`, ask, { bearer: account.apiKey });
      expect(r.status).to.equal(503);
      expect(r.body.error.code).to.equal('queue_unavailable');
      expect(Number(r.headers.get('retry-after'))).to.be.within(1, 60);
      expect(await waitingJobs(ctx)).to.equal(0);
      // The reservation was released: the next identical request sees the same tokens remaining.
      const next = await post(`${web.url}/v1/chat/completions`, ask, { bearer: account.apiKey });
      expect(next.status).to.equal(503);
      expect(next.headers.get('x-ratelimit-remaining-tokens')).to.equal(r.headers.get('x-ratelimit-remaining-tokens'));
    } finally {
      await ctx.close();
    }
  });

  it('withdraws a queued job when its client disconnects before any worker took it', async () => {
    const env = { REDIS_PREFIX: isolatedPrefix(), QUEUE_PICKUP_TIMEOUT_MS: '20000' };
    const web = await start('web', env);
    const ctx = createContext(testConfig({ REDIS_PREFIX: env.REDIS_PREFIX }), { role: 'test' });
    try {
      const s = openStream(`${web.url}/v1/chat/completions`, account.apiKey, ask);
      await eventually(async () => ((await waitingJobs(ctx)) === 1 ? true : undefined), 'the job to be queued');
      s.controller.abort();
      await s.finished;
      await eventually(async () => ((await waitingJobs(ctx)) === 0 ? true : undefined), 'the job to be withdrawn');
    } finally {
      await ctx.close();
    }
  });

  it('ends the stream with an error event when its worker dies mid-stream, and records the partial usage once', async () => {
    const env = {
      REDIS_PREFIX: isolatedPrefix(),
      LOCAL_MODEL_TTFT_MS: '0',
      LOCAL_MODEL_TOKENS_PER_SECOND: '20',
      QUEUE_STALLED_INTERVAL_MS: '500',
    };
    const web = await start('web', env);
    const first = await start('worker', env);
    const s = openStream(`${web.url}/v1/chat/completions`, account.apiKey, ask);
    await s.waitFor(3);
    const id = chunkId(s.events[0]!);
    // Killed before the survivor starts, so a slow start cannot let the stream end first.
    await first.stop('SIGKILL');
    await start('worker', env); // the survivor that will find the stalled job
    await s.finished;
    const last = s.events.at(-1);
    expect(last).to.equal('[DONE]');
    const error = JSON.parse(s.events.at(-2)!);
    expect(error.error.code).to.equal('worker_interrupted');
    const row = await usageRow(app, id);
    expect(row.status).to.equal('failed');
    expect(row.completion_tokens).to.be.greaterThan(0);
    const rows = await app.db.selectFrom('usage_events').select('id').where('request_id', '=', id).execute();
    expect(rows).to.have.length(1);
  });

  it('sends no upstream request for a stalled job whose first run already streamed: it only ends the stream', async () => {
    const openai = await startFakeOpenAI();
    try {
      // The answer is held after its fifth token until the first worker is dead, so it cannot end
      // first however long the survivor takes to start on a loaded machine.
      let killed!: () => void;
      const firstKilled = new Promise<void>((resolve) => (killed = resolve));
      openai.script({
        tokens: Array.from({ length: 100 }, () => ' tok'),
        tokenDelayMs: 50,
        holdAfter: { tokens: 5, until: firstKilled },
      });
      const env = {
        REDIS_PREFIX: isolatedPrefix(),
        QUEUE_STALLED_INTERVAL_MS: '500',
        MODEL_BACKEND: 'catalog',
        OPENAI_BASE_URL: `${openai.url}/v1`,
        OPENAI_API_KEY: openai.apiKey,
      };
      const web = await start('web', env);
      const first = await start('worker', env);
      const s = openStream(`${web.url}/v1/chat/completions`, account.apiKey, { ...ask, model: 'gpt-4.1-mini' });
      await s.waitFor(3);
      await start('worker', env); // the survivor that will find the stalled job
      await first.stop('SIGKILL');
      killed();
      await s.finished;
      expect(JSON.parse(s.events.at(-2)!).error.code).to.equal('worker_interrupted');
      await usageRow(app, chunkId(s.events[0]!));
      // Not even a connection: a request aborted at once may never show as one, but its connection does.
      expect(openai.requests).to.have.length(1);
      expect(openai.connections).to.equal(1);
    } finally {
      await openai.close();
    }
  });

  it('loses no usage when a worker is killed between the upstream answer and recording it', async () => {
    const env = {
      REDIS_PREFIX: isolatedPrefix(),
      LOCAL_MODEL_TTFT_MS: '0',
      LOCAL_MODEL_TOKENS_PER_SECOND: '5000',
      QUEUE_STALLED_INTERVAL_MS: '500',
    };
    const web = await start('web', env);
    const doomed = await start('worker', { ...env, FAULT_INJECT: 'crash-before-record' });
    const s = openStream(`${web.url}/v1/chat/completions`, account.apiKey, { ...ask, max_tokens: 30 });
    // The whole answer was relayed; then the worker died before the MULTI that records usage.
    expect(await doomed.exited).to.equal(null);
    await start('worker', env);
    await s.finished;
    const id = chunkId(s.events[0]!);
    const row = await usageRow(app, id);
    expect(row.completion_tokens).to.equal(30);
    expect(row.prompt_tokens).to.be.greaterThan(0);
    const rows = await app.db.selectFrom('usage_events').select('id').where('request_id', '=', id).execute();
    expect(rows).to.have.length(1);
  });

  it('still answers a non-streaming request whose worker is killed before recording: the re-run answers it, recorded once', async () => {
    const env = {
      REDIS_PREFIX: isolatedPrefix(),
      LOCAL_MODEL_TTFT_MS: '0',
      LOCAL_MODEL_TOKENS_PER_SECOND: '5000',
      QUEUE_STALLED_INTERVAL_MS: '500',
    };
    const web = await start('web', env);
    const doomed = await start('worker', { ...env, FAULT_INJECT: 'crash-before-record' });
    const answer = post(`${web.url}/v1/chat/completions`, { ...ask, max_tokens: 30 }, { bearer: account.apiKey });
    expect(await doomed.exited).to.equal(null);
    await start('worker', env);
    const r = await answer;
    expect(r.status).to.equal(200);
    expect(r.body.choices[0].finish_reason).to.equal('length');
    expect(r.body.usage.completion_tokens).to.equal(30);
    const rows = await eventually(async () => {
      const found = await app.db.selectFrom('usage_events').selectAll().where('request_id', '=', r.body.id).execute();
      return found.length ? found : undefined;
    }, 'the usage row');
    expect(rows).to.have.length(1);
    expect(rows[0]!.status).to.equal('completed');
    expect(rows[0]!.completion_tokens).to.equal(30);
  });

  it('stops a non-streaming answer at exactly max_tokens with finish_reason length', async () => {
    const env = { REDIS_PREFIX: isolatedPrefix(), LOCAL_MODEL_TTFT_MS: '0', LOCAL_MODEL_TOKENS_PER_SECOND: '5000' };
    const [web] = await Promise.all([start('web', env), start('worker', env)]);
    const res = await fetch(`${web.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${account.apiKey}` },
      body: JSON.stringify({ ...ask, max_tokens: 12 }),
    });
    const out = await readSse(res);
    expect(out.status).to.equal(200);
    expect(out.body.usage.completion_tokens).to.equal(12);
    expect(out.body.choices[0].finish_reason).to.equal('length');
  });
});
