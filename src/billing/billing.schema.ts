import type { JsonSchema } from '../validation.js';
import { SpendLimitSchema } from './spend-limit.schema.js';

export const HistoryQuery: JsonSchema = {
  type: 'object',
  properties: {
    start_date: {
      type: 'string',
      format: 'date',
      description:
        'First day of the period (UTC, inclusive), YYYY-MM-DD. Default: the 1st of the month eleven months before end_date.',
      example: '2026-01-01',
    },
    end_date: {
      type: 'string',
      format: 'date',
      description: 'Last day of the period (UTC, inclusive), YYYY-MM-DD, on or after start_date. Default: today.',
      example: '2026-11-22',
    },
  },
};

const integer = (description: string): JsonSchema => ({ type: 'integer', minimum: 0, description });
const decimal = (description: string, example: string): JsonSchema => ({
  type: 'string',
  pattern: '^-?\\d+(\\.\\d+)?$',
  description,
  example,
});

/** The prompt cache's and reasoning's parts of usage figures. */
const parts = {
  cached_tokens: integer('Of the prompt tokens, those read from a prompt cache (billed at the cached-input price)'),
  cache_write_tokens: integer('Of the prompt tokens, those written to a prompt cache (billed at a cache-write price)'),
  reasoning_tokens: integer('Of the completion tokens, those the model spent thinking'),
  cache_savings_usd: decimal(
    'What prompt caching saved on paid-tier requests, exact: their cost with every prompt token at the input price, less what they cost (negative when cache writes cost more than reads saved)',
    '0.0045',
  ),
};

const figures = {
  requests: integer('Requests'),
  prompt_tokens: integer('Prompt (input) tokens, cached and cache-written ones included'),
  completion_tokens: integer('Completion (output) tokens, reasoning included'),
  total_tokens: integer('prompt_tokens + completion_tokens'),
  ...parts,
  cost_usd: decimal(
    'Exact cost in USD of paid-tier requests, unrounded (free-tier requests cost nothing)',
    '0.0123456',
  ),
  cost_cents: integer('The cost as it is invoiced: rounded half up to the cent per model, then summed'),
  cost: decimal('cost_cents as a currency amount', '0.01'),
};
const figureKeys = Object.keys(figures);

/** How usage read per key names the key (as GET /v1/keys shows it). */
const keyLabel = {
  key_id: {
    type: ['string', 'null'],
    format: 'uuid',
    description: 'The API key (its `id` in GET /v1/keys); null for usage recorded before the key of each request was',
  },
  name: {
    type: ['string', 'null'],
    description: "The key's name (a revoked key keeps it); null when key_id is null or the key is no longer on record",
  },
  redacted_value: {
    type: ['string', 'null'],
    description: 'The key as GET /v1/keys shows it (`sk-svc-…` and its last 4 characters); null as name is',
    example: 'sk-svc-…a1b2',
  },
  is_default: { type: 'boolean', description: "Whether it is (or was, if revoked) the account's default key" },
  revoked: {
    type: 'boolean',
    description: 'The key was revoked (or is no longer on record): its usage stays; false when key_id is null',
  },
};
const keyLabelKeys = Object.keys(keyLabel);

export const UsageSchema: JsonSchema = {
  type: 'object',
  required: ['object', 'tier', 'currency', 'period', 'models', 'by_key', 'total'],
  properties: {
    object: { type: 'string', const: 'billing.usage' },
    tier: { type: 'string', enum: ['free', 'paid'], description: 'The tier now' },
    currency: { type: 'string', example: 'usd' },
    period: {
      type: 'object',
      required: ['start', 'end', 'month'],
      properties: {
        start: { type: 'string', format: 'date-time', description: '00:00 UTC on the 1st of the current month' },
        end: { type: 'string', format: 'date-time', description: 'Now' },
        month: { type: 'string', example: '2026-11' },
      },
    },
    models: {
      type: 'array',
      description: 'One entry per model used this month, in model order',
      items: {
        type: 'object',
        required: ['model', 'billable_requests', ...figureKeys],
        properties: {
          model: { type: 'string' },
          billable_requests: integer('Requests made on the paid tier'),
          ...figures,
        },
      },
    },
    by_key: {
      type: 'array',
      description:
        "One entry per API key used this month, revoked keys included, the costliest first, then the most requests. A key's cost_cents is its own cost rounded half up to the cent, so the keys' cents need not add up to total.cost_cents (rounded per model); the other figures add up to total.",
      items: {
        type: 'object',
        required: [...keyLabelKeys, 'billable_requests', ...figureKeys],
        properties: {
          ...keyLabel,
          billable_requests: integer('Requests made on the paid tier'),
          ...figures,
          cost_cents: integer('cost_usd rounded half up to the cent'),
        },
      },
    },
    total: { type: 'object', required: figureKeys, properties: figures },
    spend_limit: {
      ...SpendLimitSchema,
      description: 'The monthly spending limit and what is left of it (as GET /v1/billing/spend-limit answers)',
    },
  },
};

const InvoiceLine: JsonSchema = {
  type: 'object',
  required: ['model', 'requests', 'prompt_tokens', 'completion_tokens', 'cost_usd', 'amount_cents', 'amount'],
  properties: {
    model: { type: 'string' },
    requests: integer('Requests covered'),
    prompt_tokens: integer('Prompt tokens covered'),
    completion_tokens: integer('Completion tokens covered'),
    cost_usd: decimal("Exact sum of the covered requests' cost", '1.2345678'),
    amount_cents: integer('cost_usd rounded half up to the cent: what this line bills'),
    amount: decimal('amount_cents as a currency amount', '1.23'),
  },
};

export const InvoiceSchema: JsonSchema = {
  type: 'object',
  required: [
    'id',
    'stripe_invoice_id',
    'kind',
    'period_start',
    'period_end',
    'status',
    'currency',
    'amount_cents',
    'amount',
    'hosted_invoice_url',
    'invoice_pdf',
    'created_at',
  ],
  properties: {
    id: { type: 'string', format: 'uuid', description: "This service's invoice id" },
    stripe_invoice_id: { type: ['string', 'null'], description: 'The Stripe invoice (in_…)' },
    kind: { type: 'string', enum: ['monthly', 'on_demand'] },
    period_start: { type: 'string', format: 'date-time' },
    period_end: { type: 'string', format: 'date-time', description: 'Exclusive' },
    status: {
      type: 'string',
      enum: ['draft', 'open', 'paid', 'void', 'uncollectible'],
      description: "draft: being issued; otherwise Stripe's status as last seen",
    },
    currency: { type: 'string' },
    amount_cents: integer('The sum of the rounded lines'),
    amount: decimal('amount_cents as a currency amount', '12.34'),
    hosted_invoice_url: { type: ['string', 'null'], description: "Stripe's page for viewing and paying the invoice" },
    invoice_pdf: { type: ['string', 'null'], description: "Stripe's link to the invoice as a PDF" },
    created_at: { type: 'string', format: 'date-time' },
    lines: { type: 'array', items: InvoiceLine },
  },
};

export const GenerateInvoiceSchema: JsonSchema = {
  type: 'object',
  required: ['status', 'message', 'invoice'],
  properties: {
    status: { type: 'string', enum: ['invoiced', 'nothing_to_invoice'] },
    message: { type: 'string' },
    invoice: {
      oneOf: [InvoiceSchema, { type: 'null' }],
      description: 'The invoice created (with its lines), or null when there was nothing to invoice',
    },
  },
};

export const HistorySchema: JsonSchema = {
  type: 'object',
  required: [
    'object',
    'start_date',
    'end_date',
    'currency',
    'invoices',
    'months',
    'total_invoiced_cents',
    'total_invoiced',
  ],
  properties: {
    object: { type: 'string', const: 'billing.history' },
    start_date: { type: 'string', format: 'date' },
    end_date: { type: 'string', format: 'date' },
    currency: { type: 'string' },
    invoices: {
      type: 'array',
      items: InvoiceSchema,
      description: 'Invoices whose period overlaps the dates, oldest first',
    },
    months: {
      type: 'array',
      description:
        'Usage per calendar month (UTC) for months that overlap the dates and have usage; each month is counted whole',
      items: {
        type: 'object',
        required: ['month', ...figureKeys],
        properties: { month: { type: 'string', example: '2026-10' }, ...figures },
      },
    },
    total_invoiced_cents: integer('Sum of the listed invoices that were issued (not draft or void)'),
    total_invoiced: decimal('total_invoiced_cents as a currency amount', '12.34'),
  },
};

export const DailyUsageQuery: JsonSchema = {
  type: 'object',
  properties: {
    start_date: {
      type: 'string',
      format: 'date',
      description: "First day (UTC, inclusive), YYYY-MM-DD. Default: the 1st of end_date's month.",
      example: '2026-11-01',
    },
    end_date: {
      type: 'string',
      format: 'date',
      description:
        'Last day (UTC, inclusive), YYYY-MM-DD, on or after start_date and at most 365 days after it (366 days in all). Default: today.',
      example: '2026-11-22',
    },
    group_by: {
      type: 'string',
      enum: ['api', 'key'],
      description:
        '`api`: one entry of `data` per day, model and API, each naming its `api`; `key`: one per day, model and API key, each naming its `key_id`; instead of one per day and model.',
    },
  },
};

const dailyFigures = {
  requests: integer('Requests'),
  prompt_tokens: integer('Prompt (input) tokens, cached and cache-written ones included'),
  completion_tokens: integer('Completion (output) tokens, reasoning included'),
  total_tokens: integer('prompt_tokens + completion_tokens'),
  ...parts,
  cost_usd: decimal(
    'Exact cost in USD of paid-tier requests, unrounded (free-tier requests cost nothing)',
    '0.0123456',
  ),
};
const dailyFigureKeys = Object.keys(dailyFigures);

const API = {
  type: 'string',
  enum: ['chat.completions', 'responses'],
  description: 'The API the requests came through: POST /v1/chat/completions or POST /v1/responses',
};

export const DailyUsageSchema: JsonSchema = {
  type: 'object',
  required: ['object', 'timezone', 'start_date', 'end_date', 'data', 'totals', 'by_api', 'by_key'],
  properties: {
    object: { type: 'string', const: 'list' },
    timezone: { type: 'string', const: 'UTC', description: 'Days are UTC calendar days' },
    start_date: { type: 'string', format: 'date' },
    end_date: { type: 'string', format: 'date' },
    data: {
      type: 'array',
      description:
        'One entry per day and model that has usage (every API and key together), by day then model; with group_by=api, one per day, model and API, by day, model, then API; with group_by=key, one per day, model and key, by day, model, then key id (usage of no recorded key last). Days without usage are left out.',
      items: {
        type: 'object',
        required: ['date', 'model', ...dailyFigureKeys],
        properties: {
          date: { type: 'string', format: 'date', example: '2026-11-21' },
          model: { type: 'string' },
          api: { ...API, description: `${API.description} (only with group_by=api)` },
          key_id: {
            ...keyLabel.key_id,
            description: `${keyLabel.key_id.description} (only with group_by=key; by_key names each)`,
          },
          ...dailyFigures,
        },
      },
    },
    totals: {
      type: 'object',
      description: 'The sums of data: the whole period',
      required: dailyFigureKeys,
      properties: dailyFigures,
    },
    by_api: {
      type: 'array',
      description:
        "The period's totals of each API: always one entry per API, chat.completions then responses, even one without usage. They add up to totals.",
      items: {
        type: 'object',
        required: ['api', ...dailyFigureKeys],
        properties: { api: API, ...dailyFigures },
      },
    },
    by_key: {
      type: 'array',
      description:
        "The period's totals of each API key used in it, revoked keys included, the costliest first, then the most requests. They add up to totals.",
      items: {
        type: 'object',
        required: [...keyLabelKeys, ...dailyFigureKeys],
        properties: { ...keyLabel, ...dailyFigures },
      },
    },
  },
};

export const RecentRequestsQuery: JsonSchema = {
  type: 'object',
  properties: {
    limit: {
      type: 'string',
      pattern: '^([1-9]|[1-9][0-9]|100)$',
      description: 'How many requests a page holds, 1 to 100. Default 20.',
      example: '20',
    },
    starting_after: {
      type: 'string',
      minLength: 1,
      maxLength: 64,
      'x-text': 'line',
      description: 'The `id` of the last request of the previous page: this page starts with the one before it',
      example: 'chatcmpl-…',
    },
  },
};

export const RecentRequestsSchema: JsonSchema = {
  type: 'object',
  required: ['object', 'data', 'has_more'],
  properties: {
    object: { type: 'string', const: 'list' },
    data: {
      type: 'array',
      description: 'Newest first',
      items: {
        type: 'object',
        required: [
          'id',
          'created',
          'model',
          'api',
          'stream',
          'status',
          'prompt_tokens',
          'completion_tokens',
          'total_tokens',
          'cached_tokens',
          'cache_write_tokens',
          'reasoning_tokens',
          'cost_usd',
          'key_id',
          'key_name',
        ],
        properties: {
          id: {
            type: 'string',
            description:
              "The id its client received: the chat.completion's (or its chunks') `chatcmpl-…`, or the response's `resp_…`",
            example: 'chatcmpl-…',
          },
          created: { type: 'integer', description: 'Unix seconds: when the request was admitted' },
          model: { type: 'string' },
          api: API,
          stream: { type: 'boolean', description: 'Whether the request asked for a stream' },
          status: {
            type: 'string',
            enum: ['completed', 'cancelled', 'failed'],
            description: 'completed, cancelled (the client went away or the service stopped it) or failed',
          },
          prompt_tokens: integer('Prompt tokens billed'),
          completion_tokens: integer('Completion tokens billed (those produced, for a cancelled or failed request)'),
          total_tokens: integer('prompt_tokens + completion_tokens'),
          cached_tokens: parts.cached_tokens,
          cache_write_tokens: parts.cache_write_tokens,
          reasoning_tokens: parts.reasoning_tokens,
          cost_usd: decimal('Exact cost in USD; "0" on the free tier', '0.000123'),
          key_id: {
            ...keyLabel.key_id,
            description: 'The API key that made the request; null for requests recorded before keys were',
          },
          key_name: {
            type: ['string', 'null'],
            description:
              "That key's name (a revoked key keeps it); null when key_id is null or the key is no longer on record",
          },
        },
      },
    },
    has_more: { type: 'boolean', description: 'More requests follow: ask again with starting_after the last id' },
  },
};
