import { expect } from 'chai';
import fc from 'fast-check';
import { ManualClock } from '../../src/clock.js';
import { createContext, type AppContext } from '../../src/context.js';
import { invoiceMonth } from '../../src/billing/monthly-invoicing.service.js';
import { currentUsage } from '../../src/billing/billing.service.js';
import { sumDecimals } from '../../src/billing/money.js';
import { parseMonthKey } from '../../src/calendar.js';
import { requestCostUsd } from '../../src/usage/usage-cost.js';
import { FakeStripe } from '../fakes/stripe.js';
import {
  createBillingAccount,
  invoicesOf,
  ledgerCentsByModel,
  linesOf,
  recordUsage,
  usageRowsOf,
  type UsageSpec,
} from '../support/billing.js';
import { testConfig } from '../support/env.js';

// Usage that used prompt caches, over any counts (property-based): each request's cost prices every
// part at its own rate, and the month's invoice bills exactly the ledger, line by line, to the cent.
// Months of 2023, which no other test uses; each run bills a fresh account of its own.

/** A decimal USD amount in cents, rounded half up (the invoice line's rule, docs/billing.md). */
function centsHalfUp(usd: string): bigint {
  const [whole, fraction = ''] = usd.split('.');
  const picos = BigInt(`${whole}${fraction.padEnd(12, '0')}`);
  return (picos + 5_000_000_000n) / 10_000_000_000n;
}

describe('invoices of cached usage, over any counts (property-based)', function () {
  this.timeout(120_000);
  let fake: FakeStripe;
  let app: AppContext;
  const clock = new ManualClock('2023-04-01T00:15:00Z');

  before(async () => {
    fake = await new FakeStripe().start();
    app = createContext(testConfig(fake.env({ STRIPE_MAX_NETWORK_RETRIES: '0' })), { role: 'test', clock });
  });
  after(async () => {
    await app.close();
    await fake.close();
  });

  const request = fc
    .record({
      model: fc.constantFrom('claude-haiku-4-5', 'gpt-4.1', 'gemini-2.5-flash'),
      prompt: fc.integer({ min: 0, max: 3_000_000 }),
      completion: fc.integer({ min: 0, max: 300_000 }),
      cachedShare: fc.double({ min: 0, max: 1, noNaN: true }),
      writeShare: fc.double({ min: 0, max: 1, noNaN: true }),
      longShare: fc.double({ min: 0, max: 1, noNaN: true }),
      day: fc.integer({ min: 1, max: 31 }),
    })
    .map((r) => {
      const cached = Math.floor(r.prompt * r.cachedShare);
      // Only Anthropic writes to a cache; the others report reads alone.
      const cacheWrite = r.model.startsWith('claude') ? Math.floor((r.prompt - cached) * r.writeShare) : 0;
      return { ...r, cached, cacheWrite, cacheWrite1h: Math.floor(cacheWrite * r.longShare) };
    });

  it('bills each model the exact sum of its requests’ costs, rounded half up to the cent, as the ledger has it', async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(request, { minLength: 1, maxLength: 8 }), async (requests) => {
        const who = await createBillingAccount(app);
        const rows: UsageSpec[] = requests.map((r) => ({
          accountId: who.account.id,
          model: r.model,
          tier: 'paid',
          prompt: r.prompt,
          completion: r.completion,
          cached: r.cached,
          cacheWrite: r.cacheWrite,
          cacheWrite1h: r.cacheWrite1h,
          at: `2023-03-${String(r.day).padStart(2, '0')}T12:00:00Z`,
        }));
        await recordUsage(app, rows);

        // What each answer's usage.cost said, summed per model.
        const answered = new Map<string, string[]>();
        for (const r of requests) {
          const m = app.catalog.find(r.model)!;
          const cost = requestCostUsd({
            tier: 'paid',
            prompt_tokens: r.prompt,
            completion_tokens: r.completion,
            cached_tokens: r.cached,
            cache_write_tokens: r.cacheWrite,
            cache_write_1h_tokens: r.cacheWrite1h,
            ...m,
          });
          answered.set(r.model, [...(answered.get(r.model) ?? []), cost]);
        }
        const ledgerRows = await usageRowsOf(app, who.account.id);
        expect(sumDecimals(ledgerRows.map((l) => String(l.cost_usd)))).to.equal(
          sumDecimals([...answered.values()].flat()),
        );

        await invoiceMonth(app, parseMonthKey('2023-03')!, { accounts: [who.account.id] });
        const [inv, ...more] = await invoicesOf(app, who.account.id);
        const billable = [...answered].filter(([, costs]) => centsHalfUp(sumDecimals(costs)) > 0n);
        if (billable.length === 0) {
          // Under half a cent in all: nothing is invoiced, and the usage waits for a later invoice.
          expect(inv).to.equal(undefined);
          return;
        }
        expect(more).to.have.length(0);
        const lines = await linesOf(app, inv!.id);
        const expected = Object.fromEntries(
          billable.map(([model, costs]) => [model, String(centsHalfUp(sumDecimals(costs)))]),
        );
        expect(Object.fromEntries(lines.map((l) => [l.model, String(l.amount_cents)]))).to.deep.equal(expected);
        expect(await ledgerCentsByModel(app, { accountId: who.account.id, invoiceId: inv!.id })).to.deep.equal(
          expected,
        );
        expect(String(inv!.amount_cents)).to.equal(String(Object.values(expected).reduce((n, c) => n + BigInt(c), 0n)));
      }),
      { numRuns: 12 },
    );
  });

  it('reports the month’s cached tokens and cost as the sum of the requests’, exactly', async () => {
    clock.set('2023-05-20T00:00:00Z');
    const who = await createBillingAccount(app);
    await recordUsage(app, [
      {
        accountId: who.account.id,
        model: 'claude-haiku-4-5',
        tier: 'paid',
        prompt: 10_000,
        completion: 100,
        cached: 9_000,
        at: '2023-05-02T00:00:00Z',
      },
      {
        accountId: who.account.id,
        model: 'claude-haiku-4-5',
        tier: 'paid',
        prompt: 4_000,
        completion: 0,
        cacheWrite: 4_000,
        at: '2023-05-03T00:00:00Z',
      },
      {
        accountId: who.account.id,
        model: 'gpt-4.1',
        tier: 'paid',
        prompt: 2_000,
        completion: 10,
        cached: 1_024,
        reasoning: 4,
        at: '2023-05-04T00:00:00Z',
      },
    ]);
    const usage = await currentUsage(app, { id: who.account.id, tier: 'paid', monthly_spend_limit_usd: null });
    // 0.0024 + 0.005 + (976 × 2.00 + 1,024 × 0.50 + 10 × 8.00) / 10^6.
    expect(usage.total).to.deep.include({
      prompt_tokens: 16_000,
      cached_tokens: 10_024,
      cache_write_tokens: 4_000,
      reasoning_tokens: 4,
      cost_usd: '0.009944',
      // Reads saved 0.0081 and 0.001536, the writes' surcharge cost 0.001.
      cache_savings_usd: '0.008636',
    });
  });
});
