import {
  DailyUsageQuery,
  DailyUsageSchema,
  GenerateInvoiceSchema,
  HistoryQuery,
  HistorySchema,
  RecentRequestsQuery,
  RecentRequestsSchema,
  UsageSchema,
} from '../../billing/billing.schema.js';
import { billingHistory, currentUsage, type HistoryQuery as HistoryParams } from '../../billing/billing.service.js';
import { generateInvoice } from '../../billing/invoicing.service.js';
import { SpendLimitBody, SpendLimitSchema } from '../../billing/spend-limit.schema.js';
import {
  dailyUsage,
  recentRequests,
  type DailyUsageQuery as DailyParams,
  type RecentRequestsQuery as RequestsParams,
} from '../../billing/usage-activity.service.js';
import { removeSpendLimit, setSpendLimit, spendLimitView } from '../../billing/spend-limit.service.js';
import { accountOf, defineRoutes, type RouteSpec } from '../route.js';

const TAG = 'billing';

const spendLimit = { description: "The limit and this month's figures", schema: SpendLimitSchema };

/** Endpoints 16 to 18: usage this month, an invoice on demand, billing history; usage per day, the requests, and the monthly spending limit. */
export function billingRoutes(): RouteSpec[] {
  return defineRoutes([
    {
      method: 'get',
      path: '/v1/billing/usage',
      operationId: 'billingUsage',
      summary: "This calendar month's (UTC) token usage and cost to date, per model, per API key and in total",
      description:
        'Cost counts paid-tier requests only; free-tier usage shows zero cost. `cost_usd` is exact; `cost_cents` is what an invoice would bill (each model rounded half up to the cent). ' +
        '`by_key` breaks the month down by the API key that made each request, revoked keys included (`key_id` null: usage recorded before keys were).',
      tag: TAG,
      auth: 'api_key_or_jwt',
      responses: { 200: { description: 'Usage this month', schema: UsageSchema } },
      handler: async (ctx, app) => {
        ctx.body = await currentUsage(app, accountOf(ctx));
      },
    },
    {
      method: 'get',
      path: '/v1/billing/usage/daily',
      operationId: 'billingUsageDaily',
      summary:
        'Usage per UTC day and model over a period (at most 366 days), and its totals, in all, per API and per API key',
      description:
        'Defaults: `end_date` today, `start_date` the 1st of its month (this month to date). One entry per day and model with usage, read from totals kept as usage is recorded; `cost_usd` counts paid-tier requests only. ' +
        "`by_api` gives the period's totals per API the requests came through (Chat Completions, Responses); `group_by=api` splits `data` by API too. " +
        "`by_key` gives the period's totals per API key, named as GET /v1/keys shows them; `group_by=key` splits `data` by key. " +
        'A malformed date, an end before the start or a period over 366 days is a 422.',
      tag: TAG,
      auth: 'api_key_or_jwt',
      query: DailyUsageQuery,
      responses: { 200: { description: 'Usage per day and model', schema: DailyUsageSchema } },
      handler: async (ctx, app) => {
        ctx.body = await dailyUsage(app, accountOf(ctx).id, ctx.state.query as DailyParams);
      },
    },
    {
      method: 'get',
      path: '/v1/billing/requests',
      operationId: 'billingRequests',
      summary: "The account's requests as the usage ledger records them, newest first, a page at a time",
      description:
        '`id` is the id the client received (`chatcmpl-…`, or `resp_…` for the Responses API); `api` names the API; `key_id` and `key_name` the API key that made it. A request appears once its usage is recorded, normally within a second of its end. ' +
        'Page with `starting_after` set to the last `id` of the previous page while `has_more` is true.',
      tag: TAG,
      auth: 'api_key_or_jwt',
      query: RecentRequestsQuery,
      responses: {
        200: { description: 'A page of requests', schema: RecentRequestsSchema },
        404: { description: "starting_after is not one of the account's requests (request_not_found)" },
      },
      handler: async (ctx, app) => {
        ctx.body = await recentRequests(app, accountOf(ctx).id, ctx.state.query as RequestsParams);
      },
    },
    {
      method: 'post',
      path: '/v1/billing/generate-invoice',
      operationId: 'generateInvoice',
      summary:
        'Invoice the paid-tier usage of the current month to date that is on no invoice yet: one line per model, finalized and sent through Stripe',
      description:
        'status `invoiced`: a Stripe invoice was created, finalized and sent, and the usage it covers will never be billed again. status `nothing_to_invoice` (`invoice: null`): no unbilled paid-tier usage this month (a free account that never used the paid tier, an empty month, or a second call with no new usage), or only usage whose line per model is under half a cent, which `message` names and which waits for a later invoice; no invoice is created. A free account that used the paid tier earlier this month still gets an invoice for that usage.',
      tag: TAG,
      auth: 'api_key_or_jwt',
      responses: {
        200: { description: 'Invoiced, or nothing to invoice', schema: GenerateInvoiceSchema },
        409: {
          description:
            'An invoice for the account is being generated right now (invoice_in_progress), or it owes usage but has no Stripe customer (no_billing_customer)',
        },
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
      description:
        'Defaults: `end_date` today, `start_date` the 1st of the month eleven months earlier (twelve calendar months). A malformed date or an end before the start is a 422.',
      tag: TAG,
      auth: 'jwt',
      query: HistoryQuery,
      responses: { 200: { description: 'Billing history', schema: HistorySchema } },
      handler: async (ctx, app) => {
        ctx.body = await billingHistory(app, accountOf(ctx).id, ctx.state.query as HistoryParams);
      },
    },
    {
      method: 'get',
      path: '/v1/billing/spend-limit',
      operationId: 'getSpendLimit',
      summary: 'The monthly spending limit and what is left of it this month (UTC)',
      description:
        "`spent_usd` is this month's paid-tier spend, `reserved_usd` what requests in flight hold (the most each can cost), `remaining_usd` the limit minus both. " +
        'With no limit set, `monthly_limit_usd` and `remaining_usd` are null and nothing is refused for spend.',
      tag: TAG,
      auth: 'jwt',
      responses: { 200: spendLimit },
      handler: async (ctx, app) => {
        ctx.body = await spendLimitView(app, accountOf(ctx));
      },
    },
    {
      method: 'put',
      path: '/v1/billing/spend-limit',
      operationId: 'setSpendLimit',
      summary:
        'Set the monthly spending limit in USD (paid tier): requests that may cost more than what is left are refused with 429 insufficient_quota',
      description:
        "Each chat completion reserves the most it can cost (its prompt tokens and max_tokens, or the default reservation, for each of n choices, at the model's prices) against what is left, and its real cost replaces the reservation when it ends. " +
        'Emails go out at 80% and 100% of the limit, once each per month. The limit applies from the next request; the figures restart at 00:00 UTC on the 1st.',
      tag: TAG,
      auth: 'jwt',
      body: SpendLimitBody,
      responses: {
        200: spendLimit,
        403: { description: 'The account is on the free tier (spend_limit_requires_paid_tier)' },
      },
      handler: async (ctx, app) => {
        ctx.body = await setSpendLimit(app, accountOf(ctx).id, ctx.state.body as { monthly_limit_usd: string });
      },
    },
    {
      method: 'delete',
      path: '/v1/billing/spend-limit',
      operationId: 'deleteSpendLimit',
      summary: 'Remove the monthly spending limit (from the next request on)',
      tag: TAG,
      auth: 'jwt',
      responses: { 200: spendLimit },
      handler: async (ctx, app) => {
        ctx.body = await removeSpendLimit(app, accountOf(ctx).id);
      },
    },
  ]);
}
