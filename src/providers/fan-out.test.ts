import { expect } from 'chai';
import { AnthropicProvider } from './anthropic/anthropic.provider.js';
import { startFakeAnthropic, type FakeAnthropic } from './anthropic/anthropic.fake.js';
import { withCheckedOutput } from './checked-output.js';
import { ComputePool } from './compute-pool.js';
import { fanOut, withFanOut } from './fan-out.js';
import { startFakeOpenAI, type FakeOpenAI } from './openai/openai.fake.js';
import { openai } from './openai/openai.plugin.js';
import { OpenAIProvider } from './openai/openai.provider.js';
import { collectEvents } from './testing/upstream-fake.js';
import { ProviderError, type CompletionParams, type Provider } from './types.js';

const params = (over: Partial<CompletionParams> = {}): CompletionParams => ({
  model: 'claude-haiku-4-5',
  messages: [{ role: 'user', content: 'Hello?' }],
  ...over,
});

// Checks of small answers run inline; the pool starts no thread for them.
const compute = new ComputePool({ threads: 1, threadHeapMb: 128, onError: () => undefined });

describe('n on a provider without n, and strict json_schema answers (wrappers over an adapter)', () => {
  let fake: FakeAnthropic;
  let provider: Provider;
  before(async () => {
    fake = await startFakeAnthropic();
    const adapter = new AnthropicProvider({
      apiKey: fake.apiKey,
      baseUrl: fake.url,
      timeoutMs: 5000,
      defaultMaxTokens: 100,
    });
    provider = withCheckedOutput(withFanOut(adapter), compute);
  });
  afterEach(() => fake.reset());
  after(() => Promise.all([fake.close(), compute.close()]));

  for (const how of ['stream', 'complete'] as const) {
    it(`makes n = 3 as three calls of one choice each, merged into choices 0 to 2 with the usage summed (${how})`, async () => {
      fake.script({ tokens: ['a', 'b'], usage: { prompt: 10, completion: 2 } });
      const r = await collectEvents(provider[how]!(params({ n: 3 }), new AbortController().signal));
      expect(r.error).to.equal(undefined);
      expect(fake.requests).to.have.length(3);
      expect(fake.requests.every((q) => q.body.n === undefined)).to.equal(true);
      expect(r.texts).to.deep.equal(['ab', 'ab', 'ab']);
      expect(r.finishes).to.deep.equal({ 0: 'stop', 1: 'stop', 2: 'stop' });
      expect(r.usage).to.deep.equal({ prompt_tokens: 30, completion_tokens: 6 });
      expect(r.events.filter((e) => e.type === 'usage')).to.have.length(1);
    });
  }

  it('fails the whole answer, and stops the other calls, when one call fails', async () => {
    fake.nextResponse({ tokens: Array.from({ length: 50 }, () => 'x'), tokenDelayMs: 20 });
    fake.nextResponse({ status: 400, message: 'bad request' });
    fake.nextResponse({ tokens: Array.from({ length: 50 }, () => 'x'), tokenDelayMs: 20 });
    const r = await collectEvents(provider.stream(params({ n: 3 }), new AbortController().signal));
    expect(r.error).to.be.instanceOf(ProviderError);
    expect((r.error as ProviderError).status).to.equal(400);
    await Promise.all(fake.requests.map((q) => q.closed));
    expect(fake.requests.filter((q) => q.closedEarly)).to.have.length(2);
  });

  const strict = (schema: Record<string, unknown>) =>
    params({ response_format: { type: 'json_schema', json_schema: { name: 'answer', schema, strict: true } } });
  const schema = { type: 'object', properties: { n: { type: 'integer' } }, required: ['n'] };

  it('returns a strict json_schema answer that matches, whole, after checking it', async () => {
    fake.script({ toolCalls: [{ name: 'answer', arguments: ['{"n"', ':3}'] }] });
    const r = await collectEvents(provider.stream(strict(schema), new AbortController().signal));
    expect(r.texts).to.deep.equal(['{"n":3}']);
    expect(r.events.filter((e) => e.type === 'delta')).to.have.length(1);
  });

  it('fails a strict json_schema answer that does not match, before any of it is returned', async () => {
    fake.script({ toolCalls: [{ name: 'answer', arguments: ['{"n":"three"}'] }] });
    const r = await collectEvents(provider.stream(strict(schema), new AbortController().signal));
    expect(r.events.filter((e) => e.type === 'delta')).to.deep.equal([]);
    expect(r.error).to.be.instanceOf(ProviderError);
    expect((r.error as Error).message).to.match(/does not match the json_schema 'answer': \/n must be integer/);
  });

  it('checks a large strict json_schema answer on a compute thread, with the same verdict', async () => {
    const big = { type: 'object', properties: { text: { type: 'string', maxLength: 50_000 } }, required: ['text'] };
    fake.script({ toolCalls: [{ name: 'answer', arguments: [JSON.stringify({ text: 'x'.repeat(70_000) })] }] });
    const r = await collectEvents(provider.stream(strict(big), new AbortController().signal));
    expect(r.events.filter((e) => e.type === 'delta')).to.deep.equal([]);
    expect((r.error as Error).message).to.match(
      /does not match the json_schema 'answer': \/text must NOT have more than 50000 characters/,
    );
    expect(compute.completedTasks).to.equal(1);
  });
});

describe('usage of n made as several calls', () => {
  let fake: FakeOpenAI;
  let adapter: OpenAIProvider;
  before(async () => {
    fake = await startFakeOpenAI();
    adapter = new OpenAIProvider({ apiKey: fake.apiKey, baseUrl: `${fake.url}/v1`, timeoutMs: 5000 }, openai);
  });
  after(() => fake.close());

  it('sums the cached and reasoning tokens of every call into the one usage', async () => {
    fake.nextResponse({ tokens: ['a'], usage: { prompt: 2_000, cached: 1_024, completion: 1, thoughts: 10 } });
    fake.nextResponse({ tokens: ['b'], usage: { prompt: 2_000, cached: 0, completion: 1, thoughts: 20 } });
    fake.nextResponse({ tokens: ['c'], usage: { prompt: 2_000, cached: 1_536, completion: 1, thoughts: 0 } });
    const r = await collectEvents(
      fanOut(params({ model: 'gpt-4.1', n: 3 }), new AbortController().signal, 1, (q, s) => adapter.stream(q, s)),
    );
    expect(r.error).to.equal(undefined);
    expect(fake.requests).to.have.length(3);
    expect(r.texts).to.deep.equal(['a', 'b', 'c']);
    expect(r.usage).to.deep.equal({
      prompt_tokens: 6_000,
      completion_tokens: 33,
      cached_tokens: 2_560,
      reasoning_tokens: 30,
    });
  });
});
