import { expect } from 'chai';
import { FakeStripe } from '../fakes/stripe.js';
import { closeOutboxFor, createTestAccount, type TestAccount } from '../support/accounts.js';
import { invoicesOf, ledgerCentsByModel, recordUsage, stripeInvoicesOf, usageRowsOf } from '../support/billing.js';
import { fromBrowser, signIn, type Browser } from '../support/console.js';
import { get, post } from '../support/http.js';
import { startTestWeb, type TestWeb } from '../support/web.js';

// POST /v1/account/close against two real web processes, real Postgres and Redis, and the fake
// Stripe (the real client talks to it). docs/accounts.md#closing-an-account is the rule asserted here.

describe('closing an account', () => {
  let fake: FakeStripe;
  let web: TestWeb;
  let second: TestWeb;
  const addresses: string[] = [];

  before(async () => {
    fake = await new FakeStripe().start();
    // No client retries: one injected Stripe failure is the failure the client sees.
    const env = fake.env({ STRIPE_MAX_NETWORK_RETRIES: '0' });
    web = await startTestWeb({ env });
    second = await startTestWeb({ env });
  });
  after(async () => {
    await closeOutboxFor(web.app, addresses);
    await second.close();
    await web.close();
    await fake.close();
  });

  const close = (who: TestAccount, confirm: string = who.account.email, bearer = who.jwt) =>
    post(`${web.url}/v1/account/close`, { confirm_email: confirm }, { bearer });
  const models = (url: string, who: TestAccount) => get(`${url}/v1/models`, { bearer: who.apiKey });
  const accountRow = (id: string) =>
    web.app.db.selectFrom('accounts').selectAll().where('id', '=', id).executeTakeFirstOrThrow();
  const liveSessions = async (id: string) =>
    (
      await web.app.db
        .selectFrom('console_sessions')
        .select('id')
        .where('account_id', '=', id)
        .where('revoked_at', 'is', null)
        .execute()
    ).length;
  const activeKeys = async (id: string) =>
    (
      await web.app.db
        .selectFrom('api_keys')
        .select('id')
        .where('account_id', '=', id)
        .where('revoked_at', 'is', null)
        .execute()
    ).length;
  const sessionOf = async (b: Browser) => (await fromBrowser(b, 'GET', '/console/session')).body.signed_in as boolean;

  /** An account on the paid tier through Stripe checkout, with a console session and paid usage this month. */
  async function paidAccount(): Promise<{ who: TestAccount; subscription: string; browser: Browser }> {
    const who = await createTestAccount(web.app);
    addresses.push(who.account.email);
    const up = await post(`${web.url}/v1/subscription/upgrade`, undefined, { bearer: who.apiKey });
    expect(up.body.status).to.equal('checkout_required');
    fake.completeCheckoutSession(up.body.checkout_session_id);
    const done = await get(`${web.url}/v1/subscription/upgrade-success?session_id=${up.body.checkout_session_id}`);
    expect(done.body.status).to.equal('upgraded');
    const at = new Date(web.app.clock.now().getTime() - 60_000);
    await recordUsage(web.app, [
      { accountId: who.account.id, model: 'gpt-4.1', tier: 'paid', prompt: 400_000, completion: 90_000, at },
      { accountId: who.account.id, model: 'claude-haiku-4-5', tier: 'paid', prompt: 300_000, completion: 50_000, at },
    ]);
    const browser = await signIn(web.app, web.url, who.account.email);
    const account = await accountRow(who.account.id);
    return { who: { ...who, account }, subscription: done.body.subscription_id, browser };
  }

  it('revokes every key at once, on a second web process too', async () => {
    const who = await createTestAccount(web.app);
    // The second process has read the key twice, so it holds the account in its cache.
    expect((await models(second.url, who)).status).to.equal(200);
    expect((await models(second.url, who)).status).to.equal(200);
    expect((await close(who)).status).to.equal(200);
    for (const url of [web.url, second.url]) {
      const r = await models(url, who);
      expect(r.status, url).to.equal(401);
      expect(r.body.error.code).to.equal('invalid_api_key');
    }
    expect(await activeKeys(who.account.id)).to.equal(0);
  });

  it('cancels the subscription, invoices the usage not yet invoiced, ends sessions and erases the personal data', async () => {
    const { who, subscription, browser } = await paidAccount();
    const customer = who.account.stripe_customer_id!;
    expect(await sessionOf(browser)).to.equal(true);

    const r = await close(who, `  ${who.account.email.toUpperCase()} `);
    expect(r.status).to.equal(200);
    expect(r.body).to.include({ status: 'closed', account_id: who.account.id, subscription_cancelled: true });

    expect(fake.subscriptions.get(subscription)!.status).to.equal('canceled');

    const [invoice, ...more] = await invoicesOf(web.app, who.account.id);
    expect(more).to.have.length(0);
    expect(invoice).to.include({ kind: 'on_demand', idempotency_key: `final:${who.account.id}`, status: 'open' });
    expect(r.body.final_invoice).to.include({ id: invoice!.id, stripe_invoice_id: invoice!.stripe_invoice_id });
    const ledger = await ledgerCentsByModel(web.app, { accountId: who.account.id, invoiceId: invoice!.id });
    expect(ledger).to.have.keys('gpt-4.1', 'claude-haiku-4-5');
    const cents = Object.values(ledger).reduce((n, c) => n + BigInt(c), 0n);
    expect(invoice!.amount_cents).to.equal(cents.toString());
    for (const row of await usageRowsOf(web.app, who.account.id)) expect(row.invoice_id).to.equal(invoice!.id);
    const [stripeInvoice] = stripeInvoicesOf(fake, customer);
    expect(stripeInvoice!.total).to.equal(Number(cents));
    expect(fake.sentInvoices).to.include(stripeInvoice!.id);

    expect(await sessionOf(browser)).to.equal(false);
    expect(await liveSessions(who.account.id)).to.equal(0);

    const row = await accountRow(who.account.id);
    expect(row).to.include({
      name: '',
      organization: '',
      email: `closed-${who.account.id}@closed.invalid`,
      tier: 'free',
      subscription_status: 'canceled',
      stripe_customer_id: customer,
      payment_method_brand: null,
      payment_method_last4: null,
      default_payment_method_id: null,
      monthly_spend_limit_usd: null,
    });
    expect(row.closed_at).to.be.instanceOf(Date);
    const mail = await web.app.db
      .selectFrom('email_outbox')
      .select('id')
      .where((eb) => eb(eb.fn('lower', ['to_address']), '=', who.account.email.toLowerCase()))
      .execute();
    expect(mail, 'mail to the address').to.have.length(0);
    const reason = await web.app.db
      .selectFrom('tier_changes')
      .select('reason')
      .where('account_id', '=', who.account.id)
      .orderBy('at', 'desc')
      .executeTakeFirstOrThrow();
    expect(reason.reason).to.equal('account_closed');
  });

  it('refuses the account’s JWTs afterwards with 401 account_closed', async () => {
    const who = await createTestAccount(web.app);
    expect((await close(who)).status).to.equal(200);
    const r = await get(`${web.url}/v1/subscription/info`, { bearer: who.jwt });
    expect(r.status).to.equal(401);
    expect(r.body.error.code).to.equal('account_closed');
    expect((await close(who)).status).to.equal(401);
  });

  it('deletes the account’s stored responses', async () => {
    const who = await createTestAccount(web.app);
    const now = web.app.clock.now();
    await web.app.db
      .insertInto('stored_responses')
      .values({
        id: `resp_close_${who.account.id}`,
        account_id: who.account.id,
        status: 'completed',
        response: '{}',
        input_items: '[]',
        created_at: now,
        updated_at: now,
        expires_at: new Date(now.getTime() + 86_400_000),
      })
      .execute();
    expect((await close(who)).status).to.equal(200);
    const left = await web.app.db
      .selectFrom('stored_responses')
      .select('id')
      .where('account_id', '=', who.account.id)
      .execute();
    expect(left).to.have.length(0);
  });

  it('lets the address sign up again as a new account', async () => {
    const who = await createTestAccount(web.app);
    addresses.push(who.account.email);
    expect((await close(who)).status).to.equal(200);
    const r = await post(`${web.url}/v1/auth/signup`, {
      name: 'Ada Again',
      email: who.account.email,
      organization: 'Engines',
    });
    expect(r.status).to.equal(200);
    const fresh = await web.app.db
      .selectFrom('accounts')
      .selectAll()
      .where('email', '=', who.account.email)
      .executeTakeFirstOrThrow();
    expect(fresh.id).to.not.equal(who.account.id);
    expect(fresh).to.include({ name: 'Ada Again', verified_at: null, closed_at: null });
  });

  it('answers a confirmation other than the address with 422 at confirm_email, and changes nothing', async () => {
    const { who, subscription, browser } = await paidAccount();
    const before = await accountRow(who.account.id);
    const r = await close(who, `other-${who.account.email}`);
    expect(r.status).to.equal(422);
    expect(r.body.detail[0].loc).to.deep.equal(['body', 'confirm_email']);
    expect(await accountRow(who.account.id)).to.deep.equal(before);
    expect((await models(web.url, who)).status).to.equal(200);
    expect(await sessionOf(browser)).to.equal(true);
    expect(fake.subscriptions.get(subscription)!.status).to.equal('active');
    expect(await invoicesOf(web.app, who.account.id)).to.have.length(0);
  });

  it('refuses an API key: only the console’s JWT can close the account', async () => {
    const who = await createTestAccount(web.app);
    const r = await close(who, who.account.email, who.apiKey);
    expect(r.status).to.equal(401);
    expect((await accountRow(who.account.id)).closing_at).to.equal(null);
    expect((await models(web.url, who)).status).to.equal(200);
  });

  it('when Stripe fails, leaves the account closing (keys revoked, data kept) and a retry finishes it', async () => {
    const { who, subscription, browser } = await paidAccount();
    fake.failNext(1, { method: 'DELETE', path: /^\/v1\/subscriptions\// });
    const r = await close(who);
    expect(r.status).to.equal(502);
    expect(r.body.error.message).to.match(/not closed yet.*Repeat the request/);
    expect((await models(web.url, who)).status).to.equal(401);
    const half = await accountRow(who.account.id);
    expect(half.closing_at).to.be.instanceOf(Date);
    expect(half).to.include({ closed_at: null, email: who.account.email, tier: 'paid' });
    expect(await sessionOf(browser)).to.equal(true);
    expect(fake.subscriptions.get(subscription)!.status).to.equal('active');
    // No key is issued while the closure is under way.
    const regenerate = await post(`${web.url}/v1/auth/regenerate-api-key`, undefined, { bearer: who.jwt });
    expect(regenerate.status).to.equal(409);
    expect(regenerate.body.error.code).to.equal('account_closing');
    const created = await post(`${web.url}/v1/keys`, { name: 'late' }, { bearer: who.jwt });
    expect(created.status).to.equal(409);
    expect(created.body.error.code).to.equal('account_closing');
    expect(await activeKeys(who.account.id)).to.equal(0);

    // Stripe fails again, now at the final invoice: the subscription stays cancelled, nothing is billed twice.
    fake.failNext(1, { method: 'POST', path: /^\/v1\/invoices$/ });
    expect((await close(who)).status).to.equal(502);
    expect(fake.subscriptions.get(subscription)!.status).to.equal('canceled');

    const done = await close(who);
    expect(done.status).to.equal(200);
    expect(done.body.subscription_cancelled).to.equal(true);
    const invoices = await invoicesOf(web.app, who.account.id);
    expect(invoices).to.have.length(1);
    expect(invoices[0]!.status).to.equal('open');
    expect(stripeInvoicesOf(fake, who.account.stripe_customer_id!)).to.have.length(1);
    expect((await accountRow(who.account.id)).closed_at).to.be.instanceOf(Date);
    expect(await sessionOf(browser)).to.equal(false);
  });

  it('closes a free account without asking Stripe anything', async () => {
    const who = await createTestAccount(web.app);
    const asked = fake.requests.length;
    const r = await close(who);
    expect(r.status).to.equal(200);
    expect(r.body).to.include({ subscription_cancelled: false, final_invoice: null });
    expect(fake.requests.length).to.equal(asked);
  });
});
