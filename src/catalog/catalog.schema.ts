import { PROVIDER_NAMES } from '../providers/providers.js';
import type { JsonSchema } from '../validation.js';

/**
 * Prices are exact decimal strings (USD per 1M tokens), never JSON numbers: a float cannot hold
 * 0.30 exactly, and usage rows copy these strings into Postgres numeric columns.
 */
export const PRICE_PATTERN = '^\\d+(\\.\\d{1,6})?$';

const price: JsonSchema = { type: 'string', pattern: PRICE_PATTERN, maxLength: 20 };

/** A catalog entry, whose `provider` is one of `providerNames`. */
export const catalogModelSchema = (providerNames: readonly string[]): JsonSchema => ({
  type: 'object',
  additionalProperties: false,
  required: ['id', 'provider', 'upstream_model', 'tiers', 'input_price_per_million', 'output_price_per_million'],
  properties: {
    // The public id is what clients send as `model`, which the interface bounds at 50 characters.
    id: { type: 'string', minLength: 1, maxLength: 50, pattern: '^[A-Za-z0-9][A-Za-z0-9._:/-]*$' },
    provider: { type: 'string', enum: [...providerNames] },
    upstream_model: { type: 'string', minLength: 1, maxLength: 200 },
    tiers: { type: 'array', minItems: 1, uniqueItems: true, items: { type: 'string', enum: ['free', 'paid'] } },
    input_price_per_million: price,
    output_price_per_million: price,
    /** A prompt token read from the provider's prompt cache; absent, the input price (no discount). */
    cached_input_price_per_million: price,
    /** A prompt token written to the prompt cache (Anthropic's 5-minute TTL); absent, the input price. */
    cache_write_price_per_million: price,
    /** A prompt token written to the prompt cache with the 1-hour TTL; absent, the cache-write price. */
    cache_write_1h_price_per_million: price,
    /** The provider's own list price when the service's price floor raised it (transparency only). */
    published_input_price_per_million: price,
    published_output_price_per_million: price,
    description: { type: 'string', maxLength: 500 },
    /** What a prompt may hold: text always; "image" lets user messages carry image_url parts. */
    input_modalities: {
      type: 'array',
      minItems: 1,
      uniqueItems: true,
      items: { type: 'string', enum: ['text', 'image'] },
    },
    /** How many tokens the model reads and writes in one request (prompt and completion together), as its provider states it. */
    context_length: { type: 'integer', minimum: 1, maximum: 100_000_000 },
    /** The model has thinking settings, which a request's reasoning_effort is mapped onto. */
    reasoning: { type: 'boolean' },
  },
});

/** The catalog file (MODELS_FILE), for the providers this process serves (providers.ts's list by default). */
export const catalogFileSchema = (providerNames: readonly string[] = PROVIDER_NAMES): JsonSchema => ({
  type: 'object',
  additionalProperties: false,
  required: ['models', 'personas'],
  properties: {
    models: { type: 'array', minItems: 1, items: catalogModelSchema(providerNames) },
    // Persona names are what clients send as `persona` (max 50 characters in the interface).
    personas: {
      type: 'object',
      propertyNames: { type: 'string', minLength: 1, maxLength: 50, pattern: '^[A-Za-z0-9][A-Za-z0-9._-]*$' },
      additionalProperties: { type: 'string', minLength: 1, maxLength: 20000 },
    },
  },
});
