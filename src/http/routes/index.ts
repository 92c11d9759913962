import type { RouteSpec } from '../route.js';
import { chatRoutes } from './chat.routes.js';
import { opsRoutes } from './ops.routes.js';

/** Every endpoint of the service, in the order the OpenAPI document lists them. */
export function allRoutes(openApi: () => unknown): RouteSpec[] {
  return [...chatRoutes, ...opsRoutes(openApi)];
}
