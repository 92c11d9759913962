import type { Clock } from '../clock.js';
import type { Config } from '../config.js';
import { AppError } from '../errors.js';
import type { Db } from '../infra/db.js';
import { callStripe, isStripeError, stripeFailure, type Stripe } from '../infra/stripe.js';
import type { Logger } from '../logger.js';
import type { BillingMetrics } from '../metrics.js';
import type { Account } from '../accounts/account.js';
import {
  invoiceLines,
  markInvoiceIssued,
  setLineItemId,
  setStripeInvoiceId,
  type InvoiceRow,
} from './invoices.repository.js';
import { invoiceView, type InvoiceView } from './invoices.presenter.js';
import { toSafeInteger } from './money.js';
import { monthOf, unixSeconds } from '../calendar.js';

// The Stripe half of an invoice (steps 2 and 3 of invoicing.service.ts): a reserved draft becomes
// a finalized, sent Stripe invoice, and the local row records it.

/** What issuing a draft in Stripe works with. */
export interface IssuingDeps {
  clock: Clock;
  log: Logger;
  config: Pick<Config, 'faults'>;
  metrics: { billing: BillingMetrics };
  /** Throws 503 billing_not_configured when STRIPE_SECRET_KEY is not set. */
  stripe: Stripe;
}

function describeLine(
  line: { model: string; requests: number; prompt_tokens: string; completion_tokens: string },
  label: string,
): string {
  const n = (s: string | number) => BigInt(s).toLocaleString('en-US');
  return `${line.model}: ${n(line.prompt_tokens)} prompt + ${n(line.completion_tokens)} completion tokens, ${n(line.requests)} requests (${label})`;
}

function periodLabel(inv: InvoiceRow): string {
  if (inv.kind === 'monthly') return monthOf(inv.period_start).key;
  return `${inv.period_start.toISOString().slice(0, 10)} to ${inv.period_end.toISOString().slice(0, 16).replace('T', ' ')} UTC`;
}

/** An invoice we may have created before crashing, found by the local id we put in its metadata. */
async function findStripeInvoice(
  stripe: Stripe,
  customer: string,
  localId: string,
): Promise<Stripe.Invoice | undefined> {
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
export async function issueInvoice(
  app: IssuingDeps,
  conn: Db,
  account: Account,
  draft: InvoiceRow,
  resuming: boolean,
): Promise<InvoiceView> {
  const stripe = app.stripe;
  const customer = account.stripe_customer_id;
  if (customer === null)
    throw new AppError('conflict', 'The account has no payment processor customer to invoice.', {
      code: 'no_billing_customer',
    });
  const key = draft.idempotency_key;
  const label = periodLabel(draft);
  const lines = await invoiceLines(conn, draft.id);

  let stripeInvoice: Stripe.Invoice | undefined;
  if (draft.stripe_invoice_id !== null) {
    stripeInvoice = await callStripe('reading the invoice', () => stripe.invoices.retrieve(draft.stripe_invoice_id!));
  } else {
    // Stripe keeps idempotency keys for 24 hours; a draft resumed later is found by its metadata.
    if (resuming)
      stripeInvoice = await callStripe('looking for the invoice', () => findStripeInvoice(stripe, customer, draft.id));
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
    const existing =
      resuming && pending.length
        ? await callStripe('listing the invoice items', () => findStripeItems(stripe, stripeId))
        : new Map<string, string>();
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
          app.log.warn(
            { invoiceId: draft.id, itemId },
            'failpoint crash-after-invoice-item: dying before recording the item',
          );
          process.kill(process.pid, 'SIGKILL');
        }
      }
      await setLineItemId(conn, draft.id, line.model, itemId);
    }
    stripeInvoice = await callStripe('finalizing the invoice', () =>
      stripe.invoices.finalizeInvoice(stripeId, { auto_advance: true }, { idempotencyKey: `${key}:finalize` }),
    );
  }

  if (BigInt(stripeInvoice.total) !== BigInt(draft.amount_cents)) {
    // Never mark it issued: the ledger and Stripe disagree, which a person must look at.
    app.log.error(
      {
        invoiceId: draft.id,
        stripeInvoiceId: stripeId,
        ledgerCents: draft.amount_cents,
        stripeCents: stripeInvoice.total,
      },
      'invoice total differs from the ledger',
    );
    throw new AppError(
      'internal',
      `Stripe invoice ${stripeId} totals ${stripeInvoice.total} cents but the ledger says ${draft.amount_cents}`,
      { code: 'invoice_mismatch' },
    );
  }

  if (stripeInvoice.status === 'open') {
    try {
      stripeInvoice = await stripe.invoices.sendInvoice(stripeId, {}, { idempotencyKey: `${key}:send` });
    } catch (err) {
      // A refused send (not a failed call) leaves a valid, finalized invoice that Stripe charges anyway.
      if (!isStripeError(err) || err.type !== 'StripeInvalidRequestError')
        throw stripeFailure(err, 'sending the invoice');
      app.log.warn(
        { invoiceId: draft.id, stripeInvoiceId: stripeId, err: err.message },
        'Stripe refused to send the invoice; it stays finalized and is charged automatically',
      );
    }
  }

  const finalizedAt = stripeInvoice.status_transitions?.finalized_at
    ? new Date(stripeInvoice.status_transitions.finalized_at * 1000)
    : app.clock.now();
  const issued = await markInvoiceIssued(conn, draft.id, {
    status: stripeInvoice.status ?? 'open',
    hostedInvoiceUrl: stripeInvoice.hosted_invoice_url ?? null,
    invoicePdf: stripeInvoice.invoice_pdf ?? null,
    finalizedAt,
  });
  const m = app.metrics.billing;
  m.invoicesCreated.inc({ kind: draft.kind });
  m.invoicedCents.inc({ kind: draft.kind }, toSafeInteger(draft.amount_cents));
  app.log.info(
    {
      accountId: account.id,
      invoiceId: draft.id,
      stripeInvoiceId: stripeId,
      amountCents: draft.amount_cents,
      kind: draft.kind,
      resumed: resuming,
    },
    'invoice issued',
  );
  return invoiceView(issued, await invoiceLines(conn, draft.id));
}
