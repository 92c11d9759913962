import { expect } from 'chai';
import Stripe from 'stripe';
import { deliverEvent, FakeStripe, type FakeCard, type Obj } from '../fakes/stripe.js';
import { createTestAccount, type TestAccount } from '../support/accounts.js';
import { get, post } from '../support/http.js';
import { startTestWeb, type TestWeb } from '../support/web.js';

// The processor webhook (endpoint 15): the four events of the interface's webhook table, each
// decided from the object's current state at Stripe; signatures, replays and reordering.

describe('Stripe webhook (POST /v1/webhooks/processor)', () => {
  let fake: FakeStripe;
  let web: TestWeb;
  let hook: string;

  before(async () => {
    fake = await new FakeStripe().start();
    web = await startTestWeb({ env: fake.env() });
    hook = `${web.url}/v1/webhooks/processor`;
  });
  after(async () => {
    await web.close();
    await fake.close();
  });

  const readAccount = (id: string) =>
    web.app.db.selectFrom('accounts').selectAll().where('id', '=', id).executeTakeFirstOrThrow();
  const reasons = async (id: string) =>
    (
      await web.app.db.selectFrom('tier_changes').select('reason').where('account_id', '=', id).orderBy('id').execute()
    ).map((r) => r.reason);
  const recorded = async (eventId: string) =>
    (await web.app.db
      .selectFrom('processed_webhook_events')
      .select('event_id')
      .where('event_id', '=', eventId)
      .executeTakeFirst()) !== undefined;
  const send = (event: Obj, opts: Parameters<typeof deliverEvent>[3] = {}) =>
    deliverEvent(hook, event, fake.webhookSecret, opts);

  /** A free account with a Stripe customer and an open checkout session. */
  async function withOpenCheckout(who: TestAccount): Promise<{ sessionId: string; customer: string }> {
    const r = await post(`${web.url}/v1/subscription/upgrade`, undefined, { bearer: who.apiKey });
    expect(r.body.status).to.equal('checkout_required');
    return { sessionId: r.body.checkout_session_id, customer: (await readAccount(who.account.id)).stripe_customer_id! };
  }

  /** A paid account, upgraded through the hosted checkout and the browser's return. */
  async function paidAccount(
    card: FakeCard = {},
  ): Promise<{ who: TestAccount; customer: string; subscription: string }> {
    const who = await createTestAccount(web.app);
    const { sessionId, customer } = await withOpenCheckout(who);
    const { returnUrl } = fake.completeCheckoutSession(sessionId, card);
    const u = new URL(returnUrl);
    const r = await get(`${web.url}${u.pathname}${u.search}`);
    expect(r.body.status, r.text).to.equal('upgraded');
    return { who, customer, subscription: r.body.subscription_id };
  }

  describe('free -> paid', () => {
    it('checkout.session.completed sets the card as default, subscribes and upgrades', async () => {
      const who = await createTestAccount(web.app);
      const { sessionId, customer } = await withOpenCheckout(who);
      const { paymentMethod } = fake.completeCheckoutSession(sessionId, { last4: '3220' });
      const event = fake.lastEvent('checkout.session.completed');
      const r = await send(event);
      expect(r.status).to.equal(200);
      expect(r.body).to.deep.equal({
        received: true,
        event_id: event.id,
        type: 'checkout.session.completed',
        outcome: 'upgraded',
      });

      const row = await readAccount(who.account.id);
      expect(row).to.include({
        tier: 'paid',
        default_payment_method_id: paymentMethod.id,
        payment_method_last4: '3220',
        checkout_session_id: null,
      });
      expect(fake.customers.get(customer)!.invoice_settings.default_payment_method).to.equal(paymentMethod.id);
      expect(await reasons(who.account.id)).to.deep.equal(['webhook:checkout.session.completed']);
      expect(await recorded(event.id)).to.equal(true);

      // The browser arriving afterwards finds the work done.
      const back = await get(`${web.url}/v1/subscription/upgrade-success?session_id=${sessionId}`);
      expect(back.body.status).to.equal('already_paid');
      expect([...fake.subscriptions.values()].filter((s) => s.customer === customer)).to.have.length(1);
    });

    it('checkout.session.completed of a card-change session upgrades nobody', async () => {
      const who = await createTestAccount(web.app);
      await withOpenCheckout(who);
      const r0 = await post(`${web.url}/v1/subscription/payment-method-checkout`, undefined, { bearer: who.apiKey });
      expect(r0.status, r0.text).to.equal(200);
      fake.completeCheckoutSession(r0.body.id);
      const event = fake.lastEvent('checkout.session.completed');
      expect(event.data.object.id).to.equal(r0.body.id);
      const r = await send(event);
      expect(r.status).to.equal(200);
      expect(r.body).to.include({
        outcome: 'ignored',
        detail: 'This checkout session was not created by the upgrade endpoint.',
      });
      expect((await readAccount(who.account.id)).tier).to.equal('free');
      expect(await reasons(who.account.id)).to.deep.equal([]);
    });

    it('the webhook and the browser racing each other create one subscription and one tier change', async () => {
      const who = await createTestAccount(web.app);
      const { sessionId, customer } = await withOpenCheckout(who);
      const { returnUrl } = fake.completeCheckoutSession(sessionId);
      const u = new URL(returnUrl);
      const [hookAnswer, browser] = await Promise.all([
        send(fake.lastEvent('checkout.session.completed')),
        get(`${web.url}${u.pathname}${u.search}`),
      ]);
      expect(hookAnswer.status).to.equal(200);
      expect(browser.status).to.equal(200);
      expect((await readAccount(who.account.id)).tier).to.equal('paid');
      expect([...fake.subscriptions.values()].filter((s) => s.customer === customer)).to.have.length(1);
      expect(await reasons(who.account.id)).to.have.length(1);
    });

    it('customer.subscription.created for an active subscription of our customer upgrades the account', async () => {
      const who = await createTestAccount(web.app);
      const { customer } = await withOpenCheckout(who);
      const sub = fake.createSubscriptionDirectly(customer);
      const r = await send(fake.lastEvent('customer.subscription.created'));
      expect(r.status).to.equal(200);
      expect(r.body.outcome).to.equal('upgraded');
      const row = await readAccount(who.account.id);
      expect(row).to.include({ tier: 'paid', stripe_subscription_id: sub.id, subscription_status: 'active' });
      expect(await reasons(who.account.id)).to.deep.equal(['webhook:customer.subscription.created']);
    });

    it('customer.subscription.created for a subscription of an unknown customer is acknowledged and changes nothing', async () => {
      const api = web.app.stripe;
      const customer = await api.customers.create({ email: 'someone-else@example.com' });
      fake.createSubscriptionDirectly(customer.id);
      const r = await send(fake.lastEvent('customer.subscription.created'));
      expect(r.status).to.equal(200);
      expect(r.body.outcome).to.equal('ignored');
      expect(r.body.detail).to.match(/no account/);
    });
  });

  describe('paid -> free', () => {
    it('customer.subscription.deleted for the account subscription downgrades it', async () => {
      const { who, subscription } = await paidAccount();
      fake.setSubscriptionStatus(subscription, 'canceled');
      const r = await send(fake.lastEvent('customer.subscription.deleted'));
      expect(r.status).to.equal(200);
      expect(r.body.outcome).to.equal('downgraded');
      const row = await readAccount(who.account.id);
      expect(row).to.include({ tier: 'free', subscription_status: 'canceled' });
      expect(await reasons(who.account.id)).to.deep.equal([
        'checkout_success',
        'webhook:customer.subscription.deleted',
      ]);
    });

    it('invoice.payment_failed downgrades, cancels the subscription, and leaves the fix path: new card, then upgrade at once', async () => {
      const { who, customer, subscription } = await paidAccount({ last4: '0341', declines: true });
      const api = web.app.stripe;
      await api.invoiceItems.create({ customer, amount: 1234, currency: 'usd', description: 'Token usage' });
      const draft = await api.invoices.create({ customer, pending_invoice_items_behavior: 'include' });
      const invoice = await api.invoices.finalizeInvoice(draft.id);
      expect(invoice.amount_due).to.equal(1234);
      expect(fake.attemptInvoicePayment(invoice.id).paid).to.equal(false);

      const r = await send(fake.lastEvent('invoice.payment_failed'));
      expect(r.status).to.equal(200);
      expect(r.body.outcome).to.equal('downgraded');
      let row = await readAccount(who.account.id);
      expect(row).to.include({ tier: 'free', subscription_status: 'canceled', payment_method_last4: '0341' });
      expect(fake.subscriptions.get(subscription)!.status).to.equal('canceled');
      expect(await reasons(who.account.id)).to.deep.equal(['checkout_success', 'webhook:invoice.payment_failed']);

      // The user replaces the card; it becomes the default for invoices, and the upgrade is immediate.
      const si = await post(`${web.url}/v1/subscription/update-payment-method`, undefined, { bearer: who.apiKey });
      expect(si.status).to.equal(200);
      fake.confirmSetupIntent(si.body.setup_intent_id, { last4: '4242' });
      const updated = await post(
        `${web.url}/v1/subscription/confirm-payment-update?setup_intent_id=${si.body.setup_intent_id}`,
        undefined,
        { bearer: who.apiKey },
      );
      expect(updated.body).to.include({ status: 'payment_method_updated', tier: 'free' });
      expect(fake.attemptInvoicePayment(invoice.id).paid).to.equal(true);
      const again = await post(`${web.url}/v1/subscription/upgrade`, undefined, { bearer: who.apiKey });
      expect(again.body).to.include({ status: 'upgraded', tier: 'paid' });
      row = await readAccount(who.account.id);
      expect(row).to.include({ tier: 'paid', payment_method_last4: '4242' });
    });

    it('invoice.payment_failed for an invoice that has been paid since changes nothing', async () => {
      const { who, customer } = await paidAccount();
      const api = web.app.stripe;
      await api.invoiceItems.create({ customer, amount: 500, currency: 'usd' });
      const draft = await api.invoices.create({ customer, pending_invoice_items_behavior: 'include' });
      const open = await api.invoices.finalizeInvoice(draft.id);
      expect(fake.attemptInvoicePayment(open.id).paid).to.equal(true);
      // A failure event from before the successful retry, delivered late.
      const stale = fake.event('invoice.payment_failed', {
        ...fake.invoices.get(open.id)!,
        status: 'open',
        amount_paid: 0,
      });
      const r = await send(stale);
      expect(r.status).to.equal(200);
      expect(r.body.outcome).to.equal('ignored');
      expect(r.body.detail).to.match(/now paid/);
      expect((await readAccount(who.account.id)).tier).to.equal('paid');
    });
  });

  describe('signatures', () => {
    it('refuses an event signed with another secret with 400 and does nothing', async () => {
      const who = await createTestAccount(web.app);
      const { customer } = await withOpenCheckout(who);
      fake.createSubscriptionDirectly(customer);
      const event = fake.lastEvent('customer.subscription.created');
      const r = await deliverEvent(hook, event, 'whsec_not_the_configured_secret');
      expect(r.status).to.equal(400);
      expect(r.body.error).to.include({ code: 'invalid_signature', type: 'invalid_request_error' });
      expect((await readAccount(who.account.id)).tier).to.equal('free');
      expect(await recorded(event.id)).to.equal(false);
    });

    it('refuses a body changed after signing, a missing header, and a signature older than the tolerance', async () => {
      const event = fake.event('customer.created', { id: 'cus_x', object: 'customer' });
      const payload = JSON.stringify(event);
      const signature = Stripe.webhooks.generateTestHeaderString({ payload, secret: fake.webhookSecret });
      const tampered = await deliverEvent(hook, event, fake.webhookSecret, {
        payload: payload.replace('cus_x', 'cus_z'),
        signature,
      });
      expect(tampered.status).to.equal(400);
      expect(await recorded(event.id)).to.equal(false);
      const noHeader = await post(hook, event);
      expect(noHeader.status).to.equal(400);
      expect(noHeader.body.error.code).to.equal('invalid_signature');
      const old = await deliverEvent(
        hook,
        fake.event('customer.created', { id: 'cus_old', object: 'customer' }),
        fake.webhookSecret,
        {
          timestamp: Math.floor(web.app.clock.now().getTime() / 1000) - 600,
        },
      );
      expect(old.status).to.equal(400);
    });
  });

  describe('redelivery and order', () => {
    it('acknowledges a replayed event with 200 and applies no second effect', async () => {
      const who = await createTestAccount(web.app);
      const { customer } = await withOpenCheckout(who);
      fake.createSubscriptionDirectly(customer);
      const created = fake.lastEvent('customer.subscription.created');
      expect((await send(created)).body.outcome).to.equal('upgraded');
      await post(`${web.url}/v1/subscription/downgrade`, undefined, { bearer: who.apiKey });

      const replay = await send(created);
      expect(replay.status).to.equal(200);
      expect(replay.body).to.include({ received: true, event_id: created.id, outcome: 'duplicate' });
      expect((await readAccount(who.account.id)).tier).to.equal('free');
      expect(await reasons(who.account.id)).to.deep.equal(['webhook:customer.subscription.created', 'api_downgrade']);
    });

    it('applies an event delivered several times at once exactly once', async () => {
      const { who, subscription } = await paidAccount();
      fake.setSubscriptionStatus(subscription, 'canceled');
      const event = fake.lastEvent('customer.subscription.deleted');
      const answers = await Promise.all([send(event), send(event), send(event)]);
      expect(answers.map((a) => a.status)).to.deep.equal([200, 200, 200]);
      expect(answers.map((a) => a.body.outcome).sort()).to.deep.equal(['downgraded', 'duplicate', 'duplicate']);
      expect(await reasons(who.account.id)).to.deep.equal([
        'checkout_success',
        'webhook:customer.subscription.deleted',
      ]);
    });

    it('keeps the account paid when subscription.deleted arrives before subscription.created for a subscription that is now active', async () => {
      const { who, subscription } = await paidAccount();
      const now = fake.subscriptions.get(subscription)!;
      // An out-of-order pair: a deletion notice (claiming "canceled") and the creation notice.
      const deleted = fake.event('customer.subscription.deleted', { ...now, status: 'canceled' });
      const created = fake.event('customer.subscription.created', now);
      const first = await send(deleted);
      expect(first.status).to.equal(200);
      expect(first.body.outcome).to.equal('ignored');
      expect(first.body.detail).to.match(/still active/);
      expect((await send(created)).body.outcome).to.equal('no_change');
      const row = await readAccount(who.account.id);
      expect(row).to.include({ tier: 'paid', stripe_subscription_id: subscription, subscription_status: 'active' });
      expect(await reasons(who.account.id)).to.deep.equal(['checkout_success']);
    });

    it('does not upgrade on a late subscription.created for a subscription cancelled since', async () => {
      const who = await createTestAccount(web.app);
      const { customer } = await withOpenCheckout(who);
      const sub = fake.createSubscriptionDirectly(customer);
      const created = fake.lastEvent('customer.subscription.created');
      fake.setSubscriptionStatus(sub.id, 'canceled');
      const deleted = fake.lastEvent('customer.subscription.deleted');
      // Delivered in reverse order.
      expect((await send(deleted)).body.outcome).to.equal('no_change');
      const late = await send(created);
      expect(late.body.outcome).to.equal('ignored');
      expect(late.body.detail).to.match(/now canceled/);
      expect((await readAccount(who.account.id)).tier).to.equal('free');
      expect(await reasons(who.account.id)).to.deep.equal([]);
    });

    it("ignores the end of an old subscription that is not the account's current one", async () => {
      const { who, customer, subscription } = await paidAccount();
      const old = fake.createSubscriptionDirectly(customer, { status: 'active' });
      fake.setSubscriptionStatus(old.id, 'canceled');
      const r = await send(fake.lastEvent('customer.subscription.deleted'));
      expect(r.body.outcome).to.equal('no_change');
      expect(await readAccount(who.account.id)).to.include({ tier: 'paid', stripe_subscription_id: subscription });
    });
  });

  describe('other events and failures', () => {
    it('acknowledges event types it does not use with 200', async () => {
      const event = fake.event('invoice.finalized', { id: 'in_whatever', object: 'invoice' });
      const r = await send(event);
      expect(r.status).to.equal(200);
      expect(r.body).to.include({ outcome: 'ignored', type: 'invoice.finalized' });
    });

    it('answers 5xx when Stripe fails while the state is read, so Stripe redelivers; the redelivery applies it', async () => {
      const { who, subscription } = await paidAccount();
      fake.setSubscriptionStatus(subscription, 'canceled');
      const event = fake.lastEvent('customer.subscription.deleted');
      fake.failNext(3, { method: 'GET', path: /^\/v1\/subscriptions\// });
      const failed = await send(event);
      expect(failed.status).to.equal(502);
      expect(failed.body.error.code).to.equal('payment_processor_error');
      expect(await recorded(event.id)).to.equal(false);
      expect((await readAccount(who.account.id)).tier).to.equal('paid');

      const redelivered = await send(event);
      expect(redelivered.status).to.equal(200);
      expect(redelivered.body.outcome).to.equal('downgraded');
    });
  });

  describe('partly configured', () => {
    it('without STRIPE_SECRET_KEY, acknowledges a correctly signed event, changes nothing and still refuses bad signatures', async () => {
      const bare = await startTestWeb({ env: { STRIPE_WEBHOOK_SECRET: fake.webhookSecret } });
      try {
        const { who, subscription } = await paidAccount();
        fake.setSubscriptionStatus(subscription, 'canceled');
        const event = fake.lastEvent('customer.subscription.deleted');
        const ok = await deliverEvent(`${bare.url}/v1/webhooks/processor`, event, fake.webhookSecret);
        expect(ok.status).to.equal(200);
        expect(ok.body.outcome).to.equal('not_processed');
        expect((await readAccount(who.account.id)).tier).to.equal('paid');
        const bad = await deliverEvent(`${bare.url}/v1/webhooks/processor`, event, 'whsec_wrong');
        expect(bad.status).to.equal(400);
      } finally {
        await bare.close();
      }
    });

    it('without STRIPE_WEBHOOK_SECRET, answers 503 so Stripe keeps the event for later', async () => {
      const bare = await startTestWeb({ env: { STRIPE_SECRET_KEY: fake.secretKey, STRIPE_API_BASE: fake.url } });
      try {
        const r = await deliverEvent(
          `${bare.url}/v1/webhooks/processor`,
          fake.event('customer.created', { id: 'cus_1' }),
          fake.webhookSecret,
        );
        expect(r.status).to.equal(503);
        expect(r.body.error.code).to.equal('webhook_not_configured');
      } finally {
        await bare.close();
      }
    });
  });
});
