import { expect } from 'chai';
import { sql } from 'kysely';
import OpenAI from 'openai';
import { createBillingAccount } from '../support/billing.js';
import { eventually, get, post } from '../support/http.js';
import { webAndWorkerWithStripe } from '../support/stripe-service.js';

// Usage per API key through the web and worker processes: completions made through the openai SDK
// with two keys of one account, then by_key in GET /v1/billing/usage and /usage/daily set against
// the ledger summed by key, and each request in GET /v1/billing/requests naming its key.

describe('usage by key, through the web and worker processes', () => {
  const s = webAndWorkerWithStripe();

  it("breaks usage down by the key that made each request, equal to the ledger summed by key, and names each request's key", async () => {
    const who = await createBillingAccount(s.app);
    const created = await post(`${s.web.url}/v1/keys`, { name: 'Report job' }, { bearer: who.jwt });
    expect(created.status, created.text).to.equal(201);
    const second = created.body as { id: string; api_key: string; name: string; redacted_value: string };
    const keys = (await get(`${s.web.url}/v1/keys`, { bearer: who.jwt })).body.data as {
      id: string;
      name: string;
      redacted_value: string;
      is_default: boolean;
    }[];
    const first = keys.find((k) => k.is_default)!;
    const messages = [
      { role: 'user' as const, content: `Summarise: ${'the quick brown fox jumps over the lazy dog '.repeat(300)}` },
    ];
    const made = new Map<string, string>();
    for (const [apiKey, keyId, models] of [
      [who.apiKey, first.id, ['gpt-4.1', 'gemini-2.5-flash']],
      [second.api_key, second.id, ['gpt-4.1', 'gpt-4.1', 'claude-sonnet-4-5']],
    ] as const) {
      const client = new OpenAI({ apiKey, baseURL: `${s.web.url}/v1`, maxRetries: 0 });
      for (const model of models) {
        const answer = await client.chat.completions.create({ model, messages, max_tokens: 20 });
        made.set(answer.id, keyId);
      }
      const response = await client.responses.create({ model: 'gpt-4.1', input: 'Say hi.', max_output_tokens: 20 });
      made.set(response.id, keyId);
    }

    // The worker's usage reaches the ledger through the metering stream shortly after each answer.
    const listed = await eventually(async () => {
      const r = await get(`${s.web.url}/v1/billing/requests`, { bearer: who.apiKey });
      return r.body?.data?.length === made.size ? r.body : undefined;
    }, 'every request in the ledger');
    const names = new Map([
      [first.id, first.name],
      [second.id, 'Report job'],
    ]);
    expect(
      listed.data.map((d: { id: string; key_id: string; key_name: string }) => [d.id, d.key_id, d.key_name]),
    ).to.have.deep.members([...made].map(([id, keyId]) => [id, keyId, names.get(keyId)]));

    const ledger = await sql<{
      key_id: string;
      requests: string;
      billable: string;
      prompt: string;
      completion: string;
      cost: string;
      cents: string;
      cached: string;
      writes: string;
      reasoning: string;
      savings: string;
    }>`
      select key_id, count(*)::text as requests, count(*) filter (where tier = 'paid')::text as billable,
             sum(prompt_tokens)::text as prompt, sum(completion_tokens)::text as completion,
             trim_scale(coalesce(sum(cost_usd) filter (where tier = 'paid'), 0))::text as cost,
             sum(cached_tokens)::text as cached, sum(cache_write_tokens)::text as writes,
             sum(reasoning_tokens)::text as reasoning,
             trim_scale(coalesce(sum((prompt_tokens * input_price_per_million
                                      + completion_tokens * output_price_per_million) / 1000000 - cost_usd)
                                 filter (where tier = 'paid'), 0))::text as savings,
             floor(coalesce(sum(cost_usd) filter (where tier = 'paid'), 0) * 100 + 0.5)::text as cents
        from usage_events where account_id = ${who.account.id}
       group by key_id`.execute(s.app.db);
    expect(ledger.rows.map((r) => r.key_id)).to.have.members([first.id, second.id]);
    const label = (keyId: string) => {
      const k = keyId === first.id ? first : { ...second, is_default: false };
      return { key_id: k.id, name: k.name, redacted_value: k.redacted_value, is_default: k.is_default, revoked: false };
    };
    const figures = (r: (typeof ledger.rows)[number]) => ({
      requests: Number(r.requests),
      prompt_tokens: Number(r.prompt),
      completion_tokens: Number(r.completion),
      total_tokens: Number(r.prompt) + Number(r.completion),
      // The second key's gpt-4.1 prompts are read from the local model's cache, which the first key's filled.
      cached_tokens: Number(r.cached),
      cache_write_tokens: Number(r.writes),
      reasoning_tokens: Number(r.reasoning),
      cache_savings_usd: r.savings,
      cost_usd: r.cost,
    });
    // The costlier key first (the second made twice as many gpt-4.1 requests, and a Sonnet one).
    const expected = ledger.rows
      .sort((a, b) => Number(b.cost) - Number(a.cost))
      .map((r) => ({ ...label(r.key_id), ...figures(r) }));
    expect(expected[0]!.key_id).to.equal(second.id);
    expect(expected[0]!.cached_tokens).to.be.at.least(2 * 1_024);

    const usage = await get(`${s.web.url}/v1/billing/usage`, { bearer: who.apiKey });
    expect(usage.status, usage.text).to.equal(200);
    expect(usage.body.by_key).to.deep.equal(
      expected.map((k) => {
        const r = ledger.rows.find((l) => l.key_id === k.key_id)!;
        const cents = Number(r.cents);
        return {
          ...k,
          billable_requests: Number(r.billable),
          cost_cents: cents,
          cost: `${Math.floor(cents / 100)}.${String(cents % 100).padStart(2, '0')}`,
        };
      }),
    );

    const daily = await get(`${s.web.url}/v1/billing/usage/daily?group_by=key`, { bearer: who.apiKey });
    expect(daily.status, daily.text).to.equal(200);
    expect(daily.body.by_key).to.deep.equal(expected);
    // The entries per day, model and key add up to each key's totals.
    for (const k of expected) {
      const entries = daily.body.data.filter((d: { key_id: string }) => d.key_id === k.key_id);
      expect(entries.reduce((n: number, d: { requests: number }) => n + d.requests, 0)).to.equal(k.requests);
      expect(entries.reduce((n: number, d: { total_tokens: number }) => n + d.total_tokens, 0)).to.equal(
        k.total_tokens,
      );
    }
  });
});
