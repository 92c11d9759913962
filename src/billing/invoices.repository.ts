import { sql, type Insertable, type Selectable } from 'kysely';
import type { Db, Trx } from '../infra/db.js';
import type { InvoiceKind } from '../../db/schema/index.js';
import type { InvoiceLinesTable, InvoicesTable } from '../../db/schema/invoices.js';

// The invoices aggregate: invoices and their lines, one per model.

export type InvoiceRow = Selectable<InvoicesTable>;
export type InvoiceLineRow = Selectable<InvoiceLinesTable>;

export async function findInvoiceByKey(db: Db | Trx, idempotencyKey: string): Promise<InvoiceRow | undefined> {
  return db.selectFrom('invoices').selectAll().where('idempotency_key', '=', idempotencyKey).executeTakeFirst();
}

export async function findInvoice(db: Db | Trx, id: string): Promise<InvoiceRow | undefined> {
  return db.selectFrom('invoices').selectAll().where('id', '=', id).executeTakeFirst();
}

/** Invoices reserved locally but not yet issued in Stripe (a run that stopped half way). */
export async function findDraftInvoices(db: Db | Trx, accountId: string): Promise<InvoiceRow[]> {
  return db
    .selectFrom('invoices')
    .selectAll()
    .where('account_id', '=', accountId)
    .where('status', '=', 'draft')
    .orderBy('created_at')
    .execute();
}

export async function countInvoices(
  db: Db | Trx,
  accountId: string,
  kind: InvoiceKind,
  periodStart: Date,
): Promise<number> {
  const r = await db
    .selectFrom('invoices')
    .select((eb) => eb.fn.countAll<string>().as('n'))
    .where('account_id', '=', accountId)
    .where('kind', '=', kind)
    .where('period_start', '=', periodStart)
    .executeTakeFirstOrThrow();
  return Number(r.n);
}

export async function insertDraftInvoice(
  trx: Trx,
  v: {
    accountId: string;
    kind: InvoiceKind;
    periodStart: Date;
    periodEnd: Date;
    idempotencyKey: string;
    currency: string;
    createdAt: Date;
  },
): Promise<InvoiceRow> {
  return trx
    .insertInto('invoices')
    .values({
      account_id: v.accountId,
      kind: v.kind,
      period_start: v.periodStart,
      period_end: v.periodEnd,
      idempotency_key: v.idempotencyKey,
      status: 'draft',
      currency: v.currency,
      amount_cents: 0,
      created_at: v.createdAt,
    })
    .returningAll()
    .executeTakeFirstOrThrow();
}

/** A line as the ledger's aggregate gives it (see aggregateReservedUsage in the usage repository). */
export type NewInvoiceLine = Omit<Insertable<InvoiceLinesTable>, 'id' | 'invoice_id' | 'stripe_invoice_item_id'>;

export async function insertInvoiceLines(trx: Trx, invoiceId: string, lines: NewInvoiceLine[]): Promise<void> {
  await trx
    .insertInto('invoice_lines')
    .values(
      lines.map((l) => ({
        invoice_id: invoiceId,
        model: l.model,
        requests: l.requests,
        prompt_tokens: l.prompt_tokens,
        completion_tokens: l.completion_tokens,
        cost_usd: l.cost_usd,
        amount_cents: l.amount_cents,
      })),
    )
    .execute();
}

/** The invoice total is computed by Postgres as the sum of its rounded lines. */
export async function setInvoiceAmountFromLines(trx: Trx, invoiceId: string): Promise<void> {
  await sql`update invoices set amount_cents = (select coalesce(sum(amount_cents), 0) from invoice_lines where invoice_id = ${invoiceId}) where id = ${invoiceId}`.execute(
    trx,
  );
}

export async function invoiceLines(db: Db | Trx, invoiceId: string): Promise<InvoiceLineRow[]> {
  return db.selectFrom('invoice_lines').selectAll().where('invoice_id', '=', invoiceId).orderBy('model').execute();
}

export async function setStripeInvoiceId(db: Db, invoiceId: string, stripeInvoiceId: string): Promise<void> {
  await db.updateTable('invoices').set({ stripe_invoice_id: stripeInvoiceId }).where('id', '=', invoiceId).execute();
}

export async function setLineItemId(db: Db, invoiceId: string, model: string, itemId: string): Promise<void> {
  await db
    .updateTable('invoice_lines')
    .set({ stripe_invoice_item_id: itemId })
    .where('invoice_id', '=', invoiceId)
    .where('model', '=', model)
    .execute();
}

export async function markInvoiceIssued(
  db: Db,
  invoiceId: string,
  v: { status: string; hostedInvoiceUrl: string | null; invoicePdf: string | null; finalizedAt: Date },
): Promise<InvoiceRow> {
  return db
    .updateTable('invoices')
    .set({
      status: v.status,
      hosted_invoice_url: v.hostedInvoiceUrl,
      invoice_pdf: v.invoicePdf,
      finalized_at: v.finalizedAt,
    })
    .where('id', '=', invoiceId)
    .returningAll()
    .executeTakeFirstOrThrow();
}

/** Stripe's current status of an issued invoice and its links (the PDF link is new to invoices issued before it was kept). */
export async function refreshIssuedInvoice(
  db: Db,
  invoiceId: string,
  v: { status: string; hostedInvoiceUrl: string | null; invoicePdf: string | null },
): Promise<void> {
  await db
    .updateTable('invoices')
    .set({ status: v.status, hosted_invoice_url: v.hostedInvoiceUrl, invoice_pdf: v.invoicePdf })
    .where('id', '=', invoiceId)
    .execute();
}

/** Invoices whose period overlaps [from, to). */
export async function listInvoices(db: Db, accountId: string, from: Date, to: Date): Promise<InvoiceRow[]> {
  return db
    .selectFrom('invoices')
    .selectAll()
    .where('account_id', '=', accountId)
    .where('period_start', '<', to)
    .where('period_end', '>', from)
    .orderBy('period_start')
    .orderBy('created_at')
    .execute();
}

/** Issued invoices Stripe may still move on (paid, voided, uncollectible) without telling us. */
export async function openInvoicesOf(db: Db, accountId: string): Promise<InvoiceRow[]> {
  return db
    .selectFrom('invoices')
    .selectAll()
    .where('account_id', '=', accountId)
    .where('status', '=', 'open')
    .where('stripe_invoice_id', 'is not', null)
    .execute();
}

/**
 * Accounts the monthly run must visit: those with unbilled paid usage created before `before`,
 * and those with a draft invoice left by an interrupted run (their rows are reserved, so they
 * no longer look unbilled). It reads the ledger too, in one statement, so one snapshot decides.
 */
export async function accountsToInvoice(db: Db, before: Date): Promise<string[]> {
  const r = await sql<{ account_id: string }>`
    select account_id from usage_events where invoice_id is null and tier = 'paid' and created_at < ${before}
    union
    select account_id from invoices where status = 'draft'
    order by account_id`.execute(db);
  return r.rows.map((x) => x.account_id);
}
