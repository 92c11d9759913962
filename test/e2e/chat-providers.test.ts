import { expect } from 'chai';
import OpenAI from 'openai';
import { createContext, type AppContext } from '../../src/context.js';
import { startFakeAnthropic, type FakeAnthropic } from '../../src/providers/anthropic/anthropic.fake.js';
import { startFakeGemini, type FakeGemini } from '../../src/providers/gemini/gemini.fake.js';
import { startFakeOpenAI, type FakeOpenAI, DEFAULT_TOKENS } from '../../src/providers/openai/openai.fake.js';
import type { FakeUpstream } from '../../src/providers/testing/upstream-fake.js';
import { FakePostmark } from '../fakes/postmark.js';
import { closeOutboxFor, verificationLinkIn } from '../support/accounts.js';
import { isolatedPrefix, testConfig, uniqueEmail } from '../support/env.js';
import { eventually, get, post } from '../support/http.js';
import { openAiIssues } from '../support/openai-schemas.js';
import { startRole, type RoleProcess } from '../support/processes.js';
import { postStream } from '../support/sse.js';

/**
 * The product end to end over real processes: sign up and verify through the API, then
 * completions through a web process and a worker process for every adapter, each against a fake
 * of its provider that speaks the provider's wire format, and for the built-in local model.
 */
describe('completions for every provider, from sign-up on, through web and worker processes', function () {
  this.timeout(60_000);
  let postmark: FakePostmark;
  let openai: FakeOpenAI;
  let anthropic: FakeAnthropic;
  let gemini: FakeGemini;
  let app: AppContext;
  const procs: RoleProcess[] = [];
  let web: RoleProcess;
  let localWeb: RoleProcess;
  const email = uniqueEmail('providers');
  let apiKey = '';
  const answer = DEFAULT_TOKENS.join('');

  before(async () => {
    [postmark, openai, anthropic, gemini] = await Promise.all([
      new FakePostmark().start(),
      startFakeOpenAI(),
      startFakeAnthropic(),
      startFakeGemini(),
    ]);
    const common = { ...postmark.env(), REDIS_PREFIX: isolatedPrefix(), UPSTREAM_MAX_RETRIES: '2' };
    const providers = {
      ...common,
      MODEL_BACKEND: 'catalog',
      OPENAI_BASE_URL: `${openai.url}/v1`,
      OPENAI_API_KEY: openai.apiKey,
      ANTHROPIC_BASE_URL: anthropic.url,
      ANTHROPIC_API_KEY: anthropic.apiKey,
      GEMINI_BASE_URL: gemini.url,
      GEMINI_API_KEY: gemini.apiKey,
    };
    const local = {
      ...common,
      REDIS_PREFIX: isolatedPrefix(),
      MODEL_BACKEND: 'local',
      LOCAL_MODEL_TTFT_MS: '0',
      LOCAL_MODEL_TOKENS_PER_SECOND: '5000',
    };
    app = createContext(testConfig(providers), { role: 'test' });
    procs.push(
      ...(await Promise.all([
        startRole('web', providers),
        startRole('worker', providers),
        startRole('web', local),
        startRole('worker', local),
      ])),
    );
    web = procs[0]!;
    localWeb = procs[2]!;

    await post(`${web.url}/v1/auth/signup`, { name: 'Grace Hopper', email, organization: 'Navy' });
    const [message] = await eventually(
      async () => (postmark.accepted(email).length ? postmark.accepted(email) : undefined),
      'the verification email',
    );
    const verified = await get(`${web.url}/v1/auth/verify?token=${verificationLinkIn(message!.TextBody!).token}`, {
      headers: { accept: 'application/json' },
    });
    expect(verified.status).to.equal(200);
    apiKey = verified.body.api_key;
    // The OpenAI model is paid-tier only; tier changes themselves are tested with Stripe.
    await app.db.updateTable('accounts').set({ tier: 'paid' }).where('email', '=', email).execute();
  });
  after(async () => {
    await Promise.all(procs.map((p) => p.stop()));
    await closeOutboxFor(app, [email]);
    await app?.close();
    await Promise.all([postmark?.close(), openai?.close(), anthropic?.close(), gemini?.close()]);
  });
  beforeEach(() => {
    for (const f of [openai, anthropic, gemini] as FakeUpstream[]) f.reset();
  });

  const sdk = (base: string) => new OpenAI({ apiKey, baseURL: `${base}/v1`, maxRetries: 0 });
  const models: [string, () => FakeUpstream][] = [
    ['gemini-2.5-flash', () => gemini],
    ['claude-haiku-4-5', () => anthropic],
    ['gpt-4.1-mini', () => openai],
  ];

  for (const [model, fake] of models) {
    it(`answers a non-streaming request for ${model} from its provider`, async () => {
      const c = await sdk(web.url).chat.completions.create({
        model,
        messages: [{ role: 'user', content: 'Hello?' }],
        max_tokens: 50,
      });
      expect(c.model).to.equal(model);
      expect(c.choices[0]!.message.content).to.equal(answer);
      expect(c.choices[0]!.finish_reason).to.equal('stop');
      expect(c.usage!.completion_tokens).to.be.greaterThan(0);
      expect(fake().requests).to.have.length(1);
    });

    it(`streams ${model} from its provider, ending with [DONE]`, async () => {
      const s = await postStream(
        `${web.url}/v1/chat/completions`,
        { model, messages: [{ role: 'user', content: 'Hello?' }], max_tokens: 50 },
        apiKey,
      );
      expect(s.status).to.equal(200);
      expect(s.events.at(-1)).to.equal('[DONE]');
      expect(s.chunks.map((c) => c.choices[0]?.delta?.content ?? '').join('')).to.equal(answer);
      expect(s.chunks.at(-1).choices[0].finish_reason).to.equal('stop');
    });
  }

  it("answers and streams from every provider in the shape of OpenAI's published schemas", async () => {
    for (const [model] of models) {
      const ask = { model, messages: [{ role: 'user', content: 'Hello?' }], max_tokens: 50 };
      const r = await post(`${web.url}/v1/chat/completions`, ask, { bearer: apiKey });
      expect(openAiIssues('CreateChatCompletionResponse', r.body), `${model}: ${JSON.stringify(r.body)}`).to.deep.equal(
        [],
      );
      const s = await postStream(
        `${web.url}/v1/chat/completions`,
        { ...ask, stream_options: { include_usage: true } },
        apiKey,
      );
      s.chunks.forEach((chunk, i) =>
        expect(
          openAiIssues('CreateChatCompletionStreamResponse', chunk),
          `${model} chunk ${i}: ${JSON.stringify(chunk)}`,
        ).to.deep.equal([]),
      );
    }
  });

  it('asks each provider for one whole answer when the client does not stream, and for a stream when it does', async () => {
    const ask = (model: string) => ({ model, messages: [{ role: 'user', content: 'Hello?' }], max_tokens: 50 });
    for (const [model] of models) {
      await sdk(web.url).chat.completions.create(ask(model) as never);
      await postStream(`${web.url}/v1/chat/completions`, ask(model), apiKey);
    }
    expect(openai.requests.map((r) => r.body.stream)).to.deep.equal([false, true]);
    expect(openai.requests[1]!.body.stream_options).to.deep.equal({ include_usage: true });
    expect(anthropic.requests.map((r) => r.body.stream)).to.deep.equal([false, true]);
    expect(gemini.requests.map((r) => r.path.replace(/^.*:/, ''))).to.deep.equal([
      'generateContent',
      'streamGenerateContent?alt=sse',
    ]);
  });

  it("carries a reasoning effort to each provider's thinking settings, keeps the thinking out of the answer, and sends none to a model without them", async () => {
    anthropic.script({ thinking: 'A greeting is wanted.', tokens: ['Hi', '!'] });
    gemini.script({ thinking: 'A greeting is wanted.', tokens: ['Hi', '!'] });
    for (const model of ['claude-haiku-4-5', 'gemini-2.5-flash']) {
      const r = await post(
        `${web.url}/v1/responses`,
        { model, input: 'Hello?', reasoning: { effort: 'low' }, max_output_tokens: 4000 },
        { bearer: apiKey },
      );
      expect(r.status, JSON.stringify(r.body)).to.equal(200);
      expect(r.body.output[0].content[0].text, model).to.equal('Hi!');
      expect(r.body.reasoning.effort).to.equal('low');
    }
    expect(anthropic.lastRequest!.body).to.deep.include({
      max_tokens: 4000,
      thinking: { type: 'enabled', budget_tokens: 2048 },
    });
    expect(gemini.lastRequest!.body.generationConfig.thinkingConfig).to.deep.equal({ thinkingBudget: 1024 });

    const c = await sdk(web.url).chat.completions.create({
      model: 'gpt-4.1-mini',
      messages: [{ role: 'user', content: 'Hello?' }],
      reasoning_effort: 'high',
    });
    expect(c.choices[0]!.message.content).to.equal(answer);
    expect(openai.lastRequest!.body).to.not.have.property('reasoning_effort');
  });

  it('answers and streams from the built-in local model, naming it in system_fingerprint', async () => {
    const c = await sdk(localWeb.url).chat.completions.create({
      model: 'claude-sonnet-4-5',
      messages: [{ role: 'user', content: 'Hello?' }],
      max_tokens: 12,
    });
    expect(c.system_fingerprint).to.equal('local-model-v1');
    expect(c.usage!.completion_tokens).to.equal(12);
    const s = await postStream(
      `${localWeb.url}/v1/chat/completions`,
      { model: 'claude-sonnet-4-5', messages: [{ role: 'user', content: 'Hello?' }], max_tokens: 12 },
      apiKey,
    );
    expect(s.events.at(-1)).to.equal('[DONE]');
    expect(s.chunks[0].system_fingerprint).to.equal('local-model-v1');
  });

  it('retries an upstream 500 that comes before the first token, and the client never sees it', async () => {
    openai.nextResponse({ status: 500, message: 'upstream hiccup' });
    const c = await sdk(web.url).chat.completions.create({
      model: 'gpt-4.1-mini',
      messages: [{ role: 'user', content: 'Hello?' }],
    });
    expect(c.choices[0]!.message.content).to.equal(answer);
    expect(openai.requests).to.have.length(2);
  });

  it('answers 503 with Retry-After when the upstream keeps answering 429', async () => {
    openai.script({ status: 429, message: 'Rate limit reached', retryAfterMs: 5 });
    const r = await post(
      `${web.url}/v1/chat/completions`,
      { model: 'gpt-4.1-mini', messages: [{ role: 'user', content: 'Hello?' }] },
      { bearer: apiKey },
    );
    expect(r.status).to.equal(503);
    expect(r.body.error).to.include({ code: 'upstream_rate_limited', type: 'upstream_error' });
    // The upstream asked for 5 ms: the client is told the smallest whole second.
    expect(r.headers.get('retry-after')).to.equal('1');
    expect(openai.requests).to.have.length(3);
  });

  it("answers an upstream failure relayed from the worker with a body in the shape of OpenAI's ErrorResponse", async () => {
    gemini.nextResponse({ status: 400, message: 'Invalid value at generation_config' });
    const r = await post(
      `${web.url}/v1/chat/completions`,
      { model: 'gemini-2.5-flash', messages: [{ role: 'user', content: 'Hello?' }] },
      { bearer: apiKey },
    );
    expect(r.status).to.equal(400);
    expect(openAiIssues('ErrorResponse', r.body)).to.deep.equal([]);
  });

  it("passes an upstream 400 on as a 400 with the provider's message, without retrying", async () => {
    gemini.nextResponse({ status: 400, message: 'Invalid value at generation_config' });
    const r = await post(
      `${web.url}/v1/chat/completions`,
      { model: 'gemini-2.5-flash', messages: [{ role: 'user', content: 'Hello?' }] },
      { bearer: apiKey },
    );
    expect(r.status).to.equal(400);
    expect(r.body.error.message).to.include('Invalid value at generation_config');
    expect(gemini.requests).to.have.length(1);
  });

  it('ends a stream with an error event and [DONE] when the upstream fails mid-stream, and records the partial usage', async () => {
    anthropic.nextResponse({ failAfter: 3 });
    const s = await postStream(
      `${web.url}/v1/chat/completions`,
      { model: 'claude-haiku-4-5', messages: [{ role: 'user', content: 'Hello?' }] },
      apiKey,
    );
    expect(s.status).to.equal(200);
    expect(s.events.at(-1)).to.equal('[DONE]');
    const error = JSON.parse(s.events.at(-2)!);
    expect(error.error.type).to.equal('upstream_error');
    const text = s.chunks
      .filter((c) => c.choices)
      .map((c) => c.choices[0]?.delta?.content ?? '')
      .join('');
    expect(text).to.equal(DEFAULT_TOKENS.slice(0, 3).join(''));
    const row = await eventually(
      () => app.db.selectFrom('usage_events').selectAll().where('request_id', '=', s.chunks[0].id).executeTakeFirst(),
      'the usage row of the failed stream',
    );
    expect(row.status).to.equal('failed');
    expect(row.completion_tokens).to.be.greaterThan(0);
    expect(anthropic.requests).to.have.length(1);
  });

  it('answers 503 model_unavailable for a model whose provider has no key, never a stand-in answer', async () => {
    const env = {
      REDIS_PREFIX: isolatedPrefix(),
      MODEL_BACKEND: 'catalog',
      GEMINI_API_KEY: gemini.apiKey,
      GEMINI_BASE_URL: gemini.url,
    };
    const [w, k] = await Promise.all([startRole('web', env), startRole('worker', env)]);
    procs.push(w, k);
    const r = await post(
      `${w.url}/v1/chat/completions`,
      { model: 'gpt-4.1-mini', messages: [{ role: 'user', content: 'Hello?' }] },
      { bearer: apiKey },
    );
    expect(r.status).to.equal(503);
    expect(r.body.error.code).to.equal('model_unavailable');
  });
});
