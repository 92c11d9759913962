import type { RouteSpec } from '../route.js';
import { opsRoutes } from './ops.routes.js';
import { subscriptionRoutes } from './subscriptions.routes.js';
import { webhookRoutes } from './webhooks.routes.js';
import { accountsRoutes } from './accounts.routes.js';
import { accountClosingRoutes } from './account-closing.routes.js';
import { keysRoutes } from './keys.routes.js';
import { chatRoutes } from './chat.routes.js';
import { chatRetrievalRoutes } from './chat-retrieval.routes.js';
import { responsesRoutes } from './responses.routes.js';
import { responsesRetrievalRoutes } from './responses-retrieval.routes.js';
import { modelsRoutes } from './models.routes.js';
import { billingRoutes } from './billing.routes.js';
import { consoleAssetRoutes } from './console-assets.routes.js';
import { consoleSessionRoutes } from './console-session.routes.js';
import { faviconRoutes } from './favicon.routes.js';

/** Every endpoint of the service, in the order the OpenAPI document lists them. */
export function allRoutes(openApi: () => unknown): RouteSpec[] {
  return [
    ...accountsRoutes(),
    ...keysRoutes(),
    ...chatRoutes,
    ...chatRetrievalRoutes,
    ...responsesRoutes,
    ...responsesRetrievalRoutes,
    ...modelsRoutes(),
    ...subscriptionRoutes(),
    ...webhookRoutes(),
    ...billingRoutes(),
    ...accountClosingRoutes(),
    ...consoleSessionRoutes(),
    ...opsRoutes(openApi),
    ...consoleAssetRoutes(),
    ...faviconRoutes(),
  ];
}
