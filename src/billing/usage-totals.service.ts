import { transaction, type Db } from '../infra/db.js';
import type { Logger } from '../logger.js';
import type { BillingMetrics } from '../metrics.js';
import { rebuildMonthTotals } from '../usage/usage.repository.js';
import type { JobOptions, JobResult } from './job.js';
import type { Month } from './periods.js';

/** What the totals audit works with: the ledger, and the metric and log of each repair. */
export interface UsageTotalsDeps {
  db: Db;
  log: Logger;
  metrics: { billing: BillingMetrics };
}

/*
 * The "roll-up". Usage reads come from usage_monthly_totals, which a statement trigger on the
 * ledger keeps current as rows are inserted, so no periodic roll-up is needed for fast reads.
 * This job is the audit of that design: it re-derives a month's totals from the ledger and
 * rebuilds them if anything differs (which would mean a bug or a manual edit of the ledger),
 * counting and logging each repair.
 */
export async function auditUsageTotals(app: UsageTotalsDeps, month: Month, opts: JobOptions = {}): Promise<JobResult> {
  const progress = opts.progress ?? (() => undefined);
  await opts.checkpoint?.();
  const drift = await transaction(app.db, (trx) => rebuildMonthTotals(trx, month.start, month.end));
  if (drift > 0) {
    app.metrics.billing.totalsRepairs.inc(drift);
    app.log.warn({ month: month.key, drift }, 'monthly usage totals differed from the ledger; rebuilt them');
    progress(`rollup ${month.key}: ${drift} total(s) differed from the ledger and were rebuilt`);
  } else {
    progress(`rollup ${month.key}: totals match the ledger`);
  }
  return { ok: true, summary: { month: month.key, repaired: drift } };
}
