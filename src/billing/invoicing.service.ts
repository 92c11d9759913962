import type { AppContext } from '../context.js';
import { AppError } from '../errors.js';
import { transaction, type Db } from '../infra/db.js';
import { callStripe, isStripeError, stripeFailure, type Stripe } from '../infra/stripe.js';
import { flushUsage } from '../usage/metering.service.js';
import { type Account, findAccountById } from '../accounts/accounts.repository.js';
import { aggregateReservedUsage, releaseUsage, reserveUsage } from '../usage/usage.repository.js';
import {
  accountsToInvoice,
  countInvoices,
  findDraftInvoices,
  findInvoice,
  findInvoiceByKey,
  insertDraftInvoice,
  insertInvoiceLines,
  invoiceLines,
  markInvoiceIssued,
  setInvoiceAmountFromLines,
  setLineItemId,
  setStripeInvoiceId,
  type InvoiceRow,
} from './invoices.repository.js';
import { BUSY, withInvoicingLock } from './invoicing-lock.repository.js';
import type { JobOptions, JobResult } from './job.js';
import { centsToAmount, normalizeDecimal, toSafeInteger } from './money.js';
import { monthOf, unixSeconds, type Month } from './periods.js';

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
 * serialised by a Postgres advisory lock held on the connection that does the work.
 */

export interface InvoiceLineView {
  model: string;
  requests: number;
  prompt_tokens: number;
  completion_tokens: number;
  /** Exact sum of the covered requests' cost, USD. */
  cost_usd: string;
  /** The line's amount: cost_usd rounded half up to the cent. */
  amount_cents: number;
  amount: string;
}

export interface InvoiceView {
  id: string;
  stripe_invoice_id: string | null;
  kind: 'monthly' | 'on_demand';
  period_start: string;
  period_end: string;
  status: string;
  currency: string;
  /** Sum of the rounded lines. */
  amount_cents: number;
  amount: string;
  hosted_invoice_url: string | null;
  created_at: string;
  lines?: InvoiceLineView[];
}

export type InvoiceOutcome =
  | { status: 'invoiced'; invoice: InvoiceView; resumed: boolean }
  | { status: 'already_invoiced'; invoice: InvoiceView }
  | { status: 'nothing_to_invoice'; invoice: null };

type InvoiceRequest = { kind: 'monthly'; month: Month } | { kind: 'on_demand' };

export function invoiceView(row: InvoiceRow, lines?: Awaited<ReturnType<typeof invoiceLines>>): InvoiceView {
  return {
    id: row.id,
    stripe_invoice_id: row.stripe_invoice_id,
    kind: row.kind,
    period_start: row.period_start.toISOString(),
    period_end: row.period_end.toISOString(),
    status: row.status,
    currency: row.currency,
    amount_cents: toSafeInteger(row.amount_cents),
    amount: centsToAmount(row.amount_cents),
    hosted_invoice_url: row.hosted_invoice_url,
    created_at: row.created_at.toISOString(),
    ...(lines
      ? {
          lines: lines.map((l) => ({
            model: l.model,
            requests: l.requests,
            prompt_tokens: toSafeInteger(l.prompt_tokens),
            completion_tokens: toSafeInteger(l.completion_tokens),
            cost_usd: normalizeDecimal(l.cost_usd),
            amount_cents: toSafeInteger(l.amount_cents),
            amount: centsToAmount(l.amount_cents),
          })),
        }
      : {}),
  };
}

const monthlyKey = (accountId: string, month: Month) => `monthly:${accountId}:${month.key}`;
const onDemandKey = (accountId: string, month: Month, n: number) => `on_demand:${accountId}:${month.key}:${n}`;

// ---------------------------------------------------------------------------------------------
// Reserve

/** Step 1. Undefined when nothing is billable (no rows, or every line rounds to zero cents). */
async function reserve(
  app: AppContext,
  conn: Db,
  account: Account,
  v: { kind: 'monthly' | 'on_demand'; key: string; from: Date | null; to: Date; periodStart: Date; periodEnd: Date },
): Promise<InvoiceRow | undefined> {
  const NOTHING = new Error('nothing to reserve');
  try {
    return await transaction(conn, async (trx) => {
      const draft = await insertDraftInvoice(trx, {
        accountId: account.id,
        kind: v.kind,
        periodStart: v.periodStart,
        periodEnd: v.periodEnd,
        idempotencyKey: v.key,
        currency: app.config.stripe.currency,
        createdAt: app.clock.now(),
      });
      if ((await reserveUsage(trx, draft.id, account.id, v.from, v.to)) === 0) throw NOTHING;
      const lines = await aggregateReservedUsage(trx, draft.id);
      // A line worth less than half a cent would bill nothing: its rows stay unbilled and join a
      // later invoice, where they add up, so sub-cent usage is deferred rather than lost.
      const zero = lines.filter((l) => BigInt(l.amount_cents) === 0n);
      await releaseUsage(trx, draft.id, zero.map((l) => l.model));
      const billed = lines.filter((l) => BigInt(l.amount_cents) > 0n);
      if (billed.length === 0) throw NOTHING;
      if (account.stripe_customer_id === null) {
        throw new AppError('conflict', 'This account owes paid-tier usage but has no payment processor customer to invoice; contact support.', {
          code: 'no_billing_customer',
        });
      }
      await insertInvoiceLines(trx, draft.id, billed);
      await setInvoiceAmountFromLines(trx, draft.id);
      return (await findInvoice(trx, draft.id))!;
    });
  } catch (err) {
    if (err === NOTHING) return undefined;
    throw err;
  }
}

// ---------------------------------------------------------------------------------------------
// Issue in Stripe

function describeLine(line: { model: string; requests: number; prompt_tokens: string; completion_tokens: string }, label: string): string {
  const n = (s: string | number) => BigInt(s).toLocaleString('en-US');
  return `${line.model}: ${n(line.prompt_tokens)} prompt + ${n(line.completion_tokens)} completion tokens, ${n(line.requests)} requests (${label})`;
}

function periodLabel(inv: InvoiceRow): string {
  if (inv.kind === 'monthly') return monthOf(inv.period_start).key;
  return `${inv.period_start.toISOString().slice(0, 10)} to ${inv.period_end.toISOString().slice(0, 16).replace('T', ' ')} UTC`;
}

/** An invoice we may have created before crashing, found by the local id we put in its metadata. */
async function findStripeInvoice(stripe: Stripe, customer: string, localId: string): Promise<Stripe.Invoice | undefined> {
  for await (const inv of stripe.invoices.list({ customer, limit: 100 })) {
    if (inv.metadata?.invoice_id === localId) return inv;
  }
  return undefined;
}

async function findStripeItems(stripe: Stripe, stripeInvoiceId: string): Promise<Map<string, string>> {
  const byModel = new Map<string, string>();
  for await (const item of stripe.invoiceItems.list({ invoice: stripeInvoiceId, limit: 100 })) {
    const model = item.metadata?.model;
    if (model) byModel.set(model, item.id);
  }
  return byModel;
}

/** Steps 2 and 3, for a fresh draft or one a crashed run left behind (`resuming`). */
async function issue(app: AppContext, conn: Db, account: Account, draft: InvoiceRow, resuming: boolean): Promise<InvoiceView> {
  const stripe = app.stripe;
  const customer = account.stripe_customer_id;
  if (customer === null) throw new AppError('conflict', 'The account has no payment processor customer to invoice.', { code: 'no_billing_customer' });
  const key = draft.idempotency_key;
  const label = periodLabel(draft);
  const lines = await invoiceLines(conn, draft.id);

  let stripeInvoice: Stripe.Invoice | undefined;
  if (draft.stripe_invoice_id !== null) {
    stripeInvoice = await callStripe('reading the invoice', () => stripe.invoices.retrieve(draft.stripe_invoice_id!));
  } else {
    // Stripe keeps idempotency keys for 24 hours; a draft resumed later is found by its metadata.
    if (resuming) stripeInvoice = await callStripe('looking for the invoice', () => findStripeInvoice(stripe, customer, draft.id));
    stripeInvoice ??= await callStripe('creating the invoice', () =>
      stripe.invoices.create(
        {
          customer,
          currency: draft.currency,
          collection_method: 'charge_automatically',
          auto_advance: false,
          // Only the items created below: never sweep up other pending items of the customer.
          pending_invoice_items_behavior: 'exclude',
          description: `Pay-as-you-go token usage, ${label}`,
          metadata: { invoice_id: draft.id, account_id: account.id, kind: draft.kind, period: label },
        },
        { idempotencyKey: `${key}:invoice` },
      ),
    );
    await setStripeInvoiceId(conn, draft.id, stripeInvoice.id);
  }
  const stripeId = stripeInvoice.id;

  if (stripeInvoice.status === 'draft') {
    const pending = lines.filter((l) => l.stripe_invoice_item_id === null);
    const existing = resuming && pending.length ? await callStripe('listing the invoice items', () => findStripeItems(stripe, stripeId)) : new Map<string, string>();
    for (const line of pending) {
      let itemId = existing.get(line.model);
      if (itemId === undefined) {
        const item = await callStripe('adding an invoice item', () =>
          stripe.invoiceItems.create(
            {
              customer,
              invoice: stripeId,
              currency: draft.currency,
              amount: toSafeInteger(line.amount_cents),
              description: describeLine(line, label),
              period: { start: unixSeconds(draft.period_start), end: unixSeconds(draft.period_end) },
              metadata: {
                invoice_id: draft.id,
                model: line.model,
                requests: String(line.requests),
                prompt_tokens: String(line.prompt_tokens),
                completion_tokens: String(line.completion_tokens),
                cost_usd: line.cost_usd,
              },
            },
            { idempotencyKey: `${key}:item:${line.model}` },
          ),
        );
        itemId = item.id;
        if (app.config.faults.crashAfterInvoiceItem) {
          app.log.warn({ invoiceId: draft.id, itemId }, 'failpoint crash-after-invoice-item: dying before recording the item');
          process.kill(process.pid, 'SIGKILL');
        }
      }
      await setLineItemId(conn, draft.id, line.model, itemId);
    }
    stripeInvoice = await callStripe('finalizing the invoice', () => stripe.invoices.finalizeInvoice(stripeId, { auto_advance: true }, { idempotencyKey: `${key}:finalize` }));
  }

  if (BigInt(stripeInvoice.total) !== BigInt(draft.amount_cents)) {
    // Never mark it issued: the ledger and Stripe disagree, which a person must look at.
    app.log.error({ invoiceId: draft.id, stripeInvoiceId: stripeId, ledgerCents: draft.amount_cents, stripeCents: stripeInvoice.total }, 'invoice total differs from the ledger');
    throw new AppError('internal', `Stripe invoice ${stripeId} totals ${stripeInvoice.total} cents but the ledger says ${draft.amount_cents}`, { code: 'invoice_mismatch' });
  }

  if (stripeInvoice.status === 'open') {
    try {
      stripeInvoice = await stripe.invoices.sendInvoice(stripeId, {}, { idempotencyKey: `${key}:send` });
    } catch (err) {
      // A refused send (not a failed call) leaves a valid, finalized invoice that Stripe charges anyway.
      if (!isStripeError(err) || err.type !== 'StripeInvalidRequestError') throw stripeFailure(err, 'sending the invoice');
      app.log.warn({ invoiceId: draft.id, stripeInvoiceId: stripeId, err: err.message }, 'Stripe refused to send the invoice; it stays finalized and is charged automatically');
    }
  }

  const finalizedAt = stripeInvoice.status_transitions?.finalized_at ? new Date(stripeInvoice.status_transitions.finalized_at * 1000) : app.clock.now();
  const issued = await markInvoiceIssued(conn, draft.id, { status: stripeInvoice.status ?? 'open', hostedInvoiceUrl: stripeInvoice.hosted_invoice_url ?? null, finalizedAt });
  const m = app.metrics.billing;
  m.invoicesCreated.inc({ kind: draft.kind });
  m.invoicedCents.inc({ kind: draft.kind }, toSafeInteger(draft.amount_cents));
  app.log.info({ accountId: account.id, invoiceId: draft.id, stripeInvoiceId: stripeId, amountCents: draft.amount_cents, kind: draft.kind, resumed: resuming }, 'invoice issued');
  return invoiceView(issued, await invoiceLines(conn, draft.id));
}

// ---------------------------------------------------------------------------------------------
// One account

/** Invoices one account; the caller holds its lock on `conn`. */
async function invoiceAccount(app: AppContext, conn: Db, account: Account, request: InvoiceRequest): Promise<InvoiceOutcome> {
  const resumed: InvoiceView[] = [];
  for (const draft of await findDraftInvoices(conn, account.id)) resumed.push(await issue(app, conn, account, draft, true));

  let draft: InvoiceRow | undefined;
  if (request.kind === 'monthly') {
    const key = monthlyKey(account.id, request.month);
    const existing = await findInvoiceByKey(conn, key);
    if (existing) {
      const view = invoiceView(existing, await invoiceLines(conn, existing.id));
      return resumed.some((r) => r.id === existing.id) ? { status: 'invoiced', invoice: view, resumed: true } : { status: 'already_invoiced', invoice: view };
    }
    // Everything unbilled up to the month's end: normally that month's usage, plus any row
    // recorded after an earlier month was invoiced (a request in flight at midnight) and
    // sub-cent lines deferred from earlier invoices.
    draft = await reserve(app, conn, account, { kind: 'monthly', key, from: null, to: request.month.end, periodStart: request.month.start, periodEnd: request.month.end });
  } else {
    const now = app.clock.now();
    const month = monthOf(now);
    const n = (await countInvoices(conn, account.id, 'on_demand', month.start)) + 1;
    draft = await reserve(app, conn, account, { kind: 'on_demand', key: onDemandKey(account.id, month, n), from: month.start, to: now, periodStart: month.start, periodEnd: now });
  }
  if (draft) return { status: 'invoiced', invoice: await issue(app, conn, account, draft, false), resumed: false };
  const last = resumed.at(-1);
  return last ? { status: 'invoiced', invoice: last, resumed: true } : { status: 'nothing_to_invoice', invoice: null };
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
export async function generateInvoice(app: AppContext, accountId: string): Promise<GenerateInvoiceResult> {
  app.stripe;
  try {
    await flushUsage(app);
  } catch (err) {
    throw new AppError('unavailable', 'The usage ledger could not be brought up to date (the queue store is unreachable); no invoice was created. Please retry.', {
      code: 'metering_unavailable',
      headers: { 'Retry-After': '5' },
      cause: err,
    });
  }
  const outcome = await withInvoicingLock(app.db, accountId, ON_DEMAND_LOCK_WAIT_MS, async (conn) => {
    const account = await findAccountById(conn, accountId);
    if (!account) throw new AppError('not_found', 'Account not found', { code: 'account_not_found' });
    return invoiceAccount(app, conn, account, { kind: 'on_demand' });
  });
  if (outcome === BUSY) {
    throw new AppError('conflict', 'An invoice for this account is being generated right now; retry in a few seconds.', {
      code: 'invoice_in_progress',
      headers: { 'Retry-After': '5' },
    });
  }
  if (outcome.status === 'nothing_to_invoice') {
    return {
      status: 'nothing_to_invoice',
      message: 'Nothing to invoice: this month has no paid-tier usage that is not already on an invoice (free-tier usage is not billed). No invoice was created.',
      invoice: null,
    };
  }
  const inv = outcome.invoice;
  return {
    status: 'invoiced',
    message: outcome.status === 'invoiced' && outcome.resumed
      ? `Completed invoice ${inv.stripe_invoice_id} for ${inv.amount} ${inv.currency.toUpperCase()}, which an earlier attempt had started; it was finalized and sent.`
      : `Invoice ${inv.stripe_invoice_id} for ${inv.amount} ${inv.currency.toUpperCase()} was created, finalized and sent. The usage it covers will not be billed again.`,
    invoice: inv,
  };
}

// ---------------------------------------------------------------------------------------------
// The monthly run

/** How long the monthly run waits for an on-demand invoice of the same account to finish. */
const JOB_LOCK_WAIT_MS = 60_000;

/**
 * Invoices `month` (which must have ended) for every account that owes paid-tier usage up to its
 * end, including accounts that were downgraded during the month. Re-running bills nothing twice:
 * an account invoiced for the month is reported as already invoiced.
 */
export async function invoiceMonth(app: AppContext, month: Month, opts: JobOptions = {}): Promise<JobResult> {
  const now = app.clock.now();
  if (month.end.getTime() > now.getTime()) throw new Error(`month ${month.key} has not ended yet (it ends ${month.end.toISOString()}); it can only be invoiced after that`);
  app.stripe;
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
