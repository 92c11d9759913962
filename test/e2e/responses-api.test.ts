import { expect } from 'chai';
import OpenAI from 'openai';
import type { ResponseInputItem, ResponseStreamEvent } from 'openai/resources/responses/responses';
import { createContext, type AppContext } from '../../src/context.js';
import {
  DEFAULT_TOKENS,
  startFakeAnthropic,
  type FakeAnthropic,
} from '../../src/providers/anthropic/anthropic.fake.js';
import { createTestAccount, type TestAccount } from '../support/accounts.js';
import { isolatedPrefix, testConfig } from '../support/env.js';
import { eventually, get, post } from '../support/http.js';
import { rolesPerTest, startRole, type RoleProcess } from '../support/processes.js';
import { openAiIssues, responseEventIssues } from '../support/openai-schemas.js';
import { openStream, postStream, readSse, type SseResult } from '../support/sse.js';

const FAST = { LOCAL_MODEL_TTFT_MS: '0', LOCAL_MODEL_TOKENS_PER_SECOND: '5000' };

const WEATHER_TOOL = {
  type: 'function' as const,
  name: 'get_weather',
  description: 'The current weather in a city',
  parameters: {
    type: 'object',
    properties: { city: { type: 'string', description: 'The city' } },
    required: ['city'],
    additionalProperties: false,
  },
  strict: true,
};

/** Where an answer of POST /v1/responses departs from OpenAI's published schemas: its Response, each event, or its error. */
function wireIssues(r: { status: number; body?: unknown } | SseResult): string[] {
  if ('events' in r && r.events.length > 0)
    return r.chunks.flatMap((e: Record<string, unknown>, i) =>
      responseEventIssues(e).map((issue) => `event ${i} (${String(e.type)}): ${issue}`),
    );
  return openAiIssues(r.status === 200 ? 'Response' : 'ErrorResponse', r.body);
}

/**
 * A fetch for the SDK that checks every answer of /responses against OpenAI's schemas on the
 * side, as the SDK reads it, so each test through the SDK also holds the wire format to them.
 */
function schemaCheckingFetch(issues: string[]): typeof fetch {
  return async (input, init) => {
    const res = await fetch(input, init);
    if (String(input instanceof Request ? input.url : input).endsWith('/responses')) {
      const copy = res.clone();
      issues.push(...wireIssues(await readSse(copy)));
    }
    return res;
  };
}

// The Responses API (POST /v1/responses) through the web and worker processes and the built-in
// local model, read by the official openai SDK and by a raw SSE parser: the same queue and ledger
// as chat completions, OpenAI's Response and stream events on the wire.
describe('the Responses API through web and worker processes (built-in local model)', () => {
  let app: AppContext;
  let web: RoleProcess;
  let worker: RoleProcess;
  let free: TestAccount;
  let paid: TestAccount;
  let url: string;
  let client: OpenAI;
  let paidClient: OpenAI;
  const issues: string[] = [];

  before(async () => {
    app = createContext(testConfig(), { role: 'test' });
    [web, worker] = await Promise.all([startRole('web', FAST), startRole('worker', FAST)]);
    free = await createTestAccount(app, { tier: 'free' });
    paid = await createTestAccount(app, { tier: 'paid' });
    url = `${web.url}/v1/responses`;
    const fetch = schemaCheckingFetch(issues);
    client = new OpenAI({ apiKey: free.apiKey, baseURL: `${web.url}/v1`, maxRetries: 0, fetch });
    paidClient = new OpenAI({ apiKey: paid.apiKey, baseURL: `${web.url}/v1`, maxRetries: 0, fetch });
  });
  beforeEach(() => (issues.length = 0));
  afterEach(() => expect(issues, "departures from OpenAI's schemas").to.deep.equal([]));
  after(async () => {
    await Promise.all([web?.stop(), worker?.stop()]);
    await app?.close();
  });

  const usageRow = (id: string) =>
    eventually(
      () => app.db.selectFrom('usage_events').selectAll().where('request_id', '=', id).executeTakeFirst(),
      'the usage row',
    );

  it('answers responses.create with a completed Response whose output_text the SDK reads', async () => {
    const r = await client.responses.create({
      model: 'gemini-2.5-flash',
      input: 'Say hello',
      instructions: 'Be brief.',
      max_output_tokens: 4000,
      metadata: { purpose: 'test' },
    });
    expect(r.id).to.match(/^resp_/);
    expect(r.object).to.equal('response');
    expect(r.status).to.equal('completed');
    expect(r.model).to.equal('gemini-2.5-flash');
    expect(r.output).to.have.length(1);
    const message = r.output[0]!;
    expect(message.type).to.equal('message');
    if (message.type !== 'message') return;
    expect(message.id).to.match(/^msg_/);
    expect(message.status).to.equal('completed');
    expect(message.content[0]!.type).to.equal('output_text');
    expect(r.output_text).to.be.a('string').that.is.not.empty;
    expect(r.instructions).to.equal('Be brief.');
    expect(r.max_output_tokens).to.equal(4000);
    expect(r.metadata).to.deep.equal({ purpose: 'test' });
    expect(r.error).to.equal(null);
    expect(r.incomplete_details).to.equal(null);
    expect(r.usage!.total_tokens).to.equal(r.usage!.input_tokens + r.usage!.output_tokens);
    expect(r.usage!.input_tokens_details.cached_tokens).to.equal(0);
    expect(r.usage!.output_tokens_details.reasoning_tokens).to.equal(0);
    expect((r.usage as unknown as { cost: number }).cost).to.equal(0);
  });

  it("streams OpenAI's event sequence, numbered from 0, to a final Response through the SDK's stream helper", async () => {
    const stream = client.responses.stream({ model: 'gemini-2.5-flash', input: 'Say hello', max_output_tokens: 4000 });
    const events: ResponseStreamEvent[] = [];
    stream.on('event', (e) => events.push(e));
    const final = await stream.finalResponse();
    expect(final.status).to.equal('completed');
    expect(final.output_text).to.be.a('string').that.is.not.empty;
    const types = events.map((e) => e.type);
    const deltas = types.filter((t) => t === 'response.output_text.delta').length;
    expect(deltas).to.be.greaterThan(1);
    expect(types).to.deep.equal([
      'response.created',
      'response.in_progress',
      'response.output_item.added',
      'response.content_part.added',
      ...Array<string>(deltas).fill('response.output_text.delta'),
      'response.output_text.done',
      'response.content_part.done',
      'response.output_item.done',
      'response.completed',
    ]);
    expect(events.map((e) => e.sequence_number)).to.deep.equal(events.map((_, i) => i));
    const text = events.flatMap((e) => (e.type === 'response.output_text.delta' ? [e.delta] : [])).join('');
    expect(text).to.equal(final.output_text);
    const completed = events.at(-1)!;
    if (completed.type !== 'response.completed') throw new Error('not completed');
    expect(completed.response.id).to.equal(final.id);
    expect(completed.response.usage!.output_tokens).to.be.greaterThan(0);
  });

  it('writes each stream event as `event:` and `data:` lines, with no [DONE]', async () => {
    const s = await postStream(
      url,
      { model: 'gemini-2.5-flash', input: 'Say hello', max_output_tokens: 10 },
      free.apiKey,
    );
    issues.push(...wireIssues(s));
    expect(s.status).to.equal(200);
    expect(s.headers.get('content-type')).to.match(/^text\/event-stream/);
    expect(s.events).to.not.include('[DONE]');
    expect(s.raw).to.match(/^id: 1\nevent: response\.created\ndata: \{"type":"response\.created",/);
    for (const chunk of s.chunks) expect(s.raw).to.include(`event: ${chunk.type}\ndata: {"type":"${chunk.type}"`);
  });

  it('runs a function call round trip, passing the call and its output back as items', async () => {
    const input: ResponseInputItem[] = [{ role: 'user', content: 'What is the weather in Paris?' }];
    const first = await client.responses.create({ model: 'gemini-2.5-flash', input, tools: [WEATHER_TOOL] });
    expect(first.status).to.equal('completed');
    const call = first.output.find((o) => o.type === 'function_call');
    if (call?.type !== 'function_call') throw new Error(`no function call in ${JSON.stringify(first.output)}`);
    expect(call.id).to.match(/^fc_/);
    expect(call.name).to.equal('get_weather');
    expect(call.status).to.equal('completed');
    expect(JSON.parse(call.arguments)).to.have.property('city').that.is.a('string');
    expect(first.tools).to.have.length(1);
    expect(first.tools[0]).to.include({ type: 'function', name: 'get_weather', strict: true });

    const second = await client.responses.create({
      model: 'gemini-2.5-flash',
      input: [
        ...input,
        // The output items as the SDK hands them back (as the Agents SDK does, statelessly).
        ...(first.output as ResponseInputItem[]),
        { type: 'function_call_output', call_id: call.call_id, output: '{"temperature": 21}' },
      ],
      tools: [WEATHER_TOOL],
    });
    expect(second.status).to.equal('completed');
    expect(second.output.map((o) => o.type)).to.deep.equal(['message']);
    expect(second.output_text).to.match(/^Going by what get_weather returned: /);
  });

  it('streams a function call as output_item.added, function_call_arguments deltas, .done and output_item.done', async () => {
    const stream = client.responses.stream({
      model: 'gemini-2.5-flash',
      input: 'What is the weather in Paris?',
      tools: [WEATHER_TOOL],
      tool_choice: { type: 'function', name: 'get_weather' },
    });
    const events: ResponseStreamEvent[] = [];
    stream.on('event', (e) => events.push(e));
    const final = await stream.finalResponse();
    const types = events.map((e) => e.type).filter((t) => t !== 'response.function_call_arguments.delta');
    expect(types).to.deep.equal([
      'response.created',
      'response.in_progress',
      'response.output_item.added',
      'response.function_call_arguments.done',
      'response.output_item.done',
      'response.completed',
    ]);
    const args = events.flatMap((e) => (e.type === 'response.function_call_arguments.delta' ? [e.delta] : [])).join('');
    const call = final.output[0]!;
    if (call.type !== 'function_call') throw new Error('not a function call');
    expect(call.arguments).to.equal(args);
    expect(JSON.parse(args)).to.have.property('city');
  });

  it('answers text.format json_schema (strict) with JSON matching the schema', async () => {
    const r = await client.responses.create({
      model: 'gemini-2.5-flash',
      input: 'Name a city and its population',
      text: {
        format: {
          type: 'json_schema',
          name: 'city',
          strict: true,
          schema: {
            type: 'object',
            properties: { name: { type: 'string' }, population: { type: 'integer' } },
            required: ['name', 'population'],
            additionalProperties: false,
          },
        },
      },
    });
    expect(r.status).to.equal('completed');
    const answer = JSON.parse(r.output_text) as { name: unknown; population: unknown };
    expect(answer.name).to.be.a('string');
    expect(Number.isInteger(answer.population)).to.equal(true);
    expect(r.text?.format).to.include({ type: 'json_schema', name: 'city', strict: true });
  });

  it('lists POST /v1/responses in /openapi.json with its request and Response schemas', async () => {
    const doc = (await get(`${web.url}/openapi.json`)).body;
    const op = doc.paths['/v1/responses'].post;
    expect(op.operationId).to.equal('createResponse');
    expect(op.requestBody.content['application/json'].schema.required).to.deep.equal(['model', 'input']);
    expect(Object.keys(op.responses['200'].content)).to.deep.equal(['application/json', 'text/event-stream']);
  });

  it('refuses an unknown field with a 400 naming it', async () => {
    const r = await post(url, { model: 'gemini-2.5-flash', input: 'Hi', frobnicate: true }, { bearer: free.apiKey });
    issues.push(...wireIssues(r));
    expect(r.status).to.equal(400);
    expect(r.body.error).to.include({ type: 'invalid_request_error', code: 'unknown_parameter', param: 'frobnicate' });
  });

  it('refuses a tool type the service does not offer with a 400 at its type', async () => {
    const r = await post(
      url,
      { model: 'gemini-2.5-flash', input: 'Hi', tools: [{ type: 'web_search' }] },
      { bearer: free.apiKey },
    );
    issues.push(...wireIssues(r));
    expect(r.status).to.equal(400);
    expect(r.body.error).to.include({ code: 'unsupported_parameter', param: 'tools[0].type' });
  });

  it('names a refusal of the chat rules at the Responses field it is about', async () => {
    const r = await post(
      url,
      {
        model: 'gemini-2.5-flash',
        input: [
          { role: 'user', content: 'Hi' },
          { type: 'function_call_output', call_id: 'call_nobody_made', output: '21' },
        ],
      },
      { bearer: free.apiKey },
    );
    issues.push(...wireIssues(r));
    expect(r.status).to.equal(422);
    expect(r.body.detail[0].loc).to.deep.equal(['body', 'input', 1, 'call_id']);
    expect(r.body.error.param).to.equal('input[1].call_id');
  });

  it('records a ledger row of the Responses API equal to the usage of the response.completed event', async () => {
    const s = await postStream(
      url,
      { model: 'gpt-4.1-mini', input: 'Say hello', max_output_tokens: 4000 },
      paid.apiKey,
    );
    issues.push(...wireIssues(s));
    const end = s.chunks.at(-1);
    expect(end.type).to.equal('response.completed');
    const row = await usageRow(end.response.id);
    expect(row.account_id).to.equal(paid.account.id);
    expect(row.status).to.equal('completed');
    expect(row.stream).to.equal(true);
    expect(row.api).to.equal('responses');
    expect(row.prompt_tokens).to.equal(end.response.usage.input_tokens);
    expect(row.completion_tokens).to.equal(end.response.usage.output_tokens);
    expect(end.response.usage.cost).to.be.greaterThan(0);
    expect(end.response.usage.cost).to.equal(Number(row.cost_usd));
  });

  it('ends a stream cut at max_output_tokens with response.incomplete, billed as its usage says', async () => {
    const s = await postStream(
      url,
      { model: 'gpt-4.1-mini', input: 'Tell me a long story about a lighthouse', max_output_tokens: 3 },
      paid.apiKey,
    );
    issues.push(...wireIssues(s));
    const end = s.chunks.at(-1);
    const ends = ['response.completed', 'response.incomplete', 'response.failed'];
    expect(s.chunks.map((c) => c.type).filter((t) => ends.includes(t))).to.deep.equal(['response.incomplete']);
    expect(end.response.status).to.equal('incomplete');
    expect(end.response.incomplete_details).to.deep.equal({ reason: 'max_output_tokens' });
    expect(end.response.output[0].status).to.equal('incomplete');
    expect(end.response.usage.output_tokens).to.equal(3);
    const row = await usageRow(end.response.id);
    expect(row.completion_tokens).to.equal(3);
    expect(row.prompt_tokens).to.equal(end.response.usage.input_tokens);
    expect(Number(row.cost_usd)).to.equal(end.response.usage.cost);
  });

  it('answers a non-streaming request cut at max_output_tokens as an incomplete Response', async () => {
    const r = await paidClient.responses.create({
      model: 'gpt-4.1-mini',
      input: 'Tell me a long story about a lighthouse',
      max_output_tokens: 3,
    });
    expect(r.status).to.equal('incomplete');
    expect(r.incomplete_details).to.deep.equal({ reason: 'max_output_tokens' });
    const row = await usageRow(r.id);
    expect(row.completion_tokens).to.equal(r.usage!.output_tokens);
  });
});

// The same wire format over a provider's adapter (the fake Anthropic Messages API): what the
// upstream does mid-answer reaches the client as the Responses API says, and the ledger agrees.
describe('the Responses API over an upstream provider (fake Anthropic, web and worker processes)', () => {
  let anthropic: FakeAnthropic;
  let app: AppContext;
  let web: RoleProcess;
  let worker: RoleProcess;
  let user: TestAccount;
  let url: string;

  before(async () => {
    anthropic = await startFakeAnthropic();
    const env = {
      REDIS_PREFIX: isolatedPrefix(),
      MODEL_BACKEND: 'catalog',
      ANTHROPIC_BASE_URL: anthropic.url,
      ANTHROPIC_API_KEY: anthropic.apiKey,
    };
    app = createContext(testConfig(env), { role: 'test' });
    [web, worker] = await Promise.all([startRole('web', env), startRole('worker', env)]);
    user = await createTestAccount(app, { tier: 'paid' });
    url = `${web.url}/v1/responses`;
  });
  after(async () => {
    await Promise.all([web?.stop(), worker?.stop()]);
    await Promise.all([app?.close(), anthropic?.close()]);
  });

  it('ends a stream whose upstream fails mid-answer with response.failed, its usage the ledger row', async () => {
    anthropic.nextResponse({ failAfter: 3 });
    const s = await postStream(url, { model: 'claude-haiku-4-5', input: 'Hello?' }, user.apiKey);
    expect(s.status).to.equal(200);
    expect(wireIssues(s)).to.deep.equal([]);
    const types = s.chunks.map((c) => c.type);
    expect(types.slice(0, 2)).to.deep.equal(['response.created', 'response.in_progress']);
    expect(types.at(-1)).to.equal('response.failed');
    expect(types.filter((t) => t === 'response.completed' || t === 'response.incomplete')).to.deep.equal([]);
    const failed = s.chunks.at(-1).response;
    expect(failed.status).to.equal('failed');
    expect(failed.error.code).to.equal('server_error');
    expect(failed.error.message).to.match(/^upstream_error: /);
    expect(failed.output[0].status).to.equal('incomplete');
    expect(failed.output[0].content[0].text).to.equal(DEFAULT_TOKENS.slice(0, 3).join(''));
    const row = await eventually(
      () => app.db.selectFrom('usage_events').selectAll().where('request_id', '=', failed.id).executeTakeFirst(),
      'the usage row of the failed stream',
    );
    expect(row.status).to.equal('failed');
    expect(row.completion_tokens).to.equal(failed.usage.output_tokens).and.to.be.greaterThan(0);
    expect(row.prompt_tokens).to.equal(failed.usage.input_tokens);
    expect(Number(row.cost_usd)).to.equal(failed.usage.cost);
  });

  it("answers an upstream's refusal before any output with its HTTP status, not a stream", async () => {
    anthropic.nextResponse({ status: 400, message: 'prompt is too long' });
    const s = await postStream(url, { model: 'claude-haiku-4-5', input: 'Hello?' }, user.apiKey);
    expect(s.status).to.equal(400);
    expect(wireIssues(s)).to.deep.equal([]);
    expect(s.body.error.code).to.equal('upstream_rejected_request');
    expect(s.body.error.message).to.include('prompt is too long');
  });

  it("sends the provider the instructions as its system prompt and a function call's output as its tool result", async () => {
    anthropic.nextResponse({ tokens: ['It is ', 'sunny.'] });
    const r = await post(
      url,
      {
        model: 'claude-haiku-4-5',
        instructions: 'Answer in one sentence.',
        input: [
          { role: 'user', content: [{ type: 'input_text', text: 'Weather in Paris?' }] },
          { type: 'function_call', call_id: 'toolu_1', name: 'get_weather', arguments: '{"city":"Paris"}' },
          { type: 'function_call_output', call_id: 'toolu_1', output: '{"temperature": 21}' },
        ],
        tools: [WEATHER_TOOL],
      },
      { bearer: user.apiKey },
    );
    expect(r.status).to.equal(200);
    expect(wireIssues(r)).to.deep.equal([]);
    expect(r.body.output[0].content[0].text).to.equal('It is sunny.');
    const sent = anthropic.requests.at(-1)!.body as {
      system: unknown;
      messages: { role: string; content: { type: string; tool_use_id?: string; id?: string }[] }[];
    };
    expect(JSON.stringify(sent.system)).to.include('Answer in one sentence.');
    expect(sent.messages.map((m) => m.role)).to.deep.equal(['user', 'assistant', 'user']);
    expect(sent.messages[1]!.content.map((c) => [c.type, c.id])).to.deep.equal([['tool_use', 'toolu_1']]);
    expect(sent.messages[2]!.content.map((c) => [c.type, c.tool_use_id])).to.deep.equal([['tool_result', 'toolu_1']]);
  });

  /** The roles and text of the messages the fake Anthropic was last sent. */
  const sentTurns = () =>
    (anthropic.requests.at(-1)!.body as { messages: { role: string; content: unknown }[] }).messages.map((m) => [
      m.role,
      typeof m.content === 'string'
        ? m.content
        : (m.content as { type: string; text?: string }[]).map((c) => c.text ?? c.type).join(''),
    ]);

  it('stores a response by default: retrieve answers it as created and input_items lists its input', async () => {
    anthropic.nextResponse({ tokens: ['Paris is ', 'sunny.'] });
    const created = await post(url, { model: 'claude-haiku-4-5', input: 'Weather in Paris?' }, { bearer: user.apiKey });
    expect(created.status).to.equal(200);
    const got = await get(`${url}/${created.body.id}`, { bearer: user.apiKey });
    expect(got.status).to.equal(200);
    expect(got.body).to.deep.equal(created.body);
    const items = await get(`${url}/${created.body.id}/input_items`, { bearer: user.apiKey });
    expect(items.status).to.equal(200);
    expect(openAiIssues('ResponseItemList', items.body)).to.deep.equal([]);
    expect(items.body.data).to.have.length(1);
    expect(items.body.data[0]).to.deep.include({ type: 'message', role: 'user', status: 'completed' });
    expect(items.body.data[0].content).to.deep.equal([{ type: 'input_text', text: 'Weather in Paris?' }]);
    const row = await app.db
      .selectFrom('stored_responses')
      .selectAll()
      .where('id', '=', created.body.id)
      .executeTakeFirstOrThrow();
    expect(row.account_id).to.equal(user.account.id);
    expect(row.status).to.equal('completed');
  });

  it('deletes a stored response through the SDK: the row is gone and retrieve and input_items answer 404', async () => {
    anthropic.nextResponse({ tokens: ['Gone ', 'soon.'] });
    const client = new OpenAI({ apiKey: user.apiKey, baseURL: `${web.url}/v1`, maxRetries: 0 });
    const created = await client.responses.create({ model: 'claude-haiku-4-5', input: 'Forget this' });
    await client.responses.delete(created.id);
    const rows = await app.db.selectFrom('stored_responses').select('id').where('id', '=', created.id).execute();
    expect(rows).to.deep.equal([]);
    const got = await get(`${url}/${created.id}`, { bearer: user.apiKey });
    expect(got.status).to.equal(404);
    expect(openAiIssues('ErrorResponse', got.body)).to.deep.equal([]);
    const items = await get(`${url}/${created.id}/input_items`, { bearer: user.apiKey });
    expect(items.status).to.equal(404);
    // The answer was billed once all the same: deleting a response keeps its ledger row.
    const billed = await eventually(async () => {
      const found = await app.db
        .selectFrom('usage_events')
        .select('status')
        .where('request_id', '=', created.id)
        .execute();
      return found.length > 0 ? found : undefined;
    }, 'the usage row');
    expect(billed).to.deep.equal([{ status: 'completed' }]);
  });

  it('stores a streamed response as its response.completed event carries it', async () => {
    anthropic.nextResponse({ tokens: ['Streamed ', 'and ', 'stored.'] });
    const s = await postStream(url, { model: 'claude-haiku-4-5', input: 'Hello?', stream: true }, user.apiKey);
    expect(s.status).to.equal(200);
    const completed = s.chunks.at(-1);
    expect(completed.type).to.equal('response.completed');
    const got = await get(`${url}/${completed.response.id}`, { bearer: user.apiKey });
    expect(got.body).to.deep.equal(completed.response);
  });

  it('continues from previous_response_id: the provider gets the earlier input and answer, chain by chain', async () => {
    anthropic.nextResponse({ tokens: ['Paris is ', 'sunny.'] });
    const first = await post(url, { model: 'claude-haiku-4-5', input: 'Weather in Paris?' }, { bearer: user.apiKey });
    anthropic.nextResponse({ tokens: ['Rain.'] });
    const second = await post(
      url,
      { model: 'claude-haiku-4-5', input: 'And tomorrow?', previous_response_id: first.body.id },
      { bearer: user.apiKey },
    );
    expect(second.status).to.equal(200);
    expect(second.body.previous_response_id).to.equal(first.body.id);
    expect(sentTurns()).to.deep.equal([
      ['user', 'Weather in Paris?'],
      ['assistant', 'Paris is sunny.'],
      ['user', 'And tomorrow?'],
    ]);
    anthropic.nextResponse({ tokens: ['Yes.'] });
    const third = await post(
      url,
      { model: 'claude-haiku-4-5', input: 'Sure?', previous_response_id: second.body.id },
      { bearer: user.apiKey },
    );
    expect(third.status).to.equal(200);
    expect(sentTurns().map(([role]) => role)).to.deep.equal(['user', 'assistant', 'user', 'assistant', 'user']);
    expect(sentTurns()[3]).to.deep.equal(['assistant', 'Rain.']);
  });

  it('runs a function call round trip through previous_response_id: only the call output is sent again', async () => {
    anthropic.nextResponse({ toolCalls: [{ id: 'toolu_9', name: 'get_weather', arguments: ['{"city":"Paris"}'] }] });
    const first = await post(
      url,
      { model: 'claude-haiku-4-5', input: 'Weather in Paris?', tools: [WEATHER_TOOL] },
      { bearer: user.apiKey },
    );
    expect(first.status).to.equal(200);
    const call = (first.body.output as { type: string; call_id?: string }[]).find((i) => i.type === 'function_call');
    expect(call?.call_id).to.equal('toolu_9');
    anthropic.nextResponse({ tokens: ['It is 21 degrees.'] });
    const second = await post(
      url,
      {
        model: 'claude-haiku-4-5',
        previous_response_id: first.body.id,
        input: [{ type: 'function_call_output', call_id: 'toolu_9', output: '{"temperature": 21}' }],
        tools: [WEATHER_TOOL],
      },
      { bearer: user.apiKey },
    );
    expect(second.status).to.equal(200);
    expect(wireIssues(second)).to.deep.equal([]);
    expect(second.body.output[0].content[0].text).to.equal('It is 21 degrees.');
    const sent = anthropic.requests.at(-1)!.body as {
      messages: { role: string; content: { type: string; tool_use_id?: string; id?: string }[] | string }[];
    };
    expect(sent.messages.map((m) => m.role)).to.deep.equal(['user', 'assistant', 'user']);
    const blocks = (i: number) => sent.messages[i]!.content as { type: string; tool_use_id?: string; id?: string }[];
    expect(blocks(1).map((c) => [c.type, c.id])).to.deep.equal([['tool_use', 'toolu_9']]);
    expect(blocks(2).map((c) => [c.type, c.tool_use_id])).to.deep.equal([['tool_result', 'toolu_9']]);
  });

  it("answers 404 at previous_response_id for another account's response, and stores nothing with store: false", async () => {
    anthropic.nextResponse({ tokens: ['Kept to myself.'] });
    const unstored = await post(
      url,
      { model: 'claude-haiku-4-5', input: 'Hello?', store: false },
      { bearer: user.apiKey },
    );
    expect(unstored.status).to.equal(200);
    expect(unstored.body.store).to.equal(false);
    expect((await get(`${url}/${unstored.body.id}`, { bearer: user.apiKey })).status).to.equal(404);
    const rows = await app.db.selectFrom('stored_responses').select('id').where('id', '=', unstored.body.id).execute();
    expect(rows).to.have.length(0);

    anthropic.nextResponse({ tokens: ['Mine.'] });
    const mine = await post(url, { model: 'claude-haiku-4-5', input: 'Hello?' }, { bearer: user.apiKey });
    const stranger = await createTestAccount(app, { tier: 'paid' });
    const calls = anthropic.requests.length;
    const refused = await post(
      url,
      { model: 'claude-haiku-4-5', input: 'Go on', previous_response_id: mine.body.id },
      { bearer: stranger.apiKey },
    );
    expect(refused.status).to.equal(404);
    expect(refused.body.error).to.deep.include({
      message: `Previous response with id '${mine.body.id}' not found.`,
      param: 'previous_response_id',
    });
    expect(anthropic.requests.length, 'no upstream call').to.equal(calls);
  });
});

describe('the Responses API when its worker dies mid-stream (web and worker processes, local model)', () => {
  let app: AppContext;
  const start = rolesPerTest();

  before(() => {
    app = createContext(testConfig(), { role: 'test' });
  });
  after(async () => app.close());

  it('ends the stream with an error event, bills the text it carried once and stores it failed with that text, never answering it afresh', async () => {
    const env = {
      REDIS_PREFIX: isolatedPrefix(),
      LOCAL_MODEL_TTFT_MS: '0',
      LOCAL_MODEL_TOKENS_PER_SECOND: '20',
      QUEUE_STALLED_INTERVAL_MS: '500',
    };
    const account = await createTestAccount(app, { tier: 'paid' });
    const web = await start('web', env);
    const first = await start('worker', env);
    const s = openStream(`${web.url}/v1/responses`, account.apiKey, {
      model: 'gemini-2.5-flash',
      input: 'Tell me a long story',
      max_output_tokens: 400,
    });
    // Opening, the message item and its part, then text.
    await s.waitFor(6);
    const id = (JSON.parse(s.events[0]!) as { response: { id: string } }).response.id;
    await first.stop('SIGKILL');
    await start('worker', env);
    await s.finished;
    const events = s.events.map((e) => JSON.parse(e) as { type: string; code?: string });
    expect(events.filter((e) => e.type === 'response.created')).to.have.length(1);
    expect(events.filter((e) => e.type === 'response.completed')).to.deep.equal([]);
    expect(events.at(-1)).to.include({ type: 'error', code: 'worker_interrupted' });
    const rows = await eventually(async () => {
      const found = await app.db.selectFrom('usage_events').selectAll().where('request_id', '=', id).execute();
      return found.length > 0 ? found : undefined;
    }, 'the usage row');
    expect(rows).to.have.length(1);
    expect(rows[0]!.status).to.equal('failed');
    expect(rows[0]!.completion_tokens).to.be.greaterThan(0);
    // Stored (store defaults to true) as failed, holding the text its stream carried and the usage billed.
    const stored = await get(`${web.url}/v1/responses/${id}`, { bearer: account.apiKey });
    expect(stored.status).to.equal(200);
    expect(openAiIssues('Response', stored.body)).to.deep.equal([]);
    expect(stored.body).to.deep.include({ status: 'failed' });
    expect(stored.body.error).to.include({ code: 'server_error' });
    const carried = events
      .filter((e) => e.type === 'response.output_text.delta')
      .map((e) => (e as { delta?: string }).delta)
      .join('');
    const text = (stored.body.output as { content: { text: string }[] }[])[0]!.content[0]!.text;
    expect(text).to.equal(carried);
    expect(stored.body.usage.output_tokens).to.equal(rows[0]!.completion_tokens);
  });
});

describe('a Responses stream resumed on another web process (two web processes, one worker, local model)', () => {
  let app: AppContext;
  const start = rolesPerTest();

  before(() => {
    app = createContext(testConfig(), { role: 'test' });
  });
  after(async () => app.close());

  type Event = { type: string; sequence_number: number; delta?: string; response?: Record<string, unknown> };
  const deltas = (events: Event[]) =>
    events
      .filter((e) => e.type === 'response.output_text.delta')
      .map((e) => e.delta)
      .join('');

  it('goes on with starting_after from the event after the last one received; the joined text is the stored answer, billed once', async () => {
    // 20 tokens a second: 40 tokens take two seconds, time enough to drop the connection mid-stream.
    const env = { REDIS_PREFIX: isolatedPrefix(), LOCAL_MODEL_TTFT_MS: '0', LOCAL_MODEL_TOKENS_PER_SECOND: '20' };
    const account = await createTestAccount(app, { tier: 'paid' });
    const [one, other] = await Promise.all([start('web', env), start('web', env), start('worker', env)]);
    const s = openStream(`${one.url}/v1/responses`, account.apiKey, {
      model: 'gemini-2.5-flash',
      input: 'Tell me a story',
      max_output_tokens: 40,
    });
    // The opening, the message item and its part, then three deltas.
    await s.waitFor(7);
    s.controller.abort();
    await s.finished;
    const before = s.events.map((e) => JSON.parse(e) as Event);
    const id = before[0]!.response!.id as string;
    const last = before.at(-1)!.sequence_number;

    const resumed = await readSse(
      await fetch(`${other.url}/v1/responses/${id}?stream=true&starting_after=${last}`, {
        headers: { authorization: `Bearer ${account.apiKey}` },
      }),
    );
    expect(resumed.status).to.equal(200);
    expect(wireIssues(resumed)).to.deep.equal([]);
    const after = resumed.chunks as Event[];
    expect(after[0]!.sequence_number).to.equal(last + 1);
    expect(after.map((e) => e.sequence_number)).to.deep.equal(after.map((_, i) => last + 1 + i));
    const ending = after.at(-1)!;
    expect(ending.type).to.be.oneOf(['response.completed', 'response.incomplete']);

    const stored = await get(`${other.url}/v1/responses/${id}`, { bearer: account.apiKey });
    expect(stored.status).to.equal(200);
    expect(stored.body).to.deep.equal(ending.response);
    const text = (stored.body.output as { content: { text: string }[] }[])[0]!.content[0]!.text;
    expect(deltas(before) + deltas(after)).to.equal(text);
    const rows = await eventually(async () => {
      const found = await app.db.selectFrom('usage_events').selectAll().where('request_id', '=', id).execute();
      return found.length > 0 ? found : undefined;
    }, 'the usage row');
    expect(rows).to.have.length(1);
    expect(rows[0]!.completion_tokens).to.equal((ending.response!.usage as { output_tokens: number }).output_tokens);
  });

  it("answers 404 in the Responses API's words for a stream of an unknown id", async () => {
    const env = { REDIS_PREFIX: isolatedPrefix() };
    const account = await createTestAccount(app, { tier: 'paid' });
    const web = await start('web', env);
    const r = await get(`${web.url}/v1/responses/resp_nope?stream=true`, { bearer: account.apiKey });
    expect(r.status).to.equal(404);
    expect(r.body.error).to.deep.include({ message: "Response with id 'resp_nope' not found.", param: 'response_id' });
  });
});
