import { expect } from 'chai';
import { ManualClock } from '../../src/clock.js';
import { FakeStripe } from '../fakes/stripe.js';
import { createTestAccount } from '../support/accounts.js';
import {
  createBillingAccount,
  invoiceCreatesFor,
  invoicesOf,
  recordUsage,
  stripeInvoicesOf,
  usageRowsOf,
  NO_CACHE,
} from '../support/billing.js';
import { get, post } from '../support/http.js';
import { startTestWeb, type TestWeb } from '../support/web.js';

// Endpoints 16 to 18 through real HTTP, over real Postgres and Redis and the fake Stripe API,
// with the web tier's clock set by hand to March 2017 (a month no other test uses).

describe('billing endpoints (usage, generate-invoice, history)', () => {
  let fake: FakeStripe;
  let web: TestWeb;
  const clock = new ManualClock('2017-03-20T12:00:00Z');

  before(async () => {
    fake = await new FakeStripe().start();
    web = await startTestWeb({ env: fake.env(), clock });
  });
  after(async () => {
    await web.close();
    await fake.close();
  });
  beforeEach(() => clock.set('2017-03-20T12:00:00Z'));

  describe('GET /v1/billing/usage', () => {
    it("reports this month's tokens, requests and exact cost per model and in total, with free-tier usage at zero cost", async () => {
      const who = await createBillingAccount(web.app, { tier: 'paid' });
      await recordUsage(web.app, [
        // gpt-4.1: 2.00 in / 8.00 out per 1M tokens: 0.036 + 0.014 = 0.05 USD.
        {
          accountId: who.account.id,
          model: 'gpt-4.1',
          tier: 'paid',
          prompt: 10_000,
          completion: 2_000,
          at: '2017-03-02T08:00:00Z',
        },
        {
          accountId: who.account.id,
          model: 'gpt-4.1',
          tier: 'paid',
          prompt: 5_000,
          completion: 500,
          at: '2017-03-19T23:00:00Z',
        },
        // Before the upgrade, on the free tier: counted, not charged.
        {
          accountId: who.account.id,
          model: 'gemini-2.5-flash',
          tier: 'free',
          prompt: 1_000,
          completion: 1_000,
          at: '2017-03-01T00:00:00Z',
        },
        // Last month's usage is not this month's.
        {
          accountId: who.account.id,
          model: 'gpt-4.1',
          tier: 'paid',
          prompt: 999_999,
          completion: 0,
          at: '2017-02-28T23:59:59Z',
        },
      ]);
      const r = await get(`${web.url}/v1/billing/usage`, { bearer: who.apiKey });
      expect(r.status, r.text).to.equal(200);
      expect(r.body).to.deep.equal({
        object: 'billing.usage',
        tier: 'paid',
        currency: 'usd',
        period: { start: '2017-03-01T00:00:00.000Z', end: '2017-03-20T12:00:00.000Z', month: '2017-03' },
        models: [
          {
            model: 'gemini-2.5-flash',
            requests: 1,
            billable_requests: 0,
            prompt_tokens: 1000,
            completion_tokens: 1000,
            total_tokens: 2000,
            ...NO_CACHE,
            cost_usd: '0',
            cost_cents: 0,
            cost: '0.00',
          },
          {
            model: 'gpt-4.1',
            requests: 2,
            billable_requests: 2,
            prompt_tokens: 15000,
            completion_tokens: 2500,
            total_tokens: 17500,
            ...NO_CACHE,
            cost_usd: '0.05',
            cost_cents: 5,
            cost: '0.05',
          },
        ],
        by_key: [
          {
            key_id: null,
            name: null,
            redacted_value: null,
            is_default: false,
            revoked: false,
            requests: 3,
            billable_requests: 2,
            prompt_tokens: 16000,
            completion_tokens: 3500,
            total_tokens: 19500,
            ...NO_CACHE,
            cost_usd: '0.05',
            cost_cents: 5,
            cost: '0.05',
          },
        ],
        total: {
          requests: 3,
          prompt_tokens: 16000,
          completion_tokens: 3500,
          total_tokens: 19500,
          ...NO_CACHE,
          cost_usd: '0.05',
          cost_cents: 5,
          cost: '0.05',
        },
        spend_limit: {
          object: 'billing.spend_limit',
          monthly_limit_usd: null,
          enforced: false,
          month: '2017-03',
          spent_usd: '0.05',
          reserved_usd: '0.00',
          remaining_usd: null,
          resets_at: '2017-04-01T00:00:00.000Z',
        },
      });
    });

    it('accepts a JWT as well as an API key, and refuses a request without either', async () => {
      const who = await createTestAccount(web.app);
      const withJwt = await get(`${web.url}/v1/billing/usage`, { bearer: who.jwt });
      expect(withJwt.status).to.equal(200);
      expect(withJwt.body).to.include({ tier: 'free', object: 'billing.usage' });
      expect(withJwt.body.models).to.deep.equal([]);
      expect(withJwt.body.total).to.deep.equal({
        requests: 0,
        prompt_tokens: 0,
        completion_tokens: 0,
        total_tokens: 0,
        ...NO_CACHE,
        cost_usd: '0',
        cost_cents: 0,
        cost: '0.00',
      });
      const anonymous = await get(`${web.url}/v1/billing/usage`);
      expect(anonymous.status).to.equal(401);
    });

    it('rounds per model for cost_cents, as an invoice would', async () => {
      const who = await createBillingAccount(web.app, { tier: 'paid' });
      // 0.5 cent on claude-haiku-4-5 and 0.5 cent on gpt-4.1 (2,500 prompt tokens): 1 + 1 cents, not round(1.0).
      await recordUsage(web.app, [
        {
          accountId: who.account.id,
          model: 'claude-haiku-4-5',
          tier: 'paid',
          prompt: 5_000,
          completion: 0,
          at: '2017-03-05T00:00:00Z',
        },
        {
          accountId: who.account.id,
          model: 'gpt-4.1',
          tier: 'paid',
          prompt: 2_500,
          completion: 0,
          at: '2017-03-05T00:00:00Z',
        },
      ]);
      const r = await get(`${web.url}/v1/billing/usage`, { bearer: who.apiKey });
      expect(
        r.body.models.map((m: { cost_usd: string; cost_cents: number }) => [m.cost_usd, m.cost_cents]),
      ).to.deep.equal([
        ['0.005', 1],
        ['0.005', 1],
      ]);
      expect(r.body.total).to.include({ cost_usd: '0.01', cost_cents: 2, cost: '0.02' });
    });
  });

  describe('POST /v1/billing/generate-invoice', () => {
    it('creates, finalizes and sends a Stripe invoice with one line per model, and a second call creates nothing new', async () => {
      const who = await createBillingAccount(web.app, { tier: 'paid' });
      await recordUsage(web.app, [
        {
          accountId: who.account.id,
          model: 'gpt-4.1',
          tier: 'paid',
          prompt: 100_000,
          completion: 20_000,
          at: '2017-03-03T00:00:00Z',
        },
        {
          accountId: who.account.id,
          model: 'claude-sonnet-4-5',
          tier: 'paid',
          prompt: 10_000,
          completion: 5_000,
          at: '2017-03-04T00:00:00Z',
        },
      ]);
      const r = await post(`${web.url}/v1/billing/generate-invoice`, undefined, { bearer: who.apiKey });
      expect(r.status, r.text).to.equal(200);
      expect(r.body.status).to.equal('invoiced');
      const inv = r.body.invoice;
      // gpt-4.1: 0.2 + 0.16 = 0.36 USD; claude-sonnet-4-5: 0.03 + 0.075 = 0.105 USD -> 10.5 cents -> 11.
      expect(inv).to.include({
        kind: 'on_demand',
        status: 'open',
        currency: 'usd',
        amount_cents: 47,
        amount: '0.47',
        period_start: '2017-03-01T00:00:00.000Z',
        period_end: '2017-03-20T12:00:00.000Z',
      });
      expect(inv.lines).to.deep.equal([
        {
          model: 'claude-sonnet-4-5',
          requests: 1,
          prompt_tokens: 10000,
          completion_tokens: 5000,
          cost_usd: '0.105',
          amount_cents: 11,
          amount: '0.11',
        },
        {
          model: 'gpt-4.1',
          requests: 1,
          prompt_tokens: 100000,
          completion_tokens: 20000,
          cost_usd: '0.36',
          amount_cents: 36,
          amount: '0.36',
        },
      ]);
      const stripeInv = fake.invoices.get(inv.stripe_invoice_id)!;
      expect(stripeInv).to.include({
        customer: who.customerId,
        status: 'open',
        total: 47,
        hosted_invoice_url: inv.hosted_invoice_url,
      });
      expect(fake.sentInvoices).to.include(stripeInv.id);
      expect(stripeInv.lines.data.map((l: { description: string }) => l.description)).to.deep.equal([
        'claude-sonnet-4-5: 10,000 prompt + 5,000 completion tokens, 1 requests (2017-03-01 to 2017-03-20 12:00 UTC)',
        'gpt-4.1: 100,000 prompt + 20,000 completion tokens, 1 requests (2017-03-01 to 2017-03-20 12:00 UTC)',
      ]);
      expect((await usageRowsOf(web.app, who.account.id)).every((row) => row.invoice_id === inv.id)).to.equal(true);

      const again = await post(`${web.url}/v1/billing/generate-invoice`, undefined, { bearer: who.jwt });
      expect(again.status).to.equal(200);
      expect(again.body.status).to.equal('nothing_to_invoice');
      expect(again.body.invoice).to.equal(null);
      expect(again.body.message).to.match(/Nothing to invoice/);
      expect(invoiceCreatesFor(fake, who.customerId)).to.have.length(1);
      expect(await invoicesOf(web.app, who.account.id)).to.have.length(1);
    });

    it('invoices only the usage added since the previous on-demand invoice', async () => {
      const who = await createBillingAccount(web.app, { tier: 'paid' });
      await recordUsage(web.app, [
        {
          accountId: who.account.id,
          model: 'gpt-4.1',
          tier: 'paid',
          prompt: 100_000,
          completion: 0,
          at: '2017-03-03T00:00:00Z',
        },
      ]);
      const first = await post(`${web.url}/v1/billing/generate-invoice`, undefined, { bearer: who.apiKey });
      clock.set('2017-03-21T12:00:00Z');
      await recordUsage(web.app, [
        {
          accountId: who.account.id,
          model: 'gpt-4.1',
          tier: 'paid',
          prompt: 50_000,
          completion: 0,
          at: '2017-03-21T00:00:00Z',
        },
      ]);
      const second = await post(`${web.url}/v1/billing/generate-invoice`, undefined, { bearer: who.apiKey });
      expect([first.body.invoice.amount_cents, second.body.invoice.amount_cents]).to.deep.equal([20, 10]);
      const keys = (await invoicesOf(web.app, who.account.id)).map((i) => i.idempotency_key);
      expect(keys).to.deep.equal([`on_demand:${who.account.id}:2017-03:1`, `on_demand:${who.account.id}:2017-03:2`]);
    });

    it('says what unbilled paid-tier usage there is, and why it waits, when every line is under half a cent', async () => {
      const who = await createBillingAccount(web.app, { tier: 'paid' });
      // gpt-4.1: 1,000 prompt + 200 completion tokens = 0.002 + 0.0016 = 0.0036 USD, 0.36 of a cent.
      await recordUsage(web.app, [
        {
          accountId: who.account.id,
          model: 'gpt-4.1',
          tier: 'paid',
          prompt: 1_000,
          completion: 200,
          at: '2017-03-05T00:00:00Z',
        },
      ]);
      const r = await post(`${web.url}/v1/billing/generate-invoice`, undefined, { bearer: who.apiKey });
      expect(r.status, r.text).to.equal(200);
      expect(r.body).to.deep.include({ status: 'nothing_to_invoice', invoice: null });
      expect(r.body.message).to.equal(
        "Nothing to invoice yet: this month's paid-tier usage not on an invoice is gpt-4.1 $0.0036 (1 request). " +
          "An invoice bills each model's usage rounded to the cent, and under half a cent that is $0.00, so it stays unbilled " +
          "and is billed on a later invoice (one you generate, or the monthly invoice after the month ends) once the model's unbilled usage reaches half a cent. " +
          'No invoice was created.',
      );
      expect(invoiceCreatesFor(fake, who.customerId)).to.have.length(0);
      expect((await usageRowsOf(web.app, who.account.id)).map((row) => row.invoice_id)).to.deep.equal([null]);
    });

    it('answers a free account that owes nothing with nothing_to_invoice and creates no invoice', async () => {
      const who = await createBillingAccount(web.app, { tier: 'free' });
      await recordUsage(web.app, [
        {
          accountId: who.account.id,
          model: 'gemini-2.5-flash',
          tier: 'free',
          prompt: 40_000,
          completion: 9_000,
          at: '2017-03-10T00:00:00Z',
        },
      ]);
      const r = await post(`${web.url}/v1/billing/generate-invoice`, undefined, { bearer: who.apiKey });
      expect(r.status).to.equal(200);
      expect(r.body).to.deep.include({ status: 'nothing_to_invoice', invoice: null });
      expect(stripeInvoicesOf(fake, who.customerId)).to.have.length(0);
      expect(await invoicesOf(web.app, who.account.id)).to.have.length(0);
    });

    it('answers a paid account with an empty month with nothing_to_invoice', async () => {
      const who = await createBillingAccount(web.app, { tier: 'paid' });
      await recordUsage(web.app, [
        {
          accountId: who.account.id,
          model: 'gpt-4.1',
          tier: 'paid',
          prompt: 100_000,
          completion: 0,
          at: '2017-02-10T00:00:00Z',
        },
      ]);
      const r = await post(`${web.url}/v1/billing/generate-invoice`, undefined, { bearer: who.apiKey });
      expect(r.status).to.equal(200);
      expect(r.body).to.deep.include({ status: 'nothing_to_invoice', invoice: null });
      expect(invoiceCreatesFor(fake, who.customerId)).to.have.length(0);
      // Last month's usage is left for the monthly run.
      expect((await usageRowsOf(web.app, who.account.id)).map((row) => row.invoice_id)).to.deep.equal([null]);
    });

    it('invoices a downgraded account for the paid-tier usage it owes from earlier in the month', async () => {
      const who = await createBillingAccount(web.app, { tier: 'free' });
      await recordUsage(web.app, [
        {
          accountId: who.account.id,
          model: 'gpt-4.1',
          tier: 'paid',
          prompt: 250_000,
          completion: 0,
          at: '2017-03-02T00:00:00Z',
        },
        {
          accountId: who.account.id,
          model: 'gpt-4.1-mini',
          tier: 'free',
          prompt: 250_000,
          completion: 0,
          at: '2017-03-12T00:00:00Z',
        },
      ]);
      const r = await post(`${web.url}/v1/billing/generate-invoice`, undefined, { bearer: who.apiKey });
      expect(r.status, r.text).to.equal(200);
      expect(r.body.status).to.equal('invoiced');
      expect(r.body.invoice.amount_cents).to.equal(50);
      expect(r.body.invoice.lines.map((l: { model: string }) => l.model)).to.deep.equal(['gpt-4.1']);
    });

    it('answers 409 when the account owes usage but has no Stripe customer, reserving nothing', async () => {
      const who = await createTestAccount(web.app, { tier: 'paid' });
      await recordUsage(web.app, [
        {
          accountId: who.account.id,
          model: 'gpt-4.1',
          tier: 'paid',
          prompt: 100_000,
          completion: 0,
          at: '2017-03-02T00:00:00Z',
        },
      ]);
      const r = await post(`${web.url}/v1/billing/generate-invoice`, undefined, { bearer: who.apiKey });
      expect(r.status).to.equal(409);
      expect(r.body.error.code).to.equal('no_billing_customer');
      expect(await invoicesOf(web.app, who.account.id)).to.have.length(0);
      expect((await usageRowsOf(web.app, who.account.id)).map((row) => row.invoice_id)).to.deep.equal([null]);
    });
  });

  describe('GET /v1/billing/history', () => {
    it('defaults to twelve calendar months up to today and lists invoices and monthly usage totals', async () => {
      const who = await createBillingAccount(web.app, { tier: 'paid' });
      await recordUsage(web.app, [
        {
          accountId: who.account.id,
          model: 'gpt-4.1',
          tier: 'paid',
          prompt: 100_000,
          completion: 0,
          at: '2017-03-02T00:00:00Z',
        },
        {
          accountId: who.account.id,
          model: 'gpt-4.1',
          tier: 'free',
          prompt: 1_000,
          completion: 500,
          at: '2017-01-15T00:00:00Z',
        },
        {
          accountId: who.account.id,
          model: 'gpt-4.1',
          tier: 'paid',
          prompt: 1_000,
          completion: 0,
          at: '2016-03-31T23:59:59Z',
        },
      ]);
      const generated = await post(`${web.url}/v1/billing/generate-invoice`, undefined, { bearer: who.apiKey });
      const r = await get(`${web.url}/v1/billing/history`, { bearer: who.jwt });
      expect(r.status, r.text).to.equal(200);
      expect(r.body).to.include({
        object: 'billing.history',
        start_date: '2016-04-01',
        end_date: '2017-03-20',
        currency: 'usd',
        total_invoiced_cents: 20,
        total_invoiced: '0.20',
      });
      expect(r.body.invoices).to.have.length(1);
      expect(r.body.invoices[0]).to.include({
        id: generated.body.invoice.id,
        stripe_invoice_id: generated.body.invoice.stripe_invoice_id,
        status: 'open',
        amount_cents: 20,
        amount: '0.20',
        hosted_invoice_url: generated.body.invoice.hosted_invoice_url,
        period_start: '2017-03-01T00:00:00.000Z',
      });
      // Stripe's hosted page and its PDF, as Stripe has them for this invoice.
      const stripeInv = fake.invoices.get(generated.body.invoice.stripe_invoice_id)!;
      expect(r.body.invoices[0].hosted_invoice_url).to.equal(stripeInv.hosted_invoice_url).and.be.a('string');
      expect(r.body.invoices[0].invoice_pdf).to.equal(stripeInv.invoice_pdf).and.be.a('string');
      expect(r.body.months).to.deep.equal([
        {
          month: '2017-01',
          requests: 1,
          prompt_tokens: 1000,
          completion_tokens: 500,
          total_tokens: 1500,
          ...NO_CACHE,
          cost_usd: '0',
          cost_cents: 0,
          cost: '0.00',
        },
        {
          month: '2017-03',
          requests: 1,
          prompt_tokens: 100000,
          completion_tokens: 0,
          total_tokens: 100000,
          ...NO_CACHE,
          cost_usd: '0.2',
          cost_cents: 20,
          cost: '0.20',
        },
      ]);
    });

    it('limits invoices and months to the dates asked for', async () => {
      const who = await createBillingAccount(web.app, { tier: 'paid' });
      await recordUsage(web.app, [
        {
          accountId: who.account.id,
          model: 'gpt-4.1',
          tier: 'paid',
          prompt: 100_000,
          completion: 0,
          at: '2017-03-02T00:00:00Z',
        },
        {
          accountId: who.account.id,
          model: 'gpt-4.1',
          tier: 'paid',
          prompt: 3_000,
          completion: 0,
          at: '2017-01-02T00:00:00Z',
        },
      ]);
      await post(`${web.url}/v1/billing/generate-invoice`, undefined, { bearer: who.apiKey });
      const r = await get(`${web.url}/v1/billing/history?start_date=2017-01-01&end_date=2017-02-28`, {
        bearer: who.jwt,
      });
      expect(r.status).to.equal(200);
      expect(r.body).to.include({ start_date: '2017-01-01', end_date: '2017-02-28', total_invoiced_cents: 0 });
      expect(r.body.invoices).to.deep.equal([]);
      expect(r.body.months.map((m: { month: string; cost_cents: number }) => [m.month, m.cost_cents])).to.deep.equal([
        ['2017-01', 1],
      ]);
    });

    for (const [query, field] of [
      ['start_date=2017-13-01', 'start_date'],
      ['start_date=2017-02-30', 'start_date'],
      ['end_date=yesterday', 'end_date'],
      ['start_date=2017-1-5', 'start_date'],
      ['end_date=', 'end_date'],
    ] as const) {
      it(`answers a malformed date (${query}) with 422 naming the parameter`, async () => {
        const who = await createTestAccount(web.app);
        const r = await get(`${web.url}/v1/billing/history?${query}`, { bearer: who.jwt });
        expect(r.status).to.equal(422);
        expect(r.body.detail).to.have.length(1);
        expect(r.body.detail[0]).to.deep.include({ loc: ['query', field], type: 'date_parsing' });
      });
    }

    it('answers an end date before the start date with 422', async () => {
      const who = await createTestAccount(web.app);
      const r = await get(`${web.url}/v1/billing/history?start_date=2017-03-01&end_date=2017-02-28`, {
        bearer: who.jwt,
      });
      expect(r.status).to.equal(422);
      expect(r.body).to.deep.equal({
        detail: [
          {
            loc: ['query', 'end_date'],
            msg: 'end_date (2017-02-28) must be on or after start_date (2017-03-01)',
            type: 'value_error',
          },
        ],
        error: {
          message: "Invalid 'end_date': end_date (2017-02-28) must be on or after start_date (2017-03-01)",
          type: 'invalid_request_error',
          code: 'value_error',
          param: 'end_date',
        },
      });
    });

    it('also defaults the start when only the end is given, and accepts a one-day period', async () => {
      const who = await createTestAccount(web.app);
      const onlyEnd = await get(`${web.url}/v1/billing/history?end_date=2016-12-31`, { bearer: who.jwt });
      expect(onlyEnd.body).to.include({ start_date: '2016-01-01', end_date: '2016-12-31' });
      const oneDay = await get(`${web.url}/v1/billing/history?start_date=2017-03-20&end_date=2017-03-20`, {
        bearer: who.jwt,
      });
      expect(oneDay.status).to.equal(200);
    });

    it('takes a JWT, not an API key', async () => {
      const who = await createTestAccount(web.app);
      const r = await get(`${web.url}/v1/billing/history`, { bearer: who.apiKey });
      expect(r.status).to.equal(401);
      expect(r.body.error.code).to.equal('invalid_token');
    });
  });
});
