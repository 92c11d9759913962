import { expect } from 'chai';
import { ManualClock } from '../../src/clock.js';
import { LATE_RETURN_MS } from '../../src/subscriptions/stripe-guards.service.js';
import { FakeStripe, type FakeCard } from '../fakes/stripe.js';
import { createTestAccount, type TestAccount } from '../support/accounts.js';
import { get, post } from '../support/http.js';
import { startTestWeb, type TestWeb } from '../support/web.js';

// Every row of the interface's transitions table that goes through the subscription endpoints,
// against the fake Stripe API with the real `stripe` client pointed at it.

describe('subscription endpoints (upgrade, checkout, setup intents, downgrade, info)', () => {
  let fake: FakeStripe;
  let web: TestWeb;

  before(async () => {
    fake = await new FakeStripe().start();
    // A short pickup timeout: the tier test only needs to see a request get past the tier check.
    web = await startTestWeb({ env: fake.env({ QUEUE_PICKUP_TIMEOUT_MS: '200' }) });
  });
  after(async () => {
    await web.close();
    await fake.close();
  });

  const readAccount = (id: string) =>
    web.app.db.selectFrom('accounts').selectAll().where('id', '=', id).executeTakeFirstOrThrow();
  const tierChanges = (id: string) =>
    web.app.db.selectFrom('tier_changes').selectAll().where('account_id', '=', id).orderBy('id').execute();
  const subscriptionsOf = (customer: string) => [...fake.subscriptions.values()].filter((s) => s.customer === customer);
  /** What a browser following a link sends. */
  const BROWSER = 'text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8';
  /** The browser follows Stripe's redirect to success_url, which names this server. */
  const onThisServer = (url: string) => {
    const u = new URL(url);
    return `${web.url}${u.pathname}${u.search}`;
  };

  async function startCheckout(who: TestAccount): Promise<{ sessionId: string; url: string }> {
    const r = await post(`${web.url}/v1/subscription/upgrade`, undefined, { bearer: who.apiKey });
    expect(r.status, r.text).to.equal(200);
    expect(r.body.status).to.equal('checkout_required');
    return { sessionId: r.body.checkout_session_id, url: r.body.checkout_url };
  }

  /** The hosted-checkout path end to end: upgrade, the person pays on Stripe's page, the browser returns. */
  async function upgradeThroughCheckout(who: TestAccount, card: FakeCard = {}) {
    const { sessionId } = await startCheckout(who);
    const { returnUrl, paymentMethod } = fake.completeCheckoutSession(sessionId, card);
    const r = await get(onThisServer(returnUrl));
    expect(r.status, r.text).to.equal(200);
    return { sessionId, paymentMethod, result: r.body };
  }

  describe('free -> upgrade, no payment method on file -> hosted checkout (stays free)', () => {
    it('creates a Checkout Session in setup mode for a new Stripe customer and leaves the account free', async () => {
      const who = await createTestAccount(web.app);
      const r = await post(`${web.url}/v1/subscription/upgrade`, undefined, { bearer: who.apiKey });
      expect(r.status).to.equal(200);
      expect(r.body).to.include({ status: 'checkout_required', tier: 'free' });
      expect(r.body.checkout_session_id).to.match(/^cs_test_/);
      expect(r.body.checkout_url).to.equal(fake.checkoutSessions.get(r.body.checkout_session_id)!.url);

      const row = await readAccount(who.account.id);
      expect(row.tier).to.equal('free');
      expect(row.checkout_session_id).to.equal(r.body.checkout_session_id);
      const customer = fake.customers.get(row.stripe_customer_id!)!;
      expect(customer.metadata.account_id).to.equal(who.account.id);
      expect(customer.email).to.equal(who.account.email);

      const session = fake.checkoutSessions.get(r.body.checkout_session_id)!;
      const base = web.app.config.http.publicBaseUrl;
      expect(session).to.include({
        mode: 'setup',
        customer: row.stripe_customer_id,
        client_reference_id: who.account.id,
        success_url: `${base}/v1/subscription/upgrade-success?session_id={CHECKOUT_SESSION_ID}`,
        cancel_url: `${base}/v1/subscription/upgrade-cancel`,
      });
      expect(session.metadata).to.deep.equal({ account_id: who.account.id });
      // Setup mode collects a card and charges nothing.
      expect(subscriptionsOf(row.stripe_customer_id!)).to.have.length(0);
      expect(await tierChanges(who.account.id)).to.have.length(0);
    });

    it('returns the same open session to a second upgrade instead of opening another', async () => {
      const who = await createTestAccount(web.app);
      const first = await startCheckout(who);
      const before = fake.received('POST', /^\/v1\/checkout\/sessions$/).length;
      const second = await startCheckout(who);
      expect(second).to.deep.equal(first);
      expect(fake.received('POST', /^\/v1\/checkout\/sessions$/).length).to.equal(before);
      expect(
        fake.received('POST', /^\/v1\/customers$/).filter((q) => q.body.metadata?.account_id === who.account.id),
      ).to.have.length(1);
    });

    it('opens a new session once the previous one expired', async () => {
      const who = await createTestAccount(web.app);
      const first = await startCheckout(who);
      fake.expireCheckoutSession(first.sessionId);
      const second = await startCheckout(who);
      expect(second.sessionId).to.not.equal(first.sessionId);
      expect((await readAccount(who.account.id)).checkout_session_id).to.equal(second.sessionId);
    });

    it('finishes the upgrade when the session was completed but the browser never came back', async () => {
      const who = await createTestAccount(web.app);
      const { sessionId } = await startCheckout(who);
      fake.completeCheckoutSession(sessionId);
      const r = await post(`${web.url}/v1/subscription/upgrade`, undefined, { bearer: who.apiKey });
      expect(r.status).to.equal(200);
      expect(r.body).to.include({ status: 'upgraded', tier: 'paid' });
      expect((await readAccount(who.account.id)).tier).to.equal('paid');
    });
  });

  describe('free -> upgrade-success, checkout session completed -> paid', () => {
    it('sets the card from the session as default, subscribes to the metered price and upgrades', async () => {
      const who = await createTestAccount(web.app);
      const { sessionId, paymentMethod, result } = await upgradeThroughCheckout(who, {
        brand: 'mastercard',
        last4: '4444',
      });
      expect(result).to.include({ status: 'upgraded', tier: 'paid', subscription_status: 'active' });
      expect(result.payment_method).to.deep.equal({ brand: 'mastercard', last4: '4444' });

      const row = await readAccount(who.account.id);
      expect(row).to.include({
        tier: 'paid',
        subscription_status: 'active',
        default_payment_method_id: paymentMethod.id,
        payment_method_brand: 'mastercard',
        payment_method_last4: '4444',
        checkout_session_id: null,
      });
      expect(row.stripe_subscription_id).to.equal(result.subscription_id);
      expect(fake.customers.get(row.stripe_customer_id!)!.invoice_settings.default_payment_method).to.equal(
        paymentMethod.id,
      );
      const subs = subscriptionsOf(row.stripe_customer_id!);
      expect(subs).to.have.length(1);
      expect(subs[0]!.items.data[0].price.id).to.equal(fake.priceId);
      expect(subs[0]!.items.data[0].price.recurring.usage_type).to.equal('metered');
      // Pay-as-you-go: nothing is charged upfront.
      expect(
        fake.invoices.size === 0 || [...fake.invoices.values()].every((i) => i.customer !== row.stripe_customer_id),
      ).to.equal(true);

      const changes = await tierChanges(who.account.id);
      expect(changes.map((c) => [c.from_tier, c.to_tier, c.reason])).to.deep.equal([
        ['free', 'paid', 'checkout_success'],
      ]);
      expect(sessionId).to.match(/^cs_/);
    });

    it('sends a browser back to the console billing page once upgraded', async () => {
      const who = await createTestAccount(web.app);
      const { sessionId } = await startCheckout(who);
      const { returnUrl } = fake.completeCheckoutSession(sessionId);
      const r = await get(onThisServer(returnUrl), { headers: { accept: BROWSER }, redirect: 'manual' });
      expect(r.status).to.equal(303);
      expect(r.headers.get('location')).to.equal('/console/billing?upgrade=done');
      expect(r.headers.get('cache-control')).to.equal('no-store');
      const row = await readAccount(who.account.id);
      expect(row).to.include({ tier: 'paid', payment_method_last4: '4242', checkout_session_id: null });
      expect(subscriptionsOf(row.stripe_customer_id!)).to.have.length(1);
    });

    it('sends a browser back to the console with the reason when the upgrade cannot be completed, changing nothing', async () => {
      const who = await createTestAccount(web.app);
      const { sessionId } = await startCheckout(who);
      const r = await get(`${web.url}/v1/subscription/upgrade-success?session_id=${sessionId}`, {
        headers: { accept: BROWSER },
        redirect: 'manual',
      });
      expect(r.status).to.equal(303);
      expect(r.headers.get('location')).to.equal('/console/billing?upgrade=failed&reason=checkout_not_complete');
      const row = await readAccount(who.account.id);
      expect(row.tier).to.equal('free');
      expect(subscriptionsOf(row.stripe_customer_id!)).to.have.length(0);
    });

    it('is safe to reload: the second visit answers already_paid and creates no second subscription', async () => {
      const who = await createTestAccount(web.app);
      const { sessionId } = await upgradeThroughCheckout(who);
      const again = await get(`${web.url}/v1/subscription/upgrade-success?session_id=${sessionId}`);
      expect(again.status).to.equal(200);
      expect(again.body).to.include({ status: 'already_paid', tier: 'paid' });
      const row = await readAccount(who.account.id);
      expect(subscriptionsOf(row.stripe_customer_id!)).to.have.length(1);
      expect(await tierChanges(who.account.id)).to.have.length(1);
    });

    it('refuses a session that is not completed yet with 409 and changes nothing', async () => {
      const who = await createTestAccount(web.app);
      const { sessionId } = await startCheckout(who);
      const r = await get(`${web.url}/v1/subscription/upgrade-success?session_id=${sessionId}`);
      expect(r.status).to.equal(409);
      expect(r.body.error).to.include({ code: 'checkout_not_complete', type: 'invalid_request_error' });
      const row = await readAccount(who.account.id);
      expect(row.tier).to.equal('free');
      expect(subscriptionsOf(row.stripe_customer_id!)).to.have.length(0);
    });

    it("refuses a session naming an account but paid by another account's customer with 404 and changes nothing", async () => {
      const victim = await createTestAccount(web.app);
      await startCheckout(victim);
      const attacker = await createTestAccount(web.app);
      await startCheckout(attacker);
      const attackerCustomer = (await readAccount(attacker.account.id)).stripe_customer_id!;
      // A session paid by the attacker's customer but naming the victim's account.
      const forged = fake.createCheckoutSessionDirectly({
        mode: 'setup',
        currency: 'usd',
        customer: attackerCustomer,
        client_reference_id: victim.account.id,
        metadata: { account_id: victim.account.id },
        success_url: 'http://example.invalid/?session_id={CHECKOUT_SESSION_ID}',
      });
      fake.completeCheckoutSession(forged.id);
      const r = await get(`${web.url}/v1/subscription/upgrade-success?session_id=${forged.id}`);
      // The service never opened it: refused without asking Stripe about it.
      expect(r.status).to.equal(404);
      expect(r.body.error.code).to.equal('checkout_session_not_found');
      expect(fake.received('GET', new RegExp(`/v1/checkout/sessions/${forged.id}$`))).to.have.length(0);
      expect((await readAccount(victim.account.id)).tier).to.equal('free');
      expect((await readAccount(attacker.account.id)).tier).to.equal('free');
      expect(subscriptionsOf(attackerCustomer)).to.have.length(0);
    });

    it('answers 404 for a session that belongs to no account of this service', async () => {
      const who = await createTestAccount(web.app);
      await startCheckout(who);
      const foreign = fake.createCheckoutSessionDirectly({
        mode: 'setup',
        currency: 'usd',
        customer: (await readAccount(who.account.id)).stripe_customer_id,
        success_url: 'http://example.invalid/',
      });
      fake.completeCheckoutSession(foreign.id);
      const r = await get(`${web.url}/v1/subscription/upgrade-success?session_id=${foreign.id}`);
      expect(r.status).to.equal(404);
      expect(r.body.error.code).to.equal('checkout_session_not_found');
      expect(fake.received('GET', new RegExp(`/v1/checkout/sessions/${foreign.id}$`))).to.have.length(0);
      expect((await readAccount(who.account.id)).tier).to.equal('free');
    });

    it('answers 404 for a session id Stripe does not know, and 422 without one', async () => {
      const unknown = await get(`${web.url}/v1/subscription/upgrade-success?session_id=cs_test_nope`);
      expect(unknown.status).to.equal(404);
      expect(unknown.body.error.code).to.equal('checkout_session_not_found');
      const missing = await get(`${web.url}/v1/subscription/upgrade-success`);
      expect(missing.status).to.equal(422);
      expect(missing.body.detail[0]).to.deep.include({ loc: ['query', 'session_id'], type: 'missing' });
    });

    it('refuses a session already used by an earlier upgrade after the account went back to free', async () => {
      const who = await createTestAccount(web.app);
      const { sessionId } = await upgradeThroughCheckout(who);
      expect((await post(`${web.url}/v1/subscription/downgrade`, undefined, { bearer: who.apiKey })).status).to.equal(
        200,
      );
      const r = await get(`${web.url}/v1/subscription/upgrade-success?session_id=${sessionId}`);
      expect(r.status).to.equal(409);
      expect(r.body.error.code).to.equal('checkout_session_used');
      expect((await readAccount(who.account.id)).tier).to.equal('free');
    });
  });

  describe('upgrade-cancel', () => {
    it('answers a clear message as JSON, sends a browser back to the console billing page, and changes nothing', async () => {
      const who = await createTestAccount(web.app);
      const { sessionId } = await startCheckout(who);
      const json = await get(`${web.url}/v1/subscription/upgrade-cancel`);
      expect(json.status).to.equal(200);
      expect(json.body.status).to.equal('checkout_cancelled');
      expect(json.body.message).to.match(/cancelled.*Nothing was charged/);
      const browser = await get(`${web.url}/v1/subscription/upgrade-cancel`, {
        headers: { accept: BROWSER },
        redirect: 'manual',
      });
      expect(browser.status).to.equal(303);
      expect(browser.headers.get('location')).to.equal('/console/billing?upgrade=cancelled');
      const row = await readAccount(who.account.id);
      expect(row.tier).to.equal('free');
      expect(row.checkout_session_id).to.equal(sessionId);
    });
  });

  describe('free -> upgrade, payment method on file -> paid at once', () => {
    it('subscribes with the card on file without a checkout, after an earlier downgrade', async () => {
      const who = await createTestAccount(web.app);
      const first = await upgradeThroughCheckout(who, { last4: '1881' });
      await post(`${web.url}/v1/subscription/downgrade`, undefined, { bearer: who.apiKey });
      const sessionsBefore = fake.received('POST', /^\/v1\/checkout\/sessions$/).length;

      const r = await post(`${web.url}/v1/subscription/upgrade`, undefined, { bearer: who.apiKey });
      expect(r.status).to.equal(200);
      expect(r.body).to.include({ status: 'upgraded', tier: 'paid' });
      expect(r.body.payment_method).to.deep.equal({ brand: 'visa', last4: '1881' });
      expect(r.body.subscription_id).to.not.equal(first.result.subscription_id);
      expect(fake.received('POST', /^\/v1\/checkout\/sessions$/).length).to.equal(sessionsBefore);

      const row = await readAccount(who.account.id);
      expect(row.tier).to.equal('paid');
      expect(row.stripe_subscription_id).to.equal(r.body.subscription_id);
      expect(fake.subscriptions.get(r.body.subscription_id)!.status).to.equal('active');
      expect((await tierChanges(who.account.id)).map((c) => c.reason)).to.deep.equal([
        'checkout_success',
        'api_downgrade',
        'api_upgrade',
      ]);
    });

    it('answers already_paid to an upgrade while paid and creates no second subscription', async () => {
      const who = await createTestAccount(web.app);
      const { result } = await upgradeThroughCheckout(who);
      const posts = fake.received('POST', /^\/v1\/subscriptions$/).length;
      const r = await post(`${web.url}/v1/subscription/upgrade`, undefined, { bearer: who.jwt });
      expect(r.status).to.equal(200);
      expect(r.body).to.include({ status: 'already_paid', tier: 'paid', subscription_id: result.subscription_id });
      expect(fake.received('POST', /^\/v1\/subscriptions$/).length).to.equal(posts);
    });

    it('creates one subscription when two upgrades race', async () => {
      const who = await createTestAccount(web.app);
      await upgradeThroughCheckout(who);
      await post(`${web.url}/v1/subscription/downgrade`, undefined, { bearer: who.apiKey });
      const [a, b] = await Promise.all([
        post(`${web.url}/v1/subscription/upgrade`, undefined, { bearer: who.apiKey }),
        post(`${web.url}/v1/subscription/upgrade`, undefined, { bearer: who.apiKey }),
      ]);
      expect([a.status, b.status]).to.deep.equal([200, 200]);
      expect([a.body.status, b.body.status].sort()).to.deep.equal(['already_paid', 'upgraded']);
      const row = await readAccount(who.account.id);
      const active = subscriptionsOf(row.stripe_customer_id!).filter((s) => s.status === 'active');
      expect(active.map((s) => s.id)).to.deep.equal([row.stripe_subscription_id]);
    });
  });

  describe('setup intents: update-payment-method, confirm-upgrade, confirm-payment-update', () => {
    async function newIntent(who: TestAccount) {
      const r = await post(`${web.url}/v1/subscription/update-payment-method`, undefined, { bearer: who.apiKey });
      expect(r.status, r.text).to.equal(200);
      return r.body as { setup_intent_id: string; client_secret: string; status: string };
    }

    it('update-payment-method creates an off-session setup intent for the customer and returns its client secret', async () => {
      const who = await createTestAccount(web.app);
      const body = await newIntent(who);
      expect(body.setup_intent_id).to.match(/^seti_/);
      expect(body.client_secret).to.equal(fake.setupIntents.get(body.setup_intent_id)!.client_secret);
      expect(body.status).to.equal('requires_payment_method');
      const si = fake.setupIntents.get(body.setup_intent_id)!;
      expect(si.customer).to.equal((await readAccount(who.account.id)).stripe_customer_id);
      expect(si.usage).to.equal('off_session');
    });

    it('free -> confirm-upgrade with a succeeded intent of the caller -> paid', async () => {
      const who = await createTestAccount(web.app);
      const { setup_intent_id } = await newIntent(who);
      const pm = fake.confirmSetupIntent(setup_intent_id, { brand: 'amex', last4: '0005' });
      const r = await post(`${web.url}/v1/subscription/confirm-upgrade?setup_intent_id=${setup_intent_id}`, undefined, {
        bearer: who.jwt,
      });
      expect(r.status, r.text).to.equal(200);
      expect(r.body).to.include({ status: 'upgraded', tier: 'paid' });
      expect(r.body.payment_method).to.deep.equal({ brand: 'amex', last4: '0005' });
      const row = await readAccount(who.account.id);
      expect(row).to.include({ tier: 'paid', default_payment_method_id: pm.id, subscription_status: 'active' });
      expect(fake.customers.get(row.stripe_customer_id!)!.invoice_settings.default_payment_method).to.equal(pm.id);
      expect((await tierChanges(who.account.id)).map((c) => c.reason)).to.deep.equal(['setup_intent_upgrade']);
    });

    it("refuses another customer's setup intent with 403 and changes nothing", async () => {
      const owner = await createTestAccount(web.app);
      const { setup_intent_id } = await newIntent(owner);
      fake.confirmSetupIntent(setup_intent_id);
      const other = await createTestAccount(web.app);
      await newIntent(other);
      const r = await post(`${web.url}/v1/subscription/confirm-upgrade?setup_intent_id=${setup_intent_id}`, undefined, {
        bearer: other.apiKey,
      });
      expect(r.status).to.equal(403);
      expect(r.body.error).to.include({
        code: 'setup_intent_not_yours',
        type: 'permission_error',
        param: 'setup_intent_id',
      });
      const row = await readAccount(other.account.id);
      expect(row.tier).to.equal('free');
      expect(fake.customers.get(row.stripe_customer_id!)!.invoice_settings.default_payment_method).to.equal(null);
      expect(subscriptionsOf(row.stripe_customer_id!)).to.have.length(0);
    });

    it('refuses a setup intent that has not succeeded with 409 and changes nothing', async () => {
      const who = await createTestAccount(web.app);
      const { setup_intent_id } = await newIntent(who);
      fake.confirmSetupIntent(setup_intent_id, {}, true);
      const r = await post(`${web.url}/v1/subscription/confirm-upgrade?setup_intent_id=${setup_intent_id}`, undefined, {
        bearer: who.apiKey,
      });
      expect(r.status).to.equal(409);
      expect(r.body.error.code).to.equal('setup_intent_not_succeeded');
      expect((await readAccount(who.account.id)).tier).to.equal('free');
    });

    it('answers 404 for an unknown setup intent and 422 without setup_intent_id', async () => {
      const who = await createTestAccount(web.app);
      const unknown = await post(`${web.url}/v1/subscription/confirm-upgrade?setup_intent_id=seti_nope`, undefined, {
        bearer: who.apiKey,
      });
      expect(unknown.status).to.equal(404);
      expect(unknown.body.error.code).to.equal('setup_intent_not_found');
      const missing = await post(`${web.url}/v1/subscription/confirm-upgrade`, undefined, { bearer: who.apiKey });
      expect(missing.status).to.equal(422);
      expect(missing.body.detail[0]).to.deep.include({ loc: ['query', 'setup_intent_id'], type: 'missing' });
      const missing2 = await post(`${web.url}/v1/subscription/confirm-payment-update`, undefined, {
        bearer: who.apiKey,
      });
      expect(missing2.status).to.equal(422);
    });

    it('paid: confirm-payment-update makes the new card the default for future invoices, tier unchanged', async () => {
      const who = await createTestAccount(web.app);
      const { result } = await upgradeThroughCheckout(who);
      const { setup_intent_id } = await newIntent(who);
      const pm = fake.confirmSetupIntent(setup_intent_id, { brand: 'discover', last4: '1117' });
      const r = await post(
        `${web.url}/v1/subscription/confirm-payment-update?setup_intent_id=${setup_intent_id}`,
        undefined,
        { bearer: who.apiKey },
      );
      expect(r.status, r.text).to.equal(200);
      expect(r.body).to.include({
        status: 'payment_method_updated',
        tier: 'paid',
        subscription_id: result.subscription_id,
      });
      expect(r.body.payment_method).to.deep.equal({ brand: 'discover', last4: '1117' });
      const row = await readAccount(who.account.id);
      expect(row).to.include({
        tier: 'paid',
        default_payment_method_id: pm.id,
        payment_method_brand: 'discover',
        payment_method_last4: '1117',
      });
      expect(fake.customers.get(row.stripe_customer_id!)!.invoice_settings.default_payment_method).to.equal(pm.id);
      expect(await tierChanges(who.account.id)).to.have.length(1);
    });

    it("confirm-payment-update refuses another customer's intent with 403 and keeps the card on file", async () => {
      const who = await createTestAccount(web.app);
      const { paymentMethod } = await upgradeThroughCheckout(who);
      const other = await createTestAccount(web.app);
      const theirs = await newIntent(other);
      fake.confirmSetupIntent(theirs.setup_intent_id);
      const r = await post(
        `${web.url}/v1/subscription/confirm-payment-update?setup_intent_id=${theirs.setup_intent_id}`,
        undefined,
        { bearer: who.apiKey },
      );
      expect(r.status).to.equal(403);
      expect(r.body.error.code).to.equal('setup_intent_not_yours');
      const row = await readAccount(who.account.id);
      expect(row.default_payment_method_id).to.equal(paymentMethod.id);
      expect(fake.customers.get(row.stripe_customer_id!)!.invoice_settings.default_payment_method).to.equal(
        paymentMethod.id,
      );
    });
  });

  describe('change card through the hosted checkout in setup mode', () => {
    async function startCardChange(
      who: TestAccount,
    ): Promise<{ id: string; checkout_url: string; expires_at: string }> {
      const r = await post(`${web.url}/v1/subscription/payment-method-checkout`, undefined, { bearer: who.jwt });
      expect(r.status, r.text).to.equal(200);
      expect(r.headers.get('cache-control')).to.equal('no-store');
      return r.body;
    }
    const cardReturn = (sessionId: string, browser = false) =>
      get(`${web.url}/v1/subscription/payment-method-success?session_id=${sessionId}`, {
        ...(browser ? { headers: { accept: BROWSER }, redirect: 'manual' as const } : {}),
      });

    it("opens a setup-mode checkout session for the account's customer that returns to payment-method-success", async () => {
      const who = await createTestAccount(web.app);
      const body = await startCardChange(who);
      expect(Object.keys(body)).to.have.members(['id', 'checkout_url', 'expires_at']);
      const session = fake.checkoutSessions.get(body.id)!;
      const row = await readAccount(who.account.id);
      const base = web.app.config.http.publicBaseUrl;
      expect(session).to.include({
        mode: 'setup',
        status: 'open',
        customer: row.stripe_customer_id,
        client_reference_id: who.account.id,
        url: body.checkout_url,
        success_url: `${base}/v1/subscription/payment-method-success?session_id={CHECKOUT_SESSION_ID}`,
        cancel_url: `${base}/console/billing?card=cancelled`,
      });
      expect(session.metadata).to.deep.equal({ account_id: who.account.id, purpose: 'payment_method_update' });
      expect(body.expires_at).to.equal(new Date(session.expires_at * 1000).toISOString());
      // A card change is not an upgrade: the account stays free with no checkout pending.
      expect(row).to.include({ tier: 'free', checkout_session_id: null });
    });

    it('paid: makes the new card the default of the customer and of the subscription, and sends a browser to the console', async () => {
      const who = await createTestAccount(web.app);
      const { result } = await upgradeThroughCheckout(who);
      const { id } = await startCardChange(who);
      const { paymentMethod } = fake.completeCheckoutSession(id, { brand: 'mastercard', last4: '5100' });
      const r = await cardReturn(id, true);
      expect(r.status).to.equal(303);
      expect(r.headers.get('location')).to.equal('/console/billing?card=updated');
      const row = await readAccount(who.account.id);
      expect(row).to.include({
        tier: 'paid',
        default_payment_method_id: paymentMethod.id,
        payment_method_brand: 'mastercard',
        payment_method_last4: '5100',
      });
      expect(fake.customers.get(row.stripe_customer_id!)!.invoice_settings.default_payment_method).to.equal(
        paymentMethod.id,
      );
      expect(fake.subscriptions.get(result.subscription_id)!.default_payment_method).to.equal(paymentMethod.id);
      expect(await tierChanges(who.account.id)).to.have.length(1);
    });

    it('free: answers JSON with the new card as the default and leaves the tier alone; a reload repeats nothing', async () => {
      const who = await createTestAccount(web.app);
      const { id } = await startCardChange(who);
      const { paymentMethod } = fake.completeCheckoutSession(id, { brand: 'visa', last4: '0341' });
      const r = await cardReturn(id);
      expect(r.status, r.text).to.equal(200);
      expect(r.body).to.include({ status: 'payment_method_updated', tier: 'free', subscription_id: null });
      expect(r.body.payment_method).to.deep.equal({ brand: 'visa', last4: '0341' });
      const writes = fake.requests.length;
      const again = await cardReturn(id);
      expect(again.status).to.equal(200);
      expect(again.body).to.deep.equal(r.body);
      // Only replays of the same idempotent writes: no new object at Stripe.
      expect(
        fake.requests
          .slice(writes)
          .filter((q) => q.method === 'POST')
          .map((q) => q.idempotencyKey),
      ).to.satisfy((keys: string[]) => keys.every((k) => /^default-payment-method:/.test(k)));
      const row = await readAccount(who.account.id);
      expect(row).to.include({ tier: 'free', default_payment_method_id: paymentMethod.id });
      expect(subscriptionsOf(row.stripe_customer_id!)).to.have.length(0);
      // With the card on file, an upgrade is now immediate.
      const up = await post(`${web.url}/v1/subscription/upgrade`, undefined, { bearer: who.apiKey });
      expect(up.body).to.include({ status: 'upgraded', tier: 'paid' });
    });

    it('refuses a session not completed yet with 409 and keeps the card on file', async () => {
      const who = await createTestAccount(web.app);
      const { paymentMethod } = await upgradeThroughCheckout(who);
      const { id } = await startCardChange(who);
      const r = await cardReturn(id);
      expect(r.status).to.equal(409);
      expect(r.body.error.code).to.equal('checkout_not_complete');
      const browser = await cardReturn(id, true);
      expect(browser.status).to.equal(303);
      expect(browser.headers.get('location')).to.equal('/console/billing?card=failed&reason=checkout_not_complete');
      const row = await readAccount(who.account.id);
      expect(row.default_payment_method_id).to.equal(paymentMethod.id);
      expect(fake.customers.get(row.stripe_customer_id!)!.invoice_settings.default_payment_method).to.equal(
        paymentMethod.id,
      );
    });

    it("refuses a card-change session of another account's customer, which the service never opened, with 404", async () => {
      const victim = await createTestAccount(web.app);
      const { paymentMethod } = await upgradeThroughCheckout(victim);
      const attacker = await createTestAccount(web.app);
      await startCardChange(attacker);
      const attackerCustomer = (await readAccount(attacker.account.id)).stripe_customer_id!;
      const forged = fake.createCheckoutSessionDirectly({
        mode: 'setup',
        currency: 'usd',
        customer: attackerCustomer,
        client_reference_id: victim.account.id,
        metadata: { account_id: victim.account.id, purpose: 'payment_method_update' },
        success_url: 'http://example.invalid/?session_id={CHECKOUT_SESSION_ID}',
      });
      fake.completeCheckoutSession(forged.id);
      const r = await cardReturn(forged.id);
      // The service never opened it: refused without asking Stripe about it.
      expect(r.status).to.equal(404);
      expect(r.body.error.code).to.equal('checkout_session_not_found');
      expect(fake.received('GET', new RegExp(`/v1/checkout/sessions/${forged.id}$`))).to.have.length(0);
      expect((await readAccount(victim.account.id)).default_payment_method_id).to.equal(paymentMethod.id);
    });

    it('keeps upgrade sessions and card-change sessions apart: neither return endpoint takes the other', async () => {
      const who = await createTestAccount(web.app);
      const upgradeSession = (await startCheckout(who)).sessionId;
      fake.completeCheckoutSession(upgradeSession);
      const wrongWay = await cardReturn(upgradeSession);
      expect(wrongWay.status).to.equal(400);
      expect(wrongWay.body.error.code).to.equal('checkout_session_unknown');

      const other = await createTestAccount(web.app);
      const { id } = await startCardChange(other);
      fake.completeCheckoutSession(id);
      const noUpgrade = await get(`${web.url}/v1/subscription/upgrade-success?session_id=${id}`);
      expect(noUpgrade.status).to.equal(400);
      expect(noUpgrade.body.error.code).to.equal('checkout_session_unknown');
      expect((await readAccount(other.account.id)).tier).to.equal('free');
      expect((await readAccount(who.account.id)).tier).to.equal('free');
    });

    it('answers 404 for a session Stripe does not know, and 422 without one', async () => {
      const unknown = await cardReturn('cs_test_nope');
      expect(unknown.status).to.equal(404);
      expect(unknown.body.error.code).to.equal('checkout_session_not_found');
      const missing = await get(`${web.url}/v1/subscription/payment-method-success`);
      expect(missing.status).to.equal(422);
      expect(missing.body.detail[0]).to.deep.include({ loc: ['query', 'session_id'], type: 'missing' });
    });

    it('refuses a completed card-change session returned to more than an hour after it expired, changing nothing', async () => {
      // A second web tier whose clock is set from the session itself: a second past its expiry plus
      // the hour's grace, however long the setup took.
      const later = new ManualClock();
      const late = await startTestWeb({ env: fake.env(), clock: later });
      try {
        const who = await createTestAccount(web.app);
        const { id, expires_at } = await startCardChange(who);
        fake.completeCheckoutSession(id);
        later.set(Date.parse(expires_at) + LATE_RETURN_MS + 1_000);
        const r = await get(`${late.url}/v1/subscription/payment-method-success?session_id=${id}`);
        expect(r.status).to.equal(409);
        expect(r.body.error.code).to.equal('checkout_session_expired');
        const row = await readAccount(who.account.id);
        expect(row.default_payment_method_id).to.equal(null);
        expect(fake.customers.get(row.stripe_customer_id!)!.invoice_settings.default_payment_method).to.equal(null);
      } finally {
        await late.close();
      }
    });

    it('needs a credential to open a card-change checkout', async () => {
      const r = await post(`${web.url}/v1/subscription/payment-method-checkout`);
      expect(r.status).to.equal(401);
    });
  });

  describe('paid -> downgrade -> free', () => {
    it('cancels the Stripe subscription without a final invoice and returns to free at once', async () => {
      const who = await createTestAccount(web.app);
      const { result, paymentMethod } = await upgradeThroughCheckout(who);
      const r = await post(`${web.url}/v1/subscription/downgrade`, undefined, { bearer: who.jwt });
      expect(r.status).to.equal(200);
      expect(r.body).to.include({ status: 'downgraded', tier: 'free', subscription_status: 'canceled' });
      expect(fake.subscriptions.get(result.subscription_id)!.status).to.equal('canceled');
      const cancel = fake.received('DELETE', new RegExp(`/v1/subscriptions/${result.subscription_id}$`));
      expect(cancel).to.have.length(1);
      expect(cancel[0]!.query).to.deep.include({ invoice_now: 'false', prorate: 'false' });

      const row = await readAccount(who.account.id);
      // The card stays on file, so a later upgrade is immediate.
      expect(row).to.include({
        tier: 'free',
        subscription_status: 'canceled',
        default_payment_method_id: paymentMethod.id,
      });
      expect((await tierChanges(who.account.id)).map((c) => [c.from_tier, c.to_tier, c.reason])).to.deep.equal([
        ['free', 'paid', 'checkout_success'],
        ['paid', 'free', 'api_downgrade'],
      ]);
    });

    it('answers already_free to a free account and calls Stripe for nothing', async () => {
      const who = await createTestAccount(web.app);
      const before = fake.requests.length;
      const r = await post(`${web.url}/v1/subscription/downgrade`, undefined, { bearer: who.apiKey });
      expect(r.status).to.equal(200);
      expect(r.body).to.include({ status: 'already_free', tier: 'free' });
      expect(fake.requests.length).to.equal(before);
    });
  });

  describe('info', () => {
    it('shows a free account its tier, its three models with prices, its limits and no card', async () => {
      const who = await createTestAccount(web.app);
      const r = await get(`${web.url}/v1/subscription/info`, { bearer: who.jwt });
      expect(r.status).to.equal(200);
      expect(r.body).to.include({
        tier: 'free',
        subscription_status: null,
        payment_method: null,
        checkout_pending: false,
      });
      expect(r.body.models).to.have.length(3);
      for (const m of r.body.models)
        expect(m).to.have.all.keys('id', 'provider', 'input_price_per_million', 'output_price_per_million');
      const { remaining, resets_at, ...limits } = r.body.limits;
      const free = { requests_per_minute: 20, requests_per_hour: 100, requests_per_day: 500, tokens_per_day: 100_000 };
      expect(limits).to.deep.equal(free);
      // A new account has used nothing: every window is whole.
      expect(remaining).to.deep.equal(free);
      expect(Object.keys(resets_at)).to.have.members(Object.keys(free));
    });

    it('shows a paid account the paid models and limits, the card brand and last 4 only, and the subscription status', async () => {
      const who = await createTestAccount(web.app);
      await upgradeThroughCheckout(who, { brand: 'visa', last4: '0077' });
      const r = await get(`${web.url}/v1/subscription/info`, { bearer: who.apiKey });
      expect(r.status).to.equal(200);
      expect(r.body).to.include({ tier: 'paid', subscription_status: 'active' });
      expect(r.body.payment_method).to.deep.equal({ brand: 'visa', last4: '0077' });
      expect(r.body.models.length).to.be.greaterThan(3);
      const paid = web.app.config.limits.paid;
      const { remaining, resets_at: _resets, ...limits } = r.body.limits;
      const expected = {
        requests_per_minute: paid.requestsPerMinute,
        requests_per_hour: paid.requestsPerHour,
        requests_per_day: paid.requestsPerDay,
        tokens_per_day: paid.tokensPerDay,
      };
      expect(limits).to.deep.equal(expected);
      expect(remaining).to.deep.equal(expected);
      expect(JSON.stringify(r.body)).to.not.match(/pm_|cus_/);
    });

    it('needs a credential', async () => {
      const r = await get(`${web.url}/v1/subscription/info`);
      expect(r.status).to.equal(401);
    });
  });

  it('applies a tier change to model access on the very next request', async () => {
    const who = await createTestAccount(web.app);
    const ask = () =>
      post(
        `${web.url}/v1/chat/completions`,
        { model: 'claude-sonnet-4-5', messages: [{ role: 'user', content: 'hi' }] },
        { bearer: who.apiKey },
      );
    const before = await ask();
    expect(before.status).to.equal(403);
    expect(before.body.error.code).to.equal('model_requires_paid_tier');
    await upgradeThroughCheckout(who);
    const after = await ask();
    // Past the tier check (no worker runs in this test, so it ends at the queue instead).
    expect(after.body?.error?.code).to.not.equal('model_requires_paid_tier');
    expect(after.status).to.not.equal(403);
  });

  // Last, so it sees the writes of every test above.
  describe('idempotency', () => {
    it('sent every Stripe write with an idempotency key derived from our own ids', async () => {
      const writes = fake.requests.filter((r) => r.method === 'POST' || r.method === 'DELETE');
      expect(writes.length).to.be.greaterThan(10);
      for (const w of writes) {
        expect(w.idempotencyKey, `${w.method} ${w.path}`).to.match(
          /^(customer|checkout|subscription|default-payment-method|setup-intent|cancel-subscription|payment-method-checkout|subscription-payment-method):[0-9a-f-]{36}(:|$)/,
        );
      }
    });
  });
});
