import type { RedisClient } from '../infra/redis.js';
import type { Clock } from '../clock.js';
import type { Config } from '../config.js';
import { AppError } from '../errors.js';
import type { Db } from '../infra/db.js';
import type { Stripe } from '../infra/stripe.js';
import type { Logger } from '../logger.js';
import type { BillingMetrics, MeteringMetrics } from '../metrics.js';
import type { Account } from '../accounts/account.js';
import { getAccount } from '../accounts/accounts.service.js';
import { flushUsage, type UsageRecordedListener } from '../usage/metering.service.js';
import {
  finalKey,
  monthlyKey,
  onDemandKey,
  reserveDraft,
  type DeferredLine,
  type DraftDeps,
} from './invoice-drafts.service.js';
import { issueInvoice, type IssuingDeps } from './invoice-issuing.service.js';
import {
  countInvoices,
  findDraftInvoices,
  findInvoiceByKey,
  invoiceLines,
  type InvoiceRow,
} from './invoices.repository.js';
import { invoiceView, type InvoiceView } from './invoices.presenter.js';
import { normalizeDecimal } from './money.js';
import { BUSY, withInvoicingLock } from './invoicing-lock.repository.js';
import { monthOf, type Month } from '../calendar.js';

/*
 * Invoicing, built to survive a crash between any two steps without billing twice:
 *
 * 1. Reserve (one transaction): a local invoice row in status `draft` with an idempotency key
 *    derived from account and period (monthly:<account>:<YYYY-MM>, or
 *    on_demand:<account>:<YYYY-MM>:<n>), the covered ledger rows marked with its id, and its
 *    lines (one per model) computed from exactly those rows. Rows already marked are never
 *    selected again, so no later invoice can bill them.
 * 2. Issue in Stripe: the invoice, one invoice item per line, finalize, send. Every call carries
 *    an idempotency key derived from the draft's key, and each Stripe id is stored as soon as it
 *    exists, so a re-run replays or skips what was done instead of repeating it.
 * 3. Mark the local invoice open (or paid) with Stripe's hosted URL.
 *
 * A draft left by a crash is resumed by the next attempt for that account (the next on-demand
 * call or any invoicing run), before anything new is reserved. Invoicing of one account is
 * serialised by a Postgres advisory lock held by a transaction of its own while the work runs.
 */

/**
 * What invoicing works with: the ledger (brought up to date from the usage stream first), Stripe,
 * and the billing metrics and log of what was issued.
 */
export interface InvoicingDeps {
  db: Db;
  redis: RedisClient;
  clock: Clock;
  log: Logger;
  config: Pick<Config, 'stripe' | 'faults' | 'redis'>;
  metrics: { billing: BillingMetrics; metering: MeteringMetrics };
  /** Throws 503 billing_not_configured when STRIPE_SECRET_KEY is not set. */
  stripe: Stripe;
  /** Told of the usage flushed into the ledger before invoicing (the spending-limit alerts). */
  onUsageRecorded: UsageRecordedListener;
}

export type InvoiceOutcome =
  | { status: 'invoiced'; invoice: InvoiceView; resumed: boolean }
  | { status: 'already_invoiced'; invoice: InvoiceView }
  /** `deferred`: unbilled usage there is, whose lines would round to zero cents (see reserveDraft). */
  | { status: 'nothing_to_invoice'; invoice: null; deferred: DeferredLine[] };

/** `final`: everything not yet invoiced, up to now, when the account closes (once per account). */
export type InvoiceRequest = { kind: 'monthly'; month: Month } | { kind: 'on_demand' } | { kind: 'final' };

// ---------------------------------------------------------------------------------------------
// One account

/** Invoices one account; the caller holds its invoicing lock (withInvoicingLock). */
export async function invoiceAccount(
  app: DraftDeps & IssuingDeps,
  conn: Db,
  account: Account,
  request: InvoiceRequest,
): Promise<InvoiceOutcome> {
  const resumed: InvoiceView[] = [];
  for (const draft of await findDraftInvoices(conn, account.id))
    resumed.push(await issueInvoice(app, conn, account, draft, true));

  let reserved: { draft: InvoiceRow | undefined; deferred: DeferredLine[] };
  if (request.kind === 'monthly' || request.kind === 'final') {
    const key = request.kind === 'monthly' ? monthlyKey(account.id, request.month) : finalKey(account.id);
    const existing = await findInvoiceByKey(conn, key);
    if (existing) {
      const view = invoiceView(existing, await invoiceLines(conn, existing.id));
      return resumed.some((r) => r.id === existing.id)
        ? { status: 'invoiced', invoice: view, resumed: true }
        : { status: 'already_invoiced', invoice: view };
    }
    // Everything unbilled up to the month's end: normally that month's usage, plus any row
    // recorded after an earlier month was invoiced (a request in flight at midnight) and
    // sub-cent lines deferred from earlier invoices.
    const now = app.clock.now();
    reserved = await reserveDraft(
      app,
      conn,
      account,
      request.kind === 'monthly'
        ? { kind: 'monthly', key, from: null, to: request.month.end, ...periodOf(request.month) }
        : { kind: 'on_demand', key, from: null, to: now, periodStart: monthOf(now).start, periodEnd: now },
    );
  } else {
    const now = app.clock.now();
    const month = monthOf(now);
    const n = (await countInvoices(conn, account.id, 'on_demand', month.start)) + 1;
    reserved = await reserveDraft(app, conn, account, {
      kind: 'on_demand',
      key: onDemandKey(account.id, month, n),
      from: month.start,
      to: now,
      periodStart: month.start,
      periodEnd: now,
    });
  }
  const { draft, deferred } = reserved;
  if (draft)
    return { status: 'invoiced', invoice: await issueInvoice(app, conn, account, draft, false), resumed: false };
  const last = resumed.at(-1);
  return last
    ? { status: 'invoiced', invoice: last, resumed: true }
    : { status: 'nothing_to_invoice', invoice: null, deferred };
}

const periodOf = (month: Month) => ({ periodStart: month.start, periodEnd: month.end });

/** "gpt-4.1 $0.0036 (1 request), o3 $0.001 (2 requests)": what waits, in words. */
export function describeDeferred(deferred: DeferredLine[]): string {
  return deferred
    .map((l) => `${l.model} $${normalizeDecimal(l.cost_usd)} (${l.requests} request${l.requests === 1 ? '' : 's'})`)
    .join(', ');
}

/** The ledger brought up to date, then the account invoiced under its lock (waiting a few seconds for it). */
async function invoiceNow(
  app: InvoicingDeps,
  accountId: string,
  request: { kind: 'on_demand' } | { kind: 'final' },
): Promise<InvoiceOutcome> {
  try {
    await flushUsage(app);
  } catch (err) {
    throw new AppError(
      'unavailable',
      'The usage ledger could not be brought up to date (the queue store is unreachable); no invoice was created. Please retry.',
      {
        code: 'metering_unavailable',
        headers: { 'Retry-After': '5' },
        cause: err,
      },
    );
  }
  const outcome = await withInvoicingLock(app.db, accountId, ON_DEMAND_LOCK_WAIT_MS, async (conn) => {
    const account = await getAccount({ db: conn }, accountId);
    return invoiceAccount(app, conn, account, request);
  });
  if (outcome === BUSY) {
    throw new AppError(
      'conflict',
      'An invoice for this account is being generated right now; retry in a few seconds.',
      {
        code: 'invoice_in_progress',
        headers: { 'Retry-After': '5' },
      },
    );
  }
  return outcome;
}

/**
 * The final invoice of a closing account: every paid-tier use not yet invoiced, whatever its
 * month, up to now; null when nothing is owed. Repeating it returns the invoice made the first time.
 * An account that never had a Stripe customer never used the paid tier: Stripe is not asked.
 */
export async function invoiceBeforeClosing(app: InvoicingDeps, account: Account): Promise<InvoiceView | null> {
  if (account.stripe_customer_id === null) return null;
  const outcome = await invoiceNow(app, account.id, { kind: 'final' });
  return outcome.invoice;
}

// ---------------------------------------------------------------------------------------------
// POST /v1/billing/generate-invoice

export interface GenerateInvoiceResult {
  status: 'invoiced' | 'nothing_to_invoice';
  message: string;
  invoice: InvoiceView | null;
}

/** How long an on-demand request waits for an invoicing run already working on the account. */
const ON_DEMAND_LOCK_WAIT_MS = 5000;

/**
 * Invoices the current month to date: the account's paid-tier usage not yet on any invoice. A
 * free account that used the paid tier earlier in the month (it downgraded) still owes that
 * usage and gets its invoice; with nothing owed the answer says so and no invoice is created.
 */
export async function generateInvoice(app: InvoicingDeps, accountId: string): Promise<GenerateInvoiceResult> {
  // Without Stripe this throws 503 billing_not_configured before anything is read.
  void app.stripe;
  const outcome = await invoiceNow(app, accountId, { kind: 'on_demand' });
  if (outcome.status === 'nothing_to_invoice') {
    return {
      status: 'nothing_to_invoice',
      message:
        outcome.deferred.length === 0
          ? 'Nothing to invoice: this month has no paid-tier usage that is not already on an invoice (free-tier usage is not billed). No invoice was created.'
          : `Nothing to invoice yet: this month's paid-tier usage not on an invoice is ${describeDeferred(outcome.deferred)}. ` +
            "An invoice bills each model's usage rounded to the cent, and under half a cent that is $0.00, so it stays unbilled " +
            "and is billed on a later invoice (one you generate, or the monthly invoice after the month ends) once the model's unbilled usage reaches half a cent. " +
            'No invoice was created.',
      invoice: null,
    };
  }
  const inv = outcome.invoice;
  return {
    status: 'invoiced',
    message:
      outcome.status === 'invoiced' && outcome.resumed
        ? `Completed invoice ${inv.stripe_invoice_id} for ${inv.amount} ${inv.currency.toUpperCase()}, which an earlier attempt had started; it was finalized and sent.`
        : `Invoice ${inv.stripe_invoice_id} for ${inv.amount} ${inv.currency.toUpperCase()} was created, finalized and sent. The usage it covers will not be billed again.`,
    invoice: inv,
  };
}
