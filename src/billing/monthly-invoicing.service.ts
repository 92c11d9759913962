import type { RedisClient } from '../infra/redis.js';
import { findAccountById } from '../accounts/accounts.repository.js';
import { flushUsage } from '../usage/metering.service.js';
import { accountsToInvoice } from './invoices.repository.js';
import { BUSY, withInvoicingLock } from './invoicing-lock.repository.js';
import { invoiceAccount, type InvoicingDeps } from './invoicing.service.js';
import type { JobOptions, JobResult } from './job.js';
import type { Month } from './periods.js';

/** What the monthly run works with: invoicing's parts, and a wait for the Redis connection it drains usage from. */
export interface MonthlyInvoicingDeps extends InvoicingDeps {
  /** Waits (bounded) until the given connections are ready (AppContext.warmUp). */
  warmUp(connections: RedisClient[]): Promise<boolean>;
}

/** How long the monthly run waits for an on-demand invoice of the same account to finish. */
const JOB_LOCK_WAIT_MS = 60_000;

/**
 * Invoices `month` (which must have ended) for every account that owes paid-tier usage up to its
 * end, including accounts that were downgraded during the month. Re-running bills nothing twice:
 * an account invoiced for the month is reported as already invoiced.
 */
export async function invoiceMonth(app: MonthlyInvoicingDeps, month: Month, opts: JobOptions = {}): Promise<JobResult> {
  const now = app.clock.now();
  if (month.end.getTime() > now.getTime()) throw new Error(`month ${month.key} has not ended yet (it ends ${month.end.toISOString()}); it can only be invoiced after that`);
  // Without Stripe this throws 503 billing_not_configured before anything is read.
  void app.stripe;
  // A job may start before the process's fail-fast Redis connection is ready.
  await app.warmUp([app.redis]);
  await flushUsage(app);
  const progress = opts.progress ?? (() => undefined);
  // Named accounts are each visited and reported on, owing or not; otherwise only those that owe.
  const ids = opts.accounts?.length ? [...new Set(opts.accounts)].sort() : await accountsToInvoice(app.db, month.end);
  progress(`invoices ${month.key}: ${ids.length} account(s) to visit`);
  const summary = { month: month.key, accounts: ids.length, invoiced: 0, already_invoiced: 0, nothing_to_invoice: 0, failed: 0, amount_cents: 0n, failures: [] as { account_id: string; error: string }[] };
  for (const id of ids) {
    await opts.checkpoint?.();
    try {
      const outcome = await withInvoicingLock(app.db, id, JOB_LOCK_WAIT_MS, async (conn) => {
        const account = await findAccountById(conn, id);
        if (!account) throw new Error(`no account ${id}`);
        return invoiceAccount(app, conn, account, { kind: 'monthly', month });
      });
      if (outcome === BUSY) throw new Error('another invoicing of this account held its lock for too long');
      if (outcome.status === 'nothing_to_invoice') {
        summary.nothing_to_invoice += 1;
        progress(`  ${id}: nothing to invoice (no billable usage, or under one cent, deferred)`);
      } else if (outcome.status === 'already_invoiced') {
        summary.already_invoiced += 1;
        progress(`  ${id}: already invoiced (${outcome.invoice.stripe_invoice_id}, ${outcome.invoice.amount} ${outcome.invoice.currency.toUpperCase()}, ${outcome.invoice.status})`);
      } else {
        summary.invoiced += 1;
        summary.amount_cents += BigInt(outcome.invoice.amount_cents);
        progress(`  ${id}: invoiced ${outcome.invoice.stripe_invoice_id} ${outcome.invoice.amount} ${outcome.invoice.currency.toUpperCase()} (${outcome.invoice.lines?.length ?? 0} line(s))${outcome.resumed ? ', resumed' : ''}`);
      }
    } catch (err) {
      summary.failed += 1;
      const message = err instanceof Error ? err.message : String(err);
      summary.failures.push({ account_id: id, error: message });
      app.metrics.billing.invoiceFailures.inc();
      app.log.error({ err, accountId: id, month: month.key }, 'invoicing an account failed; the next run retries it');
      progress(`  ${id}: FAILED: ${message}`);
    }
  }
  progress(`invoices ${month.key}: ${summary.invoiced} invoiced, ${summary.already_invoiced} already invoiced, ${summary.nothing_to_invoice} with nothing to invoice, ${summary.failed} failed`);
  return { ok: summary.failed === 0, summary: { ...summary, amount_cents: summary.amount_cents.toString() } };
}

