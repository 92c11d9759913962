import { expect } from 'chai';
import { ManualClock } from '../../src/clock.js';
import { createContext, type AppContext } from '../../src/context.js';
import { reconcileAccounts } from '../../src/subscriptions/reconcile.service.js';
import { FakeStripe, type FakeCard } from '../fakes/stripe.js';
import { createBillingAccount } from '../support/billing.js';
import { createTestAccount } from '../support/accounts.js';
import { testConfig } from '../support/env.js';

// The daily reconciliation against the fake Stripe API: Stripe changes state behind the
// service's back (no webhook is delivered) and the job brings the account in line.

describe('reconciliation with Stripe', () => {
  let fake: FakeStripe;
  let app: AppContext;
  const clock = new ManualClock('2026-11-22T03:30:00Z');

  before(async () => {
    fake = await new FakeStripe().start();
    app = createContext(testConfig(fake.env({ STRIPE_MAX_NETWORK_RETRIES: '0' })), { role: 'test', clock });
  });
  after(async () => {
    await app.close();
    await fake.close();
  });
  beforeEach(() => clock.advance(60_000));

  const readAccount = (id: string) =>
    app.db.selectFrom('accounts').selectAll().where('id', '=', id).executeTakeFirstOrThrow();
  const tierChanges = (id: string) =>
    app.db.selectFrom('tier_changes').selectAll().where('account_id', '=', id).orderBy('id').execute();

  async function fixesCounted(fix: string): Promise<number> {
    const metric = app.metrics.registry.getSingleMetric('billing_reconciliation_fixes_total');
    if (!metric) return 0;
    const { values } = await metric.get();
    return values.find((v) => v.labels.fix === fix)?.value ?? 0;
  }

  async function setDefaultCard(customerId: string, card: FakeCard = {}) {
    const pm = fake.createPaymentMethod(card, customerId);
    await app.stripe.customers.update(customerId, { invoice_settings: { default_payment_method: pm.id } });
    return pm;
  }

  /** A paid account whose local record agrees with Stripe: active subscription, default card. */
  async function paidInSync() {
    const who = await createBillingAccount(app, { tier: 'paid' });
    const pm = await setDefaultCard(who.customerId, { brand: 'visa', last4: '4242' });
    const sub = fake.createSubscriptionDirectly(who.customerId);
    await app.db
      .updateTable('accounts')
      .set({
        stripe_subscription_id: sub.id,
        subscription_status: 'active',
        default_payment_method_id: pm.id,
        payment_method_brand: 'visa',
        payment_method_last4: '4242',
      })
      .where('id', '=', who.account.id)
      .execute();
    return { ...who, sub, pm };
  }

  it('downgrades a paid account whose subscription Stripe cancelled without a webhook reaching us', async () => {
    const who = await paidInSync();
    fake.setSubscriptionStatus(who.sub.id, 'canceled');
    const before = await fixesCounted('tier_downgraded');

    const r = await reconcileAccounts(app, { accounts: [who.account.id] });
    expect(r.ok).to.equal(true);
    expect(r.summary).to.deep.include({ accounts: 1, fixed: 1, fixes: { subscription: 1, tier_downgraded: 1 } });
    const row = await readAccount(who.account.id);
    expect(row).to.include({ tier: 'free', stripe_subscription_id: who.sub.id, subscription_status: 'canceled' });
    expect((await tierChanges(who.account.id)).map((c) => [c.from_tier, c.to_tier, c.reason])).to.deep.equal([
      ['paid', 'free', 'reconcile'],
    ]);
    expect(await fixesCounted('tier_downgraded')).to.equal(before + 1);
  });

  it('upgrades a free account that has an active subscription to our price', async () => {
    const who = await createBillingAccount(app, { tier: 'free' });
    await setDefaultCard(who.customerId, { brand: 'mastercard', last4: '4444' });
    const sub = fake.createSubscriptionDirectly(who.customerId);
    const before = await fixesCounted('tier_upgraded');

    await reconcileAccounts(app, { accounts: [who.account.id] });
    const row = await readAccount(who.account.id);
    expect(row).to.include({
      tier: 'paid',
      stripe_subscription_id: sub.id,
      subscription_status: 'active',
      payment_method_brand: 'mastercard',
      payment_method_last4: '4444',
    });
    expect((await tierChanges(who.account.id)).map((c) => [c.from_tier, c.to_tier, c.reason])).to.deep.equal([
      ['free', 'paid', 'reconcile'],
    ]);
    expect(await fixesCounted('tier_upgraded')).to.equal(before + 1);
  });

  it('downgrades a paid account whose subscription fell past due (a failed payment whose webhook was missed)', async () => {
    const who = await paidInSync();
    fake.setSubscriptionStatus(who.sub.id, 'past_due');
    await reconcileAccounts(app, { accounts: [who.account.id] });
    expect(await readAccount(who.account.id)).to.include({ tier: 'free', subscription_status: 'past_due' });
  });

  it('takes the default payment method from Stripe when it was changed there', async () => {
    const who = await paidInSync();
    const card = await setDefaultCard(who.customerId, { brand: 'amex', last4: '0005' });
    const r = await reconcileAccounts(app, { accounts: [who.account.id] });
    expect(r.summary).to.deep.include({ fixes: { payment_method: 1 } });
    expect(await readAccount(who.account.id)).to.include({
      tier: 'paid',
      default_payment_method_id: card.id,
      payment_method_brand: 'amex',
      payment_method_last4: '0005',
    });
    expect(await tierChanges(who.account.id)).to.have.length(0);
  });

  it('changes nothing on an account that agrees with Stripe', async () => {
    const who = await paidInSync();
    const before = await readAccount(who.account.id);
    const r = await reconcileAccounts(app, { accounts: [who.account.id] });
    expect(r.summary).to.deep.include({ accounts: 1, fixed: 0, failed: 0 });
    expect(await readAccount(who.account.id)).to.deep.equal(before);
    expect(await tierChanges(who.account.id)).to.have.length(0);
  });

  it('ignores an active subscription to some other price', async () => {
    const who = await createBillingAccount(app, { tier: 'free' });
    fake.createSubscriptionDirectly(who.customerId);
    // Re-point the subscription at a different price, as another product of the same Stripe account would be.
    const sub = [...fake.subscriptions.values()].find((s) => s.customer === who.customerId)!;
    sub.items.data[0].price = { ...sub.items.data[0].price, id: 'price_someOtherProduct' };
    await reconcileAccounts(app, { accounts: [who.account.id] });
    expect((await readAccount(who.account.id)).tier).to.equal('free');
  });

  it('counts an account Stripe does not know as failed, keeps its tier, and still checks the others', async () => {
    const lost = await createTestAccount(app, { tier: 'paid', stripeCustomerId: 'cus_doesNotExist1' });
    const fine = await paidInSync();
    fake.setSubscriptionStatus(fine.sub.id, 'canceled');
    const r = await reconcileAccounts(app, { accounts: [lost.account.id, fine.account.id] });
    expect(r.ok).to.equal(false);
    expect(r.summary).to.deep.include({ accounts: 2, failed: 1, fixed: 1 });
    expect((await readAccount(lost.account.id)).tier).to.equal('paid');
    expect((await readAccount(fine.account.id)).tier).to.equal('free');
  });

  it('refreshes the status of issued invoices that Stripe has since collected', async () => {
    const who = await paidInSync();
    const stripe = app.stripe;
    const inv = await stripe.invoices.create({ customer: who.customerId, pending_invoice_items_behavior: 'exclude' });
    await stripe.invoiceItems.create({ customer: who.customerId, invoice: inv.id, amount: 123, currency: 'usd' });
    await stripe.invoices.finalizeInvoice(inv.id);
    await app.db
      .insertInto('invoices')
      .values({
        account_id: who.account.id,
        kind: 'on_demand',
        period_start: new Date('2026-11-01T00:00:00Z'),
        period_end: new Date('2026-11-10T00:00:00Z'),
        idempotency_key: `on_demand:${who.account.id}:test`,
        stripe_invoice_id: inv.id,
        status: 'open',
        currency: 'usd',
        amount_cents: 123,
      })
      .execute();
    expect(fake.attemptInvoicePayment(inv.id).paid).to.equal(true);
    await reconcileAccounts(app, { accounts: [who.account.id] });
    const row = await app.db
      .selectFrom('invoices')
      .select('status')
      .where('stripe_invoice_id', '=', inv.id)
      .executeTakeFirstOrThrow();
    expect(row.status).to.equal('paid');
  });

  it("fills in Stripe's hosted page and PDF links of an open invoice recorded without them", async () => {
    const who = await paidInSync();
    const stripe = app.stripe;
    const inv = await stripe.invoices.create({ customer: who.customerId, pending_invoice_items_behavior: 'exclude' });
    await stripe.invoiceItems.create({ customer: who.customerId, invoice: inv.id, amount: 321, currency: 'usd' });
    const finalized = await stripe.invoices.finalizeInvoice(inv.id);
    await app.db
      .insertInto('invoices')
      .values({
        account_id: who.account.id,
        kind: 'on_demand',
        period_start: new Date('2026-11-01T00:00:00Z'),
        period_end: new Date('2026-11-10T00:00:00Z'),
        idempotency_key: `on_demand:${who.account.id}:links`,
        stripe_invoice_id: inv.id,
        status: 'open',
        currency: 'usd',
        amount_cents: 321,
      })
      .execute();
    await reconcileAccounts(app, { accounts: [who.account.id] });
    const row = await app.db
      .selectFrom('invoices')
      .select(['status', 'hosted_invoice_url', 'invoice_pdf'])
      .where('stripe_invoice_id', '=', inv.id)
      .executeTakeFirstOrThrow();
    expect(row).to.deep.equal({
      status: 'open',
      hosted_invoice_url: finalized.hosted_invoice_url,
      invoice_pdf: finalized.invoice_pdf,
    });
    expect(row.invoice_pdf).to.be.a('string');
  });
});
