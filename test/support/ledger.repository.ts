import { sql } from 'kysely';
import type { Db } from '../../src/infra/db.js';

// The tests' own reads of the ledger and of the invoices, written apart from the service's
// repositories on purpose: an expectation computed with the service's own query would agree with
// the service even when both were wrong.

/**
 * The rounding rule computed independently from the ledger: per model, the exact sum of the
 * paid-tier rows' cost, rounded half up to the cent (numeric arithmetic, no floats).
 */
export async function ledgerCentsByModel(
  db: Db,
  where: { accountId: string; invoiceId?: string; from?: string; to?: string },
): Promise<Record<string, string>> {
  const r = await sql<{ model: string; cents: string }>`
    select model, floor(sum(cost_usd) * 100 + 0.5)::bigint::text as cents
      from usage_events
     where account_id = ${where.accountId} and tier = 'paid'
       ${where.invoiceId ? sql`and invoice_id = ${where.invoiceId}` : sql``}
       ${where.from ? sql`and created_at >= ${where.from}` : sql``}
       ${where.to ? sql`and created_at < ${where.to}` : sql``}
     group by model order by model`.execute(db);
  return Object.fromEntries(r.rows.map((x) => [x.model, x.cents]));
}

export const usageRowsOf = (db: Db, accountId: string) =>
  db.selectFrom('usage_events').selectAll().where('account_id', '=', accountId).orderBy('created_at').execute();

export const invoicesOf = (db: Db, accountId: string) =>
  db.selectFrom('invoices').selectAll().where('account_id', '=', accountId).orderBy('created_at').execute();

export const invoiceLinesOf = (db: Db, invoiceId: string) =>
  db.selectFrom('invoice_lines').selectAll().where('invoice_id', '=', invoiceId).orderBy('model').execute();
