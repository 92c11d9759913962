import { expect } from 'chai';
import { ManualClock } from '../../src/clock.js';
import { createContext, type AppContext } from '../../src/context.js';
import { generateInvoice } from '../../src/billing/invoicing.service.js';
import { invoiceMonth } from '../../src/billing/monthly-invoicing.service.js';
import { parseMonthKey } from '../../src/calendar.js';
import { FakeStripe } from '../fakes/stripe.js';
import {
  createBillingAccount,
  invoiceCreatesFor,
  invoicesOf,
  ledgerCentsByModel,
  linesOf,
  recordUsage,
  stripeInvoicesOf,
  usageRowsOf,
  type UsageSpec,
} from '../support/billing.js';
import { testConfig } from '../support/env.js';

// Invoicing against real Postgres and the fake Stripe API (the real stripe client talks to it),
// with a hand-set clock. Each test bills its own accounts (the `accounts` option), in months of
// 2016 that nothing else in the suite uses.

const month = (key: string) => parseMonthKey(key)!;

describe('invoices: the monthly run and on-demand invoices', () => {
  let fake: FakeStripe;
  let app: AppContext;
  const clock = new ManualClock('2016-02-01T00:15:00Z');

  before(async () => {
    fake = await new FakeStripe().start();
    app = createContext(testConfig(fake.env({ STRIPE_MAX_NETWORK_RETRIES: '0' })), { role: 'test', clock });
  });
  after(async () => {
    await app.close();
    await fake.close();
  });

  /** Checks one local invoice against the ledger rows it covers and against what Stripe holds. */
  async function expectInvoiceMatchesLedgerAndStripe(invoiceId: string, accountId: string, customerId: string) {
    const inv = await app.db.selectFrom('invoices').selectAll().where('id', '=', invoiceId).executeTakeFirstOrThrow();
    const lines = await linesOf(app, invoiceId);
    const ledger = await ledgerCentsByModel(app, { accountId, invoiceId });
    expect(Object.fromEntries(lines.map((l) => [l.model, l.amount_cents]))).to.deep.equal(ledger);
    const sum = lines.reduce((n, l) => n + BigInt(l.amount_cents), 0n);
    expect(inv.amount_cents).to.equal(sum.toString());

    const stripeInv = fake.invoices.get(inv.stripe_invoice_id!)!;
    expect(stripeInv.customer).to.equal(customerId);
    expect(stripeInv.status).to.equal('open');
    expect(stripeInv.total).to.equal(Number(sum));
    expect(stripeInv.metadata.invoice_id).to.equal(inv.id);
    expect(fake.sentInvoices).to.include(stripeInv.id);
    const stripeLines = Object.fromEntries(
      (stripeInv.lines.data as { amount: number; metadata: { model: string } }[]).map((l) => [
        l.metadata.model,
        String(l.amount),
      ]),
    );
    expect(stripeLines).to.deep.equal(ledger);
    expect(inv.status).to.equal('open');
    expect(inv.hosted_invoice_url).to.equal(stripeInv.hosted_invoice_url);
    expect(inv.invoice_pdf).to.equal(stripeInv.invoice_pdf);
    return { inv, lines, stripeInv };
  }

  it('bills a month across models, tiers and a mid-month upgrade and downgrade with lines that sum exactly to the ledger', async () => {
    clock.set('2016-02-01T00:15:00Z');
    const steady = await createBillingAccount(app, { tier: 'paid' });
    // Free until the 10th, paid from the 10th to the 20th, free again (downgraded) since.
    const switcher = await createBillingAccount(app, { tier: 'free' });
    const freeOnly = await createBillingAccount(app, { tier: 'free' });
    const models = ['gemini-2.5-flash', 'claude-haiku-4-5', 'gpt-4.1', 'claude-sonnet-4-5'];
    const rows: UsageSpec[] = [];
    for (let day = 1; day <= 31; day++) {
      const at = `2016-01-${String(day).padStart(2, '0')}T${String(day % 24).padStart(2, '0')}:17:00Z`;
      models.forEach((model, i) => {
        rows.push({
          accountId: steady.account.id,
          model,
          tier: 'paid',
          prompt: 1000 + day * 37 + i * 11,
          completion: 200 + day * 13 + i * 7,
          at,
        });
      });
      const switcherTier = day >= 10 && day < 20 ? 'paid' : 'free';
      rows.push({
        accountId: switcher.account.id,
        model: models[day % 2]!,
        tier: switcherTier,
        prompt: 50_000 + day,
        completion: 9_000 + day,
        at,
      });
      rows.push({
        accountId: freeOnly.account.id,
        model: 'gemini-2.5-flash',
        tier: 'free',
        prompt: 700,
        completion: 300,
        at,
      });
    }
    // Neither the month before nor the month after belongs to January's invoice.
    rows.push({
      accountId: steady.account.id,
      model: 'gpt-4.1',
      tier: 'paid',
      prompt: 5_000_000,
      completion: 0,
      at: '2016-02-01T00:00:00Z',
    });
    await recordUsage(app, rows);

    const result = await invoiceMonth(app, month('2016-01'), {
      accounts: [steady.account.id, switcher.account.id, freeOnly.account.id],
    });
    expect(result.ok).to.equal(true);
    expect(result.summary).to.include({ invoiced: 2, failed: 0 });

    for (const who of [steady, switcher]) {
      const [inv, ...more] = await invoicesOf(app, who.account.id);
      expect(more).to.have.length(0);
      expect(inv!).to.include({ kind: 'monthly', idempotency_key: `monthly:${who.account.id}:2016-01` });
      expect(inv!.period_start.toISOString()).to.equal('2016-01-01T00:00:00.000Z');
      expect(inv!.period_end.toISOString()).to.equal('2016-02-01T00:00:00.000Z');
      await expectInvoiceMatchesLedgerAndStripe(inv!.id, who.account.id, who.customerId);
      // Exactly the month's paid rows are on it; free rows and February's row are not.
      const all = await usageRowsOf(app, who.account.id);
      for (const r of all) {
        const inJanuary = r.created_at < new Date('2016-02-01T00:00:00Z');
        expect(r.invoice_id, `${r.tier} row at ${r.created_at.toISOString()}`).to.equal(
          r.tier === 'paid' && inJanuary ? inv!.id : null,
        );
      }
    }
    const steadyLines = await linesOf(app, (await invoicesOf(app, steady.account.id))[0]!.id);
    expect(steadyLines.map((l) => l.model)).to.deep.equal([...models].sort());
    expect(steadyLines.every((l) => l.requests === 31)).to.equal(true);
    // The downgraded account owed only its ten paid days.
    const switcherLines = await linesOf(app, (await invoicesOf(app, switcher.account.id))[0]!.id);
    expect(switcherLines.reduce((n, l) => n + l.requests, 0)).to.equal(10);

    expect(await invoicesOf(app, freeOnly.account.id)).to.have.length(0);
    expect(stripeInvoicesOf(fake, freeOnly.customerId)).to.have.length(0);
  });

  it('rounds each line half up to the cent and sums the rounded lines', async () => {
    clock.set('2016-03-01T00:15:00Z');
    const who = await createBillingAccount(app);
    // claude-haiku-4-5 costs 1.00 USD per 1M prompt tokens: 5,000 tokens = 0.5 cent -> 1 cent.
    // gpt-4.1 costs 2.00 per 1M prompt tokens: 12,500 tokens = 2.5 cents -> 3 cents.
    // gemini-2.5-flash: 0.30 per 1M prompt tokens; 10,000 + 3,333 tokens = 0.39999 cents -> 0, deferred.
    await recordUsage(app, [
      {
        accountId: who.account.id,
        model: 'claude-haiku-4-5',
        tier: 'paid',
        prompt: 5_000,
        completion: 0,
        at: '2016-02-03T10:00:00Z',
      },
      {
        accountId: who.account.id,
        model: 'gpt-4.1',
        tier: 'paid',
        prompt: 12_500,
        completion: 0,
        at: '2016-02-04T10:00:00Z',
      },
      {
        accountId: who.account.id,
        model: 'gemini-2.5-flash',
        tier: 'paid',
        prompt: 10_000,
        completion: 0,
        at: '2016-02-05T10:00:00Z',
      },
      {
        accountId: who.account.id,
        model: 'gemini-2.5-flash',
        tier: 'paid',
        prompt: 3_333,
        completion: 0,
        at: '2016-02-06T10:00:00Z',
      },
    ]);
    await invoiceMonth(app, month('2016-02'), { accounts: [who.account.id] });
    const [inv] = await invoicesOf(app, who.account.id);
    const lines = await linesOf(app, inv!.id);
    expect(lines.map((l) => [l.model, l.cost_usd.replace(/0+$/, ''), l.amount_cents])).to.deep.equal([
      ['claude-haiku-4-5', '0.005', '1'],
      ['gpt-4.1', '0.025', '3'],
    ]);
    expect(inv!.amount_cents).to.equal('4');
    await expectInvoiceMatchesLedgerAndStripe(inv!.id, who.account.id, who.customerId);
    // The sub-cent line was not billed at zero: its rows wait, unbilled, for a later invoice.
    const flash = (await usageRowsOf(app, who.account.id)).filter((r) => r.model === 'gemini-2.5-flash');
    expect(flash.map((r) => r.invoice_id)).to.deep.equal([null, null]);
  });

  it('carries sub-cent usage forward until it adds up to a cent, so nothing is lost to rounding', async () => {
    clock.set('2016-04-01T00:15:00Z');
    const who = await createBillingAccount(app);
    // 0.3 cents in February, 0.3 cents in March: zero cents each month alone, 0.6 -> 1 cent together.
    await recordUsage(app, [
      {
        accountId: who.account.id,
        model: 'gemini-2.5-flash',
        tier: 'paid',
        prompt: 10_000,
        completion: 0,
        at: '2016-03-10T00:00:00Z',
      },
    ]);
    clock.set('2016-04-01T00:15:00Z');
    const first = await invoiceMonth(app, month('2016-03'), { accounts: [who.account.id] });
    expect(first.summary).to.include({ nothing_to_invoice: 1, invoiced: 0 });
    expect(stripeInvoicesOf(fake, who.customerId)).to.have.length(0);

    await recordUsage(app, [
      {
        accountId: who.account.id,
        model: 'gemini-2.5-flash',
        tier: 'paid',
        prompt: 10_000,
        completion: 0,
        at: '2016-04-10T00:00:00Z',
      },
    ]);
    clock.set('2016-05-01T00:15:00Z');
    const second = await invoiceMonth(app, month('2016-04'), { accounts: [who.account.id] });
    expect(second.summary).to.include({ invoiced: 1 });
    const [inv] = await invoicesOf(app, who.account.id);
    const lines = await linesOf(app, inv!.id);
    expect(lines.map((l) => [l.model, l.requests, l.amount_cents])).to.deep.equal([['gemini-2.5-flash', 2, '1']]);
    expect((await usageRowsOf(app, who.account.id)).every((r) => r.invoice_id === inv!.id)).to.equal(true);
  });

  it('bills every token exactly once across an on-demand invoice and the month-end run', async () => {
    const who = await createBillingAccount(app);
    const early: UsageSpec[] = [];
    const late: UsageSpec[] = [];
    for (let day = 1; day <= 30; day++) {
      const at = `2016-06-${String(day).padStart(2, '0')}T12:00:00Z`;
      const list = day < 15 ? early : late;
      list.push({
        accountId: who.account.id,
        model: 'gpt-4.1',
        tier: 'paid',
        prompt: 40_000 + day,
        completion: 3_000 + day,
        at,
      });
      list.push({
        accountId: who.account.id,
        model: 'claude-haiku-4-5',
        tier: 'paid',
        prompt: 20_000 + day,
        completion: 1_000 + day,
        at,
      });
    }
    await recordUsage(app, early);
    clock.set('2016-06-15T00:00:00Z');
    const onDemand = await generateInvoice(app, who.account.id);
    expect(onDemand.status).to.equal('invoiced');
    expect(onDemand.invoice!.kind).to.equal('on_demand');

    await recordUsage(app, late);
    clock.set('2016-07-01T00:15:00Z');
    const run = await invoiceMonth(app, month('2016-06'), { accounts: [who.account.id] });
    expect(run.summary).to.include({ invoiced: 1 });

    const invoices = await invoicesOf(app, who.account.id);
    expect(invoices.map((i) => i.kind)).to.deep.equal(['on_demand', 'monthly']);
    expect(invoices[0]!.idempotency_key).to.equal(`on_demand:${who.account.id}:2016-06:1`);
    const rows = await usageRowsOf(app, who.account.id);
    for (const r of rows)
      expect(r.invoice_id).to.equal(
        r.created_at < new Date('2016-06-15T00:00:00Z') ? invoices[0]!.id : invoices[1]!.id,
      );

    // Tokens on the invoice lines add up to the ledger's tokens, once.
    let prompt = 0n;
    let completion = 0n;
    for (const inv of invoices) {
      await expectInvoiceMatchesLedgerAndStripe(inv.id, who.account.id, who.customerId);
      for (const l of await linesOf(app, inv.id)) {
        prompt += BigInt(l.prompt_tokens);
        completion += BigInt(l.completion_tokens);
      }
    }
    expect(prompt).to.equal(rows.reduce((n, r) => n + BigInt(r.prompt_tokens), 0n));
    expect(completion).to.equal(rows.reduce((n, r) => n + BigInt(r.completion_tokens), 0n));
    expect(stripeInvoicesOf(fake, who.customerId)).to.have.length(2);
  });

  it('bills nothing twice when a month is invoiced again', async () => {
    const who = await createBillingAccount(app);
    await recordUsage(app, [
      {
        accountId: who.account.id,
        model: 'gpt-4.1',
        tier: 'paid',
        prompt: 100_000,
        completion: 10_000,
        at: '2016-07-04T00:00:00Z',
      },
    ]);
    clock.set('2016-08-01T00:15:00Z');
    await invoiceMonth(app, month('2016-07'), { accounts: [who.account.id] });
    const again = await invoiceMonth(app, month('2016-07'), { accounts: [who.account.id] });
    expect(again.summary).to.include({ invoiced: 0, already_invoiced: 1 });
    expect(await invoicesOf(app, who.account.id)).to.have.length(1);
    expect(stripeInvoicesOf(fake, who.customerId)).to.have.length(1);
    expect(invoiceCreatesFor(fake, who.customerId)).to.have.length(1);
  });

  it('puts usage recorded after its month was invoiced on the next month-end invoice', async () => {
    const who = await createBillingAccount(app);
    await recordUsage(app, [
      {
        accountId: who.account.id,
        model: 'gpt-4.1',
        tier: 'paid',
        prompt: 100_000,
        completion: 0,
        at: '2016-08-10T00:00:00Z',
      },
    ]);
    clock.set('2016-09-01T00:15:00Z');
    await invoiceMonth(app, month('2016-08'), { accounts: [who.account.id] });
    // A request admitted at 23:59:59 on 31 August that the ledger received after the run.
    await recordUsage(app, [
      {
        accountId: who.account.id,
        model: 'gpt-4.1',
        tier: 'paid',
        prompt: 50_000,
        completion: 0,
        at: '2016-08-31T23:59:59Z',
      },
    ]);
    clock.set('2016-10-01T00:15:00Z');
    await invoiceMonth(app, month('2016-09'), { accounts: [who.account.id] });
    const invoices = await invoicesOf(app, who.account.id);
    expect(invoices.map((i) => i.amount_cents)).to.deep.equal(['20', '10']);
    expect((await usageRowsOf(app, who.account.id)).map((r) => r.invoice_id)).to.deep.equal([
      invoices[0]!.id,
      invoices[1]!.id,
    ]);
  });

  it('completes a draft left by a Stripe failure on the next run instead of starting over', async () => {
    const who = await createBillingAccount(app);
    await recordUsage(app, [
      {
        accountId: who.account.id,
        model: 'gpt-4.1',
        tier: 'paid',
        prompt: 300_000,
        completion: 20_000,
        at: '2016-10-05T00:00:00Z',
      },
      {
        accountId: who.account.id,
        model: 'claude-sonnet-4-5',
        tier: 'paid',
        prompt: 100_000,
        completion: 30_000,
        at: '2016-10-06T00:00:00Z',
      },
    ]);
    clock.set('2016-11-01T00:15:00Z');
    fake.failNext(1, { method: 'POST', path: /^\/v1\/invoices\/[^/]+\/finalize$/ });
    const failed = await invoiceMonth(app, month('2016-10'), { accounts: [who.account.id] });
    expect(failed.ok).to.equal(false);
    expect(failed.summary).to.include({ failed: 1 });
    const [draft] = await invoicesOf(app, who.account.id);
    expect(draft!.status).to.equal('draft');
    expect(draft!.stripe_invoice_id).to.match(/^in_/);
    // The rows stay reserved for the draft, so nothing else can bill them meanwhile.
    expect((await usageRowsOf(app, who.account.id)).every((r) => r.invoice_id === draft!.id)).to.equal(true);

    const retried = await invoiceMonth(app, month('2016-10'), { accounts: [who.account.id] });
    expect(retried.ok).to.equal(true);
    const invoices = await invoicesOf(app, who.account.id);
    expect(invoices).to.have.length(1);
    await expectInvoiceMatchesLedgerAndStripe(invoices[0]!.id, who.account.id, who.customerId);
    expect(stripeInvoicesOf(fake, who.customerId)).to.have.length(1);
    const items = [...fake.invoiceItems.values()].filter((i) => i.customer === who.customerId);
    expect(items.map((i) => i.metadata.model).sort()).to.deep.equal(['claude-sonnet-4-5', 'gpt-4.1']);
  });

  it('lets two concurrent runs for the same account bill it once', async () => {
    const other = createContext(testConfig(fake.env()), { role: 'test-2', clock });
    try {
      const who = await createBillingAccount(app);
      await recordUsage(app, [
        {
          accountId: who.account.id,
          model: 'gpt-4.1',
          tier: 'paid',
          prompt: 700_000,
          completion: 70_000,
          at: '2016-11-05T00:00:00Z',
        },
        {
          accountId: who.account.id,
          model: 'claude-haiku-4-5',
          tier: 'paid',
          prompt: 70_000,
          completion: 7_000,
          at: '2016-11-06T00:00:00Z',
        },
      ]);
      clock.set('2016-12-01T00:15:00Z');
      const [a, b] = await Promise.all([
        invoiceMonth(app, month('2016-11'), { accounts: [who.account.id] }),
        invoiceMonth(other, month('2016-11'), { accounts: [who.account.id] }),
      ]);
      expect([a.summary.invoiced, b.summary.invoiced].sort()).to.deep.equal([0, 1]);
      expect([a.summary.already_invoiced, b.summary.already_invoiced].sort()).to.deep.equal([0, 1]);
      expect(await invoicesOf(app, who.account.id)).to.have.length(1);
      expect(invoiceCreatesFor(fake, who.customerId)).to.have.length(1);
    } finally {
      await other.close();
    }
  });

  it('refuses to invoice a month that has not ended', async () => {
    clock.set('2016-12-31T23:59:59Z');
    let error: unknown;
    try {
      await invoiceMonth(app, month('2016-12'), {});
    } catch (err) {
      error = err;
    }
    expect(String(error)).to.match(/has not ended/);
  });
});
