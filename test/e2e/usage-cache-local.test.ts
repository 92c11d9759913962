import { expect } from 'chai';
import OpenAI from 'openai';
import { createContext, type AppContext } from '../../src/context.js';
import { createTestAccount } from '../support/accounts.js';
import { testConfig } from '../support/env.js';
import { eventually, get } from '../support/http.js';
import { startRole, type RoleProcess } from '../support/processes.js';

// The built-in local model's prompt cache, through the web and worker processes and the official
// openai SDK: a long system prompt sent again is read from the cache, billed at the catalog's
// cached-input price, and counted in the month's usage.

const FAST = { LOCAL_MODEL_TTFT_MS: '0', LOCAL_MODEL_TOKENS_PER_SECOND: '5000' };

// gpt-4.1's catalog prices in 10^-12 USD per token: 2.00 input, 0.50 cached input, 8.00 output per 1M tokens.
const MODEL = 'gpt-4.1';
const PICO = { input: 2_000_000n, cached: 500_000n, output: 8_000_000n };

/** About 1,600 tokens: 100 rules of 16 tokens. */
const SYSTEM = Array.from(
  { length: 100 },
  (_, i) => `Rule ${i + 1}: answer in plain words and cite the policy you rely on.`,
).join(' ');
const QUESTION = 'May I bring my dog to the office on Fridays?';
const messages = [
  { role: 'system' as const, content: SYSTEM },
  { role: 'user' as const, content: QUESTION },
];

interface Usage {
  prompt_tokens: number;
  completion_tokens: number;
  cached: number;
  cost: number;
}

/** usage.cost, this service's addition to OpenAI's usage, which the SDK's types do not name. */
function costOf(usage: object | null | undefined): number {
  if (usage && 'cost' in usage && typeof usage.cost === 'number') return usage.cost;
  throw new Error(`no usage.cost in ${JSON.stringify(usage)}`);
}

/** A USD amount as a client adds it up exactly: in 10^-12 USD (costs have at most 12 decimals). */
const picoUsd = (cost: number | string): bigint => {
  const [whole, fraction = ''] = (typeof cost === 'number' ? cost.toFixed(12) : cost).split('.');
  return BigInt(`${whole}${fraction.padEnd(12, '0')}`);
};

/** The answer's cost at the catalog's prices: cached prompt tokens at the cached-input price, the rest at the input price. */
const expectedPico = (u: Usage): bigint =>
  BigInt(u.prompt_tokens - u.cached) * PICO.input +
  BigInt(u.cached) * PICO.cached +
  BigInt(u.completion_tokens) * PICO.output;

describe('the local model caches prompt prefixes (through web and worker processes)', () => {
  let app: AppContext;
  let web: RoleProcess;
  let worker: RoleProcess;

  before(async () => {
    app = createContext(testConfig(), { role: 'test' });
    [web, worker] = await Promise.all([startRole('web', FAST), startRole('worker', FAST)]);
  });
  after(async () => {
    await Promise.all([web?.stop(), worker?.stop()]);
    await app?.close();
  });

  async function paidClient(): Promise<{ client: OpenAI; apiKey: string; accountId: string }> {
    const { apiKey, account } = await createTestAccount(app, { tier: 'paid' });
    return { client: new OpenAI({ apiKey, baseURL: `${web.url}/v1`, maxRetries: 0 }), apiKey, accountId: account.id };
  }

  async function chat(client: OpenAI): Promise<Usage> {
    const answer = await client.chat.completions.create({ model: MODEL, messages, max_tokens: 20 });
    const usage = answer.usage!;
    return { ...usage, cached: usage.prompt_tokens_details?.cached_tokens ?? 0, cost: costOf(usage) };
  }

  async function streamed(client: OpenAI): Promise<Usage> {
    const stream = await client.chat.completions.create({
      model: MODEL,
      messages,
      max_tokens: 20,
      stream: true,
      stream_options: { include_usage: true },
    });
    let usage: OpenAI.CompletionUsage | undefined;
    for await (const chunk of stream) usage ??= chunk.usage ?? undefined;
    expect(usage, 'the usage chunk').to.not.equal(undefined);
    return { ...usage!, cached: usage!.prompt_tokens_details?.cached_tokens ?? 0, cost: costOf(usage) };
  }

  async function response(client: OpenAI): Promise<Usage> {
    const r = await client.responses.create({
      model: MODEL,
      instructions: SYSTEM,
      input: QUESTION,
      max_output_tokens: 20,
    });
    const usage = r.usage!;
    return {
      prompt_tokens: usage.input_tokens,
      completion_tokens: usage.output_tokens,
      cached: usage.input_tokens_details?.cached_tokens ?? 0,
      cost: costOf(usage),
    };
  }

  it('reads a repeated 1,600-token system prompt from the cache: 1,024 tokens or more, billed at the cached-input price exactly', async () => {
    const { client } = await paidClient();
    const first = await chat(client);
    const second = await chat(client);
    expect(first.prompt_tokens).to.be.within(1_600, 1_700);
    expect(first.cached).to.equal(0);
    expect(picoUsd(first.cost)).to.equal(expectedPico(first));

    expect(second.prompt_tokens).to.equal(first.prompt_tokens);
    expect(second.cached).to.be.at.least(1_024).and.at.most(second.prompt_tokens);
    expect(second.cached % 128).to.equal(0);
    expect(picoUsd(second.cost)).to.equal(expectedPico(second));
    expect(second.cost).to.be.lessThan(first.cost);
  });

  it('reports the same cached tokens and cost in the usage chunk of a streamed answer with include_usage', async () => {
    const { client } = await paidClient();
    await chat(client);
    const plain = await chat(client);
    const stream = await streamed(client);
    expect(stream.cached).to.equal(plain.cached).and.be.at.least(1_024);
    expect(picoUsd(stream.cost)).to.equal(expectedPico(stream));
  });

  it("reports the same count in the Responses API's usage.input_tokens_details.cached_tokens", async () => {
    const { client } = await paidClient();
    await chat(client);
    const plain = await chat(client);
    const answer = await response(client);
    expect(answer.prompt_tokens).to.equal(plain.prompt_tokens);
    expect(answer.cached).to.equal(plain.cached).and.be.at.least(1_024);
    expect(picoUsd(answer.cost)).to.equal(expectedPico(answer));
  });

  it("counts the cached tokens in the month's usage, whose cost is the sum of the answers' usage.cost", async () => {
    const { client, apiKey, accountId } = await paidClient();
    const answers = [await chat(client), await chat(client), await streamed(client), await response(client)];
    const cached = answers.reduce((n, a) => n + a.cached, 0);
    expect(cached).to.be.at.least(3 * 1_024);

    // The worker's usage reaches the ledger, and its totals, through the metering stream shortly after each answer.
    const usage = await eventually(async () => {
      const r = await get(`${web.url}/v1/billing/usage`, { bearer: apiKey });
      return r.body?.total?.requests === answers.length ? r.body : undefined;
    }, "every answer in the month's usage");
    const ledger = await app.db
      .selectFrom('usage_events')
      .select(['cached_tokens', 'cost_usd'])
      .where('account_id', '=', accountId)
      .execute();
    expect(ledger.map((r) => r.cached_tokens).sort((a, b) => a - b)).to.deep.equal(
      answers.map((a) => a.cached).sort((a, b) => a - b),
    );
    const model = usage.models.find((m: { model: string }) => m.model === MODEL);
    expect(model).to.include({
      requests: answers.length,
      prompt_tokens: answers.reduce((n, a) => n + a.prompt_tokens, 0),
      cached_tokens: cached,
    });
    expect(usage.total.cached_tokens).to.equal(cached);
    expect(picoUsd(usage.total.cost_usd)).to.equal(answers.reduce((sum, a) => sum + picoUsd(a.cost), 0n));
  });
});
