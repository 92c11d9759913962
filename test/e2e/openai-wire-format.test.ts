import { expect } from 'chai';
import { createContext, type AppContext } from '../../src/context.js';
import { createTestAccount, type TestAccount } from '../support/accounts.js';
import { testConfig } from '../support/env.js';
import { get, post } from '../support/http.js';
import { openAiIssues } from '../support/openai-schemas.js';
import { check } from '../../src/validation.js';
import { ChatCompletionSchema } from '../../src/chat/request/chat.schema.js';
import { startRole, type RoleProcess } from '../support/processes.js';
import { postStream } from '../support/sse.js';

const FAST = { LOCAL_MODEL_TTFT_MS: '0', LOCAL_MODEL_TOKENS_PER_SECOND: '5000' };

// Every answer checked against OpenAI's own published schemas (test/fixtures/openai-openapi), so
// the wire format cannot drift from what OpenAI's clients expect.
describe("the wire format against OpenAI's published OpenAPI schemas (web and worker processes, local model)", () => {
  let app: AppContext;
  let web: RoleProcess;
  let worker: RoleProcess;
  let free: TestAccount;
  let url: string;

  before(async () => {
    app = createContext(testConfig(), { role: 'test' });
    [web, worker] = await Promise.all([startRole('web', FAST), startRole('worker', FAST)]);
    free = await createTestAccount(app, { tier: 'free' });
    url = `${web.url}/v1/chat/completions`;
  });
  after(async () => {
    await Promise.all([web?.stop(), worker?.stop()]);
    await app?.close();
  });

  const ask = { model: 'gemini-2.5-flash', messages: [{ role: 'user', content: 'Say hello' }], max_tokens: 12 };

  it('answers a non-streaming request for two choices as a CreateChatCompletionResponse, refusal null', async () => {
    const r = await post(url, { ...ask, n: 2 }, { bearer: free.apiKey });
    expect(r.status).to.equal(200);
    expect(openAiIssues('CreateChatCompletionResponse', r.body)).to.deep.equal([]);
    expect(r.body.choices).to.have.length(2);
    for (const choice of r.body.choices) expect(choice.message.refusal).to.equal(null);
  });

  it('answers in the shape our own /openapi.json documents for the endpoint', async () => {
    const r = await post(url, { ...ask, n: 2 }, { bearer: free.apiKey });
    expect(check(ChatCompletionSchema, r.body)).to.deep.equal({ ok: true });
  });

  it('streams three choices with include_usage as CreateChatCompletionStreamResponse chunks, the last one usage with no choices', async () => {
    const s = await postStream(url, { ...ask, n: 3, stream_options: { include_usage: true } }, free.apiKey);
    expect(s.status).to.equal(200);
    expect(s.events.at(-1)).to.equal('[DONE]');
    s.chunks.forEach((chunk, i) =>
      expect(
        openAiIssues('CreateChatCompletionStreamResponse', chunk),
        `chunk ${i}: ${JSON.stringify(chunk)}`,
      ).to.deep.equal([]),
    );
    const last = s.chunks.at(-1);
    expect(last.choices).to.deep.equal([]);
    expect(last.usage.total_tokens).to.be.greaterThan(0);
    const indexes = new Set(s.chunks.flatMap((c) => c.choices.map((ch: { index: number }) => ch.index)));
    expect([...indexes].sort()).to.deep.equal([0, 1, 2]);
  });

  it('streams one choice without usage as CreateChatCompletionStreamResponse chunks', async () => {
    const s = await postStream(url, ask, free.apiKey);
    expect(s.status).to.equal(200);
    expect(s.chunks.length).to.be.greaterThan(1);
    s.chunks.forEach((chunk, i) =>
      expect(
        openAiIssues('CreateChatCompletionStreamResponse', chunk),
        `chunk ${i}: ${JSON.stringify(chunk)}`,
      ).to.deep.equal([]),
    );
    expect(s.chunks.at(-1).choices[0].finish_reason).to.be.oneOf(['stop', 'length']);
  });

  it('lists the models as a ListModelsResponse', async () => {
    const r = await get(`${web.url}/v1/models`, { bearer: free.apiKey });
    expect(r.status).to.equal(200);
    expect(openAiIssues('ListModelsResponse', r.body)).to.deep.equal([]);
    expect(r.body.data).to.not.be.empty;
  });

  it('answers GET /v1/models/{model} as a Model', async () => {
    const r = await get(`${web.url}/v1/models/gemini-2.5-flash`, { bearer: free.apiKey });
    expect(r.status).to.equal(200);
    expect(openAiIssues('Model', r.body)).to.deep.equal([]);
  });

  it('answers a request without a credential with a 401 ErrorResponse', async () => {
    const r = await get(`${web.url}/v1/models`);
    expect(r.status).to.equal(401);
    expect(openAiIssues('ErrorResponse', r.body)).to.deep.equal([]);
  });

  it('answers a paid-tier model asked for by a free account with a 403 ErrorResponse', async () => {
    const r = await get(`${web.url}/v1/models/claude-sonnet-4-5`, { bearer: free.apiKey });
    expect(r.status).to.equal(403);
    expect(openAiIssues('ErrorResponse', r.body)).to.deep.equal([]);
  });

  it('answers an invalid request with a 422 that is also an ErrorResponse', async () => {
    const r = await post(url, { ...ask, messages: [] }, { bearer: free.apiKey });
    expect(r.status).to.equal(422);
    expect(openAiIssues('ErrorResponse', r.body)).to.deep.equal([]);
  });

  it('answers a completion for an unknown model with a 404 ErrorResponse', async () => {
    const r = await post(url, { ...ask, model: 'no-such-model' }, { bearer: free.apiKey });
    expect(r.status).to.equal(404);
    expect(openAiIssues('ErrorResponse', r.body)).to.deep.equal([]);
  });
});
