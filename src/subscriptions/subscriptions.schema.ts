import type { JsonSchema } from '../validation.js';
import { SpendLimitSchema } from '../billing/spend-limit.schema.js';

// Stripe ids are at most 255 characters; anything longer is not one.
const stripeId = (prefix: string, what: string): JsonSchema => ({
  type: 'string',
  minLength: 1,
  maxLength: 255,
  'x-text': 'line',
  description: `${what} (${prefix}…)`,
});

export const SetupIntentQuery: JsonSchema = {
  type: 'object',
  required: ['setup_intent_id'],
  properties: { setup_intent_id: stripeId('seti_', 'The setup intent that collected the card') },
};

export const SessionQuery: JsonSchema = {
  type: 'object',
  required: ['session_id'],
  properties: { session_id: stripeId('cs_', 'The completed checkout session') },
};

const PaymentMethod: JsonSchema = {
  type: ['object', 'null'],
  description: 'The default payment method on file: brand and last 4 digits only.',
  properties: {
    brand: { type: ['string', 'null'], example: 'visa' },
    last4: { type: ['string', 'null'], example: '4242' },
  },
};

export const SubscriptionResultSchema: JsonSchema = {
  type: 'object',
  required: ['status', 'tier', 'message', 'subscription_id', 'subscription_status', 'payment_method'],
  properties: {
    status: {
      type: 'string',
      enum: ['upgraded', 'already_paid', 'checkout_required', 'downgraded', 'already_free', 'payment_method_updated'],
      description: 'What this call did.',
    },
    tier: { type: 'string', enum: ['free', 'paid'] },
    message: { type: 'string' },
    subscription_id: { type: ['string', 'null'] },
    subscription_status: {
      type: ['string', 'null'],
      description: "Stripe's subscription status as last seen (active, canceled, ...)",
    },
    payment_method: PaymentMethod,
    checkout_session_id: { type: 'string', description: 'Only with status checkout_required' },
    checkout_url: {
      type: 'string',
      description: 'Only with status checkout_required: the hosted checkout page to open',
    },
    checkout_expires_at: { type: 'string', format: 'date-time' },
  },
};

export const SetupIntentResultSchema: JsonSchema = {
  type: 'object',
  required: ['setup_intent_id', 'client_secret', 'status', 'tier', 'message'],
  properties: {
    setup_intent_id: { type: 'string' },
    client_secret: { type: 'string', description: 'For stripe.confirmCardSetup in the browser; keep it out of logs' },
    status: { type: 'string' },
    tier: { type: 'string', enum: ['free', 'paid'] },
    message: { type: 'string' },
  },
};

export const CardCheckoutSchema: JsonSchema = {
  type: 'object',
  required: ['id', 'checkout_url', 'expires_at'],
  properties: {
    id: { type: 'string', description: 'The checkout session (cs_…)' },
    checkout_url: { type: 'string', description: "Stripe's hosted page where the new card is entered" },
    expires_at: { type: 'string', format: 'date-time', description: 'After this the page no longer works' },
  },
};

export const CheckoutCancelledSchema: JsonSchema = {
  type: 'object',
  required: ['status', 'message'],
  properties: { status: { type: 'string', enum: ['checkout_cancelled'] }, message: { type: 'string' } },
};

const windowNames = ['requests_per_minute', 'requests_per_hour', 'requests_per_day', 'tokens_per_day'];
const windowFigures = (what: string): Record<string, JsonSchema> => ({
  requests_per_minute: { type: 'integer', minimum: 0, description: `${what}: requests this minute (UTC)` },
  requests_per_hour: { type: 'integer', minimum: 0, description: `${what}: requests this hour` },
  requests_per_day: { type: 'integer', minimum: 0, description: `${what}: requests this UTC day` },
  tokens_per_day: { type: 'integer', minimum: 0, description: `${what}: tokens this UTC day` },
});

export const SubscriptionInfoSchema: JsonSchema = {
  type: 'object',
  required: ['tier', 'subscription_status', 'payment_method', 'models', 'limits'],
  properties: {
    tier: { type: 'string', enum: ['free', 'paid'] },
    subscription_id: { type: ['string', 'null'] },
    subscription_status: { type: ['string', 'null'] },
    payment_method: PaymentMethod,
    checkout_pending: { type: 'boolean', description: 'A hosted checkout session is open for this account' },
    models: {
      type: 'array',
      description: 'The models available to this tier, with prices in USD per million tokens',
      items: {
        type: 'object',
        properties: {
          id: { type: 'string' },
          provider: { type: 'string' },
          input_price_per_million: { type: 'string', example: '0.30' },
          output_price_per_million: { type: 'string', example: '2.50' },
        },
      },
    },
    limits: {
      type: 'object',
      description: "The tier's rate limits, and what is left of each window now",
      required: ['requests_per_minute', 'requests_per_hour', 'requests_per_day', 'tokens_per_day'],
      properties: {
        ...windowFigures('The limit'),
        remaining: {
          type: ['object', 'null'],
          description:
            'What is left now, from the counters the X-RateLimit-* headers report (requests admitted, tokens settled today plus those reserved by requests in flight); null when they cannot be read',
          required: windowNames,
          properties: windowFigures('Left now'),
        },
        resets_at: {
          type: ['object', 'null'],
          description: 'When each window starts again (UTC): the end of the current minute, hour and day',
          required: windowNames,
          properties: Object.fromEntries(windowNames.map((w) => [w, { type: 'string', format: 'date-time' }])),
        },
      },
    },
    spend_limit: {
      ...SpendLimitSchema,
      description:
        'The monthly spending limit and what is left of it this month (as GET /v1/billing/spend-limit answers)',
    },
    api_key: {
      type: 'object',
      required: ['next_regeneration_at'],
      properties: {
        next_regeneration_at: {
          type: ['string', 'null'],
          format: 'date-time',
          description:
            'When POST /v1/auth/regenerate-api-key is allowed next (one call per 2 hours); null when it is allowed now, or when the counter cannot be read',
        },
      },
    },
  },
};

export const WebhookResultSchema: JsonSchema = {
  type: 'object',
  required: ['received', 'event_id', 'type', 'outcome'],
  properties: {
    received: { type: 'boolean', const: true },
    event_id: { type: 'string' },
    type: { type: 'string' },
    outcome: { type: 'string', enum: ['upgraded', 'downgraded', 'no_change', 'ignored', 'duplicate', 'not_processed'] },
    detail: { type: 'string' },
  },
};
