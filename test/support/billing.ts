import { randomUUID } from 'node:crypto';
import { sql } from 'kysely';
import type { AppContext } from '../../src/context.js';
import { insertUsageEvents } from '../../src/usage/usage.repository.js';
import type { Tier } from '../../db/schema/index.js';
import type { FakeStripe } from '../fakes/stripe.js';
import { createTestAccount, type TestAccount } from './accounts.js';

/** An account with a Stripe customer in the fake (created through the real client, as the upgrade path does). */
export async function createBillingAccount(app: AppContext, opts: { tier?: Tier } = {}): Promise<TestAccount & { customerId: string }> {
  const who = await createTestAccount(app, { tier: opts.tier ?? 'paid' });
  const customer = await app.stripe.customers.create({ email: who.account.email, name: who.account.name, metadata: { account_id: who.account.id } });
  await app.db.updateTable('accounts').set({ stripe_customer_id: customer.id }).where('id', '=', who.account.id).execute();
  return { ...who, account: { ...who.account, stripe_customer_id: customer.id }, customerId: customer.id };
}

export interface UsageSpec {
  accountId: string;
  model: string;
  tier: Tier;
  prompt: number;
  completion: number;
  at: string | Date;
}

/** Ledger rows as the metering worker writes them (prices from the catalog, cost computed by Postgres). */
export async function recordUsage(app: AppContext, rows: UsageSpec[]): Promise<string[]> {
  const catalog = app.catalog;
  const events = rows.map((r) => {
    const m = catalog.find(r.model);
    if (!m) throw new Error(`no model ${r.model} in the catalog`);
    return {
      request_id: `chatcmpl-test-${randomUUID()}`,
      account_id: r.accountId,
      model: r.model,
      tier: r.tier,
      status: 'completed' as const,
      prompt_tokens: r.prompt,
      completion_tokens: r.completion,
      input_price_per_million: m.input_price_per_million,
      output_price_per_million: m.output_price_per_million,
      created_at: new Date(r.at).toISOString(),
    };
  });
  await insertUsageEvents(app.db, events);
  return events.map((e) => e.request_id);
}

/**
 * The rounding rule computed independently from the ledger: per model, the exact sum of the
 * paid-tier rows' cost, rounded half up to the cent (numeric arithmetic, no floats).
 */
export async function ledgerCentsByModel(app: AppContext, where: { accountId: string; invoiceId?: string; from?: string; to?: string }): Promise<Record<string, string>> {
  const r = await sql<{ model: string; cents: string }>`
    select model, floor(sum(cost_usd) * 100 + 0.5)::bigint::text as cents
      from usage_events
     where account_id = ${where.accountId} and tier = 'paid'
       ${where.invoiceId ? sql`and invoice_id = ${where.invoiceId}` : sql``}
       ${where.from ? sql`and created_at >= ${where.from}` : sql``}
       ${where.to ? sql`and created_at < ${where.to}` : sql``}
     group by model order by model`.execute(app.db);
  return Object.fromEntries(r.rows.map((x) => [x.model, x.cents]));
}

export const invoicesOf = (app: AppContext, accountId: string) =>
  app.db.selectFrom('invoices').selectAll().where('account_id', '=', accountId).orderBy('created_at').execute();

export const linesOf = (app: AppContext, invoiceId: string) =>
  app.db.selectFrom('invoice_lines').selectAll().where('invoice_id', '=', invoiceId).orderBy('model').execute();

export const usageRowsOf = (app: AppContext, accountId: string) =>
  app.db.selectFrom('usage_events').selectAll().where('account_id', '=', accountId).orderBy('created_at').execute();

/** The fake Stripe's invoices of a customer, with the amounts of their lines. */
export function stripeInvoicesOf(fake: FakeStripe, customerId: string) {
  return [...fake.invoices.values()].filter((i) => i.customer === customerId);
}

/** POST /v1/invoices requests the fake received for a customer (replays included). */
export function invoiceCreatesFor(fake: FakeStripe, customerId: string) {
  return fake.received('POST', /^\/v1\/invoices$/).filter((r) => r.body.customer === customerId);
}
