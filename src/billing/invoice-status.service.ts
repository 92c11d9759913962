import { callStripe, type Stripe } from '../infra/stripe.js';
import type { Db } from '../infra/db.js';
import { openInvoicesOf, refreshIssuedInvoice } from './invoices.repository.js';

/**
 * Stripe moves issued invoices on (paid, void, uncollectible) without a webhook we handle; history
 * shows its status and its links (the PDF link is new to invoices issued before it was kept).
 */
export async function refreshInvoiceStatuses(app: { db: Db }, stripe: Stripe, accountId: string): Promise<void> {
  for (const inv of await openInvoicesOf(app.db, accountId)) {
    const current = await callStripe('reading an invoice', () => stripe.invoices.retrieve(inv.stripe_invoice_id!));
    const seen = {
      status: current.status ?? inv.status,
      hostedInvoiceUrl: current.hosted_invoice_url ?? inv.hosted_invoice_url,
      invoicePdf: current.invoice_pdf ?? inv.invoice_pdf,
    };
    if (
      seen.status !== inv.status ||
      seen.hostedInvoiceUrl !== inv.hosted_invoice_url ||
      seen.invoicePdf !== inv.invoice_pdf
    )
      await refreshIssuedInvoice(app.db, inv.id, seen);
  }
}
