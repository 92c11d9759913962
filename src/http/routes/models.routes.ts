import { assertModelAllowed, keyAllowsModel } from '../../accounts/key-grant.js';
import type { CatalogModel } from '../../catalog/catalog.js';
import { AppError } from '../../errors.js';
import { PROVIDER_NAMES } from '../../providers/providers.js';
import type { JsonSchema } from '../../validation.js';
import { accountOf, defineRoutes, type RouteSpec } from '../route.js';

// OpenAI's `created` is when a model was published; ours are the providers', so every entry
// carries one fixed date (2025-01-01T00:00:00Z) that keeps the list stable across restarts.
const CREATED = 1_735_689_600;

/** A tier's price for a model: exact decimal strings, USD per 1M tokens ("0" on the free tier). */
const TierPrice: JsonSchema = {
  type: 'object',
  required: [
    'input_price_per_million',
    'cached_input_price_per_million',
    'cache_write_price_per_million',
    'cache_write_1h_price_per_million',
    'output_price_per_million',
  ],
  properties: {
    input_price_per_million: { type: 'string', example: '1.00', description: 'USD per 1M prompt tokens' },
    cached_input_price_per_million: {
      type: 'string',
      example: '0.10',
      description:
        'USD per 1M prompt tokens read from a prompt cache (usage.prompt_tokens_details.cached_tokens); the input price where the provider gives no discount',
    },
    cache_write_price_per_million: {
      type: 'string',
      example: '1.25',
      description:
        'USD per 1M prompt tokens written to a prompt cache with the 5-minute TTL (usage.prompt_tokens_details.cache_write_tokens; Anthropic, where cache_control marks them); the input price where writing costs nothing more',
    },
    cache_write_1h_price_per_million: {
      type: 'string',
      example: '2.00',
      description: 'USD per 1M prompt tokens written to a prompt cache with the 1-hour TTL (cache_control ttl "1h")',
    },
    output_price_per_million: { type: 'string', example: '2.50', description: 'USD per 1M completion tokens' },
  },
};

// OpenAI's four fields first; the rest are this service's own, which OpenAI clients ignore.
const ModelObject: JsonSchema = {
  type: 'object',
  required: [
    'id',
    'object',
    'created',
    'owned_by',
    'context_length',
    'input_modalities',
    'supports_tools',
    'reasoning',
    'tiers',
    'pricing',
  ],
  properties: {
    id: { type: 'string', example: 'gemini-2.5-flash' },
    object: { type: 'string', const: 'model' },
    created: { type: 'integer' },
    owned_by: { type: 'string', enum: [...PROVIDER_NAMES], description: 'The provider behind the model' },
    context_length: {
      type: ['integer', 'null'],
      description:
        'Tokens the model takes in one request, prompt and completion together (null: the catalog does not say)',
      example: 1_048_576,
    },
    input_modalities: {
      type: 'array',
      items: { type: 'string', enum: ['text', 'image'] },
      description: 'What a prompt may hold: "image" means user messages may carry image_url parts',
    },
    supports_tools: { type: 'boolean', description: 'The model takes `tools` (function calling): every model does' },
    reasoning: { type: 'boolean', description: 'The model has thinking settings that `reasoning_effort` sets' },
    tiers: {
      type: 'array',
      items: { type: 'string', enum: ['free', 'paid'] },
      description: 'The tiers that may use it',
    },
    pricing: {
      type: 'object',
      description:
        'The price on each tier that may use it. The free tier costs nothing ("0"), within its rate limits; the paid tier is billed at these prices.',
      properties: { free: TierPrice, paid: TierPrice },
    },
  },
};

const ModelList: JsonSchema = {
  type: 'object',
  required: ['object', 'data'],
  properties: { object: { type: 'string', const: 'list' }, data: { type: 'array', items: ModelObject } },
};

const ModelParams: JsonSchema = {
  type: 'object',
  required: ['model'],
  properties: {
    model: {
      type: 'string',
      maxLength: 50,
      'x-text': 'line',
      description: 'A model id, as GET /v1/models lists them',
      example: 'gemini-2.5-flash',
    },
  },
};

const ModelsQuery: JsonSchema = {
  type: 'object',
  properties: {
    tier: {
      type: 'string',
      enum: ['free', 'paid'],
      description:
        "List that tier's models instead of the caller's (to compare before upgrading); using them still needs that tier",
    },
  },
};

const FREE_PRICE = {
  input_price_per_million: '0',
  cached_input_price_per_million: '0',
  cache_write_price_per_million: '0',
  cache_write_1h_price_per_million: '0',
  output_price_per_million: '0',
};

const toModelObject = (m: CatalogModel) => ({
  id: m.id,
  object: 'model',
  created: CREATED,
  owned_by: m.provider,
  context_length: m.context_length ?? null,
  input_modalities: m.input_modalities ?? ['text'],
  // Every provider plug-in maps `tools` (docs/models-and-providers.md, "What each request field becomes").
  supports_tools: true,
  reasoning: m.reasoning ?? false,
  tiers: [...m.tiers],
  pricing: Object.fromEntries(
    m.tiers.map((tier) => [
      tier,
      tier === 'free'
        ? FREE_PRICE
        : {
            input_price_per_million: m.input_price_per_million,
            cached_input_price_per_million: m.cached_input_price_per_million,
            cache_write_price_per_million: m.cache_write_price_per_million,
            cache_write_1h_price_per_million: m.cache_write_1h_price_per_million,
            output_price_per_million: m.output_price_per_million,
          },
    ]),
  ),
});

/** GET /v1/models and /v1/models/{model}: the OpenAI list shape, limited to the caller's tier. */
export function modelsRoutes(): RouteSpec[] {
  return defineRoutes([
    {
      method: 'get',
      path: '/v1/models',
      operationId: 'listModels',
      summary: "The models the caller's tier may use",
      description:
        "In the OpenAI list shape, so OpenAI clients (`client.models.list()`) work. The free tier lists exactly three models. Each model also says its context length, what it accepts and its price on each tier (docs/models-and-providers.md). `tier` lists another tier's models, to see the paid tier's before upgrading. Called with an API key that has a model allow-list, only the models on that list.",
      tag: 'chat',
      auth: 'api_key_or_jwt',
      query: ModelsQuery,
      responses: { 200: { description: "The models of the caller's tier (or of `tier`)", schema: ModelList } },
      handler: (ctx, app) => {
        const { tier } = ctx.state.query as { tier?: 'free' | 'paid' };
        const models = app.catalog
          .forTier(tier ?? accountOf(ctx).tier)
          .filter((m) => keyAllowsModel(ctx.state.apiKey, m.id));
        ctx.body = { object: 'list', data: models.map(toModelObject) };
      },
    },
    {
      method: 'get',
      path: '/v1/models/:model',
      operationId: 'retrieveModel',
      summary: "One model, if the caller's tier may use it",
      tag: 'chat',
      auth: 'api_key_or_jwt',
      params: ModelParams,
      responses: {
        200: { description: 'The model', schema: ModelObject },
        403: {
          description: "The model needs the paid tier, or is outside the API key's allow-list (model_not_allowed)",
        },
        404: { description: 'No such model' },
      },
      handler: (ctx, app) => {
        const { model: id } = ctx.state.params as { model: string };
        const model = app.catalog.find(id);
        if (!model) {
          throw new AppError(
            'not_found',
            `The model \`${id}\` does not exist or you do not have access to it. GET /v1/models lists the models your tier may use.`,
            {
              code: 'model_not_found',
              param: 'model',
            },
          );
        }
        if (!model.tiers.includes(accountOf(ctx).tier)) {
          throw new AppError(
            'permission',
            `The model \`${model.id}\` needs the paid tier. Upgrade with POST /v1/subscription/upgrade.`,
            {
              code: 'model_requires_paid_tier',
              param: 'model',
            },
          );
        }
        assertModelAllowed(ctx.state.apiKey, model.id);
        ctx.body = toModelObject(model);
      },
    },
  ]);
}
