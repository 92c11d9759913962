import { transaction, type Db } from '../infra/db.js';
import type { Logger } from '../logger.js';
import type { BillingMetrics } from '../metrics.js';
import { rebuildDayTotals, rebuildMonthTotals } from '../usage/ledger.service.js';
import type { JobOptions, JobResult } from '../scheduled-job.js';
import type { Month } from '../calendar.js';

/** What the totals audit works with: the ledger, and the metric and log of each repair. */
export interface UsageTotalsDeps {
  db: Db;
  log: Logger;
  metrics: { billing: BillingMetrics };
}

/*
 * The "roll-up". Usage reads come from usage_monthly_totals and usage_daily_totals, which statement
 * triggers on the ledger keep current as rows are inserted, so no periodic roll-up is needed for
 * fast reads. This job is the audit of that design: it re-derives a month's totals, monthly and
 * per day, from the ledger and rebuilds them if anything differs (which would mean a bug or a
 * manual edit of the ledger), counting and logging each repair.
 */
export async function auditUsageTotals(app: UsageTotalsDeps, month: Month, opts: JobOptions = {}): Promise<JobResult> {
  const progress = opts.progress ?? (() => undefined);
  await opts.checkpoint?.();
  const drift = await transaction(app.db, async (trx) => ({
    monthly: await rebuildMonthTotals(trx, month),
    daily: await rebuildDayTotals(trx, month),
  }));
  if (drift.monthly + drift.daily > 0) {
    app.metrics.billing.totalsRepairs.inc(drift.monthly + drift.daily);
    app.log.warn(
      { month: month.key, drift: drift.monthly, dailyDrift: drift.daily },
      'usage totals differed from the ledger; rebuilt them',
    );
    progress(
      `rollup ${month.key}: ${drift.monthly + drift.daily} total(s) differed from the ledger and were rebuilt (${drift.monthly} monthly, ${drift.daily} daily)`,
    );
  } else {
    progress(`rollup ${month.key}: totals match the ledger`);
  }
  return { ok: true, summary: { month: month.key, repaired: drift.monthly, repaired_daily: drift.daily } };
}
