import { expect } from 'chai';
import { ManualClock } from '../../src/clock.js';
import type { Env } from '../../src/config.js';
import { createContext, type AppContext } from '../../src/context.js';
import type { BackgroundService } from '../../src/lifecycle.js';
import { runJob } from '../../src/scheduler/job-runner.js';
import { JOBS } from '../../src/scheduler/jobs.js';
import { startInvoicingWork } from '../../workers/invoicing.js';
import { FakeStripe } from '../fakes/stripe.js';
import {
  createBillingAccount,
  invoiceCreatesFor,
  invoicesOf,
  ledgerCentsByModel,
  linesOf,
  recordUsage,
} from '../support/billing.js';
import { isolatedPrefix, testConfig } from '../support/env.js';
import { eventually } from '../support/http.js';
import { INVOICING_QUEUE } from '../../src/infra/queues.js';

// The monthly run fanned out: one job per account on the invoicing queue, taken by the workers
// started here (in this process, on real Redis and Postgres), against the fake Stripe. Months of
// 2014, which no other test uses, so a run's list of accounts that owe is this test's own.

describe('invoicing fanned out: one job per account, paced to Stripe', () => {
  const clock = new ManualClock('2014-12-20T00:00:00Z');
  const fakes: FakeStripe[] = [];
  const apps: AppContext[] = [];
  const workers: BackgroundService[] = [];

  const stripe = async (traffic?: { opsPerSecond: number }) => {
    const fake = await new FakeStripe({ traffic }).start();
    fakes.push(fake);
    return fake;
  };
  const context = (env: Env) => {
    const app = createContext(testConfig(env), { role: 'worker', clock });
    apps.push(app);
    return app;
  };
  afterEach(async () => {
    for (const w of workers.splice(0)) await w.stop();
    for (const a of apps.splice(0)) await a.close();
    for (const f of fakes.splice(0)) await f.close();
  });

  /** Paid accounts with usage of two models in `month` (YYYY-MM). */
  async function owing(app: AppContext, n: number, month: string) {
    const accounts = [];
    for (let i = 0; i < n; i++) {
      const who = await createBillingAccount(app);
      await recordUsage(app, [
        {
          accountId: who.account.id,
          model: 'gpt-4.1',
          tier: 'paid',
          prompt: 100_000 * (i + 1),
          completion: 10_000,
          at: `${month}-03T00:00:00Z`,
        },
        {
          accountId: who.account.id,
          model: 'claude-haiku-4-5',
          tier: 'paid',
          prompt: 40_000,
          completion: 4_000,
          at: `${month}-04T00:00:00Z`,
        },
      ]);
      accounts.push(who);
    }
    return accounts;
  }

  async function expectBilledOnce(app: AppContext, fake: FakeStripe, accounts: Awaited<ReturnType<typeof owing>>) {
    for (const who of accounts) {
      const invoices = await invoicesOf(app, who.account.id);
      expect(invoices.map((i) => i.status)).to.deep.equal(['open']);
      const lines = await linesOf(app, invoices[0]!.id);
      expect(Object.fromEntries(lines.map((l) => [l.model, l.amount_cents]))).to.deep.equal(
        await ledgerCentsByModel(app, { accountId: who.account.id }),
      );
      // One invoice asked for (a call refused with 429 is sent again with the same idempotency key).
      expect(new Set(invoiceCreatesFor(fake, who.customerId).map((r) => r.idempotencyKey)).size).to.equal(1);
      expect([...fake.invoices.values()].filter((i) => i.customer === who.customerId)).to.have.length(1);
    }
  }

  it('invoices every account that owes once, through account jobs shared by two workers', async () => {
    const fake = await stripe();
    const env = fake.env({ REDIS_PREFIX: isolatedPrefix() });
    const [coordinator, workerA, workerB] = [context(env), context(env), context(env)];
    workers.push(await startInvoicingWork(workerA), await startInvoicingWork(workerB));
    const accounts = await owing(coordinator, 6, '2014-01');

    const run = await runJob(coordinator, JOBS.invoices, '2014-01');
    expect(run).to.deep.include({ outcome: 'ran', ok: true });
    if (run.outcome !== 'ran') throw new Error('unreachable');
    expect(run.summary).to.include({ accounts: 6, invoiced: 6, failed: 0 });
    await expectBilledOnce(coordinator, fake, accounts);

    const again = await runJob(coordinator, JOBS.invoices, '2014-01', { force: true });
    expect(again).to.deep.include({ outcome: 'ran', ok: true });
    await expectBilledOnce(coordinator, fake, accounts);
  });

  it('stops waiting when its process stops, and leaves the queued account jobs to the workers', async () => {
    const fake = await stripe();
    const env = fake.env({ REDIS_PREFIX: isolatedPrefix() });
    const app = context(env);
    const accounts = await owing(app, 2, '2014-06');
    let stopping = false;
    // No worker yet: the jobs wait in the queue while the run waits for them.
    const run = runJob(app, JOBS.invoices, '2014-06', { shouldStop: () => stopping });
    await eventually(
      async () => ((await app.queue(INVOICING_QUEUE).getWaitingCount()) === 2 ? true : undefined),
      'the account jobs to be queued',
    );
    stopping = true;
    expect(await run).to.deep.include({ outcome: 'ran', ok: false });

    workers.push(await startInvoicingWork(app));
    const next = await runJob(app, JOBS.invoices, '2014-06');
    expect(next).to.deep.include({ outcome: 'ran', ok: true });
    await expectBilledOnce(app, fake, accounts);
  });

  it('retries an account whose Stripe call failed, with backoff, within the same run', async () => {
    const fake = await stripe();
    const env = fake.env({
      REDIS_PREFIX: isolatedPrefix(),
      STRIPE_MAX_NETWORK_RETRIES: '0',
      INVOICING_RETRY_DELAY_MS: '50',
    });
    const app = context(env);
    workers.push(await startInvoicingWork(app));
    const accounts = await owing(app, 1, '2014-02');
    fake.failNext(1, { method: 'POST', path: /^\/v1\/invoices\/[^/]+\/finalize$/ });

    const run = await runJob(app, JOBS.invoices, '2014-02');
    expect(run).to.deep.include({ outcome: 'ran', ok: true });
    expect(fake.requests.filter((r) => /\/finalize$/.test(r.path))).to.have.length(2);
    await expectBilledOnce(app, fake, accounts);
  });

  it('reports an account that failed every attempt, and the next run retries it and bills it once', async () => {
    const fake = await stripe();
    const env = fake.env({
      REDIS_PREFIX: isolatedPrefix(),
      STRIPE_MAX_NETWORK_RETRIES: '0',
      INVOICING_ATTEMPTS: '2',
      INVOICING_RETRY_DELAY_MS: '50',
    });
    const app = context(env);
    workers.push(await startInvoicingWork(app));
    const accounts = await owing(app, 1, '2014-03');
    fake.failNext(2, { method: 'POST', path: /^\/v1\/invoiceitems$/ });

    const failed = await runJob(app, JOBS.invoices, '2014-03');
    expect(failed).to.deep.include({ outcome: 'ran', ok: false });
    if (failed.outcome !== 'ran') throw new Error('unreachable');
    expect(failed.summary).to.include({ failed: 1 });

    const retried = await runJob(app, JOBS.invoices, '2014-03');
    expect(retried).to.deep.include({ outcome: 'ran', ok: true });
    await expectBilledOnce(app, fake, accounts);
  });

  it("sends a call Stripe refused with 429 again after a pause, so a run over Stripe's limit still bills every account once", async () => {
    // Stripe allows 4 calls a second here, and the service is told it may make 10 000: it meets 429s.
    const fake = await stripe({ opsPerSecond: 4 });
    const env = fake.env({
      REDIS_PREFIX: isolatedPrefix(),
      STRIPE_MAX_NETWORK_RETRIES: '0',
      STRIPE_MAX_OPS_PER_SECOND: '10000',
      INVOICING_ATTEMPTS: '1',
    });
    const app = context(env);
    workers.push(await startInvoicingWork(app));
    const accounts = await owing(app, 3, '2014-04');
    const before = fake.requests.length;

    const run = await runJob(app, JOBS.invoices, '2014-04');
    expect(run).to.deep.include({ outcome: 'ran', ok: true });
    expect(fake.requests.slice(before).filter((r) => r.status === 429).length).to.be.greaterThan(0);
    await expectBilledOnce(app, fake, accounts);
  });

  it('pauses the invoicing queue and puts the job back without spending an attempt when Stripe keeps answering 429', async () => {
    const fake = await stripe();
    const env = fake.env({ REDIS_PREFIX: isolatedPrefix(), STRIPE_MAX_NETWORK_RETRIES: '0', INVOICING_ATTEMPTS: '1' });
    const app = context(env);
    workers.push(await startInvoicingWork(app));
    const accounts = await owing(app, 1, '2014-05');
    // One more 429 than the call is sent again: the job itself meets it.
    fake.failNext(5, {
      status: 429,
      method: 'POST',
      path: /^\/v1\/invoices$/,
      error: { type: 'invalid_request_error', code: 'rate_limit', message: 'Request rate limit exceeded.' },
    });

    const run = await runJob(app, JOBS.invoices, '2014-05');
    expect(run).to.deep.include({ outcome: 'ran', ok: true });
    expect(
      fake.requests.filter((r) => r.path === '/v1/invoices' && r.method === 'POST').map((r) => r.status),
    ).to.deep.equal([429, 429, 429, 429, 429, 200]);
    expect((await app.metrics.billing.stripeRateLimited.get()).values[0]!.value).to.be.greaterThan(0);
    await expectBilledOnce(app, fake, accounts);
  });

  it('keeps the Stripe calls of several processes together under STRIPE_MAX_OPS_PER_SECOND', async () => {
    // Stripe allows 6 a second; two processes pace themselves together to 5 and meet no 429.
    const fake = await stripe({ opsPerSecond: 6 });
    const env = fake.env({
      REDIS_PREFIX: isolatedPrefix(),
      STRIPE_MAX_NETWORK_RETRIES: '0',
      STRIPE_MAX_OPS_PER_SECOND: '5',
    });
    const [a, b] = [context(env), context(env)];
    await Promise.all([a.warmUp([a.redis]), b.warmUp([b.redis])]);
    const calls = Array.from({ length: 16 }, (_, i) =>
      (i % 2 ? a : b).stripe.customers.create({ email: `paced-${i}@example.com` }),
    );
    await Promise.all(calls);
    expect(fake.requests.filter((r) => r.status === 429)).to.have.length(0);
    expect(fake.requests).to.have.length(16);
  });
});
