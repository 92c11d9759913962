import { changeKey, createKey, deleteKey, listKeys } from '../../accounts/keys.service.js';
import {
  CreateKeyBody,
  CreatedKeySchema,
  DeletedKeySchema,
  KeyIdParams,
  KeyListSchema,
  KeySchema,
  MAX_KEYS_PER_ACCOUNT,
  UpdateKeyBody,
  type CreateKeyInput,
  type UpdateKeyInput,
} from '../../accounts/keys.schema.js';
import { accountOf, defineRoutes, type HttpContext, type RouteSpec } from '../route.js';

const TAG = 'keys';
const JWT_ONLY = 'Takes the frontend JWT only: an API key cannot manage keys (401).';
const keyId = (ctx: HttpContext) => (ctx.state.params as { id: string }).id;
const notFound = { description: 'No live key with this id belongs to the account (key_not_found)' };

/** The account's API keys as a resource: list, create, change, revoke. */
export function keysRoutes(): RouteSpec[] {
  return defineRoutes([
    {
      method: 'get',
      path: '/v1/keys',
      operationId: 'listKeys',
      summary: "The account's live API keys (the default key first, then oldest first), without their secrets",
      description: JWT_ONLY,
      tag: TAG,
      auth: 'jwt',
      responses: { 200: { description: 'The keys', schema: KeyListSchema } },
      handler: async (ctx, app) => {
        ctx.body = await listKeys(app, accountOf(ctx).id);
      },
    },
    {
      method: 'post',
      path: '/v1/keys',
      operationId: 'createKey',
      summary: 'Create an API key with its own name, models, limits and expiry; its secret is returned this once',
      description: `${JWT_ONLY} An account holds at most ${MAX_KEYS_PER_ACCOUNT} live keys (409 key_limit_reached beyond). Every model of an allow-list must be in the catalog, a spending limit from 0.01 to 1000000, an expiry in the future (422 at the field otherwise).`,
      tag: TAG,
      auth: 'jwt',
      body: CreateKeyBody,
      bodyRequired: true,
      responses: {
        201: {
          description: 'The key, with its secret',
          schema: CreatedKeySchema,
          headers: { 'Cache-Control': 'no-store' },
        },
        409: { description: `The account already holds ${MAX_KEYS_PER_ACCOUNT} live keys (key_limit_reached)` },
      },
      handler: async (ctx, app) => {
        ctx.set('Cache-Control', 'no-store');
        ctx.status = 201;
        ctx.body = await createKey(app, accountOf(ctx).id, ctx.state.body as CreateKeyInput);
      },
    },
    {
      method: 'patch',
      path: '/v1/keys/:id',
      operationId: 'updateKey',
      summary: "Change a key's name, models, limits, expiry or disabled flag; what the body leaves out stays",
      description: `${JWT_ONLY} The change holds on every web process from the next request.`,
      tag: TAG,
      auth: 'jwt',
      params: KeyIdParams,
      body: UpdateKeyBody,
      // Without a body nothing changes: the key is answered as it is.
      bodyRequired: false,
      responses: { 200: { description: 'The key as changed', schema: KeySchema }, 404: notFound },
      handler: async (ctx, app) => {
        ctx.body = await changeKey(
          app,
          accountOf(ctx).id,
          keyId(ctx),
          (ctx.state.body as UpdateKeyInput | undefined) ?? {},
        );
      },
    },
    {
      method: 'delete',
      path: '/v1/keys/:id',
      operationId: 'deleteKey',
      summary: 'Revoke a key: it stops working at once on every web process',
      description: `${JWT_ONLY} The default key is not deleted (409 default_key): replace it with POST /v1/auth/regenerate-api-key, or disable it.`,
      tag: TAG,
      auth: 'jwt',
      params: KeyIdParams,
      responses: {
        200: { description: 'Revoked', schema: DeletedKeySchema },
        404: notFound,
        409: { description: 'The key is the default key (default_key)' },
      },
      handler: async (ctx, app) => {
        ctx.body = await deleteKey(app, accountOf(ctx).id, keyId(ctx));
      },
    },
  ]);
}
