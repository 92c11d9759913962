import type { AppContext } from '../context.js';
import { promClient } from '../metrics.js';

/** The billing feature's counters, registered once per process on its registry. */
export function billingMetrics(app: AppContext) {
  return app.once('billing-metrics', () => ({
    invoicesCreated: new promClient.Counter({
      name: 'billing_invoices_created_total',
      help: 'Invoices issued in Stripe (finalized and sent), by kind (monthly, on_demand)',
      labelNames: ['kind'] as const,
      registers: [app.metrics.registry],
    }),
    invoicedCents: new promClient.Counter({
      name: 'billing_invoiced_amount_cents_total',
      help: 'Sum of issued invoice totals in minor units (cents), by kind',
      labelNames: ['kind'] as const,
      registers: [app.metrics.registry],
    }),
    invoiceFailures: new promClient.Counter({
      name: 'billing_invoice_failures_total',
      help: 'Accounts whose invoicing failed in a run (retried by the next run; nothing is billed twice)',
      registers: [app.metrics.registry],
    }),
    reconciliationFixes: new promClient.Counter({
      name: 'billing_reconciliation_fixes_total',
      help: "Drift between an account and Stripe's subscription state repaired by reconciliation, by what was fixed",
      labelNames: ['fix'] as const,
      registers: [app.metrics.registry],
    }),
    reconciliationFailures: new promClient.Counter({
      name: 'billing_reconciliation_failures_total',
      help: 'Accounts reconciliation could not check (Stripe error, unknown customer)',
      registers: [app.metrics.registry],
    }),
    totalsRepairs: new promClient.Counter({
      name: 'billing_usage_totals_repairs_total',
      help: 'Monthly usage totals found different from the ledger and rebuilt by the rollup audit',
      registers: [app.metrics.registry],
    }),
  }));
}
