import { expect } from 'chai';
import { Redis } from 'ioredis';
import { createContext, type AppContext } from '../../src/context.js';
import { countTokens } from '../../src/providers/tokenizer.js';
import { startFakeOpenAI } from '../../src/providers/openai/openai.fake.js';
import { createTestAccount, type TestAccount } from '../support/accounts.js';
import { isolatedPrefix, testConfig } from '../support/env.js';
import { eventually, post } from '../support/http.js';
import { PrivateRedis } from '../support/private-redis.js';
import { rolesPerTest } from '../support/processes.js';
import { openStream, postStream } from '../support/sse.js';
import { deliveredChoices, readRelayLog } from '../../src/chat/relay/log.js';
import { originOf, relayLogKey } from '../../src/chat/relay/protocol.js';
import { countChoices } from '../../src/chat/job/billable.js';

const usageRow = (app: AppContext, requestId: string) =>
  eventually(
    () => app.db.selectFrom('usage_events').selectAll().where('request_id', '=', requestId).executeTakeFirst(),
    `usage row ${requestId}`,
    20_000,
  );

/** What a client received, choice by choice, from the data of its SSE events. */
function receivedText(events: string[], n: number): string[] {
  const text = Array.from({ length: n }, () => '');
  for (const e of events) {
    if (e === '[DONE]') continue;
    const chunk = JSON.parse(e) as { choices?: { index: number; delta?: { content?: string } }[] };
    for (const c of chunk.choices ?? []) text[c.index] += c.delta?.content ?? '';
  }
  return text;
}

const billable = (text: string[]) => text.reduce((sum, t) => sum + countTokens(t), 0);

/** The id of the first request a worker has claimed under `prefix`. */
async function jobStarted(redisUrl: string, prefix: string): Promise<string> {
  const redis = new Redis(redisUrl);
  try {
    // A request's state key ends with its id: <prefix>:req:{<web process's tag>}:<id>.
    return await eventually(
      async () => (await redis.keys(`${prefix}:req:*`))[0]?.split('}:').at(-1),
      'a worker to claim the job',
    );
  } finally {
    redis.disconnect();
  }
}

/**
 * The most a cut stream may be billed: what its client received (`received` tokens of one choice)
 * plus the relay message after the last one it received whole, read from the request's relay log
 * (a busy worker may put several tokens in one message).
 */
async function oneMessageMore(redisUrl: string, prefix: string, requestId: string, received: number): Promise<number> {
  const redis = new Redis(redisUrl);
  try {
    const log = await readRelayLog(redis, relayLogKey(prefix, originOf(requestId)!, requestId));
    const sse = log.filter((e) => e.kind === 'sse');
    for (let i = 1; i <= sse.length; i++) {
      const through = countChoices(deliveredChoices(sse.slice(0, i), 1));
      if (through > received) return through;
    }
    return received;
  } finally {
    redis.disconnect();
  }
}

/** Holds a fault for a fixed time: the length of the outage is what the test is about. */
const outageOf = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('faults: what a client receives is billed exactly, and a Redis restart costs no answer', function () {
  this.timeout(60_000);
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

  const story = (max_tokens: number, n = 1) => ({
    model: 'gemini-2.5-flash',
    messages: [{ role: 'user', content: `Tell me a long story ${Math.random()}` }],
    max_tokens,
    n,
  });

  it('bills an interrupted stream exactly the tokens its client received when its worker is killed', async () => {
    const env = {
      REDIS_PREFIX: isolatedPrefix(),
      LOCAL_MODEL_TTFT_MS: '0',
      LOCAL_MODEL_TOKENS_PER_SECOND: '40',
      QUEUE_STALLED_INTERVAL_MS: '1000',
    };
    const web = await start('web', env);
    const first = await start('worker', env);
    const s = openStream(`${web.url}/v1/chat/completions`, account.apiKey, story(400, 2));
    await s.waitFor(15);
    // Killed before the survivor starts: a start slower than the rest of the answer (a loaded
    // machine) would otherwise let the stream end before its worker is killed.
    await first.stop('SIGKILL');
    await start('worker', env); // the survivor that takes the stalled job over
    await s.finished;
    expect(JSON.parse(s.events.at(-2)!).error.code).to.equal('worker_interrupted');
    const received = receivedText(s.events, 2);
    const row = await usageRow(app, JSON.parse(s.events[0]!).id);
    expect(row.status).to.equal('failed');
    expect(row.completion_tokens).to.equal(billable(received));
  });

  describe('a Redis restart in the middle of answers', () => {
    let redis: PrivateRedis;
    let env: Record<string, string>;
    beforeEach(async () => {
      redis = await new PrivateRedis().start();
      env = {
        REDIS_URL: redis.url,
        REDIS_PREFIX: isolatedPrefix(),
        LOCAL_MODEL_TTFT_MS: '0',
        LOCAL_MODEL_TOKENS_PER_SECOND: '10',
      };
    });
    afterEach(async () => redis.stop());

    it('carries a stream through it: the client sees a pause, then the rest of the answer, billed once and exactly', async () => {
      const [web] = await Promise.all([start('web', env), start('worker', env)]);
      const ask = story(60);
      const whole = await postStream(`${web.url}/v1/chat/completions`, ask, account.apiKey);
      const s = openStream(`${web.url}/v1/chat/completions`, account.apiKey, ask);
      await s.waitFor(5);
      await redis.kill();
      await outageOf(3000);
      await redis.start();
      await s.finished;
      expect(s.events.at(-1)).to.equal('[DONE]');
      expect(s.events.some((e) => e !== '[DONE]' && 'error' in JSON.parse(e))).to.equal(false);
      expect(receivedText(s.events, 1)).to.deep.equal(receivedText(whole.events, 1));
      const row = await usageRow(app, JSON.parse(s.events[0]!).id);
      expect(row.status).to.equal('completed');
      expect(row.completion_tokens).to.equal(billable(receivedText(s.events, 1)));
    });

    it('logs it once when it starts and once when it ends, with counts, and no error for it', async () => {
      const [web, worker] = await Promise.all([start('web', env), start('worker', env)]);
      const s = openStream(`${web.url}/v1/chat/completions`, account.apiKey, story(40));
      await s.waitFor(3);
      await redis.kill();
      await outageOf(3000);
      await redis.start();
      await s.finished;
      const lines = await eventually(async () => {
        const parsed = worker
          .output()
          .split('\n')
          .filter((l) => l.startsWith('{'))
          .map((l) => JSON.parse(l) as { level: number; msg: string; failures?: Record<string, number> });
        return parsed.some((l) => l.msg.startsWith('Redis answers again')) ? parsed : undefined;
      }, 'the worker to report the end of the outage');
      expect(
        lines.filter((l) => l.msg === 'Redis is unreachable; failures are counted until it answers again'),
      ).to.have.length(1);
      const end = lines.filter((l) => l.msg.startsWith('Redis answers again'));
      expect(end).to.have.length(1);
      expect(Object.values(end[0]!.failures ?? {}).reduce((a, b) => a + b, 0)).to.be.greaterThan(0);
      expect(lines.filter((l) => l.level >= 50).map((l) => l.msg)).to.deep.equal([]);
    });

    it('carries a non-streaming request through it', async () => {
      const [web] = await Promise.all([start('web', env), start('worker', env)]);
      const answer = post(`${web.url}/v1/chat/completions`, story(40), { bearer: account.apiKey });
      await jobStarted(redis.url, env.REDIS_PREFIX!);
      await redis.kill();
      await outageOf(2000);
      await redis.start();
      const r = await answer;
      expect(r.status).to.equal(200);
      expect(r.body.usage.completion_tokens).to.be.within(1, 40);
      const row = await usageRow(app, r.body.id);
      expect(row.completion_tokens).to.equal(r.body.usage.completion_tokens);
    });
  });

  it('stops a stream within 200 ms of tokens when the web process holding its client dies', async () => {
    // 10 tokens a second: 200 ms is 2 tokens. The worker learns of the death from the web
    // process's relay subscription, which Redis drops with its connection, not from its liveness
    // key (which lives on for a TTL: 10 tokens here). Its counts mean something once its own
    // connection has been up for a TTL plus the longest reconnect delay (2 s here): the local
    // model answers 30 tokens at least, so 25 of them come after that.
    const env = {
      REDIS_PREFIX: isolatedPrefix(),
      LOCAL_MODEL_TTFT_MS: '0',
      LOCAL_MODEL_TOKENS_PER_SECOND: '10',
      LIVENESS_TTL_MS: '1000',
    };
    const [web] = await Promise.all([start('web', env), start('worker', env)]);
    const s = openStream(`${web.url}/v1/chat/completions`, account.apiKey, story(400));
    await s.waitFor(25);
    await web.stop('SIGKILL');
    await s.finished;
    const row = await usageRow(app, JSON.parse(s.events[0]!).id);
    expect(row.status).to.equal('cancelled');
    // What the client got, plus at most 200 ms of tokens, plus one in flight.
    expect(row.completion_tokens - billable(receivedText(s.events, 1))).to.be.at.most(3);
  });

  it('bills a stream cut by its web process’s death what its client received, at most one relay message more', async () => {
    // 10 tokens a second. The web process dies half a second in, before the worker's watch counts
    // (its connection must have been up a TTL plus the longest reconnect delay: 3 s here), so the
    // worker goes on producing for nobody for about 2.5 s; it bills through the message the web
    // process acknowledged handing on and the one after it (the one it may have handed on unasked).
    const openai = await startFakeOpenAI();
    try {
      openai.script({ tokens: Array.from({ length: 300 }, () => ' tok'), tokenDelayMs: 100 });
      const env = {
        REDIS_PREFIX: isolatedPrefix(),
        MODEL_BACKEND: 'catalog',
        OPENAI_BASE_URL: `${openai.url}/v1`,
        OPENAI_API_KEY: openai.apiKey,
      };
      const [web] = await Promise.all([start('web', env), start('worker', env)]);
      const s = openStream(`${web.url}/v1/chat/completions`, account.apiKey, { ...story(1000), model: 'gpt-4.1-mini' });
      await s.waitFor(5);
      await web.stop('SIGKILL');
      await s.finished;
      const row = await usageRow(app, JSON.parse(s.events[0]!).id);
      expect(row.status).to.equal('cancelled');
      expect(row.completion_tokens - billable(receivedText(s.events, 1))).to.be.within(0, 1);
    } finally {
      await openai.close();
    }
  });

  /** A web process and a worker answering from a fake OpenAI upstream that streams `tokens` tokens `tokenDelayMs` apart. */
  async function upstreamRoles(tokens: number, tokenDelayMs: number, delayMs = 0) {
    const openai = await startFakeOpenAI();
    openai.script({ tokens: Array.from({ length: tokens }, () => ' tok'), tokenDelayMs, delayMs });
    const env = {
      REDIS_PREFIX: isolatedPrefix(),
      MODEL_BACKEND: 'catalog',
      OPENAI_BASE_URL: `${openai.url}/v1`,
      OPENAI_API_KEY: openai.apiKey,
    };
    const [web] = await Promise.all([start('web', env), start('worker', env)]);
    return { openai, web, prefix: env.REDIS_PREFIX };
  }

  it('bills a stream whose web process froze holding its messages, then died, at most one relay message beyond what its client received', async () => {
    // 20 tokens a second. The web process is stopped (SIGSTOP: its event loop runs no more, as one
    // blocked for seconds) with its subscription still counted, so Redis goes on handing it
    // messages it never writes; the worker stops the job once its liveness key has expired.
    const { openai, web, prefix } = await upstreamRoles(300, 50);
    try {
      const s = openStream(`${web.url}/v1/chat/completions`, account.apiKey, { ...story(1000), model: 'gpt-4.1-mini' });
      await s.waitFor(5);
      web.proc.kill('SIGSTOP');
      const requestId = (JSON.parse(s.events[0]!) as { id: string }).id;
      const row = await usageRow(app, requestId);
      await web.stop('SIGKILL');
      await s.finished;
      const received = billable(receivedText(s.events, 1));
      expect(row.status).to.equal('cancelled');
      expect(row.completion_tokens).to.be.within(
        received,
        await oneMessageMore(process.env.REDIS_URL!, prefix, requestId, received),
      );
    } finally {
      await openai.close();
    }
  });

  it('bills a stream that finished while its web process was frozen, then died, at most one relay message beyond what its client received', async () => {
    // The answer (40 tokens, 25 ms apart) ends while the web process holding its client is stopped:
    // it is not billed in full, but like a job stopped for that process's death.
    const { openai, web, prefix } = await upstreamRoles(40, 25);
    try {
      const s = openStream(`${web.url}/v1/chat/completions`, account.apiKey, { ...story(1000), model: 'gpt-4.1-mini' });
      await s.waitFor(3);
      web.proc.kill('SIGSTOP');
      const requestId = (JSON.parse(s.events[0]!) as { id: string }).id;
      const row = await usageRow(app, requestId);
      await web.stop('SIGKILL');
      await s.finished;
      const received = billable(receivedText(s.events, 1));
      expect(row.status).to.equal('cancelled');
      expect(row.completion_tokens).to.be.within(
        received,
        await oneMessageMore(process.env.REDIS_URL!, prefix, requestId, received),
      );
    } finally {
      await openai.close();
    }
  });

  it('bills nothing for a whole answer that came while its web process was frozen, then died', async () => {
    // The answer comes a second after the request, while the web process holding its client is
    // stopped: it never hands it on, and its client receives nothing.
    const { openai, web, prefix } = await upstreamRoles(20, 0, 1000);
    try {
      const answer = post(
        `${web.url}/v1/chat/completions`,
        { ...story(1000), model: 'gpt-4.1-mini' },
        { bearer: account.apiKey },
      ).catch(() => undefined);
      const requestId = await jobStarted(process.env.REDIS_URL!, prefix);
      web.proc.kill('SIGSTOP');
      const row = await usageRow(app, requestId);
      await web.stop('SIGKILL');
      await answer;
      expect(row.status).to.equal('cancelled');
      expect(row.completion_tokens).to.equal(0);
      expect(row.prompt_tokens).to.equal(0);
    } finally {
      await openai.close();
    }
  });

  it('bills nothing for a whole-answer request whose web process dies before the answer reached it', async () => {
    // The local model answers with 30 to 120 tokens; at 5 a second, six seconds at least.
    const env = { REDIS_PREFIX: isolatedPrefix(), LOCAL_MODEL_TTFT_MS: '0', LOCAL_MODEL_TOKENS_PER_SECOND: '5' };
    const [web] = await Promise.all([start('web', env), start('worker', env)]);
    const answer = post(`${web.url}/v1/chat/completions`, story(400), { bearer: account.apiKey }).catch(
      () => undefined,
    );
    const requestId = await jobStarted(process.env.REDIS_URL!, env.REDIS_PREFIX);
    // Tokens are produced (the worker's relay log holds none: a whole answer is published at its end).
    await new Promise((r) => setTimeout(r, 1500));
    await web.stop('SIGKILL');
    await answer;
    const row = await usageRow(app, requestId);
    // Stopped seconds after the web process died, not at the end of its answer; no client got a byte of it.
    expect(row.status).to.equal('cancelled');
    expect(row.completion_tokens).to.equal(0);
    expect(row.prompt_tokens).to.equal(0);
  });

  it('stops a resumable stream whose web process died before its client had the completion id, billing nothing', async () => {
    // The first token comes 3 s after the claim; the web process dies at the claim, so no client
    // ever holds the id a resume needs. The worker learns of it from the liveness key (1 s TTL),
    // well before the grace period (60 s) would end.
    const env = {
      REDIS_PREFIX: isolatedPrefix(),
      LOCAL_MODEL_TTFT_MS: '3000',
      LOCAL_MODEL_TOKENS_PER_SECOND: '20',
      LIVENESS_TTL_MS: '1000',
    };
    const [web] = await Promise.all([start('web', env), start('worker', env)]);
    const s = openStream(`${web.url}/v1/chat/completions`, account.apiKey, {
      ...story(400),
      stream_options: { resumable: true },
    });
    const requestId = await jobStarted(process.env.REDIS_URL!, env.REDIS_PREFIX);
    await web.stop('SIGKILL');
    await s.finished;
    expect(s.events).to.deep.equal([]);
    const row = await usageRow(app, requestId);
    expect(row.status).to.equal('cancelled');
    expect(row.completion_tokens).to.equal(0);
    expect(row.prompt_tokens).to.equal(0);
  });
});
