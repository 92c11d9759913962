import type { ColumnType, Generated } from 'kysely';

export type InvoiceKind = 'monthly' | 'on_demand';

export interface InvoicesTable {
  id: Generated<string>;
  account_id: string;
  kind: InvoiceKind;
  /** Inclusive start and exclusive end of the billed period, UTC. */
  period_start: Date;
  period_end: Date;
  /** Derived from account and period, so re-running a month never bills twice. */
  idempotency_key: string;
  stripe_invoice_id: string | null;
  /** draft (local, not yet in Stripe), open, paid, void, uncollectible. */
  status: string;
  currency: string;
  amount_cents: ColumnType<string, string | number | bigint, string | number | bigint>;
  hosted_invoice_url: string | null;
  /** Stripe's link to the invoice's PDF. */
  invoice_pdf: ColumnType<string | null, string | null | undefined, string | null>;
  created_at: ColumnType<Date, Date | undefined, never>;
  finalized_at: Date | null;
}

export interface InvoiceLinesTable {
  id: Generated<string>;
  invoice_id: string;
  model: string;
  requests: number;
  prompt_tokens: ColumnType<string, string | number | bigint, string | number | bigint>;
  completion_tokens: ColumnType<string, string | number | bigint, string | number | bigint>;
  /** Exact sum of the ledger rows' cost, before rounding. */
  cost_usd: string;
  /** cost_usd rounded half-up to the cent: the amount billed for this line. */
  amount_cents: ColumnType<string, string | number | bigint, string | number | bigint>;
  stripe_invoice_item_id: string | null;
}
