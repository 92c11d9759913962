import { expect } from 'chai';
import OpenAI from 'openai';
import type { ChatCompletionMessageParam, ChatCompletionTool } from 'openai/resources/chat/completions';
import { createContext, type AppContext } from '../../src/context.js';
import { startFakeAnthropic, type FakeAnthropic } from '../../src/providers/anthropic/anthropic.fake.js';
import { startFakeGemini, type FakeGemini } from '../../src/providers/gemini/gemini.fake.js';
import { DEFAULT_TOKENS, startFakeOpenAI, type FakeOpenAI } from '../../src/providers/openai/openai.fake.js';
import type { FakeUpstream } from '../../src/providers/testing/upstream-fake.js';
import { schemaMismatch } from '../../src/providers/json-schema.js';
import { createTestAccount, type TestAccount } from '../support/accounts.js';
import { isolatedPrefix, testConfig } from '../support/env.js';
import { eventually, get, post } from '../support/http.js';
import { openAiIssues } from '../support/openai-schemas.js';
import { startRole, type RoleProcess } from '../support/processes.js';
import { openStream, postStream, readSse } from '../support/sse.js';

// What OpenAI's own client sends, end to end through web and worker processes: the request forms
// beside plain strings, a tool call round trip (call, tool message, final text) plain and streamed
// on the local model and on each provider's fake, n on a provider without n, and the rest of the
// path (wire format, retrieval, resumed streams) carrying tool calls unchanged.

const WEATHER: ChatCompletionTool = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'The current weather in a city',
    parameters: {
      type: 'object',
      properties: { city: { type: 'string' }, unit: { type: 'string', enum: ['celsius', 'fahrenheit'] } },
      required: ['city', 'unit'],
      additionalProperties: false,
    },
  },
};
const QUESTION: ChatCompletionMessageParam = { role: 'user', content: 'What is the weather in Paris today?' };
const ANSWER_SCHEMA = {
  type: 'object',
  properties: { city: { type: 'string' }, temperature: { type: 'number' } },
  required: ['city', 'temperature'],
  additionalProperties: false,
};

/** A stream's answer whatever its chunking: each choice's text, tool calls and finish reason. */
function assembled(events: readonly string[]) {
  const choices: Record<
    number,
    { text: string; calls: Record<number, { id?: string; name?: string; args: string }>; finish?: string }
  > = {};
  for (const e of events) {
    if (e === '[DONE]') continue;
    const chunk = JSON.parse(e) as {
      choices: {
        index: number;
        finish_reason: string | null;
        delta: {
          content?: string | null;
          tool_calls?: { index: number; id?: string; function?: { name?: string; arguments?: string } }[];
        };
      }[];
    };
    for (const c of chunk.choices) {
      const choice = (choices[c.index] ??= { text: '', calls: {} });
      choice.text += c.delta.content ?? '';
      for (const t of c.delta.tool_calls ?? []) {
        const call = (choice.calls[t.index] ??= { args: '' });
        if (t.id) call.id = t.id;
        if (t.function?.name) call.name = t.function.name;
        call.args += t.function?.arguments ?? '';
      }
      if (c.finish_reason) choice.finish = c.finish_reason;
    }
  }
  return choices;
}

describe('tool calls, content parts and structured output through web and worker processes', function () {
  this.timeout(90_000);
  let app: AppContext;
  let openai: FakeOpenAI;
  let anthropic: FakeAnthropic;
  let gemini: FakeGemini;
  const procs: RoleProcess[] = [];
  let local: RoleProcess;
  let catalog: RoleProcess;
  let user: TestAccount;

  before(async () => {
    [openai, anthropic, gemini] = await Promise.all([startFakeOpenAI(), startFakeAnthropic(), startFakeGemini()]);
    const prefix = isolatedPrefix();
    // 50 tokens a second: time enough to drop a stream in the middle of a tool call's arguments.
    const localEnv = {
      REDIS_PREFIX: prefix,
      MODEL_BACKEND: 'local',
      LOCAL_MODEL_TTFT_MS: '0',
      LOCAL_MODEL_TOKENS_PER_SECOND: '50',
    };
    const catalogEnv = {
      REDIS_PREFIX: isolatedPrefix(),
      MODEL_BACKEND: 'catalog',
      OPENAI_BASE_URL: `${openai.url}/v1`,
      OPENAI_API_KEY: openai.apiKey,
      ANTHROPIC_BASE_URL: anthropic.url,
      ANTHROPIC_API_KEY: anthropic.apiKey,
      GEMINI_BASE_URL: gemini.url,
      GEMINI_API_KEY: gemini.apiKey,
    };
    app = createContext(testConfig(localEnv), { role: 'test' });
    procs.push(
      ...(await Promise.all([
        startRole('web', localEnv),
        startRole('worker', localEnv),
        startRole('web', catalogEnv),
        startRole('worker', catalogEnv),
      ])),
    );
    local = procs[0]!;
    catalog = procs[2]!;
    user = await createTestAccount(app, { tier: 'paid' });
  });
  after(async () => {
    await Promise.all(procs.map((p) => p.stop()));
    await app?.close();
    await Promise.all([openai?.close(), anthropic?.close(), gemini?.close()]);
  });
  beforeEach(() => {
    for (const f of [openai, anthropic, gemini] as FakeUpstream[]) f.reset();
  });

  const sdk = (web: RoleProcess) => new OpenAI({ apiKey: user.apiKey, baseURL: `${web.url}/v1`, maxRetries: 0 });

  it('answers 200 to the openai SDK sending a string stop, text parts, max_completion_tokens, seed, the developer role and json_schema output', async () => {
    const client = sdk(local);
    const base = { model: 'gpt-4.1-mini', messages: [QUESTION] };
    const stop = await client.chat.completions.create({ ...base, stop: '.' });
    expect(stop.choices[0]!.message.content).to.not.include('.');
    const parts = await client.chat.completions.create({
      ...base,
      messages: [
        {
          role: 'user',
          content: [
            { type: 'text', text: 'Describe ' },
            { type: 'text', text: 'sourdough.' },
          ],
        },
      ],
    });
    expect(parts.choices[0]!.message.content).to.be.a('string').and.not.empty;
    const capped = await client.chat.completions.create({ ...base, max_completion_tokens: 5 });
    expect(capped.usage!.completion_tokens).to.equal(5);
    expect(capped.choices[0]!.finish_reason).to.equal('length');
    const [a, b] = await Promise.all([7, 7].map((seed) => client.chat.completions.create({ ...base, seed })));
    expect(a!.choices[0]!.message.content).to.equal(b!.choices[0]!.message.content);
    const developer = await client.chat.completions.create({
      ...base,
      messages: [{ role: 'developer', content: 'Answer briefly.' }, QUESTION],
    });
    expect(developer.choices[0]!.finish_reason).to.equal('stop');
    const structured = await client.chat.completions.create({
      ...base,
      response_format: { type: 'json_schema', json_schema: { name: 'weather', schema: ANSWER_SCHEMA, strict: true } },
    });
    expect(schemaMismatch(ANSWER_SCHEMA, JSON.parse(structured.choices[0]!.message.content!))).to.equal(undefined);
  });

  /** A tool call round trip through the SDK: the call, the tool message answering it, the final text. */
  async function roundTrip(web: RoleProcess, model: string, streamed: boolean) {
    const client = sdk(web);
    const ask = (messages: ChatCompletionMessageParam[]) =>
      streamed
        ? client.chat.completions.stream({ model, messages, tools: [WEATHER] }).finalChatCompletion()
        : client.chat.completions.create({ model, messages, tools: [WEATHER] });
    const first = await ask([QUESTION]);
    expect(first.choices[0]!.finish_reason).to.equal('tool_calls');
    const call = first.choices[0]!.message.tool_calls![0]!;
    expect(call.type).to.equal('function');
    if (call.type !== 'function') throw new Error('not a function call');
    expect(call.function.name).to.equal('get_weather');
    const args = JSON.parse(call.function.arguments) as unknown;
    const final = await ask([
      QUESTION,
      first.choices[0]!.message,
      { role: 'tool', tool_call_id: call.id, content: '{"temperature": 21, "unit": "celsius"}' },
    ]);
    expect(final.choices[0]!.finish_reason).to.equal('stop');
    expect(final.choices[0]!.message.content).to.be.a('string').and.not.empty;
    return { first, args, final };
  }

  for (const streamed of [false, true]) {
    const how = streamed ? 'streamed (the SDK stream helper assembling the arguments)' : 'plain';
    it(`makes a tool call round trip on the local model, ${how}, with arguments that satisfy the tool's schema`, async () => {
      const { args, final } = await roundTrip(local, 'gpt-4.1-mini', streamed);
      expect(schemaMismatch(WEATHER.function.parameters!, args)).to.equal(undefined);
      expect(final.choices[0]!.message.content).to.match(/^Going by what get_weather returned: /);
    });

    for (const [model, fake, sent] of [
      ['gpt-4.1-mini', () => openai, (body: any) => body.messages[2]],
      ['claude-haiku-4-5', () => anthropic, (body: any) => body.messages[2].content[0]],
      ['gemini-2.5-flash', () => gemini, (body: any) => body.contents[2].parts[0]],
    ] as const) {
      it(`makes a tool call round trip on ${model} through its provider's wire format, ${how}`, async () => {
        fake().nextResponse({
          toolCalls: [{ name: 'get_weather', arguments: ['{"city":', '"Paris","unit":"celsius"}'] }],
        });
        const { args, final } = await roundTrip(catalog, model, streamed);
        expect(args).to.deep.equal({ city: 'Paris', unit: 'celsius' });
        expect(final.choices[0]!.message.content).to.equal(DEFAULT_TOKENS.join(''));
        expect(fake().requests).to.have.length(2);
        expect(JSON.stringify(sent(fake().requests[1]!.body))).to.include('21');
      });
    }
  }

  it("streams tool-call chunks, and answers tool calls, in the shape of OpenAI's published schemas", async () => {
    const body = { model: 'gpt-4.1-mini', messages: [QUESTION], tools: [WEATHER], n: 2 };
    const s = await postStream(
      `${local.url}/v1/chat/completions`,
      { ...body, stream_options: { include_usage: true } },
      user.apiKey,
    );
    expect(s.chunks.some((c) => c.choices[0]?.delta?.tool_calls)).to.equal(true);
    s.chunks.forEach((chunk, i) =>
      expect(
        openAiIssues('CreateChatCompletionStreamResponse', chunk),
        `chunk ${i}: ${JSON.stringify(chunk)}`,
      ).to.deep.equal([]),
    );
    const r = await post(`${local.url}/v1/chat/completions`, body, { bearer: user.apiKey });
    expect(r.body.choices[0].message.tool_calls).to.have.length(1);
    expect(openAiIssues('CreateChatCompletionResponse', r.body)).to.deep.equal([]);
  });

  it('reads back a streamed tool call as the same chat.completion a plain request gets', async () => {
    const body = { model: 'gpt-4.1-mini', messages: [QUESTION], tools: [WEATHER] };
    const s = await postStream(`${local.url}/v1/chat/completions`, body, user.apiKey);
    const plain = await post(`${local.url}/v1/chat/completions`, body, { bearer: user.apiKey });
    const read = await eventually(async () => {
      const r = await get(`${local.url}/v1/chat/completions/${s.chunks[0].id}`, { bearer: user.apiKey });
      return r.status === 200 ? r : undefined;
    }, 'the completion to be readable');
    expect(read.body.choices).to.deep.equal(plain.body.choices);
    expect(read.body.choices[0].message.tool_calls[0].function.name).to.equal('get_weather');
  });

  it('resumes a stream dropped in the middle of tool-call deltas with exactly what an uninterrupted run sends', async () => {
    const body = { model: 'gpt-4.1-mini', messages: [QUESTION], tools: [WEATHER], seed: 11 };
    const whole = await postStream(`${local.url}/v1/chat/completions`, body, user.apiKey);
    const s = openStream(`${local.url}/v1/chat/completions`, user.apiKey, {
      ...body,
      stream_options: { resumable: true },
    });
    await s.waitFor(2);
    s.controller.abort();
    await s.finished;
    const id = (JSON.parse(s.events[0]!) as { id: string }).id;
    const rest = await readSse(
      await fetch(`${local.url}/v1/chat/completions/${id}/stream`, {
        headers: { authorization: `Bearer ${user.apiKey}`, 'last-event-id': s.ids.at(-1)! },
      }),
    );
    const replay = await readSse(
      await fetch(`${local.url}/v1/chat/completions/${id}/stream`, {
        headers: { authorization: `Bearer ${user.apiKey}` },
      }),
    );
    // Event for event, the dropped stream and its resumption are the stream's own relay log...
    expect([...s.events, ...rest.events]).to.deep.equal(replay.events);
    // ...and they carry the answer an uninterrupted run gives. Where the local model merges tokens
    // that fell due together (a busy machine), two runs cut the same arguments at other places.
    expect(assembled([...s.events, ...rest.events])).to.deep.equal(assembled(whole.events));
    expect(whole.chunks.filter((c) => c.choices[0]?.delta?.tool_calls).length).to.be.greaterThan(2);
  });

  it('returns n = 3 choices from claude-haiku-4-5, plain and streamed, billed once with the usage of the three calls summed', async () => {
    anthropic.script({ tokens: ['Hi', '!'], usage: { prompt: 10, completion: 2 } });
    const ask = { model: 'claude-haiku-4-5', messages: [{ role: 'user', content: 'Hello?' }], n: 3 };
    const plain = await post(`${catalog.url}/v1/chat/completions`, ask, { bearer: user.apiKey });
    expect(plain.status).to.equal(200);
    expect(plain.body.choices.map((c: { index: number }) => c.index)).to.deep.equal([0, 1, 2]);
    expect(plain.body.usage).to.include({ prompt_tokens: 30, completion_tokens: 6, total_tokens: 36 });
    const s = await postStream(
      `${catalog.url}/v1/chat/completions`,
      { ...ask, stream_options: { include_usage: true } },
      user.apiKey,
    );
    const texts = [0, 1, 2].map((i) =>
      s.chunks
        .flatMap((c) => c.choices.filter((x: { index: number }) => x.index === i))
        .map((x) => x.delta.content ?? '')
        .join(''),
    );
    expect(texts).to.deep.equal(['Hi!', 'Hi!', 'Hi!']);
    expect(s.chunks.at(-1).usage).to.include({ prompt_tokens: 30, completion_tokens: 6 });
    expect(anthropic.requests).to.have.length(6);
    for (const id of [plain.body.id, s.chunks[0].id]) {
      const rows = await eventually(async () => {
        const found = await app.db.selectFrom('usage_events').selectAll().where('request_id', '=', id).execute();
        return found.length > 0 ? found : undefined;
      }, `the ledger row of ${id}`);
      expect(rows).to.have.length(1);
      expect(rows[0]).to.include({ prompt_tokens: 30, completion_tokens: 6, status: 'completed' });
    }
  });

  it('refuses malformed forms with 422 at the field: a tool message answering no call, disagreeing token limits, a bad function name, parameters that are no JSON Schema object', async () => {
    const send = (extra: object) =>
      post(
        `${local.url}/v1/chat/completions`,
        { model: 'gpt-4.1-mini', messages: [QUESTION], ...extra },
        { bearer: user.apiKey },
      );
    const locs = async (extra: object) => {
      const r = await send(extra);
      expect(r.status, JSON.stringify(r.body)).to.equal(422);
      return r.body.detail.map((d: { loc: unknown }) => d.loc);
    };
    expect(await locs({ messages: [QUESTION, { role: 'tool', tool_call_id: 'call_x', content: '1' }] })).to.deep.equal([
      ['body', 'messages', 1, 'tool_call_id'],
    ]);
    expect(await locs({ max_tokens: 10, max_completion_tokens: 20 })).to.deep.equal([
      ['body', 'max_completion_tokens'],
    ]);
    expect(await locs({ tools: [{ type: 'function', function: { name: 'get.weather' } }] })).to.deep.equal([
      ['body', 'tools', 0, 'function', 'name'],
    ]);
    expect(
      await locs({
        tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'object', properties: 3 } } }],
      }),
    ).to.deep.equal([['body', 'tools', 0, 'function', 'parameters']]);
    expect(
      await locs({ tool_choice: { type: 'function', function: { name: 'nope' } }, tools: [WEATHER] }),
    ).to.deep.equal([['body', 'tool_choice', 'function', 'name']]);
    expect(
      await locs({
        messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'http://example.com/a.png' } }] }],
      }),
    ).to.deep.equal([['body', 'messages', 0, 'content', 0, 'image_url', 'url']]);
    // A message's 50,000 characters count its text and its tool calls together.
    const call = { id: 'c', type: 'function', function: { name: 'f', arguments: JSON.stringify('a'.repeat(25_000)) } };
    expect(
      await locs({ messages: [QUESTION, { role: 'assistant', content: 'z'.repeat(30_000), tool_calls: [call] }] }),
    ).to.deep.equal([['body', 'messages', 1, 'tool_calls']]);
  });
});
