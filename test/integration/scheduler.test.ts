import { expect } from 'chai';
import { ManualClock } from '../../src/clock.js';
import { createContext, type AppContext } from '../../src/context.js';
import { runJob } from '../../src/scheduler/job-runner.js';
import { JOBS } from '../../src/scheduler/jobs.js';
import { startScheduler, type ScheduledWork } from '../../src/scheduler/scheduler.service.js';
import { SCHEDULED_QUEUE } from '../../src/infra/queues.js';
import { startScheduledWork } from '../../workers/scheduled.js';
import { startInvoicingWork } from '../../workers/invoicing.js';
import type { BackgroundService } from '../../src/lifecycle.js';
import { eventually } from '../support/http.js';
import { FakeStripe } from '../fakes/stripe.js';
import { createBillingAccount, invoiceCreatesFor, invoicesOf, recordUsage } from '../support/billing.js';
import { isolatedPrefix, testConfig } from '../support/env.js';

// The scheduler in this process, with a hand-set clock and real Postgres: catch-up at start, the
// claim that keeps replicas from running a period twice, retries of failed runs. It runs the jobs
// for every account (no filter), over 2015, which holds no other test's usage.

describe('scheduler: due jobs, catch-up and replicas', () => {
  let fake: FakeStripe;
  const clock = new ManualClock('2015-08-03T10:00:00Z');
  const apps: AppContext[] = [];
  const newApp = () => {
    // A Redis prefix of its own: what a scheduler hands over here is never left for another test's workers.
    const app = createContext(
      testConfig(
        fake.env({
          STRIPE_MAX_NETWORK_RETRIES: '0',
          REDIS_PREFIX: isolatedPrefix(),
          INVOICING_ATTEMPTS: '2',
          INVOICING_RETRY_DELAY_MS: '50',
        }),
      ),
      { role: 'scheduler', clock },
    );
    apps.push(app);
    return app;
  };
  // Workers that invoice the accounts a monthly run hands out, on each app's own queue.
  const invoicing: BackgroundService[] = [];
  const withInvoicingWorker = async (app: AppContext): Promise<AppContext> => {
    invoicing.push(await startInvoicingWork(app));
    return app;
  };
  afterEach(async () => {
    for (const w of invoicing.splice(0)) await w.stop();
  });

  before(async () => {
    fake = await new FakeStripe().start();
  });
  after(async () => {
    for (const app of apps) await app.close();
    await fake.close();
  });

  const schedulerDeps = (app: AppContext) => ({
    queue: app.queue<ScheduledWork>(SCHEDULED_QUEUE),
    clock: app.clock,
    log: app.log,
    config: app.config,
    metrics: app.metrics,
  });

  const runOf = (app: AppContext, job: string, period: string) =>
    app.db
      .selectFrom('scheduler_runs')
      .selectAll()
      .where('job', '=', job)
      .where('period_key', '=', period)
      .executeTakeFirst();

  it('catches up at start a monthly invoicing run missed while no scheduler was up, and runs it once', async () => {
    const app = await withInvoicingWorker(newApp());
    const who = await createBillingAccount(app);
    await recordUsage(app, [
      {
        accountId: who.account.id,
        model: 'gpt-4.1',
        tier: 'paid',
        prompt: 400_000,
        completion: 40_000,
        at: '2015-07-14T00:00:00Z',
      },
    ]);
    expect(await runOf(app, 'invoices', '2015-07')).to.equal(undefined);

    clock.set('2015-08-03T10:00:00Z');
    const scheduler = startScheduler(schedulerDeps(app));
    const work = await startScheduledWork(app);
    try {
      // wake() queues behind the start-up wake; a worker runs what they handed over.
      await scheduler.wake('test');
      for (const [job, period] of [
        ['invoices', '2015-07'],
        ['rollup', '2015-07'],
        ['reconcile', '2015-08-03'],
      ] as const) {
        await eventually(
          async () => ((await runOf(app, job, period))?.finished_at ? true : undefined),
          `the ${job} run for ${period}`,
        );
      }
      const [inv, ...more] = await invoicesOf(app, who.account.id);
      expect(more).to.have.length(0);
      expect(inv!).to.include({ kind: 'monthly', status: 'open', amount_cents: '112' });
      expect(await runOf(app, 'invoices', '2015-07')).to.include({ status: 'succeeded' });
      expect(await runOf(app, 'rollup', '2015-07')).to.include({ status: 'succeeded' });
      expect(await runOf(app, 'reconcile', '2015-08-03')).to.not.equal(undefined);
      expect(invoiceCreatesFor(fake, who.customerId)).to.have.length(1);
    } finally {
      await scheduler.stop();
      await work.stop();
    }
  });

  it('schedules only the jobs that need no Stripe (the rollup audit and the sign-in and stored-response clean-ups) where Stripe is not configured', async () => {
    const app = createContext(testConfig({ STRIPE_SECRET_KEY: '', REDIS_PREFIX: isolatedPrefix() }), {
      role: 'scheduler',
      clock,
    });
    apps.push(app);
    const scheduler = startScheduler(schedulerDeps(app));
    try {
      expect(scheduler.jobs).to.deep.equal(['rollup', 'sign-ins', 'responses']);
      await scheduler.wake('test');
    } finally {
      await scheduler.stop();
    }
  });

  it('lets only one of two replicas run a period at a time, and the other skips it', async () => {
    const [a, b] = await Promise.all([withInvoicingWorker(newApp()), withInvoicingWorker(newApp())]);
    const who = await createBillingAccount(a);
    await recordUsage(a, [
      {
        accountId: who.account.id,
        model: 'gpt-4.1',
        tier: 'paid',
        prompt: 100_000,
        completion: 0,
        at: '2015-05-02T00:00:00Z',
      },
      {
        accountId: who.account.id,
        model: 'claude-haiku-4-5',
        tier: 'paid',
        prompt: 100_000,
        completion: 0,
        at: '2015-05-03T00:00:00Z',
      },
    ]);
    clock.set('2015-06-01T00:15:00Z');
    const outcomes = await Promise.all([runJob(a, JOBS.invoices, '2015-05'), runJob(b, JOBS.invoices, '2015-05')]);
    const kinds = outcomes.map((o) => o.outcome).sort();
    expect(kinds[1]).to.equal('ran');
    expect(['already_done', 'busy']).to.include(kinds[0]);
    expect(await invoicesOf(a, who.account.id)).to.have.length(1);
    expect(invoiceCreatesFor(fake, who.customerId)).to.have.length(1);
    expect(await runOf(a, 'invoices', '2015-05')).to.include({ status: 'succeeded' });
  });

  it('retries a failed run at the next wake and completes its draft without billing twice', async () => {
    const app = await withInvoicingWorker(newApp());
    const who = await createBillingAccount(app);
    await recordUsage(app, [
      {
        accountId: who.account.id,
        model: 'gpt-4.1',
        tier: 'paid',
        prompt: 250_000,
        completion: 0,
        at: '2015-03-10T00:00:00Z',
      },
    ]);
    clock.set('2015-04-01T00:20:00Z');
    // Both of the account job's attempts fail: the run fails, and the next one retries the job.
    fake.failNext(2, { method: 'POST', path: /^\/v1\/invoiceitems$/ });
    const first = await runJob(app, JOBS.invoices, '2015-03');
    expect(first).to.include({ outcome: 'ran', ok: false });
    expect(await runOf(app, 'invoices', '2015-03')).to.include({ status: 'failed' });

    const second = await runJob(app, JOBS.invoices, '2015-03');
    expect(second).to.include({ outcome: 'ran', ok: true });
    expect(await runOf(app, 'invoices', '2015-03')).to.include({ status: 'succeeded' });
    const invoices = await invoicesOf(app, who.account.id);
    expect(invoices.map((i) => [i.status, i.amount_cents])).to.deep.equal([['open', '50']]);
    expect(
      invoiceCreatesFor(fake, who.customerId).filter(
        (r) => r.idempotencyKey === `monthly:${who.account.id}:2015-03:invoice`,
      ),
    ).to.have.length(1);
    expect([...fake.invoices.values()].filter((i) => i.customer === who.customerId)).to.have.length(1);

    const third = await runJob(app, JOBS.invoices, '2015-03');
    expect(third.outcome).to.equal('already_done');
  });
});
