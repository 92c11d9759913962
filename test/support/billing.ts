import { randomUUID } from 'node:crypto';
import type { AppContext } from '../../src/context.js';
import { setCustomerIdIfUnset } from '../../src/accounts/accounts.repository.js';
import { insertUsageEvents } from '../../src/usage/usage.repository.js';
import type { Tier, UsageApi, UsageStatus } from '../../db/schema/index.js';
import type { FakeStripe } from '../fakes/stripe.js';
import { createTestAccount, type TestAccount } from './accounts.js';
import * as ledger from './ledger.repository.js';

/** An account with a Stripe customer in the fake (created through the real client, as the upgrade path does). */
export async function createBillingAccount(
  app: AppContext,
  opts: { tier?: Tier } = {},
): Promise<TestAccount & { customerId: string }> {
  const who = await createTestAccount(app, { tier: opts.tier ?? 'paid' });
  const customer = await app.stripe.customers.create({
    email: who.account.email,
    name: who.account.name,
    metadata: { account_id: who.account.id },
  });
  await setCustomerIdIfUnset(app.db, who.account.id, customer.id, app.clock.now());
  return { ...who, account: { ...who.account, stripe_customer_id: customer.id }, customerId: customer.id };
}

export interface UsageSpec {
  accountId: string;
  model: string;
  tier: Tier;
  prompt: number;
  completion: number;
  at: string | Date;
  status?: UsageStatus;
  stream?: boolean;
  /** Default chat.completions; a responses row gets a `resp_…` id, as the Responses API's have. */
  api?: UsageApi;
  /** The API key that made the request (api_keys.id, or any uuid); none by default. */
  keyId?: string;
  /** Parts of the prompt read from and written to a prompt cache (of which with the 1-hour TTL), and of the completion, reasoning. */
  cached?: number;
  cacheWrite?: number;
  cacheWrite1h?: number;
  reasoning?: number;
}

/** Ledger rows as the metering worker writes them (prices from the catalog, cost as the worker computes it). */
export async function recordUsage(app: AppContext, rows: UsageSpec[]): Promise<string[]> {
  const catalog = app.catalog;
  const events = rows.map((r) => {
    const m = catalog.find(r.model);
    if (!m) throw new Error(`no model ${r.model} in the catalog`);
    return {
      request_id: r.api === 'responses' ? `resp_test${randomUUID()}` : `chatcmpl-test-${randomUUID()}`,
      account_id: r.accountId,
      model: r.model,
      tier: r.tier,
      status: r.status ?? ('completed' as const),
      stream: r.stream ?? false,
      api: r.api ?? ('chat.completions' as const),
      prompt_tokens: r.prompt,
      completion_tokens: r.completion,
      ...(r.cached ? { cached_tokens: r.cached } : {}),
      ...(r.cacheWrite ? { cache_write_tokens: r.cacheWrite } : {}),
      ...(r.cacheWrite1h ? { cache_write_1h_tokens: r.cacheWrite1h } : {}),
      ...(r.reasoning ? { reasoning_tokens: r.reasoning } : {}),
      input_price_per_million: m.input_price_per_million,
      output_price_per_million: m.output_price_per_million,
      cached_input_price_per_million: m.cached_input_price_per_million,
      cache_write_price_per_million: m.cache_write_price_per_million,
      cache_write_1h_price_per_million: m.cache_write_1h_price_per_million,
      created_at: new Date(r.at).toISOString(),
      ...(r.keyId ? { key_id: r.keyId } : {}),
    };
  });
  await insertUsageEvents(app.db, events);
  return events.map((e) => e.request_id);
}

/** The expected cents per model, computed independently of the service (see ledger.repository.ts). */
export const ledgerCentsByModel = (
  app: AppContext,
  where: { accountId: string; invoiceId?: string; from?: string; to?: string },
) => ledger.ledgerCentsByModel(app.db, where);

export const invoicesOf = (app: AppContext, accountId: string) => ledger.invoicesOf(app.db, accountId);

export const linesOf = (app: AppContext, invoiceId: string) => ledger.invoiceLinesOf(app.db, invoiceId);

export const usageRowsOf = (app: AppContext, accountId: string) => ledger.usageRowsOf(app.db, accountId);

/** The fake Stripe's invoices of a customer, with the amounts of their lines. */
export function stripeInvoicesOf(fake: FakeStripe, customerId: string) {
  return [...fake.invoices.values()].filter((i) => i.customer === customerId);
}

/** POST /v1/invoices requests the fake received for a customer (replays included). */
export function invoiceCreatesFor(fake: FakeStripe, customerId: string) {
  return fake.received('POST', /^\/v1\/invoices$/).filter((r) => r.body.customer === customerId);
}

/** The prompt-cache and reasoning figures of usage that used neither, as usage bodies show them. */
export const NO_CACHE = {
  cached_tokens: 0,
  cache_write_tokens: 0,
  reasoning_tokens: 0,
  cache_savings_usd: '0',
} as const;
/** The same parts of one request of the requests list, which shows the counts only. */
export const NO_CACHE_TOKENS = { cached_tokens: 0, cache_write_tokens: 0, reasoning_tokens: 0 } as const;
