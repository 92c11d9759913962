import type { JsonSchema } from '../validation.js';

/** The largest monthly limit, in whole dollars: far above any real budget, well inside the counters' exact range. */
export const MAX_MONTHLY_LIMIT_USD = 1_000_000;

export const SpendLimitBody: JsonSchema = {
  type: 'object',
  required: ['monthly_limit_usd'],
  additionalProperties: false,
  properties: {
    monthly_limit_usd: {
      type: 'string',
      pattern: '^(0|[1-9][0-9]{0,6})(\\.[0-9]{1,2})?$',
      maxLength: 10,
      description: `The monthly limit in USD as a decimal string with at most two decimals, from 0.01 to ${MAX_MONTHLY_LIMIT_USD} (a JSON number is refused: it cannot carry an exact amount).`,
      example: '25.00',
    },
  },
};

const usd = (description: string, example: string): JsonSchema => ({
  type: 'string',
  pattern: '^\\d+\\.\\d{2,9}$',
  description,
  example,
});

export const SpendLimitSchema: JsonSchema = {
  type: 'object',
  required: [
    'object',
    'monthly_limit_usd',
    'enforced',
    'month',
    'spent_usd',
    'reserved_usd',
    'remaining_usd',
    'resets_at',
  ],
  properties: {
    object: { type: 'string', const: 'billing.spend_limit' },
    monthly_limit_usd: {
      type: ['string', 'null'],
      description: 'The limit (two decimals), or null when none is set',
      example: '25.00',
    },
    enforced: {
      type: 'boolean',
      description: 'True when a limit is set and the account is on the paid tier (free-tier usage costs nothing)',
    },
    month: { type: 'string', description: 'The current calendar month (UTC) the figures are for', example: '2026-11' },
    spent_usd: usd(
      'Paid-tier spend this month: what the ledger holds plus requests finished since, each rounded up to the nano-dollar',
      '3.1415926',
    ),
    reserved_usd: usd(
      'Held by requests in flight: the most each can cost, until it ends and its real cost is counted',
      '0.0412',
    ),
    remaining_usd: {
      type: ['string', 'null'],
      pattern: '^\\d+\\.\\d{2,9}$',
      description: 'The limit minus spent and reserved, never below 0; null without a limit',
      example: '21.8172074',
    },
    resets_at: {
      type: 'string',
      format: 'date-time',
      description: 'When the month ends and the figures start again from 0 (00:00 UTC on the 1st)',
    },
  },
};
