import { sql, type Selectable } from 'kysely';
import type { Db, Trx } from '../infra/db.js';
import type { InvoiceKind, Tier } from '../../db/schema/index.js';
import type { InvoicesTable } from '../../db/schema/invoices.js';

export type InvoiceRow = Selectable<InvoicesTable>;

export interface BillingAccountRow {
  id: string;
  email: string;
  tier: Tier;
  stripe_customer_id: string | null;
  stripe_subscription_id: string | null;
  subscription_status: string | null;
  default_payment_method_id: string | null;
  tier_changed_at: Date;
}

const accountColumns = [
  'id',
  'email',
  'tier',
  'stripe_customer_id',
  'stripe_subscription_id',
  'subscription_status',
  'default_payment_method_id',
  'tier_changed_at',
] as const;

export async function findBillingAccount(db: Db | Trx, id: string): Promise<BillingAccountRow | undefined> {
  return db.selectFrom('accounts').select(accountColumns).where('id', '=', id).executeTakeFirst();
}

export async function lockBillingAccount(trx: Trx, id: string): Promise<BillingAccountRow | undefined> {
  return trx.selectFrom('accounts').select(accountColumns).where('id', '=', id).forUpdate().executeTakeFirst();
}

// ---------------------------------------------------------------------------------------------
// Per-account serialisation of invoicing

// Session-level advisory locks live as long as the connection (or until released): a process that
// dies mid-invoice frees its accounts at once, with no lease to wait out. Namespace 7001 keeps our
// keys apart from anyone else's advisory locks.
const ACCOUNT_LOCK_NS = 7001;

export async function tryLockAccountForInvoicing(conn: Db, accountId: string): Promise<boolean> {
  const r = await sql<{ ok: boolean }>`select pg_try_advisory_lock(${ACCOUNT_LOCK_NS}::int, hashtext(${accountId})) as ok`.execute(conn);
  return r.rows[0]?.ok === true;
}

export async function unlockAccountForInvoicing(conn: Db, accountId: string): Promise<void> {
  await sql`select pg_advisory_unlock(${ACCOUNT_LOCK_NS}::int, hashtext(${accountId}))`.execute(conn);
}

// ---------------------------------------------------------------------------------------------
// Usage reads (from the trigger-maintained monthly totals)

export interface ModelUsageRow {
  model: string;
  requests: string;
  prompt_tokens: string;
  completion_tokens: string;
  /** Exact sum of paid-tier cost (free-tier usage costs nothing). */
  cost_usd: string;
  /** cost_usd rounded half up to the cent: what an invoice line for it would bill. */
  cost_cents: string;
  paid_requests: string;
}

/** One month of an account's usage per model (month = first day, UTC). */
export async function monthUsageByModel(db: Db, accountId: string, month: Date): Promise<ModelUsageRow[]> {
  const r = await sql<ModelUsageRow>`
    select model,
           sum(requests)::text as requests,
           sum(prompt_tokens)::text as prompt_tokens,
           sum(completion_tokens)::text as completion_tokens,
           coalesce(sum(cost_usd) filter (where tier = 'paid'), 0)::text as cost_usd,
           round(coalesce(sum(cost_usd) filter (where tier = 'paid'), 0) * 100)::bigint::text as cost_cents,
           coalesce(sum(requests) filter (where tier = 'paid'), 0)::text as paid_requests
      from usage_monthly_totals
     where account_id = ${accountId} and month = ${month.toISOString().slice(0, 10)}::date
     group by model
     order by model`.execute(db);
  return r.rows;
}

export interface MonthUsageRow {
  month: string;
  requests: string;
  prompt_tokens: string;
  completion_tokens: string;
  cost_usd: string;
  /** Sum over models of each model's paid cost rounded to the cent (the invoice-line rule). */
  cost_cents: string;
}

/** Monthly totals of an account for the months from `from` to `to` inclusive (first days, UTC). */
export async function usageByMonth(db: Db, accountId: string, from: Date, to: Date): Promise<MonthUsageRow[]> {
  const r = await sql<MonthUsageRow>`
    with per_model as (
      select month, model,
             sum(requests) as requests,
             sum(prompt_tokens) as prompt_tokens,
             sum(completion_tokens) as completion_tokens,
             coalesce(sum(cost_usd) filter (where tier = 'paid'), 0) as cost_usd
        from usage_monthly_totals
       where account_id = ${accountId}
         and month between ${from.toISOString().slice(0, 10)}::date and ${to.toISOString().slice(0, 10)}::date
       group by month, model
    )
    select to_char(month, 'YYYY-MM') as month,
           sum(requests)::text as requests,
           sum(prompt_tokens)::text as prompt_tokens,
           sum(completion_tokens)::text as completion_tokens,
           sum(cost_usd)::text as cost_usd,
           sum(round(cost_usd * 100))::bigint::text as cost_cents
      from per_model
     group by month
     order by month`.execute(db);
  return r.rows;
}

// ---------------------------------------------------------------------------------------------
// Invoices

export async function findInvoiceByKey(db: Db | Trx, idempotencyKey: string): Promise<InvoiceRow | undefined> {
  return db.selectFrom('invoices').selectAll().where('idempotency_key', '=', idempotencyKey).executeTakeFirst();
}

export async function findInvoice(db: Db | Trx, id: string): Promise<InvoiceRow | undefined> {
  return db.selectFrom('invoices').selectAll().where('id', '=', id).executeTakeFirst();
}

/** Invoices reserved locally but not yet issued in Stripe (a run that stopped half way). */
export async function findDraftInvoices(db: Db | Trx, accountId: string): Promise<InvoiceRow[]> {
  return db.selectFrom('invoices').selectAll().where('account_id', '=', accountId).where('status', '=', 'draft').orderBy('created_at').execute();
}

export async function countInvoices(db: Db | Trx, accountId: string, kind: InvoiceKind, periodStart: Date): Promise<number> {
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
  v: { accountId: string; kind: InvoiceKind; periodStart: Date; periodEnd: Date; idempotencyKey: string; currency: string; createdAt: Date },
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

/**
 * Marks the account's unbilled paid-tier rows created in [from, to) (from = null: everything
 * before `to`) as belonging to the invoice. Rows of free-tier requests are never billable.
 */
export async function reserveUsage(trx: Trx, invoiceId: string, accountId: string, from: Date | null, to: Date): Promise<number> {
  let q = trx
    .updateTable('usage_events')
    .set({ invoice_id: invoiceId })
    .where('account_id', '=', accountId)
    .where('tier', '=', 'paid')
    .where('invoice_id', 'is', null)
    .where('created_at', '<', to);
  if (from !== null) q = q.where('created_at', '>=', from);
  const r = await q.executeTakeFirst();
  return Number(r.numUpdatedRows);
}

export interface LineAggregate {
  model: string;
  requests: number;
  prompt_tokens: string;
  completion_tokens: string;
  cost_usd: string;
  amount_cents: string;
}

/**
 * The invoice's lines, one per model, from the rows it reserved. THE rounding rule: each line is
 * its exact numeric sum rounded to the cent, half up (Postgres round() on a non-negative numeric
 * rounds halves away from zero, i.e. up); the invoice total is the sum of the rounded lines.
 */
export async function aggregateReservedUsage(trx: Trx, invoiceId: string): Promise<LineAggregate[]> {
  const r = await sql<LineAggregate>`
    select model,
           count(*)::int as requests,
           sum(prompt_tokens)::text as prompt_tokens,
           sum(completion_tokens)::text as completion_tokens,
           sum(cost_usd)::text as cost_usd,
           round(sum(cost_usd) * 100)::bigint::text as amount_cents
      from usage_events
     where invoice_id = ${invoiceId}
     group by model
     order by model`.execute(trx);
  return r.rows;
}

/** Gives rows of these models back to the unbilled pool (lines that would bill zero cents). */
export async function releaseUsage(trx: Trx, invoiceId: string, models: string[]): Promise<void> {
  if (models.length === 0) return;
  await trx.updateTable('usage_events').set({ invoice_id: null }).where('invoice_id', '=', invoiceId).where('model', 'in', models).execute();
}

export async function insertInvoiceLines(trx: Trx, invoiceId: string, lines: LineAggregate[]): Promise<void> {
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
  await sql`update invoices set amount_cents = (select coalesce(sum(amount_cents), 0) from invoice_lines where invoice_id = ${invoiceId}) where id = ${invoiceId}`.execute(trx);
}

export async function invoiceLines(db: Db | Trx, invoiceId: string) {
  return db.selectFrom('invoice_lines').selectAll().where('invoice_id', '=', invoiceId).orderBy('model').execute();
}

export async function setStripeInvoiceId(db: Db, invoiceId: string, stripeInvoiceId: string): Promise<void> {
  await db.updateTable('invoices').set({ stripe_invoice_id: stripeInvoiceId }).where('id', '=', invoiceId).execute();
}

export async function setLineItemId(db: Db, invoiceId: string, model: string, itemId: string): Promise<void> {
  await db.updateTable('invoice_lines').set({ stripe_invoice_item_id: itemId }).where('invoice_id', '=', invoiceId).where('model', '=', model).execute();
}

export async function markInvoiceIssued(db: Db, invoiceId: string, v: { status: string; hostedInvoiceUrl: string | null; finalizedAt: Date }): Promise<InvoiceRow> {
  return db
    .updateTable('invoices')
    .set({ status: v.status, hosted_invoice_url: v.hostedInvoiceUrl, finalized_at: v.finalizedAt })
    .where('id', '=', invoiceId)
    .returningAll()
    .executeTakeFirstOrThrow();
}

export async function setInvoiceStatus(db: Db, invoiceId: string, status: string): Promise<void> {
  await db.updateTable('invoices').set({ status }).where('id', '=', invoiceId).execute();
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
  return db.selectFrom('invoices').selectAll().where('account_id', '=', accountId).where('status', '=', 'open').where('stripe_invoice_id', 'is not', null).execute();
}

/**
 * Accounts the monthly run must visit: those with unbilled paid usage created before `before`,
 * and those with a draft invoice left by an interrupted run (their rows are reserved, so they
 * no longer look unbilled).
 */
export async function accountsToInvoice(db: Db, before: Date): Promise<string[]> {
  const r = await sql<{ account_id: string }>`
    select account_id from usage_events where invoice_id is null and tier = 'paid' and created_at < ${before}
    union
    select account_id from invoices where status = 'draft'
    order by account_id`.execute(db);
  return r.rows.map((x) => x.account_id);
}

// ---------------------------------------------------------------------------------------------
// Reconciliation

/** A page of accounts with a Stripe customer, in id order. */
export async function accountsWithCustomer(db: Db, afterId: string | null, limit: number, only?: string[]): Promise<BillingAccountRow[]> {
  let q = db.selectFrom('accounts').select(accountColumns).where('stripe_customer_id', 'is not', null).orderBy('id').limit(limit);
  if (afterId !== null) q = q.where('id', '>', afterId);
  if (only && only.length) q = q.where('id', 'in', only);
  return q.execute();
}

export interface AccountBillingPatch {
  stripe_subscription_id?: string | null;
  subscription_status?: string | null;
  default_payment_method_id?: string | null;
  payment_method_brand?: string | null;
  payment_method_last4?: string | null;
}

/** Stripe-mirrored columns only; the tier changes through changeTier (subscriptions feature). */
export async function updateAccountBilling(trx: Trx, accountId: string, patch: AccountBillingPatch, at: Date): Promise<void> {
  await trx
    .updateTable('accounts')
    .set({ ...patch, updated_at: at })
    .where('id', '=', accountId)
    .execute();
}

// ---------------------------------------------------------------------------------------------
// Usage totals audit

/**
 * Re-derives one month's totals from the ledger and replaces them where they differ. The table
 * lock makes concurrent inserts (whose trigger writes totals) wait, so no row is counted twice or
 * missed while the month is rebuilt. Returns the number of (account, model, tier) totals that differed.
 */
export async function rebuildMonthTotals(trx: Trx, monthStart: Date, monthEnd: Date): Promise<number> {
  await sql`lock table usage_monthly_totals in share row exclusive mode`.execute(trx);
  const month = monthStart.toISOString().slice(0, 10);
  const drift = await sql<{ n: string }>`
    with truth as (
      select account_id, model, tier, count(*)::bigint as requests, sum(prompt_tokens)::bigint as prompt_tokens,
             sum(completion_tokens)::bigint as completion_tokens, sum(cost_usd) as cost_usd
        from usage_events
       where created_at >= ${monthStart} and created_at < ${monthEnd}
       group by account_id, model, tier
    ), kept as (
      select account_id, model, tier, requests, prompt_tokens, completion_tokens, cost_usd
        from usage_monthly_totals where month = ${month}::date
    )
    select count(*)::text as n
      from truth t full join kept k using (account_id, model, tier)
     where (t.requests, t.prompt_tokens, t.completion_tokens, t.cost_usd) is distinct from (k.requests, k.prompt_tokens, k.completion_tokens, k.cost_usd)`.execute(trx);
  const n = Number(drift.rows[0]?.n ?? 0);
  if (n > 0) {
    await sql`delete from usage_monthly_totals where month = ${month}::date`.execute(trx);
    await sql`
      insert into usage_monthly_totals (account_id, month, model, tier, requests, prompt_tokens, completion_tokens, cost_usd)
      select account_id, ${month}::date, model, tier, count(*), sum(prompt_tokens), sum(completion_tokens), sum(cost_usd)
        from usage_events
       where created_at >= ${monthStart} and created_at < ${monthEnd}
       group by account_id, model, tier`.execute(trx);
  }
  return n;
}
