import type { AppContext } from '../src/context.js';
import { invoicingSlots } from '../src/config.js';
import {
  invoiceMonthAccount,
  type AccountInvoicingJob,
  type AccountInvoicingResult,
} from '../src/billing/monthly-invoicing.service.js';
import { parseMonthKey } from '../src/calendar.js';
import { createWorker, INVOICING_QUEUE, rateLimited } from '../src/infra/queues.js';
import { isStripeRateLimit } from '../src/infra/stripe.js';
import type { BackgroundService } from '../src/lifecycle.js';

/** How long every worker leaves the invoicing queue alone after Stripe answered 429. */
const STRIPE_429_PAUSE_MS = 1000;

/**
 * Invoices accounts of a monthly run, INVOICING_CONCURRENCY at a time (fewer if DB_LOCK_POOL_SIZE
 * is smaller, since each holds a lock connection). Stripe calls are paced
 * deployment-wide (infra/stripe-pacing.ts); BullMQ's limiter also caps account jobs at
 * STRIPE_MAX_OPS_PER_SECOND a second (each makes at least three calls, so it never binds before
 * the pacing does), and when Stripe still answers 429 (other traffic of the same Stripe account)
 * every worker pauses the queue and the job goes back without spending an attempt.
 */
export async function startInvoicingWork(app: AppContext): Promise<BackgroundService> {
  const { config } = app;
  const worker = createWorker<AccountInvoicingJob, AccountInvoicingResult>(
    config,
    INVOICING_QUEUE,
    app.redisConnection('queue-worker', 'invoicing-worker'),
    async (job) => {
      const month = parseMonthKey(job.data.month);
      if (!month) throw new Error(`not a month: ${job.data.month}`);
      try {
        return await invoiceMonthAccount(app, month, job.data.accountId);
      } catch (err) {
        if (!isStripeRateLimit(err)) throw err;
        app.metrics.billing.stripeRateLimited.inc();
        await worker.rateLimit(STRIPE_429_PAUSE_MS);
        throw rateLimited();
      }
    },
    { concurrency: invoicingSlots(config), limiter: { max: config.stripe.maxOpsPerSecond, duration: 1000 } },
  );
  worker.on('error', (err) => app.log.warn({ reason: err.message }, 'invoicing work: queue error'));
  await worker.waitUntilReady();
  return {
    name: 'invoicing',
    async stop() {
      await worker.close();
    },
  };
}
