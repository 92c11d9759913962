import type { Db, Trx } from '../infra/db.js';
import { dayKey, type Month } from '../calendar.js';
import * as usage from './usage.repository.js';
import type {
  DailyGrouping,
  DailyUsageRow,
  KeyUsageRow,
  LedgerRequestRow,
  LineAggregate,
  ModelUsageRow,
  MonthUsageRow,
} from './usage.repository.js';

// What billing reads from and does to the usage ledger: usage reports, the account's requests,
// the rows an invoice reserves and bills, and the audit of the monthly and daily totals. Other features come here, never to
// the repository (CONVENTIONS.md); a step of an invoice's transaction takes its `trx`.

/** One month of an account's usage per model, from the monthly totals. */
export function monthUsageByModel(db: Db, accountId: string, month: Month): Promise<ModelUsageRow[]> {
  return usage.monthUsageByModel(db, accountId, month.start);
}

/** An account's usage per month, for the months from `from` to `to` inclusive. */
export function usageByMonth(db: Db, accountId: string, from: Month, to: Month): Promise<MonthUsageRow[]> {
  return usage.usageByMonth(db, accountId, from.start, to.start);
}

/** One month of an account's usage per API key, from the daily totals (the costliest key first). */
export function monthUsageByKey(db: Db, accountId: string, month: Month): Promise<KeyUsageRow[]> {
  return usage.usageByKey(db, accountId, dayKey(month.start), dayKey(month.end));
}

/**
 * An account's usage over [fromDay, toDay] (YYYY-MM-DD) from the daily totals: per UTC day and
 * model (and API or key, by `grouping`), and the period's totals per API and per key.
 */
export function dailyUsage(
  db: Db,
  accountId: string,
  fromDay: string,
  toDay: string,
  grouping: DailyGrouping,
): Promise<DailyUsageRow[]> {
  return usage.dailyUsage(db, accountId, fromDay, toDay, grouping);
}

/**
 * Up to `limit` of the account's requests, newest first, after its request `afterRequestId` when
 * given; undefined when that is not one of the account's requests.
 */
export async function accountRequests(
  db: Db,
  accountId: string,
  afterRequestId: string | undefined,
  limit: number,
): Promise<LedgerRequestRow[] | undefined> {
  let after: string | null = null;
  if (afterRequestId !== undefined) {
    after = (await usage.findLedgerRowId(db, accountId, afterRequestId)) ?? null;
    if (after === null) return undefined;
  }
  return usage.recentLedgerRows(db, accountId, after, limit);
}

/**
 * Reserves for the invoice the account's unbilled paid-tier rows created in [from, to) (from =
 * null: everything before `to`). Returns how many rows it reserved.
 */
export function reserveUsageForInvoice(
  trx: Trx,
  invoiceId: string,
  accountId: string,
  from: Date | null,
  to: Date,
): Promise<number> {
  return usage.reserveUsage(trx, invoiceId, accountId, from, to);
}

/** The invoice's lines, one per model, from the rows it reserved (each rounded to the cent, half up). */
export function invoiceLinesOfReservedUsage(trx: Trx, invoiceId: string): Promise<LineAggregate[]> {
  return usage.aggregateReservedUsage(trx, invoiceId);
}

/** Gives the invoice's rows of these models back to the unbilled pool. */
export function releaseUsageFromInvoice(trx: Trx, invoiceId: string, models: string[]): Promise<void> {
  return usage.releaseUsage(trx, invoiceId, models);
}

/** Re-derives the month's totals from the ledger, replacing them where they differ; returns how many differed. */
export function rebuildMonthTotals(trx: Trx, month: Month): Promise<number> {
  return usage.rebuildMonthTotals(trx, month.start, month.end);
}

/** Re-derives the daily totals of the month's days from the ledger, replacing them where they differ; returns how many differed. */
export function rebuildDayTotals(trx: Trx, month: Month): Promise<number> {
  return usage.rebuildDayTotals(trx, month.start, month.end);
}
