import { expect } from 'chai';
import { AppError } from '../../errors.js';
import { GeminiProvider, geminiRoot } from './gemini.provider.js';
import { ProviderError, type CompletionParams, type ToolDefinition } from '../types.js';
import { startFakeGemini, type FakeGemini } from './gemini.fake.js';
import { collectEvents } from '../testing/upstream-fake.js';
import { expectAbortClosesTheUpstream, expectCachedAndReasoningTokens } from '../testing/adapter-contract.js';

const params = (over: Partial<CompletionParams> = {}): CompletionParams => ({
  model: 'gemini-2.5-flash',
  messages: [
    { role: 'system', content: 'Be brief.' },
    { role: 'user', content: 'Say hello' },
    { role: 'assistant', content: 'Hello.' },
    { role: 'user', content: 'Again' },
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

describe('Gemini adapter against a fake Gemini API', () => {
  let fake: FakeGemini;
  let provider: GeminiProvider;
  const run = (p: CompletionParams = params(), signal = new AbortController().signal) =>
    collectEvents(provider.stream(p, signal));

  before(async () => {
    fake = await startFakeGemini();
    provider = new GeminiProvider({ apiKey: fake.apiKey, baseUrl: fake.url, timeoutMs: 5000 });
  });
  afterEach(() => fake.reset());
  after(() => fake.close());

  it('streams candidate text, the finish reason and usageMetadata', async () => {
    fake.script({ tokens: ['Hi', ' there', '!'], usage: { prompt: 9, completion: 3 } });
    const r = await run();
    expect(r.error).to.equal(undefined);
    expect(r.texts).to.deep.equal(['Hi there!']);
    expect(r.finishes).to.deep.equal({ 0: 'stop' });
    expect(r.usage).to.deep.equal({ prompt_tokens: 9, completion_tokens: 3 });
  });

  it('posts to streamGenerateContent with alt=sse and the key in x-goog-api-key', async () => {
    await run();
    const req = fake.lastRequest!;
    expect(req.path).to.equal('/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse');
    expect(req.headers['x-goog-api-key']).to.equal(fake.apiKey);
  });

  it('maps system to systemInstruction, assistant to model and every supported field to generationConfig', async () => {
    await run(
      params({
        temperature: 0.3,
        top_p: 0.8,
        max_tokens: 99,
        stop: ['END'],
        n: 2,
        presence_penalty: 0.5,
        frequency_penalty: 0.25,
        user: 'u-1',
      }),
    );
    expect(fake.lastRequest!.body).to.deep.equal({
      contents: [
        { role: 'user', parts: [{ text: 'Say hello' }] },
        { role: 'model', parts: [{ text: 'Hello.' }] },
        { role: 'user', parts: [{ text: 'Again' }] },
      ],
      systemInstruction: { parts: [{ text: 'Be brief.' }] },
      generationConfig: {
        temperature: 0.3,
        topP: 0.8,
        maxOutputTokens: 99,
        stopSequences: ['END'],
        candidateCount: 2,
        presencePenalty: 0.5,
        frequencyPenalty: 0.25,
      },
    });
  });

  it('streams several candidates with their indexes', async () => {
    fake.script({ choices: [['A', 'a'], ['B']] });
    const r = await run(params({ n: 2 }));
    expect(r.texts).to.deep.equal(['Aa', 'B']);
    expect(r.finishes).to.deep.equal({ 0: 'stop', 1: 'stop' });
  });

  it('maps finishReason MAX_TOKENS to length and SAFETY to content_filter', async () => {
    expect((await run(params({ max_tokens: 2 }))).finishes[0]).to.equal('length');
    fake.script({ tokens: ['x'], finishReason: 'SAFETY' });
    expect((await run()).finishes[0]).to.equal('content_filter');
  });

  it('counts thinking tokens as completion tokens, as Google bills them, and reports them as reasoning', async () => {
    fake.nextResponse({ tokens: ['ok'], usage: { prompt: 5, completion: 1, thoughts: 40 } });
    const r = await run();
    expect(r.usage).to.deep.equal({ prompt_tokens: 5, completion_tokens: 41, reasoning_tokens: 40 });
  });

  describe('usage as Gemini counts it', () => {
    const whole = (p: CompletionParams = params()) => collectEvents(provider.complete(p, new AbortController().signal));

    for (const how of ['stream', 'complete'] as const) {
      it(`reports cachedContentTokenCount as cached prompt tokens and thoughtsTokenCount as reasoning (${how})`, () =>
        expectCachedAndReasoningTokens(provider, fake, params(), how));
    }

    it('reads cachedContentTokenCount as a part of promptTokenCount, not beside it', async () => {
      fake.script({ tokens: ['ok'], usage: { prompt: 4_096, cached: 4_000, completion: 1 } });
      for (const r of [await run(), await whole()])
        expect(r.usage).to.deep.equal({ prompt_tokens: 4_096, completion_tokens: 1, cached_tokens: 4_000 });
    });

    it('reports no cached or reasoning tokens when usageMetadata names none (no cache hit, no thinking)', async () => {
      fake.script({ tokens: ['ok'], usage: { prompt: 9, completion: 1 } });
      for (const r of [await run(), await whole()])
        expect(r.usage).to.deep.equal({ prompt_tokens: 9, completion_tokens: 1 });
    });
  });

  describe('whole-answer calls, for clients that do not stream', () => {
    const whole = (p: CompletionParams = params()) => collectEvents(provider.complete(p, new AbortController().signal));

    it('posts to generateContent and yields the same events: text, finish reason, usage with thinking tokens', async () => {
      fake.script({ tokens: ['Hi', ' there', '!'], usage: { prompt: 9, completion: 3, thoughts: 10 } });
      const r = await whole();
      expect(r.error).to.equal(undefined);
      expect(fake.lastRequest!.path).to.equal('/v1beta/models/gemini-2.5-flash:generateContent');
      expect(r.texts).to.deep.equal(['Hi there!']);
      expect(r.finishes).to.deep.equal({ 0: 'stop' });
      expect(r.usage).to.deep.equal({ prompt_tokens: 9, completion_tokens: 13, reasoning_tokens: 10 });
    });

    it('yields several candidates with their indexes', async () => {
      fake.script({ choices: [['a'], ['b', 'c']] });
      const r = await whole(params({ n: 2 }));
      expect(r.texts).to.deep.equal(['a', 'bc']);
      expect(r.finishes).to.deep.equal({ 0: 'stop', 1: 'stop' });
    });

    it('turns a 429 into a retryable ProviderError using the RetryInfo delay', async () => {
      fake.nextResponse({ status: 429, message: 'Resource has been exhausted (e.g. check quota).' });
      const e = (await whole()).error as ProviderError;
      expect(e).to.include({ status: 429, retryable: true, retryAfterMs: 1000 });
    });
  });

  it('turns a 429 into a retryable ProviderError using the RetryInfo delay', async () => {
    fake.nextResponse({ status: 429, message: 'Resource has been exhausted (e.g. check quota).' });
    const e = (await run()).error as ProviderError;
    expect(e).to.be.instanceOf(ProviderError);
    expect(e).to.include({ status: 429, retryable: true, retryAfterMs: 1000 });
    expect(e.message).to.contain('Resource has been exhausted');
  });

  it('prefers a Retry-After header over RetryInfo', async () => {
    fake.nextResponse({ status: 429, retryAfter: 4 });
    expect(((await run()).error as ProviderError).retryAfterMs).to.equal(4000);
  });

  it('turns a 503 into a retryable ProviderError', async () => {
    fake.nextResponse({ status: 503, message: 'The model is overloaded. Please try again later.' });
    expect((await run()).error).to.include({ status: 503, retryable: true });
  });

  it('turns a bad key into a non-retryable ProviderError with the upstream message', async () => {
    const wrong = new GeminiProvider({ apiKey: 'wrong', baseUrl: fake.url, timeoutMs: 5000 });
    const e = (await collectEvents(wrong.stream(params(), new AbortController().signal))).error as ProviderError;
    expect(e).to.be.instanceOf(ProviderError);
    expect(e).to.include({ status: 401, retryable: false });
    expect(e.message).to.contain('Invalid API key provided');
  });

  it('turns a 400 into a non-retryable ProviderError', async () => {
    fake.nextResponse({ status: 400, message: 'Penalty is not enabled for this model' });
    const e = (await run()).error as ProviderError;
    expect(e).to.include({ status: 400, retryable: false });
    expect(e.message).to.contain('Penalty is not enabled');
  });

  it('fails with a retryable error when the connection is cut mid-stream', async () => {
    fake.script({ tokens: ['one', ' two', ' three'], failAfter: 2 });
    const r = await run();
    expect(r.texts).to.deep.equal(['one two']);
    expect(r.error).to.be.instanceOf(ProviderError);
    expect(r.error).to.include({ retryable: true });
  });

  it('fails on an error object inside the stream', async () => {
    fake.script({ tokens: ['one', ' two'], errorAfter: 1 });
    const r = await run();
    expect(r.texts).to.deep.equal(['one']);
    expect(r.error).to.be.instanceOf(ProviderError);
  });

  it('gives up with a retryable 504 when the upstream never answers', async () => {
    const impatient = new GeminiProvider({ apiKey: fake.apiKey, baseUrl: fake.url, timeoutMs: 300 });
    fake.script({ hang: true });
    const r = await collectEvents(impatient.stream(params(), new AbortController().signal));
    expect(r.error).to.include({ status: 504, retryable: true });
    await fake.lastRequest!.closed;
    expect(fake.lastRequest!.closedEarly).to.equal(true);
  });

  it('cancels the upstream request when aborted: the fake sees the connection close', () =>
    expectAbortClosesTheUpstream(provider, fake, params()));

  it('reads GEMINI_BASE_URL as the API root, with or without a version', () => {
    expect(geminiRoot(undefined)).to.equal('https://generativelanguage.googleapis.com/v1beta');
    expect(geminiRoot('http://127.0.0.1:9999')).to.equal('http://127.0.0.1:9999/v1beta');
    expect(geminiRoot('https://proxy.example/gemini/v1/')).to.equal('https://proxy.example/gemini/v1');
  });

  describe('check()', () => {
    it('accepts every field but logit_bias', () => {
      expect(() =>
        provider.check(
          params({
            temperature: 2,
            top_p: 0.1,
            n: 5,
            presence_penalty: 1,
            frequency_penalty: 1,
            stop: ['x'],
            user: 'u',
          }),
        ),
      ).to.not.throw();
    });

    it('rejects logit_bias with a 422 naming logit_bias', () => {
      try {
        provider.check(params({ logit_bias: { '42': 1 } }));
        expect.fail('logit_bias was accepted');
      } catch (err) {
        expect(err).to.be.instanceOf(AppError);
        expect(err).to.include({ status: 422, param: 'logit_bias' });
        expect((err as AppError).detail).to.deep.equal([
          { loc: ['body', 'logit_bias'], msg: 'logit_bias is not supported by Gemini models', type: 'value_error' },
        ]);
      }
    });
  });

  describe('tools', () => {
    it('sends functionDeclarations with their JSON Schemas, the calling mode, and calls and results as parts', async () => {
      await run(
        params({
          messages: ROUND_TRIP,
          tools: [WEATHER],
          tool_choice: 'required',
          seed: 5,
          response_format: { type: 'json_object' },
        }),
      );
      const body = fake.lastRequest!.body;
      expect(body.tools).to.deep.equal([
        {
          functionDeclarations: [
            {
              name: 'get_weather',
              description: 'The weather in a city',
              parametersJsonSchema: WEATHER.function.parameters,
            },
          ],
        },
      ]);
      expect(body.toolConfig).to.deep.equal({ functionCallingConfig: { mode: 'ANY' } });
      expect(body.contents).to.deep.equal([
        { role: 'user', parts: [{ text: 'Weather in Paris?' }] },
        { role: 'model', parts: [{ functionCall: { name: 'get_weather', args: { city: 'Paris' } } }] },
        { role: 'user', parts: [{ functionResponse: { name: 'get_weather', response: { output: '21 C' } } }] },
      ]);
      expect(body.generationConfig).to.include({ seed: 5, responseMimeType: 'application/json' });
    });

    it('turns functionCall parts into tool calls with ids of their own, finish tool_calls', async () => {
      fake.script({ toolCalls: [{ name: 'get_weather', arguments: ['{"city":"Paris"}'] }] });
      for (const r of [
        await run(params({ tools: [WEATHER] })),
        await collectEvents(provider.complete(params({ tools: [WEATHER] }), new AbortController().signal)),
      ]) {
        const [call] = callEvents(r.events) as unknown as { id: string; name: string; arguments: string }[];
        expect(call).to.include({ name: 'get_weather', arguments: '{"city":"Paris"}' });
        expect(call!.id).to.match(/^call_[0-9a-f]{24}$/);
        expect(r.finishes).to.deep.equal({ 0: 'tool_calls' });
      }
    });

    it('sends a json_schema as the response JSON Schema', async () => {
      const schema = { type: 'object', properties: { n: { type: 'integer' } } };
      await run(params({ response_format: { type: 'json_schema', json_schema: { name: 'a', schema } } }));
      expect(fake.lastRequest!.body.generationConfig).to.deep.include({
        responseMimeType: 'application/json',
        responseJsonSchema: schema,
      });
    });

    it('refuses an https image (Gemini fetches no URL) at the URL, and takes a data URL inline', async () => {
      const image = (url: string) =>
        params({ messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url } }] }] });
      expect(() => provider.check(image('https://example.com/a.png')))
        .to.throw(AppError)
        .with.property('detail')
        .that.deep.equals([
          {
            loc: ['body', 'messages', 0, 'content', 0, 'image_url', 'url'],
            msg: 'Gemini models take images as data URLs (data:image/png;base64,…), not as URLs to fetch',
            type: 'value_error',
          },
        ]);
      await run(image('data:image/png;base64,AAAA'));
      expect(fake.lastRequest!.body.contents[0].parts).to.deep.equal([
        { inlineData: { mimeType: 'image/png', data: 'AAAA' } },
      ]);
    });
  });

  describe('reasoning_effort as a thinking budget', () => {
    const thinkingOf = () => fake.lastRequest!.body.generationConfig.thinkingConfig;

    it("sends each effort's thinkingBudget, 0 (thinking off) for none, and no thinkingConfig without one", async () => {
      const budgets = { none: 0, minimal: 512, low: 1024, medium: 8192, high: 24576, xhigh: 24576, max: 24576 };
      for (const [effort, budget] of Object.entries(budgets)) {
        await run(params({ reasoning_effort: effort as keyof typeof budgets }));
        expect(thinkingOf(), effort).to.deep.equal({ thinkingBudget: budget });
      }
      await run(params());
      expect(fake.lastRequest!.body.generationConfig).to.not.have.property('thinkingConfig');
    });

    it("keeps 2.5 Pro's budget in its range: 128 for none (it always thinks), 32768 for xhigh and max", async () => {
      for (const [effort, budget] of [
        ['none', 128],
        ['medium', 8192],
        ['max', 32768],
      ] as const) {
        await run(params({ model: 'gemini-2.5-pro', reasoning_effort: effort }));
        expect(thinkingOf(), effort).to.deep.equal({ thinkingBudget: budget });
      }
    });

    it('leaves thought parts out of the answer, streamed or whole, and counts their tokens as completion', async () => {
      fake.script({
        thinking: 'The user wants a greeting.',
        tokens: ['Hi', '!'],
        usage: { prompt: 5, completion: 2, thoughts: 30 },
      });
      const streamed = await run(params({ reasoning_effort: 'low' }));
      expect(streamed.texts).to.deep.equal(['Hi!']);
      expect(streamed.usage).to.deep.equal({ prompt_tokens: 5, completion_tokens: 32, reasoning_tokens: 30 });
      const whole = await collectEvents(
        provider.complete(params({ reasoning_effort: 'low' }), new AbortController().signal),
      );
      expect(whole.texts).to.deep.equal(['Hi!']);
      expect(whole.usage).to.deep.equal({ prompt_tokens: 5, completion_tokens: 32, reasoning_tokens: 30 });
    });
  });
});
