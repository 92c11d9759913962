import { expect } from 'chai';
import { isAbortError } from '../abort.js';
import { LocalProvider, LOCAL_MODEL_FINGERPRINT, type LocalModelOptions } from './local.provider.js';
import { planChoice } from './local-answer.js';
import { ComputePool } from '../compute-pool.js';
import { AppError } from '../../errors.js';
import { ManualClock } from '../../clock.js';
import { countPromptTokens, countTokens, countToolCallTokens } from '../tokenizer.js';
import type { UpstreamEvent, CompletionParams, ToolDefinition } from '../types.js';
import { schemaMismatch } from '../json-schema.js';

// One compute thread for the whole file, as a worker process has its pool.
const compute = new ComputePool({ threads: 1, threadHeapMb: 256, onError: () => undefined });
const budgets = { generationBudgetMs: 5000, maxAnswerChars: 100_000 };
const model = (opts: Partial<LocalModelOptions>, clock = new ManualClock()) =>
  new LocalProvider({ ttftMs: 0, tokensPerSecond: 1_000_000, ...budgets, ...opts }, compute, clock);
const fast = model({});

const params = (over: Partial<CompletionParams> = {}): CompletionParams => ({
  model: 'gemini-2.5-flash',
  messages: [{ role: 'user', content: 'How do I keep a sourdough starter alive?' }],
  ...over,
});

interface Collected {
  texts: string[];
  finishes: Record<number, string>;
  usage?: { prompt_tokens: number; completion_tokens: number };
  events: UpstreamEvent[];
}

async function collect(
  provider: LocalProvider,
  p: CompletionParams,
  signal = new AbortController().signal,
): Promise<Collected> {
  const out: Collected = { texts: [], finishes: {}, events: [] };
  for await (const e of provider.stream(p, signal)) {
    out.events.push(e);
    if (e.type === 'delta') out.texts[e.index] = (out.texts[e.index] ?? '') + e.content;
    else if (e.type === 'finish') out.finishes[e.index] = e.reason;
    else if (e.type === 'usage') out.usage = { prompt_tokens: e.prompt_tokens, completion_tokens: e.completion_tokens };
  }
  return out;
}

describe('local model', () => {
  after(() => compute.close());

  it('names itself local-model-v1 for system_fingerprint', () => {
    expect(fast.name).to.equal('local');
    expect(fast.fingerprint).to.equal(LOCAL_MODEL_FINGERPRINT).and.equal('local-model-v1');
  });

  it('answers the same request with the same text', async () => {
    const a = await collect(fast, params());
    const b = await collect(fast, params());
    expect(a.texts[0]).to.be.a('string').and.not.empty;
    expect(b.texts[0]).to.equal(a.texts[0]);
  });

  it('accepts reasoning_effort and answers as without it: it does not think', async () => {
    const plain = await collect(fast, params());
    for (const effort of ['none', 'high'] as const) {
      fast.check(params({ reasoning_effort: effort }));
      const r = await collect(fast, params({ reasoning_effort: effort }));
      expect(r.texts, effort).to.deep.equal(plain.texts);
      expect(r.usage, effort).to.deep.equal(plain.usage);
    }
  });

  it('answers different prompts and models differently', async () => {
    const a = await collect(fast, params());
    const b = await collect(fast, params({ messages: [{ role: 'user', content: 'What is a monad?' }] }));
    const c = await collect(fast, params({ model: 'claude-haiku-4-5' }));
    expect(b.texts[0]).to.not.equal(a.texts[0]);
    expect(c.texts[0]).to.not.equal(a.texts[0]);
  });

  it('writes English sentences that end with punctuation and finishes with stop', async () => {
    const r = await collect(fast, params());
    expect(r.texts[0]).to.match(/^[A-Z].*[.?!]$/s);
    expect(r.finishes).to.deep.equal({ 0: 'stop' });
  });

  it('produces roughly 30 to 120 tokens when max_tokens is not set', async () => {
    for (const content of [
      'Explain recursion',
      'What is the capital of France?',
      'Write a haiku about rain',
      'hi',
      'Compare TCP and UDP',
    ]) {
      const r = await collect(fast, params({ messages: [{ role: 'user', content }] }));
      expect(countTokens(r.texts[0]!)).to.be.within(25, 135);
    }
  });

  it('stops at max_tokens with finish_reason length', async () => {
    const r = await collect(fast, params({ max_tokens: 5 }));
    expect(countTokens(r.texts[0]!)).to.equal(5);
    expect(r.finishes[0]).to.equal('length');
    expect(r.usage?.completion_tokens).to.equal(5);
  });

  it('returns the untruncated answer as a prefix of itself when max_tokens cuts it', async () => {
    const full = await collect(fast, params());
    const cut = await collect(fast, params({ max_tokens: 7 }));
    expect(full.texts[0]!.startsWith(cut.texts[0]!)).to.equal(true);
  });

  it('cuts the text just before the earliest stop sequence with finish_reason stop', async () => {
    const full = (await collect(fast, params())).texts[0]!;
    const r = await collect(fast, params({ stop: ['zzz-never', '.'] }));
    expect(r.texts[0]).to.equal(full.slice(0, full.indexOf('.')));
    expect(r.texts[0]).to.not.contain('.');
    expect(r.finishes[0]).to.equal('stop');
  });

  it('can end with an empty choice when the answer starts with a stop sequence', async () => {
    const full = (await collect(fast, params())).texts[0]!;
    const r = await collect(fast, params({ stop: [full.slice(0, 3)] }));
    expect(r.texts[0]).to.equal(undefined);
    expect(r.finishes[0]).to.equal('stop');
    expect(r.usage?.completion_tokens).to.equal(0);
  });

  it('streams n distinct choices, indexed 0..n-1, each finished once', async () => {
    const r = await collect(fast, params({ n: 3 }));
    expect(r.texts).to.have.length(3);
    expect(new Set(r.texts).size).to.equal(3);
    expect(r.finishes).to.deep.equal({ 0: 'stop', 1: 'stop', 2: 'stop' });
    const finishCount = r.events.filter((e) => e.type === 'finish').length;
    expect(finishCount).to.equal(3);
  });

  it('gives choice 0 of an n=3 request the same text as the n=1 answer', async () => {
    const one = await collect(fast, params());
    const three = await collect(fast, params({ n: 3 }));
    expect(three.texts[0]).to.equal(one.texts[0]);
  });

  it('reports usage once, last: the chat prompt count and the tokens produced across all choices', async () => {
    const p = params({
      n: 2,
      messages: [
        { role: 'system', content: 'Be helpful.' },
        { role: 'user', content: 'Tell me about tides' },
      ],
    });
    const r = await collect(fast, p);
    expect(r.events.filter((e) => e.type === 'usage')).to.have.length(1);
    expect(r.events.at(-1)?.type).to.equal('usage');
    expect(r.usage).to.deep.equal({
      prompt_tokens: countPromptTokens(p.messages),
      completion_tokens: countTokens(r.texts[0]!) + countTokens(r.texts[1]!),
    });
  });

  it('sends every delta of a choice before its finish', async () => {
    const r = await collect(fast, params({ n: 2 }));
    for (const index of [0, 1]) {
      const finishAt = r.events.findIndex((e) => e.type === 'finish' && e.index === index);
      const lastDelta = r.events.findLastIndex((e) => e.type === 'delta' && e.index === index);
      expect(lastDelta).to.be.lessThan(finishAt);
    }
  });

  it('paces tokens at the configured rate, one small delta per token at a slow rate', async () => {
    const slow = model({ tokensPerSecond: 200 });
    const r = await collect(slow, params({ max_tokens: 10 }));
    const deltas = r.events.filter((e) => e.type === 'delta');
    expect(deltas.length).to.be.greaterThan(3);
  });

  it('merges due tokens into few deltas at a very high rate', async () => {
    const r = await collect(fast, params({ max_tokens: 100 }));
    const deltas = r.events.filter((e) => e.type === 'delta');
    expect(deltas.length).to.be.lessThan(10);
  });

  it('stops promptly with an AbortError when aborted mid-stream, without waiting for the next token', async () => {
    const slow = model({ tokensPerSecond: 1 });
    const ac = new AbortController();
    const it = slow.stream(params(), ac.signal)[Symbol.asyncIterator]();
    const first = await it.next();
    expect(first.value).to.include({ type: 'delta', index: 0 });
    const started = performance.now();
    const pending = it.next();
    ac.abort();
    const err = await pending.then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(isAbortError(err)).to.equal(true);
    expect(performance.now() - started).to.be.lessThan(200);
  });

  it('aborts during the wait for the first token', async () => {
    const slow = model({ ttftMs: 60_000, tokensPerSecond: 10 });
    const ac = new AbortController();
    const pending = collect(slow, params(), ac.signal).then(
      () => undefined,
      (e: unknown) => e,
    );
    ac.abort();
    expect(isAbortError(await pending)).to.equal(true);
  });

  it('refuses to start on an already aborted signal', async () => {
    const ac = new AbortController();
    ac.abort();
    const err = await collect(fast, params(), ac.signal).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(isAbortError(err)).to.equal(true);
  });

  it('accepts every request field (check does not throw)', () => {
    expect(() =>
      fast.check(
        params({
          temperature: 2,
          top_p: 0.5,
          n: 5,
          presence_penalty: 1,
          frequency_penalty: -1,
          logit_bias: { '50256': -100 },
          user: 'u1',
          stop: ['\n'],
        }),
      ),
    ).to.not.throw();
  });

  describe('tools and structured output', () => {
    const weather: ToolDefinition = {
      type: 'function',
      function: {
        name: 'get_weather',
        description: 'The current weather in a city',
        parameters: {
          type: 'object',
          properties: {
            city: { type: 'string', minLength: 2 },
            unit: { type: 'string', enum: ['celsius', 'fahrenheit'] },
            days: { type: 'integer', minimum: 1, maximum: 7 },
          },
          required: ['city', 'unit'],
          additionalProperties: false,
        },
      },
    };
    const clock: ToolDefinition = { type: 'function', function: { name: 'current_time' } };
    const ask = (over: Partial<CompletionParams> = {}) =>
      params({
        messages: [{ role: 'user', content: 'What is the weather in Paris?' }],
        tools: [clock, weather],
        ...over,
      });
    const calls = (r: Collected) => r.events.filter((e) => e.type === 'tool_call');
    const argumentsOf = (r: Collected) =>
      calls(r)
        .map((e) => (e as { arguments: string }).arguments)
        .join('');

    it('calls the tool the last user message is about, with arguments that satisfy its JSON Schema', async () => {
      const r = await collect(fast, ask());
      const [first] = calls(r) as { id: string; name: string; call: number; index: number }[];
      expect(first).to.include({ name: 'get_weather', call: 0, index: 0 });
      expect(first!.id).to.match(/^call_/);
      const args = JSON.parse(argumentsOf(r)) as Record<string, unknown>;
      expect(schemaMismatch(weather.function.parameters!, args)).to.equal(undefined);
      expect(args).to.have.keys(Object.keys(args)).and.include.keys('city', 'unit');
      expect(r.finishes).to.deep.equal({ 0: 'tool_calls' });
      expect(r.texts).to.deep.equal([]);
    });

    it('calls the same tool with the same arguments for the same request and seed, others for another seed', async () => {
      const a = argumentsOf(await collect(fast, ask({ seed: 7 })));
      const b = argumentsOf(await collect(fast, ask({ seed: 7 })));
      const others = await Promise.all([8, 9, 10].map(async (seed) => argumentsOf(await collect(fast, ask({ seed })))));
      expect(b).to.equal(a);
      expect(others.some((o) => o !== a)).to.equal(true);
    });

    it('streams the arguments in pieces, the first carrying the id and the name', async () => {
      const r = await collect(fast, ask({ tools: [weather] }));
      const pieces = calls(r) as { id?: string; name?: string; arguments: string }[];
      expect(pieces.length).to.be.greaterThan(1);
      expect(pieces.slice(1).every((p) => p.id === undefined && p.name === undefined)).to.equal(true);
    });

    it('answers in text once the last message is the tool result', async () => {
      const call = { id: 'call_1', type: 'function' as const, function: { name: 'get_weather', arguments: '{}' } };
      const r = await collect(
        fast,
        ask({
          messages: [
            { role: 'user', content: 'What is the weather in Paris?' },
            { role: 'assistant', content: null, tool_calls: [call] },
            { role: 'tool', tool_call_id: 'call_1', content: '{"temperature": 21}' },
          ],
        }),
      );
      expect(calls(r)).to.deep.equal([]);
      expect(r.texts[0]).to.match(/^Going by what get_weather returned: /);
      expect(r.finishes).to.deep.equal({ 0: 'stop' });
    });

    it('calls no tool with tool_choice none, and the named tool whatever the message says', async () => {
      expect(calls(await collect(fast, ask({ tool_choice: 'none' })))).to.deep.equal([]);
      const named = await collect(fast, ask({ tool_choice: { type: 'function', function: { name: 'current_time' } } }));
      expect(calls(named)[0]).to.include({ name: 'current_time' });
    });

    it('answers JSON matching a json_schema, and a JSON object for json_object', async () => {
      const schema = weather.function.parameters!;
      const r = await collect(
        fast,
        params({ response_format: { type: 'json_schema', json_schema: { name: 'w', schema, strict: true } } }),
      );
      expect(schemaMismatch(schema, JSON.parse(r.texts[0]!))).to.equal(undefined);
      const o = await collect(fast, params({ response_format: { type: 'json_object' } }));
      expect(JSON.parse(o.texts[0]!)).to.be.an('object').with.property('answer').that.is.a('string');
    });

    it('counts the tool definitions as prompt tokens and the call as completion tokens', async () => {
      const r = await collect(fast, ask());
      expect(r.usage!.prompt_tokens).to.equal(countPromptTokens(ask().messages, ask()));
      expect(r.usage!.prompt_tokens).to.be.greaterThan(countPromptTokens(ask().messages));
      const first = calls(r)[0] as { name: string };
      expect(r.usage!.completion_tokens).to.equal(
        countToolCallTokens([{ name: first.name, arguments: argumentsOf(r) }]),
      );
    });
  });

  describe('the generation budget', () => {
    const strict = (schema: Record<string, unknown>): Partial<CompletionParams> => ({
      response_format: { type: 'json_schema', json_schema: { name: 'out', schema, strict: true } },
    });
    // A million characters of JSON: seconds of json-schema-faker, Ajv and the tokenizer.
    // Within every admission limit (docs/limits.md), and seconds of a thread's time to compile and answer.
    const costly = {
      type: 'object',
      properties: Object.fromEntries(
        Array.from({ length: 4500 }, (_, i) => [`p${i}`, { type: 'string', pattern: '^[a-z]{1,40}$' }]),
      ),
      required: Array.from({ length: 300 }, (_, i) => `p${i}`),
    };
    const failure = (p: Promise<unknown>) =>
      p.then(
        () => undefined,
        (e: unknown) => e,
      );

    it('writes on a compute thread the same JSON the seed gives on the event loop', async () => {
      const p = params({ seed: 3, ...strict({ type: 'array', items: { type: 'integer' }, minItems: 5 }) });
      const r = await collect(fast, p);
      expect(r.texts[0]).to.equal(planChoice(p, 0).pieces.join(''));
    });

    it('ends a JSON answer that runs past its time budget with 400 generation_budget_exceeded at response_format', async () => {
      const started = performance.now();
      const err = await failure(
        collect(model({ generationBudgetMs: 300, maxAnswerChars: 10_000_000 }), params(strict(costly))),
      );
      expect(performance.now() - started).to.be.lessThan(2000);
      expect(err)
        .to.be.instanceOf(AppError)
        .and.include({ status: 400, code: 'generation_budget_exceeded', param: 'response_format' });
      expect((err as Error).message).to.match(/^The local model exceeded its generation budget .*more than 300 ms/);
    });

    it('answers the next JSON request on a fresh thread once a thread was stopped for its budget', async () => {
      await failure(collect(model({ generationBudgetMs: 300, maxAnswerChars: 10_000_000 }), params(strict(costly))));
      const r = await collect(
        fast,
        params(strict({ type: 'object', properties: { a: { type: 'integer' } }, required: ['a'] })),
      );
      expect(JSON.parse(r.texts[0]!)).to.have.property('a').that.is.a('number');
    });

    it('ends tool call arguments longer than the size budget with 400 generation_budget_exceeded at tools', async () => {
      const big: ToolDefinition = {
        type: 'function',
        function: {
          name: 'save',
          parameters: { type: 'object', properties: { text: { type: 'string', minLength: 5000 } }, required: ['text'] },
        },
      };
      const err = await failure(
        collect(model({ maxAnswerChars: 1000 }), params({ tools: [big], tool_choice: 'required' })),
      );
      expect(err)
        .to.be.instanceOf(AppError)
        .and.include({ status: 400, code: 'generation_budget_exceeded', param: 'tools' });
      expect((err as Error).message).to.match(/beyond its limit of 1000/);
    });

    it('stops a JSON answer being written on its thread when the request is aborted', async () => {
      const ac = new AbortController();
      const pending = failure(collect(fast, params(strict(costly)), ac.signal));
      setTimeout(() => ac.abort(), 50);
      const started = performance.now();
      expect(isAbortError(await pending)).to.equal(true);
      expect(performance.now() - started).to.be.lessThan(1000);
    });

    it('counts a large prompt on a compute thread as the event loop counts it', async () => {
      const long = params({ messages: [{ role: 'user', content: 'word '.repeat(30_000) }] });
      const before = compute.completedTasks;
      const r = await collect(fast, long);
      expect(r.usage!.prompt_tokens).to.equal(countPromptTokens(long.messages, long));
      expect(compute.completedTasks).to.equal(before + 1);
    });
  });

  describe('the prompt cache', () => {
    const rules = Array.from({ length: 160 }, (_, i) => `Rule ${i} is to answer briefly and politely.`).join(' ');
    const long = (content = 'How do I keep a sourdough starter alive?', cache_scope: string | null = 'acct-1') =>
      params({
        messages: [
          { role: 'system', content: rules },
          { role: 'user', content },
        ],
        ...(cache_scope === null ? {} : { cache_scope }),
      });
    const usageOf = (r: Collected) => r.events.find((e) => e.type === 'usage');

    it('reports the longest cached prefix of a second identical long prompt: 1,024 tokens and more, in steps of 128', async () => {
      const local = model({});
      const first = usageOf(await collect(local, long()));
      const second = usageOf(await collect(local, long()));
      const promptTokens = countPromptTokens(long().messages);
      expect(promptTokens).to.be.above(1500);
      expect(first).to.not.have.property('cached_tokens');
      expect(second).to.include({ prompt_tokens: promptTokens, cached_tokens: Math.floor(promptTokens / 128) * 128 });
    });

    it("reads the cached system prompt under another question, and nothing from another scope's cache", async () => {
      const local = model({});
      await collect(local, long());
      expect(usageOf(await collect(local, long('What is a monad?')))?.cached_tokens).to.be.at.least(1024);
      expect(usageOf(await collect(local, long(undefined, 'acct-2')))).to.not.have.property('cached_tokens');
    });

    it('reads nothing cached for another model', async () => {
      const local = model({});
      await collect(local, long());
      expect(usageOf(await collect(local, { ...long(), model: 'gemini-2.5-pro' }))).to.not.have.property(
        'cached_tokens',
      );
    });

    it('caches nothing for a request without a cache scope', async () => {
      const local = model({});
      await collect(local, long(undefined, null));
      expect(usageOf(await collect(local, long(undefined, null)))).to.not.have.property('cached_tokens');
    });

    it('digests a prompt too large for the event loop on a compute thread, counted the same', async () => {
      const local = model({});
      const big = long(`Summarise: ${'the quick brown fox jumps over the lazy dog '.repeat(2_000)}`);
      await collect(local, big);
      const tasks = compute.completedTasks;
      const second = usageOf(await collect(local, big));
      expect(compute.completedTasks).to.equal(tasks + 1);
      const promptTokens = countPromptTokens(big.messages);
      expect(second).to.include({ prompt_tokens: promptTokens, cached_tokens: Math.floor(promptTokens / 128) * 128 });
    });
  });
});
