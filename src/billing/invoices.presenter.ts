import type { InvoiceLineRow, InvoiceRow } from './invoices.repository.js';
import { centsToAmount, normalizeDecimal, toSafeInteger } from './money.js';

// The invoice as the billing endpoints return it (generate-invoice, history): money as whole
// cents and as an amount string, never a float.

export interface InvoiceLineView {
  model: string;
  requests: number;
  prompt_tokens: number;
  completion_tokens: number;
  /** Exact sum of the covered requests' cost, USD. */
  cost_usd: string;
  /** The line's amount: cost_usd rounded half up to the cent. */
  amount_cents: number;
  amount: string;
}

export interface InvoiceView {
  id: string;
  stripe_invoice_id: string | null;
  kind: 'monthly' | 'on_demand';
  period_start: string;
  period_end: string;
  status: string;
  currency: string;
  /** Sum of the rounded lines. */
  amount_cents: number;
  amount: string;
  hosted_invoice_url: string | null;
  invoice_pdf: string | null;
  created_at: string;
  lines?: InvoiceLineView[];
}

export function invoiceView(row: InvoiceRow, lines?: InvoiceLineRow[]): InvoiceView {
  return {
    id: row.id,
    stripe_invoice_id: row.stripe_invoice_id,
    kind: row.kind,
    period_start: row.period_start.toISOString(),
    period_end: row.period_end.toISOString(),
    status: row.status,
    currency: row.currency,
    amount_cents: toSafeInteger(row.amount_cents),
    amount: centsToAmount(row.amount_cents),
    hosted_invoice_url: row.hosted_invoice_url,
    invoice_pdf: row.invoice_pdf,
    created_at: row.created_at.toISOString(),
    ...(lines
      ? {
          lines: lines.map((l) => ({
            model: l.model,
            requests: l.requests,
            prompt_tokens: toSafeInteger(l.prompt_tokens),
            completion_tokens: toSafeInteger(l.completion_tokens),
            cost_usd: normalizeDecimal(l.cost_usd),
            amount_cents: toSafeInteger(l.amount_cents),
            amount: centsToAmount(l.amount_cents),
          })),
        }
      : {}),
  };
}
