import { expect } from 'chai';
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type { Env } from '../../src/config.js';
import { createContext, type AppContext } from '../../src/context.js';
import { addMonths, monthOf } from '../../src/calendar.js';
import { FakeStripe } from '../fakes/stripe.js';
import {
  createBillingAccount,
  invoiceCreatesFor,
  invoicesOf,
  ledgerCentsByModel,
  linesOf,
  recordUsage,
} from '../support/billing.js';
import { isolatedPrefix, testConfig, testEnv } from '../support/env.js';
import { eventually, get } from '../support/http.js';
import { startRole, type RoleProcess } from '../support/processes.js';

// The compiled run-job script and scheduler processes against real Postgres and the fake Stripe
// API (served from this process): a run killed mid-way and re-run, two schedulers at once.

const RUN_JOB = fileURLToPath(new URL('../../scripts/run-job.js', import.meta.url));

interface Exit {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

function runJob(args: string[], env: Env): Promise<Exit> {
  const proc = spawn(process.execPath, ['--enable-source-maps', RUN_JOB, ...args], {
    env: testEnv(env),
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  proc.stdout.on('data', (d) => (stdout += d));
  proc.stderr.on('data', (d) => (stderr += d));
  return new Promise((resolve) => proc.once('exit', (code, signal) => resolve({ code, signal, stdout, stderr })));
}

describe('scheduler and run-job as processes', () => {
  let fake: FakeStripe;
  let app: AppContext;
  const roles: RoleProcess[] = [];

  before(async () => {
    fake = await new FakeStripe().start();
    app = createContext(testConfig(fake.env()), { role: 'test' });
  });
  afterEach(async () => {
    await Promise.all(roles.splice(0).map((r) => r.stop()));
  });
  after(async () => {
    await app.close();
    await fake.close();
  });

  const runOf = (job: string, period: string) =>
    app.db
      .selectFrom('scheduler_runs')
      .selectAll()
      .where('job', '=', job)
      .where('period_key', '=', period)
      .executeTakeFirst();

  it('bills nothing twice when an invoicing run is killed after its first Stripe invoice item and run again', async () => {
    const accounts = [await createBillingAccount(app), await createBillingAccount(app)];
    for (const who of accounts) {
      await recordUsage(app, [
        {
          accountId: who.account.id,
          model: 'gpt-4.1',
          tier: 'paid',
          prompt: 300_000,
          completion: 30_000,
          at: '2015-10-07T00:00:00Z',
        },
        {
          accountId: who.account.id,
          model: 'claude-sonnet-4-5',
          tier: 'paid',
          prompt: 30_000,
          completion: 3_000,
          at: '2015-10-08T00:00:00Z',
        },
      ]);
    }

    // --here: run-job invoices the accounts itself, so the fault kills run-job mid-account.
    const killed = await runJob(
      ['invoices', '--month', '2015-10', '--here'],
      fake.env({ FAULT_INJECT: 'crash-after-invoice-item' }),
    );
    expect(killed.signal, killed.stdout + killed.stderr).to.equal('SIGKILL');
    expect(await runOf('invoices', '2015-10')).to.include({ status: 'running' });
    const drafts = (await Promise.all(accounts.map((w) => invoicesOf(app, w.account.id)))).flat();
    expect(drafts.map((d) => d.status)).to.deep.equal(['draft']);
    expect(fake.invoiceItems.size).to.be.greaterThan(0);

    const rerun = await runJob(['invoices', '--month', '2015-10', '--here'], fake.env());
    expect(rerun.code, rerun.stdout + rerun.stderr).to.equal(0);
    expect(rerun.stdout).to.include('invoices 2015-10: starting');
    expect(rerun.stdout).to.match(/resumed/);
    expect(rerun.stdout).to.include('invoices 2015-10: succeeded');
    expect(await runOf('invoices', '2015-10')).to.include({ status: 'succeeded' });

    for (const who of accounts) {
      const invoices = await invoicesOf(app, who.account.id);
      expect(invoices.map((i) => i.status)).to.deep.equal(['open']);
      const lines = await linesOf(app, invoices[0]!.id);
      expect(Object.fromEntries(lines.map((l) => [l.model, l.amount_cents]))).to.deep.equal(
        await ledgerCentsByModel(app, { accountId: who.account.id }),
      );
      const stripeInvoices = [...fake.invoices.values()].filter((i) => i.customer === who.customerId);
      expect(stripeInvoices).to.have.length(1);
      expect(stripeInvoices[0]!.total).to.equal(Number(invoices[0]!.amount_cents));
      const items = [...fake.invoiceItems.values()].filter((i) => i.customer === who.customerId);
      expect(items.map((i) => i.metadata.model).sort()).to.deep.equal(['claude-sonnet-4-5', 'gpt-4.1']);
    }

    const third = await runJob(['invoices', '--month', '2015-10', '--here'], fake.env());
    expect(third.code).to.equal(0);
    for (const who of accounts) expect(invoiceCreatesFor(fake, who.customerId)).to.have.length(1);
  });

  it('hands a month to the workers as one job per account, and a worker killed mid-account bills nothing twice', async () => {
    const accounts = [
      await createBillingAccount(app),
      await createBillingAccount(app),
      await createBillingAccount(app),
    ];
    for (const who of accounts) {
      await recordUsage(app, [
        {
          accountId: who.account.id,
          model: 'gpt-4.1',
          tier: 'paid',
          prompt: 200_000,
          completion: 20_000,
          at: '2014-11-07T00:00:00Z',
        },
        {
          accountId: who.account.id,
          model: 'claude-haiku-4-5',
          tier: 'paid',
          prompt: 50_000,
          completion: 5_000,
          at: '2014-11-08T00:00:00Z',
        },
      ]);
    }
    const env = fake.env({
      REDIS_PREFIX: isolatedPrefix(),
      QUEUE_STALLED_INTERVAL_MS: '1000',
      INVOICING_RETRY_DELAY_MS: '100',
    });
    // The first worker takes the account jobs and dies after its first Stripe invoice item.
    const doomed = await startRole('worker', { ...env, FAULT_INJECT: 'crash-after-invoice-item' });
    roles.push(doomed);
    const run = runJob(['invoices', '--month', '2014-11'], env);
    await doomed.exited;
    const drafts = (await Promise.all(accounts.map((w) => invoicesOf(app, w.account.id)))).flat();
    expect(drafts.map((d) => d.status)).to.include('draft');
    // Another worker finds the jobs stalled and finishes them, resuming the drafts.
    roles.push(await startRole('worker', env));
    const done = await run;
    expect(done.code, done.stdout + done.stderr).to.equal(0);
    expect(done.stdout).to.include('one job each on the invoicing queue');
    expect(done.stdout).to.include('invoices 2014-11: succeeded');
    for (const who of accounts) {
      const invoices = await invoicesOf(app, who.account.id);
      expect(invoices.map((i) => i.status)).to.deep.equal(['open']);
      const lines = await linesOf(app, invoices[0]!.id);
      expect(Object.fromEntries(lines.map((l) => [l.model, l.amount_cents]))).to.deep.equal(
        await ledgerCentsByModel(app, { accountId: who.account.id }),
      );
      expect(invoiceCreatesFor(fake, who.customerId)).to.have.length(1);
      expect([...fake.invoices.values()].filter((i) => i.customer === who.customerId)).to.have.length(1);
    }
  });

  it('runs the previous month once when two schedulers start together, catching it up at start', async () => {
    const previous = addMonths(monthOf(new Date()), -1);
    const who = await createBillingAccount(app);
    await recordUsage(app, [
      {
        accountId: who.account.id,
        model: 'gpt-4.1',
        tier: 'paid',
        prompt: 1_000_000,
        completion: 0,
        at: new Date(previous.start.getTime() + 86_400_000),
      },
    ]);
    // This run owns the previous month's record: no scheduler has run it in this database.
    await app.db
      .deleteFrom('scheduler_runs')
      .where('job', '=', 'invoices')
      .where('period_key', '=', previous.key)
      .execute();

    const env = fake.env({ SCHEDULER_METRICS_PORT: '0', WORKER_METRICS_PORT: '0' });
    // The schedulers hand the period over; the worker runs it.
    roles.push(
      ...(await Promise.all([startRole('scheduler', env), startRole('scheduler', env), startRole('worker', env)])),
    );
    const run = await eventually(
      async () => {
        const r = await runOf('invoices', previous.key);
        return r && r.status !== 'running' ? r : undefined;
      },
      `the invoices run for ${previous.key}`,
      30_000,
    );
    expect(run.finished_at).to.not.equal(null);

    const invoices = await invoicesOf(app, who.account.id);
    expect(invoices.map((i) => [i.kind, i.status, i.amount_cents])).to.deep.equal([['monthly', 'open', '200']]);
    expect(invoiceCreatesFor(fake, who.customerId)).to.have.length(1);

    // Each process serves its registry; between them they issued the invoice once.
    let issued = 0;
    for (const role of roles) {
      const url = /"url":"(http:\/\/[^"]+\/metrics)"/.exec(role.output())?.[1];
      expect(url, role.output()).to.be.a('string');
      const metrics = await get(url!);
      expect(metrics.status).to.equal(200);
      expect(metrics.text).to.include('scheduler_job_runs_total');
      issued += Number(/billing_invoices_created_total\{kind="monthly"[^}]*\} (\d+)/.exec(metrics.text)?.[1] ?? 0);
    }
    expect(issued).to.be.greaterThanOrEqual(1);
  });

  it('explains bad arguments with exit code 64, runs the rollup audit and lists recent runs', async () => {
    const unknown = await runJob(['bake'], {});
    expect(unknown.code).to.equal(64);
    expect(unknown.stderr).to.include('unknown job bake');
    const future = await runJob(['invoices', '--month', '2999-01'], {});
    expect(future.code).to.equal(64);
    expect(future.stderr).to.include('has not ended');
    const badMonth = await runJob(['rollup', '--month', '2015-13'], {});
    expect(badMonth.code).to.equal(64);
    const rollup = await runJob(['rollup', '--month', '2015-09'], {});
    expect(rollup.code, rollup.stderr).to.equal(0);
    expect(rollup.stdout).to.include('rollup 2015-09: totals match the ledger');
    const status = await runJob(['status'], {});
    expect(status.code).to.equal(0);
    expect(status.stdout).to.match(/rollup\s+2015-09\s+succeeded/);
  });
});
