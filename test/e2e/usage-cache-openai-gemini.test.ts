import { expect } from 'chai';
import OpenAI from 'openai';
import type { ChatCompletionMessageParam } from 'openai/resources/chat/completions';
import type { CompletionUsage } from 'openai/resources/completions';
import { createContext, type AppContext } from '../../src/context.js';
import { startFakeGemini, type FakeGemini } from '../../src/providers/gemini/gemini.fake.js';
import { startFakeOpenAI, type FakeOpenAI } from '../../src/providers/openai/openai.fake.js';
import type { FakeUpstream, ScriptedUsage } from '../../src/providers/testing/upstream-fake.js';
import { createTestAccount, type TestAccount } from '../support/accounts.js';
import { isolatedPrefix, testConfig } from '../support/env.js';
import { eventually, post } from '../support/http.js';
import { openAiIssues } from '../support/openai-schemas.js';
import { startRole, type RoleProcess } from '../support/processes.js';
import { postStream } from '../support/sse.js';

// Cached and reasoning tokens as OpenAI and Gemini count them, end to end: each provider's fake
// reports them in its own wire format, and a paid account's answer, read with the official openai
// SDK, carries them under OpenAI's names, costs each part at its own catalog price, and is recorded
// in the ledger with the same counts and cost.

interface Case {
  model: string;
  fake: () => FakeUpstream;
  /** What the provider reports, in the fakes' neutral words (upstream-fake.ts). */
  usage: Required<Pick<ScriptedUsage, 'prompt' | 'cached' | 'completion' | 'thoughts'>>;
  /** The answer's usage in OpenAI's meaning. */
  prompt: number;
  completion: number;
  /** usage.cost and the ledger's cost_usd, worked out by hand from the catalog's prices. */
  cost: string;
}

const ASK: ChatCompletionMessageParam[] = [
  { role: 'system', content: 'You answer questions about the attached handbook.' },
  { role: 'user', content: 'Which chapter covers expenses?' },
];

describe('cached and reasoning tokens from OpenAI and Gemini, billed at their own prices (web and worker processes)', function () {
  this.timeout(60_000);
  let openai: FakeOpenAI;
  let gemini: FakeGemini;
  let app: AppContext;
  const procs: RoleProcess[] = [];
  let web: RoleProcess;
  let paid: TestAccount;

  const cases: Case[] = [
    {
      // gpt-4.1 at 2.00 input, 0.50 cached input, 8.00 output per 1M tokens. OpenAI counts the
      // 16 reasoning tokens within its 40 completion tokens, and the 2,048 cached within the 3,000:
      //   (3,000 - 2,048) × 2.00 = 952 × 2.00   = 1,904.00
      //              2,048 × 0.50              = 1,024.00
      //                 40 × 8.00              =   320.00
      //                                          3,248.00 per 1M = 0.003248 USD
      model: 'gpt-4.1',
      fake: () => openai,
      usage: { prompt: 3_000, cached: 2_048, completion: 24, thoughts: 16 },
      prompt: 3_000,
      completion: 40,
      cost: '0.003248',
    },
    {
      // gemini-2.5-flash at 0.30 input, 0.03 cached input, 2.50 output per 1M tokens. Gemini counts
      // the 4,096 cached tokens within its 5,000 prompt tokens, and the 120 thought tokens beside
      // its 30 candidate tokens, both billed as output:
      //   (5,000 - 4,096) × 0.30 = 904 × 0.30   = 271.20
      //              4,096 × 0.03              = 122.88
      //       (30 + 120) × 2.50 = 150 × 2.50   = 375.00
      //                                          769.08 per 1M = 0.00076908 USD
      model: 'gemini-2.5-flash',
      fake: () => gemini,
      usage: { prompt: 5_000, cached: 4_096, completion: 30, thoughts: 120 },
      prompt: 5_000,
      completion: 150,
      cost: '0.00076908',
    },
  ];

  before(async () => {
    [openai, gemini] = await Promise.all([startFakeOpenAI(), startFakeGemini()]);
    const env = {
      REDIS_PREFIX: isolatedPrefix(),
      MODEL_BACKEND: 'catalog',
      OPENAI_BASE_URL: `${openai.url}/v1`,
      OPENAI_API_KEY: openai.apiKey,
      GEMINI_BASE_URL: gemini.url,
      GEMINI_API_KEY: gemini.apiKey,
    };
    app = createContext(testConfig(env), { role: 'test' });
    procs.push(...(await Promise.all([startRole('web', env), startRole('worker', env)])));
    web = procs[0]!;
    paid = await createTestAccount(app, { tier: 'paid' });
  });
  after(async () => {
    await Promise.all(procs.map((p) => p.stop()));
    await app?.close();
    await Promise.all([openai?.close(), gemini?.close()]);
  });
  beforeEach(() => {
    openai.reset();
    gemini.reset();
  });

  const sdk = () => new OpenAI({ apiKey: paid.apiKey, baseURL: `${web.url}/v1`, maxRetries: 0 });
  const ledgerRow = (requestId: string) =>
    eventually(
      () => app.db.selectFrom('usage_events').selectAll().where('request_id', '=', requestId).executeTakeFirst(),
      'the usage row',
    );

  /** The answer's usage, the provider's counts under OpenAI's names, and the ledger row: all the same. */
  async function expectBilledAsCounted(c: Case, requestId: string, usage: CompletionUsage | undefined | null) {
    expect(usage?.prompt_tokens).to.equal(c.prompt);
    expect(usage?.completion_tokens).to.equal(c.completion);
    expect(usage?.prompt_tokens_details?.cached_tokens).to.equal(c.usage.cached);
    expect(usage?.completion_tokens_details?.reasoning_tokens).to.equal(c.usage.thoughts);
    // usage.cost is OpenRouter's field, beyond the SDK's types.
    expect(usage).to.have.property('cost', Number(c.cost));
    const row = await ledgerRow(requestId);
    expect(row).to.include({
      status: 'completed',
      prompt_tokens: c.prompt,
      completion_tokens: c.completion,
      cached_tokens: c.usage.cached,
      cache_write_tokens: 0,
      reasoning_tokens: c.usage.thoughts,
      cost_usd: c.cost,
    });
  }

  for (const c of cases) {
    it(`bills a ${c.model} answer's cached and reasoning tokens at their own prices, in its usage and its ledger row`, async () => {
      c.fake().script({ tokens: ['Chapter', ' 7', '.'], usage: c.usage });
      const completion = await sdk().chat.completions.create({ model: c.model, messages: ASK });
      expect(completion.choices[0]!.message.content).to.equal('Chapter 7.');
      expect(c.fake().lastRequest!.body).to.not.have.property('stream_options');
      await expectBilledAsCounted(c, completion.id, completion.usage);
    });

    it(`bills a streamed ${c.model} answer the same, in the usage chunk include_usage asks for`, async () => {
      c.fake().script({ tokens: ['Chapter', ' 7', '.'], usage: c.usage });
      const stream = await sdk().chat.completions.create({
        model: c.model,
        messages: ASK,
        stream: true,
        stream_options: { include_usage: true },
      });
      let text = '';
      let id = '';
      let usage: CompletionUsage | undefined;
      for await (const chunk of stream) {
        id ||= chunk.id;
        text += chunk.choices[0]?.delta.content ?? '';
        if (chunk.usage) usage = chunk.usage;
      }
      expect(text).to.equal('Chapter 7.');
      await expectBilledAsCounted(c, id, usage);
    });
  }

  it("answers and streams usage with cached and reasoning tokens in the shape of OpenAI's published schemas", async () => {
    for (const c of cases) {
      c.fake().script({ tokens: ['Chapter', ' 7', '.'], usage: c.usage });
      const ask = { model: c.model, messages: ASK };
      const r = await post(`${web.url}/v1/chat/completions`, ask, { bearer: paid.apiKey });
      expect(r.status).to.equal(200);
      expect(r.body.usage.prompt_tokens_details.cached_tokens).to.equal(c.usage.cached);
      expect(openAiIssues('CreateChatCompletionResponse', r.body), `${c.model}: ${r.text}`).to.deep.equal([]);
      const s = await postStream(
        `${web.url}/v1/chat/completions`,
        { ...ask, stream: true, stream_options: { include_usage: true } },
        paid.apiKey,
      );
      expect(s.chunks.at(-1).usage.completion_tokens_details.reasoning_tokens).to.equal(c.usage.thoughts);
      s.chunks.forEach((chunk, i) =>
        expect(
          openAiIssues('CreateChatCompletionStreamResponse', chunk),
          `${c.model} chunk ${i}: ${JSON.stringify(chunk)}`,
        ).to.deep.equal([]),
      );
    }
  });
});
