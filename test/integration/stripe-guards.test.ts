import { expect } from 'chai';
import { FakeStripe } from '../fakes/stripe.js';
import { deliverEvent } from '../fakes/stripe.js';
import { createTestAccount, type TestAccount } from '../support/accounts.js';
import { isolatedPrefix } from '../support/env.js';
import { get, post, request } from '../support/http.js';
import { startTestWeb, type TestWeb } from '../support/web.js';

// The Stripe-calling routes spend the deployment's Stripe budget: the checkout returns take no
// credential, the pacer bounds how long a web request waits for its turn, an account's open
// setup intents and card-change sessions are capped and reused, and idempotency keys are the
// service's own.

const PER_CLIENT = 20;
const PER_SESSION = 5;

describe('guards on the Stripe-calling routes', function () {
  this.timeout(60_000);
  let fake: FakeStripe;
  before(async () => {
    fake = await new FakeStripe().start();
  });
  after(async () => fake?.close());

  const sessionReads = (id?: string) => fake.received('GET', new RegExp(`^/v1/checkout/sessions/${id ?? ''}`)).length;

  describe('the unauthenticated checkout returns', () => {
    let web: TestWeb;
    before(async () => {
      web = await startTestWeb({
        env: fake.env({
          REDIS_PREFIX: isolatedPrefix(),
          STRIPE_RETURNS_PER_CLIENT_PER_MINUTE: String(PER_CLIENT),
          STRIPE_RETURNS_PER_SESSION_PER_MINUTE: String(PER_SESSION),
          // Slow enough that a flood of Stripe reads would hold a webhook back for many seconds.
          STRIPE_MAX_OPS_PER_SECOND: '10',
        }),
      });
    });
    after(async () => web?.close());

    async function openCheckout(who: TestAccount): Promise<string> {
      const r = await post(`${web.url}/v1/subscription/upgrade`, undefined, { bearer: who.apiKey });
      expect(r.body.status, r.text).to.equal('checkout_required');
      return r.body.checkout_session_id as string;
    }

    it('answers a return the webhook already turned into the paid tier from the account, without asking Stripe', async () => {
      const who = await createTestAccount(web.app);
      const sessionId = await openCheckout(who);
      fake.completeCheckoutSession(sessionId);
      const hook = await deliverEvent(
        `${web.url}/v1/webhooks/processor`,
        fake.lastEvent('checkout.session.completed'),
        fake.webhookSecret,
      );
      expect(hook.body.outcome, hook.text).to.equal('upgraded');
      const before = fake.requests.length;
      const r = await get(`${web.url}/v1/subscription/upgrade-success?session_id=${sessionId}`);
      expect(r.status, r.text).to.equal(200);
      expect(r.body).to.include({ status: 'already_paid', tier: 'paid' });
      expect(fake.requests.slice(before)).to.deep.equal([]);
    });

    it('keeps a flood of 500 returns to at most STRIPE_RETURNS_PER_SESSION_PER_MINUTE Stripe reads, and a concurrent upgrade’s webhook is processed at once', async () => {
      const target = await createTestAccount(web.app);
      const openSession = await openCheckout(target);
      const payer = await createTestAccount(web.app);
      const payerSession = await openCheckout(payer);
      fake.completeCheckoutSession(payerSession);
      const event = fake.lastEvent('checkout.session.completed');
      const readsBefore = sessionReads();

      const statuses: number[] = [];
      const flood = (async () => {
        for (let batch = 0; batch < 10; batch++) {
          const answers = await Promise.all(
            Array.from({ length: 50 }, (_, i) => {
              // Half name the open session (its owner has not paid yet), half are made up.
              const id = i % 2 === 0 ? openSession : `cs_test_flood_${batch}_${i}`;
              return get(`${web.url}/v1/subscription/upgrade-success?session_id=${id}`);
            }),
          );
          statuses.push(...answers.map((a) => a.status));
        }
      })();
      const started = Date.now();
      const hook = await deliverEvent(`${web.url}/v1/webhooks/processor`, event, fake.webhookSecret);
      const webhookMs = Date.now() - started;
      await flood;

      expect(hook.status, hook.text).to.equal(200);
      expect(hook.body.outcome).to.equal('upgraded');
      // The webhook makes a handful of paced calls at 10 a second; queued behind hundreds of reads it would take a minute.
      expect(webhookMs).to.be.below(3000);
      expect(statuses).to.have.length(500);
      expect(new Set(statuses)).to.satisfy((s: Set<number>) => [...s].every((x) => [404, 409, 429].includes(x)));
      expect(statuses.filter((s) => s === 429).length).to.be.at.least(500 - PER_CLIENT);
      expect(sessionReads() - readsBefore).to.be.at.most(PER_SESSION + 1); // + the webhook's own read
      expect(sessionReads(openSession)).to.be.at.most(PER_SESSION);
      expect(
        (
          await web.app.db
            .selectFrom('accounts')
            .select('tier')
            .where('id', '=', target.account.id)
            .executeTakeFirstOrThrow()
        ).tier,
      ).to.equal('free');
    });

    it('refuses returns past the per-network limit with 429 rate_limit_exceeded and Retry-After', async () => {
      // The flood above used up this client's minute.
      const r = await get(`${web.url}/v1/subscription/payment-method-success?session_id=cs_test_any`);
      expect(r.status).to.equal(429);
      expect(r.headers.get('retry-after')).to.match(/^\d+$/);
      expect(r.body.error).to.include({ type: 'rate_limit_exceeded', code: 'rate_limit_exceeded', param: null });
      expect(r.body.error.message).to.match(/Too many checkout returns/);
    });
  });

  describe('the pacer’s bounded wait on the web tier', () => {
    let web: TestWeb;
    before(async () => {
      web = await startTestWeb({
        env: fake.env({
          REDIS_PREFIX: isolatedPrefix(),
          STRIPE_MAX_OPS_PER_SECOND: '1',
          STRIPE_PACE_MAX_WAIT_MS: '100',
        }),
      });
    });
    after(async () => web?.close());

    it('answers 503 payment_processor_busy with Retry-After when the turn is further off than STRIPE_PACE_MAX_WAIT_MS, sending nothing more to Stripe', async () => {
      const who = await createTestAccount(web.app);
      const before = fake.requests.length;
      // A new customer and then a setup intent: two calls, the second in the same second as the first.
      const r = await post(`${web.url}/v1/subscription/update-payment-method`, undefined, { bearer: who.apiKey });
      expect(r.status, r.text).to.equal(503);
      expect(r.headers.get('retry-after')).to.match(/^\d+$/);
      expect(r.body.error).to.include({ type: 'service_unavailable', code: 'payment_processor_busy' });
      expect(fake.requests.slice(before).map((q) => `${q.method} ${q.path}`)).to.deep.equal(['POST /v1/customers']);
    });
  });

  describe('setup intents and card-change sessions per account', () => {
    let web: TestWeb;
    before(async () => {
      web = await startTestWeb({
        env: fake.env({
          REDIS_PREFIX: isolatedPrefix(),
          STRIPE_SETUP_INTENTS_PER_ACCOUNT_PER_DAY: '2',
          STRIPE_CARD_CHECKOUTS_PER_ACCOUNT_PER_DAY: '2',
        }),
      });
    });
    after(async () => web?.close());

    const intentsOf = (customer: string) => [...fake.setupIntents.values()].filter((s) => s.customer === customer);
    const customerOf = async (who: TestAccount) =>
      (
        await web.app.db
          .selectFrom('accounts')
          .select('stripe_customer_id')
          .where('id', '=', who.account.id)
          .executeTakeFirstOrThrow()
      ).stripe_customer_id!;
    const newIntent = (who: TestAccount) =>
      post(`${web.url}/v1/subscription/update-payment-method`, undefined, { bearer: who.apiKey });
    const newCardCheckout = (who: TestAccount) =>
      post(`${web.url}/v1/subscription/payment-method-checkout`, undefined, { bearer: who.apiKey });

    it('hands out the open setup intent again instead of creating another', async () => {
      const who = await createTestAccount(web.app);
      const first = await newIntent(who);
      const second = await newIntent(who);
      expect(second.status, second.text).to.equal(200);
      expect(second.body.setup_intent_id).to.equal(first.body.setup_intent_id);
      expect(second.body.client_secret).to.equal(first.body.client_secret);
      expect(intentsOf(await customerOf(who))).to.have.length(1);
    });

    it('refuses a new setup intent past the daily cap with 429 too_many_setup_intents, creating nothing', async () => {
      const who = await createTestAccount(web.app);
      for (let i = 0; i < 2; i++) {
        const r = await newIntent(who);
        expect(r.status, r.text).to.equal(200);
        fake.confirmSetupIntent(r.body.setup_intent_id);
      }
      const over = await newIntent(who);
      expect(over.status).to.equal(429);
      // The cap frees up within the day: too far off for an automatic retry.
      expect(over.headers.get('x-should-retry')).to.equal('false');
      expect(over.body.error.message).to.match(/Try again at /);
      expect(over.body.error).to.include({ type: 'rate_limit_exceeded', code: 'too_many_setup_intents' });
      expect(over.body.error.message).to.match(/opened 2 setup intents in the last 24 hours/);
      expect(intentsOf(await customerOf(who))).to.have.length(2);
    });

    it('hands out the open card-change session again, and refuses a new one past the daily cap with 429 too_many_card_checkouts', async () => {
      const who = await createTestAccount(web.app);
      const first = await newCardCheckout(who);
      const again = await newCardCheckout(who);
      expect(again.body).to.deep.equal(first.body);
      fake.expireCheckoutSession(first.body.id);
      const second = await newCardCheckout(who);
      expect(second.status, second.text).to.equal(200);
      expect(second.body.id).to.not.equal(first.body.id);
      fake.expireCheckoutSession(second.body.id);
      const over = await newCardCheckout(who);
      expect(over.status).to.equal(429);
      expect(over.body.error).to.include({ type: 'rate_limit_exceeded', code: 'too_many_card_checkouts' });
      const customer = await customerOf(who);
      expect([...fake.checkoutSessions.values()].filter((s) => s.customer === customer)).to.have.length(2);
    });

    it('derives Stripe idempotency keys from the service’s own ids, never from a client-chosen X-Request-Id', async () => {
      const chosen = 'chosen-by-the-client-0001';
      for (const path of ['update-payment-method', 'payment-method-checkout']) {
        const who = await createTestAccount(web.app);
        const before = fake.requests.length;
        const r = await request('POST', `${web.url}/v1/subscription/${path}`, {
          bearer: who.apiKey,
          headers: { 'x-request-id': chosen },
        });
        expect(r.status, r.text).to.equal(200);
        const keys = fake.requests
          .slice(before)
          .filter((q) => q.method === 'POST')
          .map((q) => q.idempotencyKey ?? '');
        expect(keys).to.not.be.empty;
        for (const key of keys) expect(key).to.not.include(chosen);
      }
    });
  });
});
