import type { JsonSchema } from '../validation.js';

/** Live keys an account may hold at once (the default key included). */
export const MAX_KEYS_PER_ACCOUNT = 50;
/** The largest per-key requests per minute: far above any tier's, well inside the counters' range. */
export const MAX_KEY_REQUESTS_PER_MINUTE = 1_000_000;
/** The largest per-key monthly limit, in whole dollars (as the account's spending limit). */
export const MAX_KEY_MONTHLY_LIMIT_USD = 1_000_000;

const name: JsonSchema = {
  type: 'string',
  maxLength: 100,
  'x-text': 'name',
  description: 'What the key is for, to tell keys apart: one line, not blank, at most 100 characters',
  example: 'Nightly report job',
};

const models: JsonSchema = {
  type: ['array', 'null'],
  minItems: 1,
  maxItems: 100,
  items: { type: 'string', maxLength: 200, 'x-text': 'line' },
  description:
    "The models the key may use (ids from GET /v1/models), or null for every model of the account's tier. A model the tier does not offer is refused by the tier as before.",
  example: ['gpt-4.1-mini'],
};

const limits: JsonSchema = {
  type: 'object',
  additionalProperties: false,
  properties: {
    requests_per_minute: {
      type: ['integer', 'null'],
      minimum: 1,
      maximum: MAX_KEY_REQUESTS_PER_MINUTE,
      description: "Requests per UTC minute for this key, or null for none (the tier's limits still apply)",
      example: 10,
    },
    monthly_spend_limit_usd: {
      type: ['string', 'null'],
      pattern: '^(0|[1-9][0-9]{0,6})(\\.[0-9]{1,2})?$',
      maxLength: 10,
      description: `This key's monthly spending limit in USD as a decimal string (0.01 to ${MAX_KEY_MONTHLY_LIMIT_USD}, at most two decimals), or null for none: past it (paid tier) the key's requests get 429 insufficient_quota. The account's own limit still applies to all its keys together.`,
      example: '10.00',
    },
  },
};

const expiresAt: JsonSchema = {
  type: ['string', 'null'],
  format: 'date-time',
  description: 'When the key stops working (RFC 3339, in the future), or null for never',
  example: '2027-01-31T00:00:00Z',
};

export const CreateKeyBody: JsonSchema = {
  type: 'object',
  required: ['name'],
  additionalProperties: false,
  properties: { name, models, limits, expires_at: expiresAt },
};

export const UpdateKeyBody: JsonSchema = {
  type: 'object',
  additionalProperties: false,
  properties: {
    name,
    models,
    limits,
    expires_at: expiresAt,
    disabled: { type: 'boolean', description: 'A disabled key is refused (401) until enabled again' },
  },
};

export const KeyIdParams: JsonSchema = {
  type: 'object',
  required: ['id'],
  properties: {
    id: {
      type: 'string',
      pattern: '^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$',
      description: "The key's id",
    },
  },
};

const timestamp = (description: string, nullable = false): JsonSchema => ({
  type: nullable ? ['string', 'null'] : 'string',
  format: 'date-time',
  description,
});

export const KeySchema: JsonSchema = {
  type: 'object',
  required: [
    'id',
    'name',
    'redacted_value',
    'is_default',
    'created_at',
    'last_used_at',
    'expires_at',
    'models',
    'limits',
    'disabled',
  ],
  properties: {
    id: { type: 'string', format: 'uuid' },
    name: { type: 'string' },
    redacted_value: {
      type: 'string',
      description:
        '`sk-svc-…` and the last 4 characters of the key. A key issued before keys were named shows its first 13 characters and `…` instead.',
      example: 'sk-svc-…x9Qz',
    },
    is_default: {
      type: 'boolean',
      description:
        "The interface's key: issued at verification, replaced by POST /v1/auth/regenerate-api-key, not deleted by DELETE /v1/keys/{id}",
    },
    created_at: timestamp('When the key was issued'),
    last_used_at: timestamp('When the key last authenticated a request, to the minute; null if never', true),
    expires_at: timestamp('When the key stops working, or null for never', true),
    models: { type: ['array', 'null'], items: { type: 'string' }, description: 'The allow-list, or null for all' },
    limits: {
      type: 'object',
      required: ['requests_per_minute', 'monthly_spend_limit_usd'],
      properties: {
        requests_per_minute: { type: ['integer', 'null'] },
        monthly_spend_limit_usd: { type: ['string', 'null'], example: '10.00' },
      },
    },
    disabled: { type: 'boolean' },
  },
};

export const KeyListSchema: JsonSchema = {
  type: 'object',
  required: ['object', 'data'],
  properties: {
    object: { type: 'string', const: 'list' },
    data: {
      type: 'array',
      items: KeySchema,
      description: 'The live keys, the default key first, then oldest first; never their secrets',
    },
  },
};

export const CreatedKeySchema: JsonSchema = {
  ...KeySchema,
  required: [...(KeySchema.required as string[]), 'api_key'],
  properties: {
    ...(KeySchema.properties as Record<string, JsonSchema>),
    api_key: { type: 'string', description: 'The secret key, shown this once only', example: 'sk-svc-…' },
  },
};

export const DeletedKeySchema: JsonSchema = {
  type: 'object',
  required: ['id', 'object', 'deleted'],
  properties: {
    id: { type: 'string' },
    object: { type: 'string', const: 'api_key.deleted' },
    deleted: { type: 'boolean', const: true },
  },
};

export interface KeyLimitsInput {
  requests_per_minute?: number | null;
  monthly_spend_limit_usd?: string | null;
}

export interface CreateKeyInput {
  name: string;
  models?: string[] | null;
  limits?: KeyLimitsInput;
  expires_at?: string | null;
}

export interface UpdateKeyInput extends Partial<CreateKeyInput> {
  disabled?: boolean;
}
