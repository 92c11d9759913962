import { expect } from 'chai';
import OpenAI from 'openai';
import { createContext, type AppContext } from '../../src/context.js';
import { createTestAccount, type TestAccount } from '../support/accounts.js';
import { testConfig } from '../support/env.js';
import { eventually, post } from '../support/http.js';
import { startRole, type RoleProcess } from '../support/processes.js';
import { postStream } from '../support/sse.js';

const FAST = { LOCAL_MODEL_TTFT_MS: '0', LOCAL_MODEL_TOKENS_PER_SECOND: '5000' };

describe('chat completions through web and worker processes (built-in local model)', () => {
  let app: AppContext;
  let web: RoleProcess;
  let worker: RoleProcess;
  let free: TestAccount;
  let paid: TestAccount;
  let url: string;

  before(async () => {
    app = createContext(testConfig(), { role: 'test' });
    [web, worker] = await Promise.all([startRole('web', FAST), startRole('worker', FAST)]);
    free = await createTestAccount(app, { tier: 'free' });
    paid = await createTestAccount(app, { tier: 'paid' });
    url = `${web.url}/v1/chat/completions`;
  });
  after(async () => {
    await Promise.all([web?.stop(), worker?.stop()]);
    await app?.close();
  });

  const ask = { model: 'gemini-2.5-flash', messages: [{ role: 'user', content: 'Say hello' }], max_tokens: 20 };

  it('answers a non-streaming request with a chat.completion body and usage', async () => {
    const r = await post(url, ask, { bearer: free.apiKey });
    expect(r.status).to.equal(200);
    expect(r.body.object).to.equal('chat.completion');
    expect(r.body.id).to.match(/^chatcmpl-/);
    expect(r.body.model).to.equal('gemini-2.5-flash');
    expect(r.body.system_fingerprint).to.equal('local-model-v1');
    expect(r.body.choices).to.have.length(1);
    expect(r.body.choices[0].message.role).to.equal('assistant');
    expect(r.body.choices[0].message.content).to.be.a('string').that.is.not.empty;
    expect(r.body.usage.completion_tokens).to.be.within(1, 20);
    expect(r.body.usage.total_tokens).to.equal(r.body.usage.prompt_tokens + r.body.usage.completion_tokens);
  });

  it('carries the rate-limit headers on a successful response', async () => {
    const r = await post(url, ask, { bearer: free.apiKey });
    expect(r.headers.get('x-ratelimit-limit')).to.match(/^\d+$/);
    expect(r.headers.get('x-ratelimit-remaining')).to.match(/^\d+$/);
    expect(r.headers.get('x-ratelimit-reset')).to.match(/^\d+$/);
    expect(r.headers.get('x-ratelimit-limit-requests')).to.equal('20');
    expect(r.headers.get('x-ratelimit-limit-tokens')).to.equal('100000');
  });

  it('streams chunks as the interface describes and ends with [DONE]', async () => {
    const s = await postStream(url, ask, free.apiKey);
    expect(s.status).to.equal(200);
    expect(s.headers.get('content-type')).to.match(/^text\/event-stream/);
    expect(s.headers.get('cache-control')).to.equal('no-cache');
    expect(s.headers.get('x-accel-buffering')).to.equal('no');
    expect(s.events.at(-1)).to.equal('[DONE]');
    expect(s.chunks.length).to.be.greaterThan(1);
    for (const c of s.chunks) {
      expect(c.object).to.equal('chat.completion.chunk');
      expect(c.id).to.equal(s.chunks[0].id);
      expect(c.model).to.equal('gemini-2.5-flash');
      expect(c.created).to.be.a('number');
    }
    const last = s.chunks.at(-1);
    expect(last.choices[0].finish_reason).to.be.oneOf(['stop', 'length']);
    for (const c of s.chunks.slice(0, -1)) expect(c.choices[0].finish_reason).to.equal(null);
    expect(s.chunks[0].choices[0].delta.role).to.equal('assistant');
    const text = s.chunks.map((c) => c.choices[0]?.delta?.content ?? '').join('');
    expect(text).to.not.be.empty;
  });

  it('sends a final usage chunk when stream_options.include_usage is set', async () => {
    const s = await postStream(url, { ...ask, stream_options: { include_usage: true } }, free.apiKey);
    const last = s.chunks.at(-1);
    expect(last.choices).to.deep.equal([]);
    expect(last.usage.total_tokens).to.equal(last.usage.prompt_tokens + last.usage.completion_tokens);
    expect(s.chunks[0].usage).to.equal(null);
  });

  it('streams n choices, each with its own index and finish_reason', async () => {
    const s = await postStream(url, { ...ask, n: 3 }, free.apiKey);
    const finished = s.chunks
      .flatMap((c) => c.choices)
      .filter((ch: any) => ch.finish_reason !== null)
      .map((ch: any) => ch.index);
    expect(finished.sort()).to.deep.equal([0, 1, 2]);
  });

  it('records exactly one ledger row per request, with its API, tier and prices', async () => {
    const r = await post(url, ask, { bearer: paid.apiKey });
    const row = await eventually(
      () => app.db.selectFrom('usage_events').selectAll().where('request_id', '=', r.body.id).executeTakeFirst(),
      'the usage row',
    );
    expect(row.account_id).to.equal(paid.account.id);
    expect(row.api).to.equal('chat.completions');
    expect(row.tier).to.equal('paid');
    expect(row.status).to.equal('completed');
    expect(row.prompt_tokens).to.equal(r.body.usage.prompt_tokens);
    expect(row.completion_tokens).to.equal(r.body.usage.completion_tokens);
    expect(Number(row.input_price_per_million)).to.equal(0.3);
  });

  it('tells a paid request its cost in usage.cost, equal to what the ledger records for it', async () => {
    const r = await post(url, ask, { bearer: paid.apiKey });
    expect(r.status).to.equal(200);
    const row = await eventually(
      () => app.db.selectFrom('usage_events').selectAll().where('request_id', '=', r.body.id).executeTakeFirst(),
      'the usage row',
    );
    expect(r.body.usage.cost).to.be.greaterThan(0);
    expect(r.body.usage.cost).to.equal(Number(row.cost_usd));
  });

  it("puts usage.cost in a stream's usage chunk, and 0 on the free tier", async () => {
    const paidStream = await postStream(
      url,
      { ...ask, stream: true, stream_options: { include_usage: true } },
      paid.apiKey,
    );
    const freeStream = await postStream(
      url,
      { ...ask, stream: true, stream_options: { include_usage: true } },
      free.apiKey,
    );
    const paidUsage = paidStream.chunks.at(-1).usage;
    const row = await eventually(
      () =>
        app.db
          .selectFrom('usage_events')
          .selectAll()
          .where('request_id', '=', paidStream.chunks[0].id)
          .executeTakeFirst(),
      'the usage row',
    );
    expect(paidUsage.cost).to.equal(Number(row.cost_usd)).and.to.be.greaterThan(0);
    expect(freeStream.chunks.at(-1).usage.cost).to.equal(0);
  });

  it('refuses a paid-tier model to a free account with 403', async () => {
    const r = await post(url, { ...ask, model: 'claude-sonnet-4-5' }, { bearer: free.apiKey });
    expect(r.status).to.equal(403);
    expect(r.body.error.code).to.equal('model_requires_paid_tier');
    expect(r.body.error.message).to.match(/paid tier/);
  });

  it('answers an unknown model with 404', async () => {
    const r = await post(url, { ...ask, model: 'no-such-model' }, { bearer: free.apiKey });
    expect(r.status).to.equal(404);
    expect(r.body.error).to.include({ type: 'not_found_error', code: 'model_not_found', param: 'model' });
  });

  it('answers an unknown persona with 422 at body.persona', async () => {
    const r = await post(url, { ...ask, persona: 'pirate-captain-nope' }, { bearer: free.apiKey });
    expect(r.status).to.equal(422);
    expect(r.body.detail[0].loc).to.deep.equal(['body', 'persona']);
  });

  it('refuses OpenAI parameters that would change the answer and cannot be honoured, with 422 naming each', async () => {
    const r = await post(
      url,
      {
        ...ask,
        functions: [{ name: 'f', parameters: { type: 'object' } }],
        logprobs: true,
        audio: { voice: 'alloy', format: 'mp3' },
      },
      { bearer: free.apiKey },
    );
    expect(r.status).to.equal(422);
    expect(r.body.detail.map((d: { loc: unknown }) => d.loc)).to.have.deep.members([
      ['body', 'functions'],
      ['body', 'logprobs'],
      ['body', 'audio'],
    ]);
    expect(r.body.detail.find((d: { loc: string[] }) => d.loc[1] === 'functions').msg).to.match(/send tools/);
  });

  it('accepts those parameters at the values that ask for nothing, and ignores fields it does not know', async () => {
    const r = await post(
      url,
      {
        ...ask,
        tools: [],
        response_format: { type: 'text' },
        logprobs: false,
        tool_choice: null,
        seed: 7,
        metadata: { a: 'b' },
      },
      { bearer: free.apiKey },
    );
    expect(r.status).to.equal(200);
    expect(r.body.object).to.equal('chat.completion');
  });

  it('refuses an empty messages list with 422 at body.messages', async () => {
    const r = await post(url, { ...ask, messages: [] }, { bearer: free.apiKey });
    expect(r.status).to.equal(422);
    expect(r.body.detail).to.deep.equal([
      { loc: ['body', 'messages'], msg: 'List should have at least 1 items', type: 'too_short' },
    ]);
  });

  it('refuses a role no provider understands with 422 at the client’s own message index, persona or not', async () => {
    const messages = [
      { role: 'user', content: 'hi' },
      { role: 'robot', content: 'beep' },
    ];
    for (const extra of [{}, { persona: 'concise' }]) {
      const r = await post(url, { ...ask, ...extra, messages }, { bearer: free.apiKey });
      expect(r.status).to.equal(422);
      expect(r.body.detail[0].loc).to.deep.equal(['body', 'messages', 1, 'role']);
    }
  });

  it('refuses offline what the catalog’s provider would refuse in production (Anthropic: no temperature)', async () => {
    const r = await post(url, { ...ask, model: 'claude-haiku-4-5', temperature: 0.5 }, { bearer: free.apiKey });
    expect(r.status).to.equal(422);
    expect(r.body.detail[0].loc).to.deep.equal(['body', 'temperature']);
    expect(r.body.detail[0].msg).to.match(/not supported by Anthropic models/);
  });

  it('answers out-of-bounds fields with 422, one entry per field', async () => {
    const r = await post(
      url,
      {
        model: 'x'.repeat(51),
        messages: [{ role: 'user', content: 'hi' }],
        temperature: 2.5,
        n: 6,
        max_tokens: 0,
        stop: ['a', 'b', 'c', 'd', 'e'],
      },
      { bearer: free.apiKey },
    );
    expect(r.status).to.equal(422);
    expect(r.body.detail.map((d: any) => d.loc)).to.have.deep.members([
      ['body', 'model'],
      ['body', 'temperature'],
      ['body', 'max_tokens'],
      ['body', 'n'],
      ['body', 'stop'],
    ]);
  });

  describe('through the official openai SDK', () => {
    const client = (key: string) => new OpenAI({ apiKey: key, baseURL: `${web.url}/v1`, maxRetries: 0 });

    it('creates a non-streaming completion', async () => {
      const c = await client(free.apiKey).chat.completions.create({
        model: 'gemini-2.5-flash-lite',
        messages: [{ role: 'user', content: 'hi' }],
        max_tokens: 10,
      });
      expect(c.choices[0]!.message.content).to.be.a('string').that.is.not.empty;
      expect(c.usage!.total_tokens).to.be.greaterThan(0);
    });

    it('streams a completion', async () => {
      const stream = await client(free.apiKey).chat.completions.create({
        model: 'gemini-2.5-flash-lite',
        messages: [{ role: 'user', content: 'hi' }],
        max_tokens: 10,
        stream: true,
      });
      let text = '';
      let finish: string | null = null;
      for await (const chunk of stream) {
        text += chunk.choices[0]?.delta?.content ?? '';
        finish = chunk.choices[0]?.finish_reason ?? finish;
      }
      expect(text).to.not.be.empty;
      expect(finish).to.be.oneOf(['stop', 'length']);
    });

    it('raises its typed errors for 401, 403, 404 and 422', async () => {
      const bad = client('sk-svc-' + 'A'.repeat(49));
      const req = { model: 'gemini-2.5-flash', messages: [{ role: 'user' as const, content: 'hi' }] };
      await bad.chat.completions.create(req).then(
        () => expect.fail('401 expected'),
        (e) => expect(e).to.be.instanceOf(OpenAI.AuthenticationError),
      );
      await client(free.apiKey)
        .chat.completions.create({ ...req, model: 'claude-sonnet-4-5' })
        .then(
          () => expect.fail('403 expected'),
          (e) => expect(e).to.be.instanceOf(OpenAI.PermissionDeniedError),
        );
      await client(free.apiKey)
        .chat.completions.create({ ...req, model: 'nope' })
        .then(
          () => expect.fail('404 expected'),
          (e) => expect(e).to.be.instanceOf(OpenAI.NotFoundError),
        );
      await client(free.apiKey)
        .chat.completions.create({ ...req, temperature: 3 })
        .then(
          () => expect.fail('422 expected'),
          (e) => expect(e).to.be.instanceOf(OpenAI.UnprocessableEntityError),
        );
    });
  });
});
