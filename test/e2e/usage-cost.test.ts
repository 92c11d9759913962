import { expect } from 'chai';
import OpenAI from 'openai';
import { createBillingAccount } from '../support/billing.js';
import { post } from '../support/http.js';
import { webAndWorkerWithStripe } from '../support/stripe-service.js';

// usage.cost as a client sees it through the official openai SDK, summed and set against the
// invoice the service then issues: the web and worker processes, the built-in local model standing
// in for the paid models, and the fake Stripe.

/** A USD amount as a client would add it up exactly: in 10^-12 dollars (costs have at most 12 decimals). */
const picoDollars = (cost: number): bigint => BigInt(cost.toFixed(12).replace('.', ''));
/** Half up to the cent, the invoice's rule. */
const cents = (pico: bigint): number => Number((pico + 5_000_000_000n) / 10_000_000_000n);

describe('usage.cost through the openai SDK, against the invoice', () => {
  const s = webAndWorkerWithStripe();

  it('adds up, per model and rounded to the cent, to the lines of the invoice for the same requests', async () => {
    const who = await createBillingAccount(s.app);
    const client = new OpenAI({ apiKey: who.apiKey, baseURL: `${s.web.url}/v1`, maxRetries: 0 });
    // A long prompt, so a handful of requests costs some cents. Each begins differently, so none
    // reads the local model's prompt cache (usage-cache-local.test.ts prices those that do).
    let sent = 0;
    const prompt = () => [
      {
        role: 'user' as const,
        content: `Request ${++sent}. Summarise: ${'the quick brown fox jumps over the lazy dog '.repeat(700)}`,
      },
    ];
    const spent = new Map<string, bigint>();
    const add = (model: string, cost: unknown) => {
      expect(cost, `usage.cost of a ${model} answer`).to.be.a('number').and.greaterThan(0);
      spent.set(model, (spent.get(model) ?? 0n) + picoDollars(cost as number));
    };
    for (const model of ['gpt-4.1', 'claude-sonnet-4-5']) {
      for (let i = 0; i < 3; i++) {
        const answer = await client.chat.completions.create({ model, messages: prompt(), max_tokens: 30 });
        add(model, (answer.usage as unknown as { cost: unknown }).cost);
        const stream = await client.chat.completions.create({
          model,
          messages: prompt(),
          max_tokens: 30,
          stream: true,
          stream_options: { include_usage: true },
        });
        let cost: unknown;
        for await (const chunk of stream) if (chunk.usage) cost = (chunk.usage as unknown as { cost: unknown }).cost;
        add(model, cost);
      }
    }

    const r = await post(`${s.web.url}/v1/billing/generate-invoice`, undefined, { bearer: who.apiKey });
    expect(r.status, r.text).to.equal(200);
    const lines = r.body.invoice.lines as { model: string; amount_cents: number }[];
    expect(Object.fromEntries(lines.map((l) => [l.model, l.amount_cents]))).to.deep.equal(
      Object.fromEntries([...spent].map(([m, pico]) => [m, cents(pico)])),
    );
    expect(r.body.invoice.amount_cents).to.equal([...spent.values()].reduce((sum, pico) => sum + cents(pico), 0));
    expect(r.body.invoice.amount_cents).to.be.greaterThan(10);
  });
});
