import { assertModelAllowed, keyAllowsModel } from '../../accounts/key-grant.js';
import type { CatalogModel } from '../../catalog/catalog.js';
import { AppError } from '../../errors.js';
import { PROVIDER_NAMES } from '../../providers/providers.js';
import type { JsonSchema } from '../../validation.js';
import { accountOf, defineRoutes, type RouteSpec } from '../route.js';

// OpenAI's `created` is when a model was published; ours are the providers', so every entry
// carries one fixed date (2025-01-01T00:00:00Z) that keeps the list stable across restarts.
const CREATED = 1_735_689_600;

const ModelObject: JsonSchema = {
  type: 'object',
  required: ['id', 'object', 'created', 'owned_by'],
  properties: {
    id: { type: 'string', example: 'gemini-2.5-flash' },
    object: { type: 'string', const: 'model' },
    created: { type: 'integer' },
    owned_by: { type: 'string', enum: [...PROVIDER_NAMES], description: 'The provider behind the model' },
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

const toModelObject = (m: CatalogModel) => ({ id: m.id, object: 'model', created: CREATED, owned_by: m.provider });

/** GET /v1/models and /v1/models/{model}: the OpenAI list shape, limited to the caller's tier. */
export function modelsRoutes(): RouteSpec[] {
  return defineRoutes([
    {
      method: 'get',
      path: '/v1/models',
      operationId: 'listModels',
      summary: "The models the caller's tier may use",
      description:
        "In the OpenAI list shape, so OpenAI clients (`client.models.list()`) work. The free tier lists exactly three models. Called with an API key that has a model allow-list, only the tier's models on that list.",
      tag: 'chat',
      auth: 'api_key_or_jwt',
      responses: { 200: { description: "The models of the caller's tier", schema: ModelList } },
      handler: (ctx, app) => {
        const { tier } = accountOf(ctx);
        const models = app.catalog.forTier(tier).filter((m) => keyAllowsModel(ctx.state.apiKey, m.id));
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
