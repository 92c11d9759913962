import type { Clock } from '../clock.js';
import type { Config } from '../config.js';
import { validationError } from '../errors.js';
import type { Db } from '../infra/db.js';
import type { Tier } from '../../db/schema/index.js';
import type { Account } from '../accounts/account.js';
import type { Limiter } from '../limits/limiter.service.js';
import { monthUsageByKey, monthUsageByModel, usageByMonth } from '../usage/ledger.service.js';
import { keyLabels, type KeyLabel } from '../accounts/keys.service.js';
import { listInvoices } from './invoices.repository.js';
import { invoiceView, type InvoiceView } from './invoices.presenter.js';
import { centsToAmount, normalizeDecimal, sumDecimals, toSafeInteger } from './money.js';
import { addDays, addMonths, dayKey, monthOf, parseDay } from '../calendar.js';
import { spendLimitView, type SpendLimitView } from './spend-limit.service.js';
import { partsOf, type UsageParts } from './usage-parts.js';

/** What the usage and history endpoints read: the ledger's totals, the invoices, today's date and the currency (and the spending limit's figures). */
export interface BillingDeps {
  db: Db;
  clock: Clock;
  config: Pick<Config, 'stripe'>;
  limiter: Limiter;
}

export interface UsageFigures extends UsageParts {
  requests: number;
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  /** Exact USD cost of paid-tier requests (free-tier requests cost nothing), as a decimal string. */
  cost_usd: string;
  /** The cost as it would be invoiced: rounded half up to the cent per model, summed. */
  cost_cents: number;
  cost: string;
}

type Count = string | number | bigint;
type UsageRow = {
  requests: Count;
  prompt_tokens: Count;
  completion_tokens: Count;
  cost_usd: string;
  cost_cents: string | bigint;
  cached_tokens: Count;
  cache_write_tokens: Count;
  reasoning_tokens: Count;
  cache_savings_usd: string;
};

/** The figures of one ledger aggregate row, as every usage body shows them. */
function figuresOf(r: UsageRow): UsageFigures {
  return {
    requests: toSafeInteger(r.requests),
    prompt_tokens: toSafeInteger(r.prompt_tokens),
    completion_tokens: toSafeInteger(r.completion_tokens),
    total_tokens: toSafeInteger(BigInt(r.prompt_tokens) + BigInt(r.completion_tokens)),
    ...partsOf([r]),
    cost_usd: normalizeDecimal(r.cost_usd),
    cost_cents: toSafeInteger(r.cost_cents),
    cost: centsToAmount(r.cost_cents),
  };
}

export interface ModelUsage extends UsageFigures {
  model: string;
  /** Requests made on the paid tier (the billable ones). */
  billable_requests: number;
}

/** One key's usage: its label (a revoked key keeps its name) and the figures, as a model's are. */
export type KeyUsage = KeyLabel & { billable_requests: number } & UsageFigures;

export interface CurrentUsage {
  object: 'billing.usage';
  tier: Tier;
  currency: string;
  /** The current calendar month (UTC) to now. */
  period: { start: string; end: string; month: string };
  models: ModelUsage[];
  /** One entry per key used this month, the costliest first, then the busiest (from the daily totals). */
  by_key: KeyUsage[];
  total: UsageFigures;
  /** The monthly spending limit and what is left of it (see GET /v1/billing/spend-limit). */
  spend_limit: SpendLimitView;
}

/** GET /v1/billing/usage: this month to date, per model, per key and in total, and the spending limit. */
export async function currentUsage(
  app: BillingDeps,
  account: Pick<Account, 'id' | 'tier' | 'monthly_spend_limit_usd'>,
): Promise<CurrentUsage> {
  const now = app.clock.now();
  const month = monthOf(now);
  const [rows, keyRows] = await Promise.all([
    monthUsageByModel(app.db, account.id, month),
    monthUsageByKey(app.db, account.id, month),
  ]);
  const labelOf = await keyLabels(
    app,
    account.id,
    keyRows.map((r) => r.key_id),
  );
  const models: ModelUsage[] = rows.map((r) => ({
    model: r.model,
    billable_requests: toSafeInteger(r.paid_requests),
    ...figuresOf(r),
  }));
  const cents = rows.reduce((n, r) => n + BigInt(r.cost_cents), 0n);
  const total: UsageFigures = {
    requests: models.reduce((n, m) => n + m.requests, 0),
    prompt_tokens: models.reduce((n, m) => n + m.prompt_tokens, 0),
    completion_tokens: models.reduce((n, m) => n + m.completion_tokens, 0),
    total_tokens: models.reduce((n, m) => n + m.total_tokens, 0),
    ...partsOf(rows),
    cost_usd: sumDecimals(rows.map((r) => r.cost_usd)),
    cost_cents: toSafeInteger(cents),
    cost: centsToAmount(cents),
  };
  return {
    object: 'billing.usage',
    tier: account.tier,
    currency: app.config.stripe.currency,
    period: { start: month.start.toISOString(), end: now.toISOString(), month: month.key },
    models,
    by_key: keyRows.map((r) => ({
      ...labelOf(r.key_id),
      billable_requests: toSafeInteger(r.paid_requests),
      ...figuresOf(r),
    })),
    total,
    spend_limit: await spendLimitView(app, account),
  };
}

export interface MonthUsage extends UsageFigures {
  month: string;
}

export interface BillingHistory {
  object: 'billing.history';
  start_date: string;
  end_date: string;
  currency: string;
  invoices: InvoiceView[];
  /** Months that overlap the period and have usage, each month whole. */
  months: MonthUsage[];
  total_invoiced_cents: number;
  total_invoiced: string;
}

export interface HistoryQuery {
  start_date?: string;
  end_date?: string;
}

/**
 * GET /v1/billing/history. Dates are UTC days, both inclusive. Defaults: end_date today; start_date
 * the 1st of the month eleven months before end_date's month (twelve calendar months in all).
 */
export async function billingHistory(app: BillingDeps, accountId: string, q: HistoryQuery): Promise<BillingHistory> {
  const endDate = q.end_date ?? dayKey(app.clock.now());
  const startDate = q.start_date ?? dayKey(addMonths(monthOf(parseDay(endDate)), -11).start);
  if (endDate < startDate) {
    throw validationError([
      {
        loc: ['query', 'end_date'],
        msg: `end_date (${endDate}) must be on or after start_date (${startDate})`,
        type: 'value_error',
      },
    ]);
  }
  const from = parseDay(startDate);
  const to = addDays(parseDay(endDate), 1);
  const invoices = (await listInvoices(app.db, accountId, from, to)).map((r) => invoiceView(r));
  const rows = await usageByMonth(app.db, accountId, monthOf(from), monthOf(parseDay(endDate)));
  const months = rows.map((r) => ({ month: r.month, ...figuresOf(r) }));
  const invoiced = invoices
    .filter((i) => i.status !== 'draft' && i.status !== 'void')
    .reduce((n, i) => n + BigInt(i.amount_cents), 0n);
  return {
    object: 'billing.history',
    start_date: startDate,
    end_date: endDate,
    currency: app.config.stripe.currency,
    invoices,
    months,
    total_invoiced_cents: toSafeInteger(invoiced),
    total_invoiced: centsToAmount(invoiced),
  };
}
