import type { Config } from '../config.js';
import { invoiceMonth, type MonthlyInvoicingDeps } from '../billing/monthly-invoicing.service.js';
import type { JobOptions, JobResult } from '../scheduled-job.js';
import { parseMonthKey } from '../calendar.js';
import { reconcileAccounts, type ReconcileDeps } from '../subscriptions/reconcile.service.js';
import { auditUsageTotals, type UsageTotalsDeps } from '../billing/usage-totals.service.js';
import { purgeEndedSignIns, type SignInCleanupDeps } from '../console-identity/cleanup.service.js';
import { purgeExpiredResponses, type ResponsesCleanupDeps } from '../responses/stored-responses.service.js';
import type { Granularity } from './cron.js';

export type JobName = 'invoices' | 'reconcile' | 'rollup' | 'sign-ins' | 'responses';

/** What the scheduled jobs work with, all together (a worker hands its parts over). */
export type JobDeps = MonthlyInvoicingDeps & ReconcileDeps & UsageTotalsDeps & SignInCleanupDeps & ResponsesCleanupDeps;

/** A scheduled job: when it is due (cron, UTC) and what it does for a period (the work lives in its feature). */
export interface JobDefinition {
  name: JobName;
  granularity: Granularity;
  /** Talks to Stripe, so it is not scheduled where STRIPE_SECRET_KEY is unset. */
  needsStripe: boolean;
  cron(config: Config): string;
  run(app: JobDeps, period: string, opts: JobOptions): Promise<JobResult>;
}

function month(period: string) {
  const m = parseMonthKey(period);
  if (!m) throw new Error(`not a month: ${period} (expected YYYY-MM)`);
  return m;
}

export const JOBS: Record<JobName, JobDefinition> = {
  invoices: {
    name: 'invoices',
    granularity: 'month',
    needsStripe: true,
    cron: (c) => c.scheduler.invoiceCron,
    run: (app, period, opts) => invoiceMonth(app, month(period), opts),
  },
  reconcile: {
    name: 'reconcile',
    granularity: 'day',
    needsStripe: true,
    cron: (c) => c.scheduler.reconcileCron,
    run: (app, _period, opts) => reconcileAccounts(app, opts),
  },
  rollup: {
    name: 'rollup',
    granularity: 'month',
    needsStripe: false,
    cron: (c) => c.scheduler.rollupCron,
    run: (app, period, opts) => auditUsageTotals(app, month(period), opts),
  },
  'sign-ins': {
    name: 'sign-ins',
    granularity: 'day',
    needsStripe: false,
    cron: (c) => c.scheduler.signInCleanupCron,
    run: async (app, _period, opts) => {
      const deleted = await purgeEndedSignIns(app);
      opts.progress?.(
        `deleted ${deleted.signInLinks} sign-in link(s) and ${deleted.sessions} console session(s) that ended over a day ago`,
      );
      return { ok: true, summary: { deleted } };
    },
  },
  responses: {
    name: 'responses',
    granularity: 'day',
    needsStripe: false,
    cron: (c) => c.scheduler.responsesCleanupCron,
    run: async (app, _period, opts) => {
      const deleted = await purgeExpiredResponses(app);
      opts.progress?.(`deleted ${deleted} stored response(s) past RESPONSES_RETENTION_DAYS`);
      return { ok: true, summary: { deleted } };
    },
  },
};

export const isJobName = (s: string): s is JobName => Object.hasOwn(JOBS, s);
