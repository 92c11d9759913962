import { expect } from 'chai';
import { AppError } from '../../errors.js';
import { AnthropicProvider } from './anthropic.provider.js';
import { ProviderError, type CacheControl, type CompletionParams, type ToolDefinition } from '../types.js';
import { startFakeAnthropic, type FakeAnthropic } from './anthropic.fake.js';
import { collectEvents, type Collected } from '../testing/upstream-fake.js';
import { expectAbortClosesTheUpstream } from '../testing/adapter-contract.js';

const params = (over: Partial<CompletionParams> = {}): CompletionParams => ({
  model: 'claude-haiku-4-5',
  messages: [
    { role: 'system', content: 'Be brief.' },
    { role: 'user', content: 'Say hello' },
    { role: 'assistant', content: 'Hello.' },
    { role: 'user', content: 'Again' },
  ],
  ...over,
});

function fieldOf422(fn: () => void): { param: string | null; loc: unknown } {
  try {
    fn();
  } catch (err) {
    expect(err).to.be.instanceOf(AppError);
    const e = err as AppError;
    expect(e.status).to.equal(422);
    return { param: e.param, loc: e.detail?.[0]?.loc };
  }
  throw new Error('expected check() to reject the request');
}

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
/** The usage event's counts, every part included. */
function usageOf(r: Collected) {
  const usage = r.events.find((e) => e.type === 'usage');
  if (!usage) throw new Error(`no usage event: ${JSON.stringify(r.error ?? r.events)}`);
  const { type: _type, model: _model, ...counts } = usage;
  return counts;
}
const FIVE_MINUTES: CacheControl = { type: 'ephemeral' };
const ONE_HOUR: CacheControl = { type: 'ephemeral', ttl: '1h' };

describe('Anthropic adapter against a fake Anthropic API', () => {
  let fake: FakeAnthropic;
  let provider: AnthropicProvider;
  const run = (p: CompletionParams = params(), signal = new AbortController().signal) =>
    collectEvents(provider.stream(p, signal));

  before(async () => {
    fake = await startFakeAnthropic();
    provider = new AnthropicProvider({
      apiKey: fake.apiKey,
      baseUrl: fake.url,
      timeoutMs: 5000,
      defaultMaxTokens: 4096,
    });
  });
  afterEach(() => fake.reset());
  after(() => fake.close());

  it('streams text deltas, the finish reason and usage from message_start and message_delta', async () => {
    fake.script({ tokens: ['Hi', ' there', '!'], usage: { prompt: 21, completion: 3 } });
    const r = await run();
    expect(r.error).to.equal(undefined);
    expect(r.texts).to.deep.equal(['Hi there!']);
    expect(r.finishes).to.deep.equal({ 0: 'stop' });
    expect(r.usage).to.deep.equal({ prompt_tokens: 21, completion_tokens: 3 });
  });

  describe('whole-answer calls, for clients that do not stream', () => {
    const whole = (p: CompletionParams = params()) => collectEvents(provider.complete(p, new AbortController().signal));

    it('asks for one message (stream: false) and yields the same events: text, finish reason, usage', async () => {
      fake.script({ tokens: ['Hi', ' there', '!'], usage: { prompt: 21, completion: 3 } });
      const r = await whole();
      expect(r.error).to.equal(undefined);
      expect(fake.lastRequest!.body.stream).to.equal(false);
      expect(r.texts).to.deep.equal(['Hi there!']);
      expect(r.finishes).to.deep.equal({ 0: 'stop' });
      expect(r.usage).to.deep.equal({ prompt_tokens: 21, completion_tokens: 3 });
    });

    it('maps stop_reason max_tokens to length', async () => {
      fake.script({ tokens: ['a', 'b', 'c'] });
      expect((await whole(params({ max_tokens: 2 }))).finishes).to.deep.equal({ 0: 'length' });
    });

    it('turns a 529 overloaded into a retryable ProviderError', async () => {
      fake.script({ status: 529, message: 'Overloaded' });
      expect((await whole()).error).to.include({ status: 529, retryable: true });
    });
  });

  it('moves system messages to `system`, maps stop and user, and sends the default max_tokens', async () => {
    await run(params({ stop: ['END', '###'], user: 'user-7' }));
    const req = fake.lastRequest!;
    expect(req.path).to.equal('/v1/messages');
    expect(req.headers['anthropic-version']).to.be.a('string');
    expect(req.body).to.deep.equal({
      model: 'claude-haiku-4-5',
      max_tokens: 4096,
      system: 'Be brief.',
      messages: [
        { role: 'user', content: 'Say hello' },
        { role: 'assistant', content: 'Hello.' },
        { role: 'user', content: 'Again' },
      ],
      stop_sequences: ['END', '###'],
      metadata: { user_id: 'user-7' },
      stream: true,
    });
  });

  it("sends the request's max_tokens and leaves sampling defaults out", async () => {
    await run(
      params({
        max_tokens: 64,
        temperature: 1,
        top_p: 1,
        n: 1,
        presence_penalty: 0,
        frequency_penalty: 0,
        logit_bias: {},
      }),
    );
    const body = fake.lastRequest!.body;
    expect(body.max_tokens).to.equal(64);
    expect(body).to.not.have.any.keys(
      'temperature',
      'top_p',
      'n',
      'presence_penalty',
      'frequency_penalty',
      'logit_bias',
    );
  });

  it('maps stop_reason max_tokens to length', async () => {
    const r = await run(params({ max_tokens: 2 }));
    expect(r.texts[0]).to.equal('Hello!');
    expect(r.finishes[0]).to.equal('length');
  });

  it('maps stop_reason stop_sequence to stop', async () => {
    fake.script({ tokens: ['Hi'], finishReason: 'stop_sequence' });
    expect((await run(params({ stop: ['END'] }))).finishes[0]).to.equal('stop');
  });

  it('maps a refusal to content_filter', async () => {
    fake.script({ tokens: ['I cannot'], finishReason: 'refusal' });
    expect((await run()).finishes[0]).to.equal('content_filter');
  });

  it('turns a 429 into a retryable ProviderError carrying retry-after', async () => {
    fake.nextResponse({
      status: 429,
      message: 'Number of request tokens has exceeded your per-minute rate limit',
      retryAfter: 3,
    });
    const e = (await run()).error as ProviderError;
    expect(e).to.be.instanceOf(ProviderError);
    expect(e).to.include({ status: 429, retryable: true, retryAfterMs: 3000 });
    expect(e.message).to.contain('per-minute rate limit');
  });

  it('turns a 529 overloaded into a retryable ProviderError', async () => {
    fake.nextResponse({ status: 529, message: 'Overloaded' });
    expect((await run()).error).to.include({ status: 529, retryable: true });
  });

  it('turns a 500 into a retryable ProviderError', async () => {
    fake.nextResponse({ status: 500, message: 'Internal server error' });
    expect((await run()).error).to.include({ status: 500, retryable: true });
  });

  it('turns a bad key (401) into a non-retryable ProviderError with the upstream message', async () => {
    const wrong = new AnthropicProvider({
      apiKey: 'sk-ant-wrong',
      baseUrl: fake.url,
      timeoutMs: 5000,
      defaultMaxTokens: 4096,
    });
    const e = (await collectEvents(wrong.stream(params(), new AbortController().signal))).error as ProviderError;
    expect(e).to.be.instanceOf(ProviderError);
    expect(e).to.include({ status: 401, retryable: false });
    expect(e.message).to.contain('Invalid API key provided');
  });

  it('turns a 404 (unknown model) into a non-retryable ProviderError', async () => {
    fake.nextResponse({ status: 404, message: 'model: claude-nope' });
    expect((await run()).error).to.include({ status: 404, retryable: false });
  });

  it('fails with a retryable error on an in-stream error event, after the text it got', async () => {
    fake.script({ tokens: ['one', ' two'], errorAfter: 1 });
    const r = await run();
    expect(r.texts).to.deep.equal(['one']);
    expect(r.error).to.be.instanceOf(ProviderError);
    expect(r.error).to.include({ retryable: true });
  });

  it('fails with a retryable error when the connection is cut mid-stream', async () => {
    fake.script({ tokens: ['one', ' two', ' three'], failAfter: 2 });
    const r = await run();
    expect(r.texts).to.deep.equal(['one two']);
    expect(r.error).to.be.instanceOf(ProviderError);
    expect(r.error).to.include({ retryable: true });
  });

  it('cancels the upstream request when aborted: the fake sees the connection close', () =>
    expectAbortClosesTheUpstream(provider, fake, params()));

  describe('check()', () => {
    it('accepts the fields Anthropic can honour', () => {
      expect(() =>
        provider.check(params({ max_tokens: 8192, stop: ['END'], user: 'u', temperature: 1, top_p: 1, n: 1 })),
      ).to.not.throw();
    });

    it('rejects a non-default temperature with a 422 naming temperature', () => {
      expect(fieldOf422(() => provider.check(params({ temperature: 1.5 })))).to.deep.equal({
        param: 'temperature',
        loc: ['body', 'temperature'],
      });
      expect(fieldOf422(() => provider.check(params({ temperature: 0.2 }))).param).to.equal('temperature');
    });

    it('rejects a non-default top_p with a 422 naming top_p', () => {
      expect(fieldOf422(() => provider.check(params({ top_p: 0.5 }))).param).to.equal('top_p');
    });

    it('accepts n up to 5: the Messages API has no n, so the registry makes n calls (fan-out.ts)', () => {
      expect(() => provider.check(params({ n: 5 }))).to.not.throw();
      expect(provider.maxChoices).to.equal(1);
    });

    it('rejects logit_bias with a 422 naming logit_bias', () => {
      expect(fieldOf422(() => provider.check(params({ logit_bias: { '1': 5 } }))).param).to.equal('logit_bias');
    });

    it('rejects non-zero penalties with a 422 naming the penalty', () => {
      expect(fieldOf422(() => provider.check(params({ presence_penalty: 0.5 }))).param).to.equal('presence_penalty');
      expect(fieldOf422(() => provider.check(params({ frequency_penalty: -1 }))).param).to.equal('frequency_penalty');
    });

    it('rejects a whitespace-only stop sequence with a 422 naming its position', () => {
      expect(fieldOf422(() => provider.check(params({ stop: ['END', '\n'] })))).to.deep.equal({
        param: 'stop',
        loc: ['body', 'stop', 1],
      });
    });

    it('rejects an empty message content with a 422 naming the message', () => {
      expect(fieldOf422(() => provider.check(params({ messages: [{ role: 'user', content: '' }] })))).to.deep.equal({
        param: 'messages',
        loc: ['body', 'messages', 0, 'content'],
      });
    });

    it('rejects a conversation of system messages only', () => {
      expect(fieldOf422(() => provider.check(params({ messages: [{ role: 'system', content: 'x' }] }))).param).to.equal(
        'messages',
      );
    });
  });

  describe('tools', () => {
    it('sends tools with input_schema, tool_choice in its own words, and tool calls and results as blocks', async () => {
      await run(
        params({
          messages: ROUND_TRIP,
          tools: [WEATHER],
          tool_choice: { type: 'function', function: { name: 'get_weather' } },
          parallel_tool_calls: false,
        }),
      );
      const body = fake.lastRequest!.body;
      expect(body.tools).to.deep.equal([
        { name: 'get_weather', description: 'The weather in a city', input_schema: WEATHER.function.parameters },
      ]);
      expect(body.tool_choice).to.deep.equal({ type: 'tool', name: 'get_weather', disable_parallel_tool_use: true });
      expect(body.messages).to.deep.equal([
        { role: 'user', content: 'Weather in Paris?' },
        {
          role: 'assistant',
          content: [{ type: 'tool_use', id: 'call_1', name: 'get_weather', input: { city: 'Paris' } }],
        },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'call_1', content: '21 C' }] },
      ]);
    });

    it('turns streamed tool_use blocks and their input_json_delta fragments into tool calls, finish tool_calls', async () => {
      fake.script({
        tokens: ['Let me check.'],
        toolCalls: [{ id: 'toolu_1', name: 'get_weather', arguments: ['{"ci', 'ty":"Paris"}'] }],
      });
      const r = await run(params({ tools: [WEATHER] }));
      expect(r.error).to.equal(undefined);
      expect(r.texts).to.deep.equal(['Let me check.']);
      expect(callEvents(r.events)).to.deep.equal([
        { type: 'tool_call', index: 0, call: 0, id: 'toolu_1', name: 'get_weather', arguments: '' },
        { type: 'tool_call', index: 0, call: 0, arguments: '{"ci' },
        { type: 'tool_call', index: 0, call: 0, arguments: 'ty":"Paris"}' },
      ]);
      expect(r.finishes).to.deep.equal({ 0: 'tool_calls' });
    });

    it('reads tool_use blocks of a whole answer as tool calls', async () => {
      fake.script({ toolCalls: [{ id: 'toolu_2', name: 'get_weather', arguments: ['{"city":"Oslo"}'] }] });
      const r = await collectEvents(provider.complete(params({ tools: [WEATHER] }), new AbortController().signal));
      expect(callEvents(r.events)).to.deep.equal([
        { type: 'tool_call', index: 0, call: 0, id: 'toolu_2', name: 'get_weather', arguments: '' },
        { type: 'tool_call', index: 0, call: 0, arguments: '{"city":"Oslo"}' },
      ]);
      expect(r.finishes).to.deep.equal({ 0: 'tool_calls' });
    });

    it('answers a json_schema through a forced tool named after it, its input returned as the message content', async () => {
      const schema = { type: 'object', properties: { n: { type: 'integer' } }, required: ['n'] };
      fake.script({ toolCalls: [{ name: 'answer', arguments: ['{"n"', ':3}'] }] });
      const r = await run(
        params({ response_format: { type: 'json_schema', json_schema: { name: 'answer', schema } } }),
      );
      expect(fake.lastRequest!.body.tools).to.deep.equal([{ name: 'answer', input_schema: schema }]);
      expect(fake.lastRequest!.body.tool_choice).to.deep.equal({ type: 'tool', name: 'answer' });
      expect(r.texts).to.deep.equal(['{"n":3}']);
      expect(callEvents(r.events)).to.deep.equal([]);
      expect(r.finishes).to.deep.equal({ 0: 'stop' });
    });

    it('refuses tool call arguments that are not a JSON object, at the arguments', () => {
      const bad = { ...CALL, function: { name: 'get_weather', arguments: '[1]' } };
      expect(
        fieldOf422(() =>
          provider.check(params({ messages: [{ role: 'assistant', content: null, tool_calls: [bad] }] })),
        ).loc,
      ).to.deep.equal(['body', 'messages', 0, 'tool_calls', 0, 'function', 'arguments']);
    });
  });

  describe('prompt caching', () => {
    const whole = (p: CompletionParams = params()) => collectEvents(provider.complete(p, new AbortController().signal));
    const both = { streamed: () => run(), whole: () => whole() };

    for (const [how, answer] of Object.entries(both)) {
      it(`reports cache reads and 5-minute writes as parts of prompt_tokens (${how})`, async () => {
        fake.script({ tokens: ['Hi'], usage: { prompt: 3000, completion: 20, cached: 2000, cacheWrite5m: 800 } });
        expect(usageOf(await answer())).to.deep.equal({
          prompt_tokens: 3000,
          completion_tokens: 20,
          cached_tokens: 2000,
          cache_write_tokens: 800,
        });
      });

      it(`reports 1-hour writes apart, within the cache writes (${how})`, async () => {
        fake.script({
          tokens: ['Hi'],
          usage: { prompt: 6000, completion: 10, cached: 1000, cacheWrite5m: 500, cacheWrite1h: 4000 },
        });
        expect(usageOf(await answer())).to.deep.equal({
          prompt_tokens: 6000,
          completion_tokens: 10,
          cached_tokens: 1000,
          cache_write_tokens: 4500,
          cache_write_1h_tokens: 4000,
        });
      });

      it(`reports thinking tokens as reasoning_tokens, within completion_tokens (${how})`, async () => {
        fake.script({ thinking: 'Greet.', tokens: ['Hi'], usage: { prompt: 12, completion: 5, thoughts: 40 } });
        expect(usageOf(await answer())).to.deep.equal({
          prompt_tokens: 12,
          completion_tokens: 45,
          reasoning_tokens: 40,
        });
      });
    }

    it('reports no cache or reasoning parts when Anthropic counts none', async () => {
      fake.script({ tokens: ['Hi'], usage: { prompt: 30, completion: 2 } });
      expect(usageOf(await run())).to.deep.equal({ prompt_tokens: 30, completion_tokens: 2 });
    });

    it('sends a marked system message as a system text block carrying its mark, TTL as given', async () => {
      await run(
        params({
          messages: [
            { role: 'system', content: 'You are a librarian.', cache_control: ONE_HOUR },
            { role: 'developer', content: 'Answer briefly.' },
            { role: 'user', content: 'Hello' },
          ],
        }),
      );
      expect(fake.lastRequest!.body.system).to.deep.equal([
        { type: 'text', text: 'You are a librarian.', cache_control: { type: 'ephemeral', ttl: '1h' } },
        { type: 'text', text: 'Answer briefly.' },
      ]);
    });

    it('keeps the mark of each marked content part on its own block: system text, user text and image', async () => {
      const png = 'data:image/png;base64,iVBORw0KGgo=';
      await run(
        params({
          messages: [
            {
              role: 'system',
              content: [
                { type: 'text', text: 'Rules. ', cache_control: FIVE_MINUTES },
                { type: 'text', text: 'Today is Monday.' },
              ],
            },
            {
              role: 'user',
              content: [
                { type: 'image_url', image_url: { url: png }, cache_control: ONE_HOUR },
                { type: 'text', text: 'The long document.', cache_control: FIVE_MINUTES },
                { type: 'text', text: 'What is it?' },
              ],
            },
          ],
        }),
      );
      const body = fake.lastRequest!.body;
      expect(body.system).to.deep.equal([
        { type: 'text', text: 'Rules. ', cache_control: { type: 'ephemeral' } },
        { type: 'text', text: 'Today is Monday.' },
      ]);
      expect(body.messages).to.deep.equal([
        {
          role: 'user',
          content: [
            {
              type: 'image',
              source: { type: 'base64', media_type: 'image/png', data: 'iVBORw0KGgo=' },
              cache_control: { type: 'ephemeral', ttl: '1h' },
            },
            { type: 'text', text: 'The long document.', cache_control: { type: 'ephemeral' } },
            { type: 'text', text: 'What is it?' },
          ],
        },
      ]);
    });

    it("marks the last block of a message marked as a whole: user, assistant's tool call and tool result", async () => {
      await run(
        params({
          messages: [
            { role: 'user', content: 'Weather in Paris?', cache_control: FIVE_MINUTES },
            { role: 'assistant', content: 'Checking.', tool_calls: [CALL], cache_control: FIVE_MINUTES },
            { role: 'tool', tool_call_id: 'call_1', content: '21 C', cache_control: ONE_HOUR },
          ],
          tools: [WEATHER],
        }),
      );
      expect(fake.lastRequest!.body.messages).to.deep.equal([
        {
          role: 'user',
          content: [{ type: 'text', text: 'Weather in Paris?', cache_control: { type: 'ephemeral' } }],
        },
        {
          role: 'assistant',
          content: [
            { type: 'text', text: 'Checking.' },
            {
              type: 'tool_use',
              id: 'call_1',
              name: 'get_weather',
              input: { city: 'Paris' },
              cache_control: { type: 'ephemeral' },
            },
          ],
        },
        {
          role: 'user',
          content: [
            {
              type: 'tool_result',
              tool_use_id: 'call_1',
              content: '21 C',
              cache_control: { type: 'ephemeral', ttl: '1h' },
            },
          ],
        },
      ]);
    });

    it('marks a tool definition, so the tools up to it are cached', async () => {
      const search: ToolDefinition = { type: 'function', function: { name: 'search' }, cache_control: ONE_HOUR };
      await run(params({ tools: [WEATHER, search] }));
      expect(fake.lastRequest!.body.tools).to.deep.equal([
        { name: 'get_weather', description: 'The weather in a city', input_schema: WEATHER.function.parameters },
        {
          name: 'search',
          input_schema: { type: 'object', properties: {} },
          cache_control: { type: 'ephemeral', ttl: '1h' },
        },
      ]);
    });

    it('accepts four breakpoints', () => {
      expect(() =>
        provider.check(
          params({
            tools: [{ ...WEATHER, cache_control: ONE_HOUR }],
            messages: [
              { role: 'system', content: 'Rules.', cache_control: ONE_HOUR },
              { role: 'user', content: [{ type: 'text', text: 'A', cache_control: FIVE_MINUTES }] },
              { role: 'assistant', content: 'B' },
              { role: 'user', content: 'C', cache_control: FIVE_MINUTES },
            ],
          }),
        ),
      ).to.not.throw();
    });

    it('refuses a fifth breakpoint with a 422 naming it', () => {
      expect(
        fieldOf422(() =>
          provider.check(
            params({
              tools: [{ ...WEATHER, cache_control: FIVE_MINUTES }],
              messages: [
                { role: 'system', content: 'Rules.', cache_control: FIVE_MINUTES },
                { role: 'user', content: [{ type: 'text', text: 'A', cache_control: FIVE_MINUTES }] },
                { role: 'assistant', content: 'B', cache_control: FIVE_MINUTES },
                {
                  role: 'user',
                  content: [
                    { type: 'text', text: 'C' },
                    { type: 'text', text: 'D', cache_control: FIVE_MINUTES },
                  ],
                },
              ],
            }),
          ),
        ),
      ).to.deep.equal({ param: 'messages', loc: ['body', 'messages', 3, 'content', 1, 'cache_control'] });
    });

    it('refuses a 1-hour breakpoint after a 5-minute one in prompt order (tools, system, conversation), naming it', () => {
      expect(
        fieldOf422(() =>
          provider.check(
            params({
              tools: [{ ...WEATHER, cache_control: FIVE_MINUTES }],
              messages: [
                { role: 'user', content: 'Hi' },
                { role: 'system', content: 'Rules.', cache_control: ONE_HOUR },
              ],
            }),
          ),
        ),
      ).to.deep.equal({ param: 'messages', loc: ['body', 'messages', 1, 'cache_control'] });
    });
  });

  describe('reasoning_effort as extended thinking', () => {
    const sent = () => fake.lastRequest!.body as { max_tokens: number; thinking?: unknown };

    it("sends the effort's thinking budget on top of the default max_tokens when the request sets none", async () => {
      await run(params({ reasoning_effort: 'medium' }));
      expect(sent().thinking).to.deep.equal({ type: 'enabled', budget_tokens: 8192 });
      expect(sent().max_tokens).to.equal(4096 + 8192);
    });

    it("fits the budget under the request's max_tokens, which bounds thinking and answer together", async () => {
      await run(params({ reasoning_effort: 'high', max_tokens: 3000 }));
      expect(sent()).to.deep.include({ max_tokens: 3000, thinking: { type: 'enabled', budget_tokens: 2999 } });
    });

    it('disables thinking when less than the 1024-token minimum budget fits under max_tokens', async () => {
      await run(params({ reasoning_effort: 'low', max_tokens: 1024 }));
      expect(sent()).to.deep.include({ max_tokens: 1024, thinking: { type: 'disabled' } });
    });

    it('disables thinking for effort none, and sends no thinking at all without an effort', async () => {
      await run(params({ reasoning_effort: 'none' }));
      expect(sent()).to.deep.include({ max_tokens: 4096, thinking: { type: 'disabled' } });
      await run(params());
      expect(sent()).to.not.have.property('thinking');
    });

    it('disables thinking where a tool call is forced: tool_choice required or named, or a structured answer', async () => {
      const forced: Partial<CompletionParams>[] = [
        { tools: [WEATHER], tool_choice: 'required' },
        { tools: [WEATHER], tool_choice: { type: 'function', function: { name: 'get_weather' } } },
        { response_format: { type: 'json_object' } },
      ];
      for (const over of forced) {
        fake.script({ toolCalls: [{ name: 'get_weather', arguments: ['{}'] }] });
        await run(params({ ...over, reasoning_effort: 'high' }));
        expect(sent().thinking, JSON.stringify(over)).to.deep.equal({ type: 'disabled' });
      }
    });

    it('disables thinking for tool results that continue the turn, and thinks again on a new user message', async () => {
      await run(params({ messages: ROUND_TRIP, tools: [WEATHER], reasoning_effort: 'low' }));
      expect(sent().thinking).to.deep.equal({ type: 'disabled' });
      const next = [
        ...ROUND_TRIP,
        { role: 'assistant', content: 'It is 21 C.' },
        { role: 'user', content: 'And Rome?' },
      ];
      await run(params({ messages: next, tools: [WEATHER], reasoning_effort: 'low' }));
      expect(sent().thinking).to.deep.equal({ type: 'enabled', budget_tokens: 2048 });
    });

    it('leaves thinking blocks out of the answer, streamed or whole', async () => {
      fake.script({ thinking: 'The user wants a greeting.', tokens: ['Hi', '!'] });
      const streamed = await run(params({ reasoning_effort: 'low' }));
      expect(streamed.error).to.equal(undefined);
      expect(streamed.texts).to.deep.equal(['Hi!']);
      const whole = await collectEvents(
        provider.complete(params({ reasoning_effort: 'low' }), new AbortController().signal),
      );
      expect(whole.texts).to.deep.equal(['Hi!']);
      expect(whole.finishes).to.deep.equal({ 0: 'stop' });
    });

    it('reads tool calls after a thinking block', async () => {
      fake.script({ thinking: 'Look it up.', toolCalls: [{ id: 'toolu_3', name: 'get_weather', arguments: ['{}'] }] });
      const r = await run(params({ tools: [WEATHER], reasoning_effort: 'low' }));
      expect(callEvents(r.events)).to.deep.equal([
        { type: 'tool_call', index: 0, call: 0, id: 'toolu_3', name: 'get_weather', arguments: '' },
        { type: 'tool_call', index: 0, call: 0, arguments: '{}' },
      ]);
      expect(r.texts).to.deep.equal([]);
    });
  });
});
