import { expect } from 'chai';
import { FakeStripe } from '../fakes/stripe.js';
import { createTestAccount, type TestAccount } from '../support/accounts.js';
import { get, post } from '../support/http.js';
import { metricValue } from '../support/metrics.js';
import { startTestWeb, type TestWeb } from '../support/web.js';

// What the client sees, and what stays in the database, when Stripe fails, hangs or is not configured.

describe('subscription endpoints when Stripe fails', () => {
  let fake: FakeStripe;
  let web: TestWeb;
  let fast: TestWeb;

  before(async () => {
    fake = await new FakeStripe().start();
    // Default retries (2): a single Stripe 500 is absorbed by the client's own retry.
    web = await startTestWeb({ env: fake.env() });
    // No retries and a short timeout, so "Stripe hangs" costs a fraction of a second per test.
    fast = await startTestWeb({ env: fake.env({ STRIPE_MAX_NETWORK_RETRIES: '0', STRIPE_TIMEOUT_MS: '300' }) });
  });
  after(async () => {
    await fast.close();
    await web.close();
    await fake.close();
  });

  const readAccount = (id: string) =>
    web.app.db.selectFrom('accounts').selectAll().where('id', '=', id).executeTakeFirstOrThrow();
  const tierChanges = async (id: string) =>
    (await web.app.db.selectFrom('tier_changes').select('reason').where('account_id', '=', id).execute()).length;

  async function completedCheckout(who: TestAccount): Promise<string> {
    const r = await post(`${web.url}/v1/subscription/upgrade`, undefined, { bearer: who.apiKey });
    expect(r.body.status).to.equal('checkout_required');
    fake.completeCheckoutSession(r.body.checkout_session_id);
    return r.body.checkout_session_id;
  }

  async function paid(): Promise<{ who: TestAccount; subscription: string }> {
    const who = await createTestAccount(web.app);
    const sessionId = await completedCheckout(who);
    const r = await get(`${web.url}/v1/subscription/upgrade-success?session_id=${sessionId}`);
    expect(r.body.status).to.equal('upgraded');
    return { who, subscription: r.body.subscription_id };
  }

  it('absorbs a single Stripe 500 with a retry that reuses the idempotency key', async () => {
    const who = await createTestAccount(web.app);
    const sessionId = await completedCheckout(who);
    fake.failNext(1, { method: 'POST', path: /^\/v1\/subscriptions$/ });
    const r = await get(`${web.url}/v1/subscription/upgrade-success?session_id=${sessionId}`);
    expect(r.status).to.equal(200);
    expect(r.body.status).to.equal('upgraded');
    const attempts = fake
      .received('POST', /^\/v1\/subscriptions$/)
      .filter((q) => q.body.metadata?.account_id === who.account.id);
    expect(attempts).to.have.length(2);
    expect(attempts[1]!.idempotencyKey).to.equal(attempts[0]!.idempotencyKey);
  });

  it('answers 502 in the error envelope when Stripe keeps answering 500, and changes nothing; a later retry succeeds once', async () => {
    const who = await createTestAccount(web.app);
    const sessionId = await completedCheckout(who);
    fake.failNext(3, { method: 'POST', path: /^\/v1\/subscriptions$/ });
    const r = await get(`${web.url}/v1/subscription/upgrade-success?session_id=${sessionId}`);
    expect(r.status).to.equal(502);
    expect(r.body.error).to.include({ type: 'upstream_error', code: 'payment_processor_error' });
    expect(r.body.error.message).to.match(/nothing was changed/);
    const row = await readAccount(who.account.id);
    expect(row).to.include({ tier: 'free', stripe_subscription_id: null, checkout_session_id: sessionId });
    expect(await tierChanges(who.account.id)).to.equal(0);

    const retry = await get(`${web.url}/v1/subscription/upgrade-success?session_id=${sessionId}`);
    expect(retry.status).to.equal(200);
    expect(retry.body.status).to.equal('upgraded');
    expect([...fake.subscriptions.values()].filter((s) => s.customer === row.stripe_customer_id)).to.have.length(1);
  });

  it('answers 503 when Stripe times out on upgrade, and opens nothing locally', async () => {
    const who = await createTestAccount(fast.app);
    fake.hangNext(1, { method: 'POST', path: /^\/v1\/checkout\/sessions$/ });
    const r = await post(`${fast.url}/v1/subscription/upgrade`, undefined, { bearer: who.apiKey });
    expect(r.status).to.equal(503);
    expect(r.body.error).to.include({ type: 'service_unavailable', code: 'payment_processor_unavailable' });
    expect(r.headers.get('retry-after')).to.equal('5');
    const row = await readAccount(who.account.id);
    expect(row).to.include({ tier: 'free', checkout_session_id: null });
  });

  it('answers 503 when Stripe times out on downgrade, and the account stays paid', async () => {
    const { who, subscription } = await paid();
    fake.hangNext(1, { method: 'DELETE', path: /^\/v1\/subscriptions\// });
    const r = await post(`${fast.url}/v1/subscription/downgrade`, undefined, { bearer: who.apiKey });
    expect(r.status).to.equal(503);
    expect(r.body.error.code).to.equal('payment_processor_unavailable');
    const row = await readAccount(who.account.id);
    expect(row).to.include({ tier: 'paid', stripe_subscription_id: subscription, subscription_status: 'active' });
    expect(await tierChanges(who.account.id)).to.equal(1);
  });

  it('answers 503 when Stripe times out on confirm-upgrade, and changes nothing', async () => {
    const who = await createTestAccount(fast.app);
    const si = await post(`${fast.url}/v1/subscription/update-payment-method`, undefined, { bearer: who.apiKey });
    fake.confirmSetupIntent(si.body.setup_intent_id);
    fake.hangNext(1, { method: 'GET', path: /^\/v1\/setup_intents\// });
    const r = await post(
      `${fast.url}/v1/subscription/confirm-upgrade?setup_intent_id=${si.body.setup_intent_id}`,
      undefined,
      { bearer: who.apiKey },
    );
    expect(r.status).to.equal(503);
    const row = await readAccount(who.account.id);
    expect(row).to.include({ tier: 'free', default_payment_method_id: null, stripe_subscription_id: null });
  });

  it('maps a declined card to 402 with the card error code', async () => {
    const { who } = await paid();
    // A card update whose default-setting call Stripe refuses as a card error.
    const si = await post(`${web.url}/v1/subscription/update-payment-method`, undefined, { bearer: who.apiKey });
    fake.confirmSetupIntent(si.body.setup_intent_id);
    fake.failNext(1, {
      status: 402,
      method: 'POST',
      path: /^\/v1\/customers\//,
      error: {
        type: 'card_error',
        code: 'card_declined',
        decline_code: 'generic_decline',
        message: 'Your card was declined.',
      },
    });
    const r = await post(
      `${web.url}/v1/subscription/confirm-payment-update?setup_intent_id=${si.body.setup_intent_id}`,
      undefined,
      { bearer: who.apiKey },
    );
    expect(r.status).to.equal(402);
    expect(r.body.error).to.include({ type: 'invalid_request_error', code: 'card_declined' });
    expect(r.body.error.message).to.match(/Your card was declined/);
  });

  it('counts every request to Stripe in stripe_requests_total by its answer’s status, or as unreachable', async () => {
    const statuses = ['200', '500', 'unreachable'];
    const count = () =>
      Promise.all(
        statuses.map((status) => metricValue(fast.app.metrics.registry, 'stripe_requests_total', { status })),
      );
    const counted = () => metricValue(fast.app.metrics.registry, 'stripe_requests_total');
    const [before, totalBefore, receivedBefore] = [await count(), await counted(), fake.received().length];
    const who = await createTestAccount(fast.app);
    fake.failNext(1, { method: 'POST', path: /^\/v1\/checkout\/sessions$/ });
    expect((await post(`${fast.url}/v1/subscription/upgrade`, undefined, { bearer: who.apiKey })).status).to.equal(502);
    fake.hangNext(1, { method: 'POST', path: /^\/v1\/checkout\/sessions$/ });
    expect((await post(`${fast.url}/v1/subscription/upgrade`, undefined, { bearer: who.apiKey })).status).to.equal(503);
    expect((await post(`${fast.url}/v1/subscription/upgrade`, undefined, { bearer: who.apiKey })).body.status).to.equal(
      'checkout_required',
    );
    const after = await count();
    const [ok, failed, unreachable] = after.map((n, i) => n - before[i]!);
    expect({ failed, unreachable }).to.deep.equal({ failed: 1, unreachable: 1 });
    expect(ok).to.be.at.least(1);
    // Every request the fake received is counted once, whatever its answer.
    expect((await counted()) - totalBefore).to.equal(fake.received().length - receivedBefore);
  });

  describe('without STRIPE_SECRET_KEY', () => {
    let bare: TestWeb;
    before(async () => {
      bare = await startTestWeb({ env: {} });
    });
    after(async () => bare.close());

    it('answers 503 billing_not_configured on every endpoint that must call Stripe', async () => {
      const who = await createTestAccount(bare.app);
      const calls = [
        post(`${bare.url}/v1/subscription/upgrade`, undefined, { bearer: who.apiKey }),
        post(`${bare.url}/v1/subscription/confirm-upgrade?setup_intent_id=seti_1`, undefined, { bearer: who.apiKey }),
        post(`${bare.url}/v1/subscription/update-payment-method`, undefined, { bearer: who.apiKey }),
        post(`${bare.url}/v1/subscription/confirm-payment-update?setup_intent_id=seti_1`, undefined, {
          bearer: who.apiKey,
        }),
        get(`${bare.url}/v1/subscription/upgrade-success?session_id=cs_test_1`),
        post(`${bare.url}/v1/subscription/payment-method-checkout`, undefined, { bearer: who.apiKey }),
        get(`${bare.url}/v1/subscription/payment-method-success?session_id=cs_test_1`),
      ];
      for (const r of await Promise.all(calls)) {
        expect(r.status).to.equal(503);
        expect(r.body.error).to.include({ type: 'service_unavailable', code: 'billing_not_configured' });
        expect(r.body.error.message).to.match(/STRIPE_SECRET_KEY/);
      }
      const paidOne = await createTestAccount(bare.app, { tier: 'paid' });
      const down = await post(`${bare.url}/v1/subscription/downgrade`, undefined, { bearer: paidOne.apiKey });
      expect(down.status).to.equal(503);
      expect((await readAccount(paidOne.account.id)).tier).to.equal('paid');
    });

    it('still serves subscription info and upgrade-cancel', async () => {
      const who = await createTestAccount(bare.app);
      const info = await get(`${bare.url}/v1/subscription/info`, { bearer: who.jwt });
      expect(info.status).to.equal(200);
      expect(info.body.tier).to.equal('free');
      expect(info.body.models).to.have.length(3);
      const cancel = await get(`${bare.url}/v1/subscription/upgrade-cancel`);
      expect(cancel.status).to.equal(200);
    });

    it('sends a browser returning from a checkout back to the console with the reason billing is not configured', async () => {
      const browser = { headers: { accept: 'text/html' }, redirect: 'manual' as const };
      const upgrade = await get(`${bare.url}/v1/subscription/upgrade-success?session_id=cs_test_1`, browser);
      expect(upgrade.status).to.equal(303);
      expect(upgrade.headers.get('location')).to.equal('/console/billing?upgrade=failed&reason=billing_not_configured');
      const card = await get(`${bare.url}/v1/subscription/payment-method-success?session_id=cs_test_1`, browser);
      expect(card.status).to.equal(303);
      expect(card.headers.get('location')).to.equal('/console/billing?card=failed&reason=billing_not_configured');
    });
  });
});
