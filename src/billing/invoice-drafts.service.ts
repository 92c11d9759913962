import type { Clock } from '../clock.js';
import type { Config } from '../config.js';
import { AppError } from '../errors.js';
import { transaction, type Db } from '../infra/db.js';
import type { Account } from '../accounts/account.js';
import {
  invoiceLinesOfReservedUsage,
  releaseUsageFromInvoice,
  reserveUsageForInvoice,
} from '../usage/ledger.service.js';
import {
  findInvoice,
  insertDraftInvoice,
  insertInvoiceLines,
  setInvoiceAmountFromLines,
  type InvoiceRow,
} from './invoices.repository.js';
import type { Month } from '../calendar.js';

// The local half of an invoice (step 1 of invoicing.service.ts): the draft, the ledger rows it
// covers and its lines, reserved in one transaction before Stripe hears of it.

/** What reserving a draft works with: the time it is created and the currency it bills in. */
export interface DraftDeps {
  clock: Clock;
  config: Pick<Config, 'stripe'>;
}

export const monthlyKey = (accountId: string, month: Month) => `monthly:${accountId}:${month.key}`;
/** The final invoice of a closed account: one per account. */
export const finalKey = (accountId: string) => `final:${accountId}`;
export const onDemandKey = (accountId: string, month: Month, n: number) => `on_demand:${accountId}:${month.key}:${n}`;

/** A model's unbilled usage left off an invoice because its line would round to zero cents. */
export interface DeferredLine {
  model: string;
  requests: number;
  /** Exact decimal USD. */
  cost_usd: string;
}

/**
 * Step 1. `draft` is undefined when nothing is billable: no rows, or every line rounds to zero
 * cents. `deferred` names the lines left unbilled for that reason, with or without a draft.
 */
export async function reserveDraft(
  app: DraftDeps,
  conn: Db,
  account: Account,
  v: { kind: 'monthly' | 'on_demand'; key: string; from: Date | null; to: Date; periodStart: Date; periodEnd: Date },
): Promise<{ draft: InvoiceRow | undefined; deferred: DeferredLine[] }> {
  const NOTHING = new Error('nothing to reserve');
  let deferred: DeferredLine[] = [];
  try {
    const draft = await transaction(conn, async (trx) => {
      const draft = await insertDraftInvoice(trx, {
        accountId: account.id,
        kind: v.kind,
        periodStart: v.periodStart,
        periodEnd: v.periodEnd,
        idempotencyKey: v.key,
        currency: app.config.stripe.currency,
        createdAt: app.clock.now(),
      });
      if ((await reserveUsageForInvoice(trx, draft.id, account.id, v.from, v.to)) === 0) throw NOTHING;
      const lines = await invoiceLinesOfReservedUsage(trx, draft.id);
      // A line worth less than half a cent would bill nothing: its rows stay unbilled and join a
      // later invoice, where they add up, so sub-cent usage is deferred rather than lost.
      const zero = lines.filter((l) => BigInt(l.amount_cents) === 0n);
      deferred = zero.map(({ model, requests, cost_usd }) => ({ model, requests, cost_usd }));
      await releaseUsageFromInvoice(
        trx,
        draft.id,
        zero.map((l) => l.model),
      );
      const billed = lines.filter((l) => BigInt(l.amount_cents) > 0n);
      if (billed.length === 0) throw NOTHING;
      if (account.stripe_customer_id === null) {
        throw new AppError(
          'conflict',
          'This account owes paid-tier usage but has no payment processor customer to invoice; contact support.',
          {
            code: 'no_billing_customer',
          },
        );
      }
      await insertInvoiceLines(trx, draft.id, billed);
      await setInvoiceAmountFromLines(trx, draft.id);
      return (await findInvoice(trx, draft.id))!;
    });
    return { draft, deferred };
  } catch (err) {
    if (err === NOTHING) return { draft: undefined, deferred };
    throw err;
  }
}
