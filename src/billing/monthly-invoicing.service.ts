import type { RedisClient, RedisRole } from '../infra/redis.js';
import type { Config } from '../config.js';
import {
  createQueueEvents,
  INVOICING_QUEUE,
  type Job,
  type Queue,
  type QueueEvents,
  type QueueRef,
} from '../infra/queues.js';
import { findAccount } from '../accounts/account-billing.service.js';
import { flushUsage } from '../usage/metering.service.js';
import { accountsToInvoice } from './invoices.repository.js';
import { BUSY, withInvoicingLock } from './invoicing-lock.repository.js';
import { describeDeferred, invoiceAccount, type InvoicingDeps } from './invoicing.service.js';
import type { JobOptions, JobResult } from '../scheduled-job.js';
import type { Month } from '../calendar.js';

/*
 * The monthly run fans out: the run (held by one process through its claim on the month) lists
 * the accounts that owe, queues one job per account on the invoicing queue, and waits for their
 * results. Any worker takes account jobs (INVOICING_CONCURRENCY at a time each), retrying a
 * failed one with backoff. An account is never invoiced twice for a month whatever runs twice:
 * its invoice's idempotency key is the account and the month, and invoicing it holds its lock.
 */

/** One account of one month's run: the invoicing queue's job. */
export interface AccountInvoicingJob {
  month: string;
  accountId: string;
}

/** What invoicing one account came to, as the run's summary counts it. */
export interface AccountInvoicingResult {
  status: 'invoiced' | 'already_invoiced' | 'nothing_to_invoice';
  amount_cents: string;
  /** One line for run-job's progress output. */
  line: string;
}

/** What the monthly run works with: invoicing's parts, the queue it fans out on, and its connections. */
export interface MonthlyInvoicingDeps extends InvoicingDeps {
  config: InvoicingDeps['config'] & Pick<Config, 'redis' | 'invoicing'>;
  /** Waits (bounded) until the given connections are ready (AppContext.warmUp). */
  warmUp(connections: RedisClient[]): Promise<boolean>;
  queue<T>(ref: QueueRef): Queue<T>;
  redisConnection(role: RedisRole, name?: string): RedisClient;
}

/** How long an account job waits for an on-demand invoice of the same account to finish. */
const JOB_LOCK_WAIT_MS = 60_000;
/** How often the run checks its claim while it waits, and looks again at jobs whose end it may have missed. */
const WAIT_SLICE_MS = 5_000;

/** The account job's id: one per account and month, so queuing it again while it exists adds nothing. */
export const accountJobId = (month: string, accountId: string): string => `invoice.${month}.${accountId}`;

/** Invoices one account for `month`: the body of an account job, also used by a targeted run. */
export async function invoiceMonthAccount(
  app: InvoicingDeps,
  month: Month,
  accountId: string,
): Promise<AccountInvoicingResult> {
  const outcome = await withInvoicingLock(app.db, accountId, JOB_LOCK_WAIT_MS, async (conn) => {
    const account = await findAccount(conn, accountId);
    if (!account) throw new Error(`no account ${accountId}`);
    return invoiceAccount(app, conn, account, { kind: 'monthly', month });
  });
  if (outcome === BUSY) throw new Error('another invoicing of this account held its lock for too long');
  if (outcome.status === 'nothing_to_invoice') {
    return {
      status: 'nothing_to_invoice',
      amount_cents: '0',
      line:
        outcome.deferred.length === 0
          ? `  ${accountId}: nothing to invoice (no billable usage)`
          : `  ${accountId}: nothing to invoice: ${describeDeferred(outcome.deferred)} under half a cent, left for a later invoice`,
    };
  }
  const inv = outcome.invoice;
  if (outcome.status === 'already_invoiced') {
    return {
      status: 'already_invoiced',
      amount_cents: '0',
      line: `  ${accountId}: already invoiced (${inv.stripe_invoice_id}, ${inv.amount} ${inv.currency.toUpperCase()}, ${inv.status})`,
    };
  }
  return {
    status: 'invoiced',
    amount_cents: String(inv.amount_cents),
    line: `  ${accountId}: invoiced ${inv.stripe_invoice_id} ${inv.amount} ${inv.currency.toUpperCase()} (${inv.lines?.length ?? 0} line(s))${outcome.resumed ? ', resumed' : ''}`,
  };
}

/**
 * Invoices `month` (which must have ended) for every account that owes paid-tier usage up to its
 * end, including accounts that were downgraded during the month: one job per account, run by the
 * workers. Named accounts (an operator's targeted re-run, a test's own accounts) are invoiced here,
 * in this process, and so is every account when `inProcess` is set (run-job --here, for a
 * deployment whose workers are down). Re-running bills nothing twice: an account invoiced for the
 * month is reported as already invoiced.
 */
export async function invoiceMonth(app: MonthlyInvoicingDeps, month: Month, opts: JobOptions = {}): Promise<JobResult> {
  const now = app.clock.now();
  if (month.end.getTime() > now.getTime())
    throw new Error(
      `month ${month.key} has not ended yet (it ends ${month.end.toISOString()}); it can only be invoiced after that`,
    );
  // Without Stripe this throws 503 billing_not_configured before anything is read.
  void app.stripe;
  // A job may start before the process's fail-fast Redis connection is ready.
  await app.warmUp([app.redis]);
  await flushUsage(app);
  const progress = opts.progress ?? (() => undefined);
  const summary = new RunSummary(month.key);

  if (opts.accounts?.length || opts.inProcess) {
    const ids = opts.accounts?.length ? [...new Set(opts.accounts)].sort() : await accountsToInvoice(app.db, month.end);
    progress(`invoices ${month.key}: ${ids.length} account(s), invoiced by this process`);
    for (const id of ids) {
      await opts.checkpoint?.();
      try {
        summary.add(id, await invoiceMonthAccount(app, month, id), progress);
      } catch (err) {
        summary.fail(app, id, err, progress);
      }
    }
  } else {
    const ids = await accountsToInvoice(app.db, month.end);
    progress(`invoices ${month.key}: ${ids.length} account(s) to invoice, one job each on the invoicing queue`);
    await fanOut(app, month, ids, summary, opts);
  }
  progress(
    `invoices ${month.key}: ${summary.invoiced} invoiced, ${summary.alreadyInvoiced} already invoiced, ${summary.nothingToInvoice} with nothing to invoice, ${summary.failed} failed`,
  );
  return summary.result();
}

/** Queues one job per account and waits for every one to end, counting each result as it comes. */
async function fanOut(
  app: MonthlyInvoicingDeps,
  month: Month,
  ids: string[],
  summary: RunSummary,
  opts: JobOptions,
): Promise<void> {
  const progress = opts.progress ?? (() => undefined);
  const queue = app.queue<AccountInvoicingJob>(INVOICING_QUEUE);
  const events = createQueueEvents(
    app.config,
    INVOICING_QUEUE,
    app.redisConnection('queue-worker', 'invoicing-events'),
  );
  try {
    await events.waitUntilReady();
    // A job of this month that failed for good in an earlier run is tried again (queuing it anew
    // would find its id taken and add nothing). One that completed is kept for a day, so a re-run
    // reads its result instead of invoicing again, though that would be harmless.
    for (const job of await queue.getFailed()) if (job.data.month === month.key) await job.retry('failed');
    const jobs: Job<AccountInvoicingJob, AccountInvoicingResult>[] = [];
    for (let i = 0; i < ids.length; i += 1000) {
      const batch = ids.slice(i, i + 1000).map((accountId) => ({
        name: 'invoice-account',
        data: { month: month.key, accountId },
        opts: {
          jobId: accountJobId(month.key, accountId),
          attempts: app.config.invoicing.attempts,
          backoff: { type: 'exponential', delay: app.config.invoicing.retryDelayMs },
          removeOnComplete: { age: 86_400 },
          removeOnFail: { age: 30 * 86_400 },
        },
      }));
      jobs.push(...((await queue.addBulk(batch)) as Job<AccountInvoicingJob, AccountInvoicingResult>[]));
    }
    // In queue order, one at a time: by the time a job's turn comes most later ones have ended,
    // and each costs one read; thousands of waits at once would each hold listeners.
    for (const job of jobs) {
      const accountId = job.data.accountId;
      // Stop at once when the process is stopping or the claim is lost; the jobs carry on.
      await opts.checkpoint?.();
      try {
        summary.add(accountId, await waitFor(job, events, opts), progress);
      } catch (err) {
        if (err instanceof Interrupted) throw err.cause;
        summary.fail(app, accountId, err, progress);
      }
    }
  } finally {
    await events.close().catch(() => undefined);
  }
}

class Interrupted extends Error {}

/**
 * The job's result once it ends. BullMQ announces the end on the queue's event stream; every
 * WAIT_SLICE_MS the run also checks its claim (checkpoint) and reads the job's state itself, so
 * an announcement lost to a Redis failover cannot leave it waiting for ever.
 */
async function waitFor(
  job: Job<AccountInvoicingJob, AccountInvoicingResult>,
  events: QueueEvents,
  opts: JobOptions,
): Promise<AccountInvoicingResult> {
  for (;;) {
    try {
      return await job.waitUntilFinished(events, WAIT_SLICE_MS);
    } catch (err) {
      if (!(err instanceof Error) || !/timed out/i.test(err.message)) throw err;
    }
    try {
      await opts.checkpoint?.();
    } catch (err) {
      throw new Interrupted('the run must stop', { cause: err });
    }
  }
}

/** The run's counts and failures, reported per account as they come. */
class RunSummary {
  invoiced = 0;
  alreadyInvoiced = 0;
  nothingToInvoice = 0;
  failed = 0;
  private amountCents = 0n;
  private readonly failures: { account_id: string; error: string }[] = [];
  private accounts = 0;

  constructor(private readonly month: string) {}

  add(accountId: string, r: AccountInvoicingResult, progress: (line: string) => void): void {
    this.accounts += 1;
    if (r.status === 'invoiced') {
      this.invoiced += 1;
      this.amountCents += BigInt(r.amount_cents);
    } else if (r.status === 'already_invoiced') this.alreadyInvoiced += 1;
    else this.nothingToInvoice += 1;
    progress(r.line);
  }

  fail(
    app: Pick<InvoicingDeps, 'metrics' | 'log'>,
    accountId: string,
    err: unknown,
    progress: (line: string) => void,
  ): void {
    this.accounts += 1;
    this.failed += 1;
    const message = err instanceof Error ? err.message : String(err);
    this.failures.push({ account_id: accountId, error: message });
    app.metrics.billing.invoiceFailures.inc();
    app.log.error({ err, accountId, month: this.month }, 'invoicing an account failed; the next run retries it');
    progress(`  ${accountId}: FAILED: ${message}`);
  }

  result(): JobResult {
    return {
      ok: this.failed === 0,
      summary: {
        month: this.month,
        accounts: this.accounts,
        invoiced: this.invoiced,
        already_invoiced: this.alreadyInvoiced,
        nothing_to_invoice: this.nothingToInvoice,
        failed: this.failed,
        amount_cents: this.amountCents.toString(),
        failures: this.failures,
      },
    };
  }
}
