import { HistoryQuery, HistorySchema, GenerateInvoiceSchema, UsageSchema } from '../../billing/billing.schema.js';
import { billingHistory, currentUsage, type HistoryQuery as HistoryParams } from '../../billing/billing.service.js';
import { generateInvoice } from '../../billing/invoicing.service.js';
import { accountOf, defineRoutes, type RouteSpec } from '../route.js';

const TAG = 'billing';

/** Endpoints 16 to 18: usage this month, an invoice on demand, billing history. */
export function billingRoutes(): RouteSpec[] {
  return defineRoutes([
    {
      method: 'get',
      path: '/v1/billing/usage',
      operationId: 'billingUsage',
      summary: "This calendar month's (UTC) token usage and cost to date, per model and in total",
      description:
        'Cost counts paid-tier requests only; free-tier usage shows zero cost. `cost_usd` is exact; `cost_cents` is what an invoice would bill (each model rounded half up to the cent).',
      tag: TAG,
      auth: 'api_key_or_jwt',
      responses: { 200: { description: 'Usage this month', schema: UsageSchema } },
      handler: async (ctx, app) => {
        const account = accountOf(ctx);
        ctx.body = await currentUsage(app, { id: account.id, tier: account.tier });
      },
    },
    {
      method: 'post',
      path: '/v1/billing/generate-invoice',
      operationId: 'generateInvoice',
      summary: 'Invoice the paid-tier usage of the current month to date that is on no invoice yet: one line per model, finalized and sent through Stripe',
      description:
        'status `invoiced`: a Stripe invoice was created, finalized and sent, and the usage it covers will never be billed again. status `nothing_to_invoice` (`invoice: null`): no unbilled paid-tier usage this month (a free account that never used the paid tier, an empty month, or a second call with no new usage); no invoice is created. A free account that used the paid tier earlier this month still gets an invoice for that usage.',
      tag: TAG,
      auth: 'api_key_or_jwt',
      responses: {
        200: { description: 'Invoiced, or nothing to invoice', schema: GenerateInvoiceSchema },
        409: { description: 'An invoice for the account is being generated right now (invoice_in_progress), or it owes usage but has no Stripe customer (no_billing_customer)' },
        502: { description: 'Stripe answered with an error; the reserved invoice is completed by the next call' },
        503: { description: 'Stripe or the usage stream is unreachable, or billing is not configured' },
      },
      handler: async (ctx, app) => {
        ctx.body = await generateInvoice(app, accountOf(ctx).id);
      },
    },
    {
      method: 'get',
      path: '/v1/billing/history',
      operationId: 'billingHistory',
      summary: 'Invoices and monthly usage totals for a period (UTC dates, both inclusive)',
      description: 'Defaults: `end_date` today, `start_date` the 1st of the month eleven months earlier (twelve calendar months). A malformed date or an end before the start is a 422.',
      tag: TAG,
      auth: 'jwt',
      query: HistoryQuery,
      responses: { 200: { description: 'Billing history', schema: HistorySchema } },
      handler: async (ctx, app) => {
        ctx.body = await billingHistory(app, accountOf(ctx).id, ctx.state.query as HistoryParams);
      },
    },
  ]);
}
