import { expect } from 'chai';
import Stripe from 'stripe';
import { createStripe } from '../../src/infra/stripe.js';
import { testConfig } from '../support/env.js';
import { FakeStripe, parseStripeForm } from '../fakes/stripe.js';

// The fake Stripe API itself, driven by the real `stripe` client exactly as the service builds
// it: if these hold, tests written against the fake exercise the real client's wire format.

describe('fake Stripe API with the real stripe client', () => {
  let fake: FakeStripe;
  let stripe: Stripe;

  before(async () => {
    fake = await new FakeStripe().start();
    stripe = createStripe(testConfig(fake.env({ STRIPE_MAX_NETWORK_RETRIES: '0' })))!;
  });
  after(async () => fake.close());

  it('parses bracket-notation form bodies the way Stripe does', () => {
    expect(parseStripeForm('a[b][0][c]=1&a[b][0][d]=2&expand[0]=x.y&list[]=p&list[]=q&plain=v%20w')).to.deep.equal({
      a: { b: [{ c: '1', d: '2' }] },
      expand: ['x.y'],
      list: ['p', 'q'],
      plain: 'v w',
    });
  });

  it('replays the saved response for a repeated idempotency key and refuses the key with other parameters', async () => {
    const before = fake.customers.size;
    const a = await stripe.customers.create({ email: 'a@example.com' }, { idempotencyKey: 'customer:same' });
    const b = await stripe.customers.create({ email: 'a@example.com' }, { idempotencyKey: 'customer:same' });
    expect(b.id).to.equal(a.id);
    expect(fake.customers.size).to.equal(before + 1);
    try {
      await stripe.customers.create({ email: 'other@example.com' }, { idempotencyKey: 'customer:same' });
      expect.fail('expected an idempotency error');
    } catch (err) {
      expect(err).to.be.instanceOf(Stripe.errors.StripeIdempotencyError);
    }
  });

  it('answers a missing object with a 404 resource_missing error the client raises as StripeInvalidRequestError', async () => {
    try {
      await stripe.subscriptions.retrieve('sub_missing');
      expect.fail('expected an error');
    } catch (err) {
      expect(err).to.be.instanceOf(Stripe.errors.StripeInvalidRequestError);
      const e = err as Stripe.errors.StripeInvalidRequestError;
      expect(e.statusCode).to.equal(404);
      expect(e.code).to.equal('resource_missing');
      expect(e.param).to.equal('id');
    }
  });

  it('refuses a wrong secret key with 401', async () => {
    const wrong = createStripe(
      testConfig(fake.env({ STRIPE_SECRET_KEY: 'sk_test_wrong', STRIPE_MAX_NETWORK_RETRIES: '0' })),
    )!;
    try {
      await wrong.customers.create({});
      expect.fail('expected an error');
    } catch (err) {
      expect(err).to.be.instanceOf(Stripe.errors.StripeAuthenticationError);
    }
  });

  it('expands nested ids on retrieve (checkout session -> setup intent -> payment method)', async () => {
    const customer = await stripe.customers.create({ email: 'x@example.com' });
    const session = await stripe.checkout.sessions.create({
      mode: 'setup',
      customer: customer.id,
      currency: 'usd',
      success_url: 'https://example.com/ok',
    });
    fake.completeCheckoutSession(session.id, { brand: 'visa', last4: '1234' });
    const got = await stripe.checkout.sessions.retrieve(session.id, { expand: ['setup_intent.payment_method'] });
    expect(got.status).to.equal('complete');
    const si = got.setup_intent as Stripe.SetupIntent;
    expect(si.status).to.equal('succeeded');
    expect((si.payment_method as Stripe.PaymentMethod).card?.last4).to.equal('1234');
  });

  it('builds, finalizes, pays and sends an invoice from pending invoice items, with exact amounts', async () => {
    const customer = await stripe.customers.create({ email: 'billing@example.com' });
    const session = await stripe.checkout.sessions.create({
      mode: 'setup',
      customer: customer.id,
      currency: 'usd',
      success_url: 'https://example.com/ok',
    });
    const { paymentMethod } = fake.completeCheckoutSession(session.id);
    await stripe.customers.update(customer.id, { invoice_settings: { default_payment_method: paymentMethod.id } });

    // 3 x 2.5 cents = 7.5 -> 8 (half up); plus a plain amount.
    const metered = await stripe.invoiceItems.create({
      customer: customer.id,
      currency: 'usd',
      quantity: 3,
      unit_amount_decimal: Stripe.Decimal.from('2.5'),
      description: 'tokens',
    });
    expect(metered.amount).to.equal(8);
    await stripe.invoiceItems.create({
      customer: customer.id,
      currency: 'usd',
      amount: 1000,
      description: 'flat',
      metadata: { period: '2026-11' },
    });

    const draft = await stripe.invoices.create({
      customer: customer.id,
      pending_invoice_items_behavior: 'include',
      collection_method: 'charge_automatically',
      metadata: { month: '2026-11' },
    });
    expect(draft.status).to.equal('draft');
    expect(draft.lines.data.map((l) => l.amount)).to.deep.equal([8, 1000]);
    expect(draft.amount_due).to.equal(1008);

    const open = await stripe.invoices.finalizeInvoice(draft.id);
    expect(open.status).to.equal('open');
    expect(open.number).to.match(/^[A-Z0-9]+-\d{4}$/);
    const paid = await stripe.invoices.pay(open.id);
    expect(paid.status).to.equal('paid');
    expect(paid.amount_paid).to.equal(1008);
    await stripe.invoices.sendInvoice(open.id);
    expect(fake.sentInvoices).to.include(open.id);

    const listed = await stripe.invoices.list({ customer: customer.id });
    expect(listed.data.map((i) => i.id)).to.deep.equal([open.id]);
    expect((await stripe.invoices.retrieve(open.id)).metadata).to.deep.equal({ month: '2026-11' });
    expect(fake.eventsOf('invoice.paid').some((e) => e.data.object.id === open.id)).to.equal(true);
  });

  it('declines an invoice payment on a declining card with a 402 card error and an invoice.payment_failed event', async () => {
    const customer = await stripe.customers.create({ email: 'declined@example.com' });
    const pm = fake.createPaymentMethod({ declines: true }, customer.id);
    await stripe.customers.update(customer.id, { invoice_settings: { default_payment_method: pm.id } });
    await stripe.invoiceItems.create({ customer: customer.id, currency: 'usd', amount: 250 });
    const draft = await stripe.invoices.create({ customer: customer.id, pending_invoice_items_behavior: 'include' });
    const open = await stripe.invoices.finalizeInvoice(draft.id);
    try {
      await stripe.invoices.pay(open.id);
      expect.fail('expected a card error');
    } catch (err) {
      expect(err).to.be.instanceOf(Stripe.errors.StripeCardError);
      expect((err as Stripe.errors.StripeCardError).code).to.equal('card_declined');
    }
    const after = await stripe.invoices.retrieve(open.id);
    expect(after).to.include({ status: 'open', attempt_count: 1, attempted: true });
    expect(fake.lastEvent('invoice.payment_failed').data.object.id).to.equal(open.id);
  });

  it('refuses a default payment method that is not attached to the customer', async () => {
    const customer = await stripe.customers.create({});
    const stranger = fake.createPaymentMethod({}, null);
    try {
      await stripe.customers.update(customer.id, { invoice_settings: { default_payment_method: stranger.id } });
      expect.fail('expected an error');
    } catch (err) {
      expect(err).to.be.instanceOf(Stripe.errors.StripeInvalidRequestError);
      expect((err as Stripe.errors.StripeInvalidRequestError).param).to.equal(
        'invoice_settings[default_payment_method]',
      );
    }
  });

  it('merges metadata on a customer update, an empty value removing its key', async () => {
    const customer = await stripe.customers.create({ metadata: { keep: '1', drop: '2' } });
    const updated = await stripe.customers.update(customer.id, { metadata: { drop: '', add: '3' } });
    expect(updated.metadata).to.deep.equal({ keep: '1', add: '3' });
  });

  it('retrieves a card payment method with its brand, last four digits and customer', async () => {
    const customer = await stripe.customers.create({});
    const pm = fake.createPaymentMethod({ brand: 'mastercard', last4: '4444' }, customer.id);
    const got = await stripe.paymentMethods.retrieve(pm.id);
    expect(got.card).to.include({ brand: 'mastercard', last4: '4444' });
    expect(got.customer).to.equal(customer.id);
  });

  it('creates an off-session setup intent for a customer that waits for a card', async () => {
    const customer = await stripe.customers.create({});
    const si = await stripe.setupIntents.create({
      customer: customer.id,
      usage: 'off_session',
      metadata: { account_id: 'a1' },
    });
    expect(si).to.include({
      status: 'requires_payment_method',
      usage: 'off_session',
      customer: customer.id,
      payment_method: null,
    });
    expect(si.client_secret).to.match(new RegExp(`^${si.id}_secret_`));
    expect(si.metadata).to.deep.equal({ account_id: 'a1' });
  });

  it('retrieves a setup intent confirmed elsewhere with its card expanded', async () => {
    const customer = await stripe.customers.create({});
    const made = fake.createSetupIntent({ customer: customer.id, card: { last4: '0077' } });
    const got = await stripe.setupIntents.retrieve(made.id, { expand: ['payment_method'] });
    expect(got.status).to.equal('succeeded');
    expect((got.payment_method as Stripe.PaymentMethod).card?.last4).to.equal('0077');
  });

  it('expires an open checkout session once and refuses to expire it again', async () => {
    const session = await stripe.checkout.sessions.create({
      mode: 'setup',
      currency: 'usd',
      success_url: 'https://example.com/ok',
    });
    expect((await stripe.checkout.sessions.expire(session.id)).status).to.equal('expired');
    try {
      await stripe.checkout.sessions.expire(session.id);
      expect.fail('expected an error');
    } catch (err) {
      expect(err).to.be.instanceOf(Stripe.errors.StripeInvalidRequestError);
    }
  });

  it("lists a customer's subscriptions without the canceled ones unless asked for status all", async () => {
    const customer = await stripe.customers.create({});
    const kept = await stripe.subscriptions.create({ customer: customer.id, items: [{ price: fake.priceId }] });
    const ended = await stripe.subscriptions.create({ customer: customer.id, items: [{ price: fake.priceId }] });
    await stripe.subscriptions.cancel(ended.id);
    expect((await stripe.subscriptions.list({ customer: customer.id })).data.map((s) => s.id)).to.deep.equal([kept.id]);
    expect(
      (await stripe.subscriptions.list({ customer: customer.id, status: 'all' })).data.map((s) => s.id),
    ).to.have.members([kept.id, ended.id]);
  });

  it("sets a live subscription's default payment method to a card of its customer, and refuses anyone else's card", async () => {
    const customer = await stripe.customers.create({});
    const sub = await stripe.subscriptions.create({ customer: customer.id, items: [{ price: fake.priceId }] });
    expect(sub.default_payment_method).to.equal(null);
    const card = fake.createPaymentMethod({ last4: '5100' }, customer.id);
    const updated = await stripe.subscriptions.update(sub.id, { default_payment_method: card.id });
    expect(updated.default_payment_method).to.equal(card.id);
    expect(fake.lastEvent('customer.subscription.updated').data.previous_attributes).to.deep.equal({
      default_payment_method: null,
    });
    const stranger = fake.createPaymentMethod({}, null);
    try {
      await stripe.subscriptions.update(sub.id, { default_payment_method: stranger.id });
      expect.fail('expected an error');
    } catch (err) {
      expect(err).to.be.instanceOf(Stripe.errors.StripeInvalidRequestError);
      expect((err as Stripe.errors.StripeInvalidRequestError).param).to.equal('default_payment_method');
    }
    expect((await stripe.subscriptions.retrieve(sub.id)).default_payment_method).to.equal(card.id);
  });

  it("completes a setup-mode session the way the hosted page does: the session's setup intent succeeds with the card", async () => {
    const customer = await stripe.customers.create({ email: 'card@example.com' });
    const session = await stripe.checkout.sessions.create({
      mode: 'setup',
      customer: customer.id,
      currency: 'usd',
      metadata: { purpose: 'payment_method_update' },
      success_url: 'https://example.com/back?session_id={CHECKOUT_SESSION_ID}',
    });
    expect(session.setup_intent).to.match(/^seti_/);
    expect(session.status).to.equal('open');
    const { returnUrl, paymentMethod } = fake.completeCheckoutSession(session.id, { last4: '0341' });
    expect(returnUrl).to.equal(`https://example.com/back?session_id=${session.id}`);
    const got = await stripe.checkout.sessions.retrieve(session.id, { expand: ['setup_intent'] });
    expect(got).to.include({ status: 'complete', mode: 'setup' });
    expect(got.metadata).to.deep.equal({ purpose: 'payment_method_update' });
    const si = got.setup_intent as Stripe.SetupIntent;
    expect(si).to.include({ status: 'succeeded', customer: customer.id, payment_method: paymentMethod.id });
  });

  it('pays an invoice with nothing due as soon as it is finalized', async () => {
    const customer = await stripe.customers.create({});
    const draft = await stripe.invoices.create({ customer: customer.id });
    const finalized = await stripe.invoices.finalizeInvoice(draft.id);
    expect(finalized).to.include({ status: 'paid', amount_due: 0 });
  });

  it('voids an open invoice', async () => {
    const customer = await stripe.customers.create({});
    await stripe.invoiceItems.create({ customer: customer.id, currency: 'usd', amount: 300 });
    const draft = await stripe.invoices.create({ customer: customer.id, pending_invoice_items_behavior: 'include' });
    const open = await stripe.invoices.finalizeInvoice(draft.id);
    const voided = await stripe.invoices.voidInvoice(open.id);
    expect(voided.status).to.equal('void');
    expect(fake.lastEvent('invoice.voided').data.object.id).to.equal(open.id);
  });

  it('adds an invoice item to the draft invoice it names and updates the amount due', async () => {
    const customer = await stripe.customers.create({});
    const draft = await stripe.invoices.create({ customer: customer.id });
    const item = await stripe.invoiceItems.create({
      customer: customer.id,
      currency: 'usd',
      amount: 420,
      invoice: draft.id,
    });
    expect(item.invoice).to.equal(draft.id);
    expect((await stripe.invoices.retrieve(draft.id)).amount_due).to.equal(420);
  });

  it('lists only the invoice items not yet on an invoice when asked for pending ones', async () => {
    const customer = await stripe.customers.create({});
    await stripe.invoiceItems.create({ customer: customer.id, currency: 'usd', amount: 100 });
    await stripe.invoices.create({ customer: customer.id, pending_invoice_items_behavior: 'include' });
    const pending = await stripe.invoiceItems.create({ customer: customer.id, currency: 'usd', amount: 200 });
    const listed = await stripe.invoiceItems.list({ customer: customer.id, pending: true });
    expect(listed.data.map((i) => i.id)).to.deep.equal([pending.id]);
  });
});
