import { expect } from 'chai';
import { AppError } from '../../errors.js';
import { OpenAIProvider, toOpenAIRequest } from './openai.provider.js';
import { openai } from './openai.plugin.js';
import { ProviderError, type CompletionParams, type ToolDefinition } from '../types.js';
import { startFakeOpenAI, type FakeOpenAI } from './openai.fake.js';
import { collectEvents } from '../testing/upstream-fake.js';
import { expectAbortClosesTheUpstream, expectCachedAndReasoningTokens } from '../testing/adapter-contract.js';
import { isAbortError } from '../abort.js';
import { startNow } from '../../chat/job/upstream-loop.js';
import { eventually, post } from '../../../test/support/http.js';
import { openAiIssues } from '../../../test/support/openai-schemas.js';
import { postStream } from '../../../test/support/sse.js';

const params = (over: Partial<CompletionParams> = {}): CompletionParams => ({
  model: 'gpt-4.1-mini',
  messages: [
    { role: 'system', content: 'Be brief.' },
    { role: 'user', content: 'Say hello' },
  ],
  ...over,
});

const WEATHER: ToolDefinition = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'The weather in a city',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  },
};
const CALL = {
  id: 'call_1',
  type: 'function' as const,
  function: { name: 'get_weather', arguments: '{"city":"Paris"}' },
};
const ROUND_TRIP: CompletionParams['messages'] = [
  { role: 'user', content: 'Weather in Paris?' },
  { role: 'assistant', content: null, tool_calls: [CALL] },
  { role: 'tool', tool_call_id: 'call_1', content: '21 C' },
];
const callEvents = (events: { type: string }[]) => events.filter((e) => e.type === 'tool_call');

describe('OpenAI adapter against a fake OpenAI', () => {
  let fake: FakeOpenAI;
  let provider: OpenAIProvider;
  const run = (p: CompletionParams = params(), signal = new AbortController().signal) =>
    collectEvents(provider.stream(p, signal));

  before(async () => {
    fake = await startFakeOpenAI();
    provider = new OpenAIProvider({ apiKey: fake.apiKey, baseUrl: `${fake.url}/v1`, timeoutMs: 5000 }, openai);
  });
  afterEach(() => fake.reset());
  after(() => fake.close());

  it('streams the text, the finish reason and the upstream usage', async () => {
    fake.script({ tokens: ['Hel', 'lo', ' there'], usage: { prompt: 12, completion: 3 } });
    const r = await run();
    expect(r.error).to.equal(undefined);
    expect(r.texts).to.deep.equal(['Hello there']);
    expect(r.finishes).to.deep.equal({ 0: 'stop' });
    expect(r.usage).to.deep.equal({ prompt_tokens: 12, completion_tokens: 3 });
    expect(r.events.at(-1)?.type).to.equal('usage');
  });

  it('a stream started with startNow sends its request before anyone reads it, and loses no event', async () => {
    fake.script({ tokens: ['Hel', 'lo'], usage: { prompt: 5, completion: 2 } });
    const started = startNow(provider.stream(params(), new AbortController().signal));
    await eventually(
      async () => (fake.requests.length === 1 ? true : undefined),
      'the upstream request to arrive unread',
    );
    const r = await collectEvents(started);
    expect(r.error).to.equal(undefined);
    expect(r.texts).to.deep.equal(['Hello']);
    expect(r.usage).to.deep.equal({ prompt_tokens: 5, completion_tokens: 2 });
  });

  it('reuses one keep-alive connection for answers read to the end', async () => {
    const before = fake.connections;
    for (let i = 0; i < 5; i++) expect((await run()).error).to.equal(undefined);
    expect(fake.connections - before).to.be.at.most(1);
  });

  it('maps every request field onto the upstream body and always asks for usage', async () => {
    await run(
      params({
        temperature: 0.2,
        top_p: 0.9,
        max_tokens: 50,
        n: 2,
        stop: ['\n\n'],
        presence_penalty: 0.5,
        frequency_penalty: -0.5,
        logit_bias: { '1234': -100 },
        user: 'user-7',
      }),
    );
    const req = fake.lastRequest!;
    expect(req.path).to.equal('/v1/chat/completions');
    expect(req.headers.authorization).to.equal(`Bearer ${fake.apiKey}`);
    expect(req.body).to.deep.equal({
      model: 'gpt-4.1-mini',
      messages: [
        { role: 'system', content: 'Be brief.' },
        { role: 'user', content: 'Say hello' },
      ],
      stream: true,
      stream_options: { include_usage: true },
      temperature: 0.2,
      top_p: 0.9,
      max_tokens: 50,
      n: 2,
      stop: ['\n\n'],
      presence_penalty: 0.5,
      frequency_penalty: -0.5,
      logit_bias: { '1234': -100 },
      user: 'user-7',
    });
  });

  it('sends no optional field the request did not set', async () => {
    await run();
    expect(Object.keys(fake.lastRequest!.body).sort()).to.deep.equal(['messages', 'model', 'stream', 'stream_options']);
  });

  it('streams n choices with their own indexes and finish reasons', async () => {
    fake.script({
      choices: [
        ['A', 'a'],
        ['B', 'b', 'b'],
      ],
    });
    const r = await run(params({ n: 2, max_tokens: 2 }));
    expect(r.texts).to.deep.equal(['Aa', 'Bb']);
    expect(r.finishes).to.deep.equal({ 0: 'stop', 1: 'length' });
  });

  it('reports finish_reason length when the upstream hit max_tokens', async () => {
    const r = await run(params({ max_tokens: 2 }));
    expect(r.finishes[0]).to.equal('length');
  });

  it('still streams from an OpenAI-compatible server that sends no usage', async () => {
    fake.script({ tokens: ['ok'], usage: null });
    const r = await run();
    expect(r.error).to.equal(undefined);
    expect(r.texts).to.deep.equal(['ok']);
    expect(r.usage).to.equal(undefined);
  });

  it('turns a 429 into a retryable ProviderError carrying Retry-After', async () => {
    fake.nextResponse({ status: 429, message: 'Rate limit reached for requests', retryAfter: 2 });
    const r = await run();
    expect(r.error).to.be.instanceOf(ProviderError);
    const e = r.error as ProviderError;
    expect(e).to.include({ status: 429, retryable: true, retryAfterMs: 2000 });
    expect(e.message).to.contain('Rate limit reached for requests');
  });

  it('prefers the retry-after-ms header when the upstream sends it', async () => {
    fake.nextResponse({ status: 429, retryAfterMs: 350, retryAfter: 1 });
    const e = (await run()).error as ProviderError;
    expect(e.retryAfterMs).to.equal(350);
  });

  it('turns a 500 into a retryable ProviderError', async () => {
    fake.nextResponse({ status: 500, message: 'The server had an error while processing your request.' });
    const e = (await run()).error as ProviderError;
    expect(e).to.be.instanceOf(ProviderError);
    expect(e).to.include({ status: 500, retryable: true });
    expect(e.message).to.contain('The server had an error');
  });

  it('turns a bad key (401) into a non-retryable ProviderError with the upstream message', async () => {
    const wrong = new OpenAIProvider({ apiKey: 'sk-wrong', baseUrl: `${fake.url}/v1`, timeoutMs: 5000 }, openai);
    const e = (await collectEvents(wrong.stream(params(), new AbortController().signal))).error as ProviderError;
    expect(e).to.be.instanceOf(ProviderError);
    expect(e).to.include({ status: 401, retryable: false });
    expect(e.message).to.contain('Invalid API key provided');
  });

  it('turns a 400 into a non-retryable ProviderError', async () => {
    fake.nextResponse({ status: 400, message: "Invalid 'messages[0].role'" });
    const e = (await run()).error as ProviderError;
    expect(e).to.include({ status: 400, retryable: false });
  });

  it('fails with a retryable error when the connection is cut mid-stream, after the text it got', async () => {
    fake.script({ tokens: ['one', ' two', ' three', ' four'], failAfter: 2 });
    const r = await run();
    expect(r.texts).to.deep.equal(['one two']);
    expect(r.error).to.be.instanceOf(ProviderError);
    expect((r.error as ProviderError).retryable).to.equal(true);
  });

  it('fails when the stream ends cleanly but without a finish reason', async () => {
    fake.script({ tokens: ['one'], failAfter: 1 });
    const r = await run();
    expect(r.error).to.be.instanceOf(ProviderError);
    expect(r.finishes).to.deep.equal({});
  });

  it('fails with a ProviderError on an error event inside the stream', async () => {
    fake.script({ tokens: ['one', ' two'], errorAfter: 1 });
    const r = await run();
    expect(r.texts).to.deep.equal(['one']);
    expect(r.error).to.be.instanceOf(ProviderError);
    expect((r.error as ProviderError).message).to.contain('Internal error encountered');
  });

  it('gives up with a retryable 504 when the upstream goes silent', async () => {
    const impatient = new OpenAIProvider({ apiKey: fake.apiKey, baseUrl: `${fake.url}/v1`, timeoutMs: 300 }, openai);
    fake.script({ tokens: ['one', ' two'], hangAfter: 1 });
    const r = await collectEvents(impatient.stream(params(), new AbortController().signal));
    expect(r.texts).to.deep.equal(['one']);
    expect(r.error).to.be.instanceOf(ProviderError);
    expect(r.error).to.include({ status: 504, retryable: true });
    await fake.lastRequest!.closed;
    expect(fake.lastRequest!.closedEarly).to.equal(true);
  });

  it('cancels the upstream request when aborted: the fake sees the connection close', () =>
    expectAbortClosesTheUpstream(provider, fake, params()));

  it('closes the upstream connection when the consumer stops reading early', async () => {
    fake.script({ tokens: Array.from({ length: 100 }, () => ' tok'), tokenDelayMs: 50 });
    for await (const e of provider.stream(params(), new AbortController().signal)) {
      if (e.type === 'delta') break;
    }
    await fake.lastRequest!.closed;
    expect(fake.lastRequest!.closedEarly).to.equal(true);
  });

  describe('whole-answer calls, for clients that do not stream', () => {
    const whole = (p: CompletionParams = params(), signal = new AbortController().signal) =>
      collectEvents(provider.complete(p, signal));

    it('asks for one JSON answer (stream: false) and yields the same events: text, finish reason, usage', async () => {
      fake.script({ tokens: ['Hel', 'lo', ' there'], usage: { prompt: 12, completion: 3 } });
      const r = await whole();
      expect(r.error).to.equal(undefined);
      expect(r.texts).to.deep.equal(['Hello there']);
      expect(r.finishes).to.deep.equal({ 0: 'stop' });
      expect(r.usage).to.deep.equal({ prompt_tokens: 12, completion_tokens: 3 });
      expect(fake.lastRequest!.body.stream).to.equal(false);
      expect(fake.lastRequest!.body).to.not.have.property('stream_options');
    });

    it('yields n choices with their own indexes and finish reasons', async () => {
      fake.script({
        choices: [
          ['a', 'b'],
          ['c', 'd', 'e'],
        ],
      });
      const r = await whole(params({ n: 2, max_tokens: 2 }));
      expect(r.texts).to.deep.equal(['ab', 'cd']);
      expect(r.finishes).to.deep.equal({ 0: 'stop', 1: 'length' });
    });

    it('turns a 429 into a retryable ProviderError carrying Retry-After', async () => {
      fake.script({ status: 429, message: 'Rate limit reached', retryAfter: 3 });
      const r = await whole();
      expect(r.error).to.be.instanceOf(ProviderError);
      expect(r.error).to.include({ status: 429, retryable: true, retryAfterMs: 3000 });
      expect(r.events).to.deep.equal([]);
    });

    it('turns an error body sent with 200 (some compatible servers do) into a ProviderError', async () => {
      fake.script({ status: 200, body: { error: { message: 'model overloaded' } } });
      const r = await whole();
      expect(r.error).to.be.instanceOf(ProviderError);
      expect((r.error as Error).message).to.match(/model overloaded/);
    });

    it('reuses one keep-alive connection for whole answers', async () => {
      const before = fake.connections;
      for (let i = 0; i < 5; i++) expect((await whole()).error).to.equal(undefined);
      expect(fake.connections - before).to.be.at.most(1);
    });

    it('cancels the upstream request when aborted before the answer came', async () => {
      fake.script({ hang: true });
      const ac = new AbortController();
      const r = whole(params(), ac.signal);
      await eventually(async () => (fake.requests.length === 1 ? true : undefined), 'the upstream request to arrive');
      ac.abort();
      expect(isAbortError((await r).error)).to.equal(true);
      await fake.lastRequest!.closed;
      expect(fake.lastRequest!.closedEarly).to.equal(true);
    });
  });

  describe('usage as OpenAI counts it', () => {
    const whole = (p: CompletionParams = params()) => collectEvents(provider.complete(p, new AbortController().signal));

    for (const how of ['stream', 'complete'] as const) {
      it(`reports prompt_tokens_details.cached_tokens and completion_tokens_details.reasoning_tokens as parts of the counts (${how})`, () =>
        expectCachedAndReasoningTokens(provider, fake, params(), how));
    }

    it('reports no cached or reasoning tokens where OpenAI counts 0 of them', async () => {
      fake.script({ tokens: ['ok'], usage: { prompt: 12, completion: 1, cached: 0, thoughts: 0 } });
      expect((await run()).usage).to.deep.equal({ prompt_tokens: 12, completion_tokens: 1 });
      expect((await whole()).usage).to.deep.equal({ prompt_tokens: 12, completion_tokens: 1 });
    });

    it('reads a usage without details (vLLM, Ollama) as no cached and no reasoning tokens', async () => {
      fake.script({ tokens: ['ok'], usage: { prompt: 12, completion: 1 } });
      for (const r of [await run(), await whole()]) {
        expect(r.error).to.equal(undefined);
        expect(r.usage).to.deep.equal({ prompt_tokens: 12, completion_tokens: 1 });
      }
    });

    it("sends the details in OpenAI's published shape, in the usage chunk and in the whole answer", async () => {
      fake.script({ tokens: ['ok'], usage: { prompt: 2_000, cached: 1_024, completion: 1, thoughts: 32 } });
      const s = await postStream(`${fake.url}/v1/chat/completions`, toOpenAIRequest(params()), fake.apiKey);
      s.chunks.forEach((chunk, i) =>
        expect(openAiIssues('CreateChatCompletionStreamResponse', chunk), `chunk ${i}`).to.deep.equal([]),
      );
      const answer = await post(`${fake.url}/v1/chat/completions`, toOpenAIRequest(params(), false), {
        bearer: fake.apiKey,
      });
      expect(openAiIssues('CreateChatCompletionResponse', answer.body)).to.deep.equal([]);
      for (const usage of [s.chunks.at(-1).usage, answer.body.usage]) {
        expect(usage).to.deep.include({ prompt_tokens: 2_000, completion_tokens: 33, total_tokens: 2_033 });
        expect(usage.prompt_tokens_details.cached_tokens).to.equal(1_024);
        expect(usage.completion_tokens_details.reasoning_tokens).to.equal(32);
      }
    });
  });

  describe('check()', () => {
    it('accepts every interface field with valid values', () => {
      expect(() =>
        provider.check(
          params({ temperature: 2, top_p: 0, n: 5, logit_bias: { '50256': -100, '11': 100 }, presence_penalty: 2 }),
        ),
      ).to.not.throw();
    });

    it('rejects a logit_bias key that is not a token id with a 422 naming logit_bias', () => {
      try {
        provider.check(params({ logit_bias: { hello: 5 } }));
        expect.fail('check accepted a word as a token id');
      } catch (err) {
        expect(err).to.be.instanceOf(AppError);
        const e = err as AppError;
        expect(e.status).to.equal(422);
        expect(e.param).to.equal('logit_bias');
        expect(e.detail).to.deep.equal([
          {
            loc: ['body', 'logit_bias', 'hello'],
            msg: 'logit_bias keys must be token ids (integers); got "hello"',
            type: 'value_error',
          },
        ]);
      }
    });

    it('rejects a role the upstream does not know with a 422 naming the message', () => {
      expect(() => provider.check(params({ messages: [{ role: 'wizard', content: 'hi' }] })))
        .to.throw(AppError)
        .with.property('detail')
        .that.deep.equals([
          {
            loc: ['body', 'messages', 0, 'role'],
            msg: 'Role "wizard" is not supported by OpenAI models; use one of system, developer, user, assistant, tool',
            type: 'value_error',
          },
        ]);
    });
  });

  describe('tools', () => {
    it('passes tools, tool_choice, parallel_tool_calls, response_format, seed and tool messages through', async () => {
      const format = {
        type: 'json_schema' as const,
        json_schema: { name: 'a', schema: { type: 'object' }, strict: true },
      };
      await run(
        params({
          messages: ROUND_TRIP,
          tools: [WEATHER],
          tool_choice: 'auto',
          parallel_tool_calls: false,
          response_format: format,
          seed: 3,
        }),
      );
      expect(fake.lastRequest!.body).to.deep.include({
        messages: ROUND_TRIP,
        tools: [WEATHER],
        tool_choice: 'auto',
        parallel_tool_calls: false,
        response_format: format,
        seed: 3,
      });
    });

    it("leaves Anthropic's cache_control marks out: OpenAI refuses unknown fields and caches prefixes on its own", async () => {
      const mark = { type: 'ephemeral' as const, ttl: '1h' as const };
      await run(
        params({
          messages: [
            { role: 'system', content: 'Be brief.', cache_control: mark },
            { role: 'user', content: [{ type: 'text', text: 'Say hello', cache_control: mark }] },
          ],
          tools: [{ ...WEATHER, cache_control: mark }],
        }),
      );
      expect(fake.lastRequest!.body).to.deep.include({
        messages: [
          { role: 'system', content: 'Be brief.' },
          { role: 'user', content: [{ type: 'text', text: 'Say hello' }] },
        ],
        tools: [WEATHER],
      });
    });

    it('turns streamed tool_calls deltas into tool call events, and a whole answer the same', async () => {
      fake.script({ toolCalls: [{ id: 'call_9', name: 'get_weather', arguments: ['{"city"', ':"Paris"}'] }] });
      const streamed = await run(params({ tools: [WEATHER] }));
      expect(callEvents(streamed.events)).to.deep.equal([
        { type: 'tool_call', index: 0, call: 0, id: 'call_9', name: 'get_weather', arguments: '{"city"' },
        { type: 'tool_call', index: 0, call: 0, arguments: ':"Paris"}' },
      ]);
      expect(streamed.finishes).to.deep.equal({ 0: 'tool_calls' });
      const whole = await collectEvents(provider.complete(params({ tools: [WEATHER] }), new AbortController().signal));
      expect(callEvents(whole.events)).to.deep.equal([
        { type: 'tool_call', index: 0, call: 0, id: 'call_9', name: 'get_weather', arguments: '{"city":"Paris"}' },
      ]);
    });
  });

  describe('reasoning_effort', () => {
    it('passes the effort through, bounding reasoning and answer with max_completion_tokens', async () => {
      await run(params({ model: 'o4-mini', reasoning_effort: 'high', max_tokens: 2000 }));
      const body = fake.lastRequest!.body;
      expect(body).to.deep.include({ reasoning_effort: 'high', max_completion_tokens: 2000 });
      expect(body).to.not.have.property('max_tokens');
    });

    it('sends a whole-answer request the same effort', async () => {
      await collectEvents(provider.complete(params({ reasoning_effort: 'minimal' }), new AbortController().signal));
      expect(fake.lastRequest!.body).to.deep.include({ stream: false, reasoning_effort: 'minimal' });
    });
  });
});
