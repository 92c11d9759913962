import { FAVICON_ICO, FAVICON_SVG } from '../favicon.js';
import { defineRoutes, type RouteSpec } from '../route.js';

/** One icon file: cached a day (it rarely changes, and a new one reaches every browser by the next). */
function iconRoute(path: string, operationId: string, type: string, body: string | Buffer): RouteSpec {
  return {
    method: 'get',
    path,
    operationId,
    summary: "The service's icon",
    tag: 'operations',
    auth: 'none',
    hidden: true,
    responses: { 200: { description: 'The icon' } },
    handler: (ctx) => {
      ctx.set('Cache-Control', 'public, max-age=86400');
      ctx.set('X-Content-Type-Options', 'nosniff');
      ctx.type = type;
      ctx.body = body;
    },
  };
}

/** The service's icon, at the two paths browsers ask for. */
export function faviconRoutes(): RouteSpec[] {
  return defineRoutes([
    iconRoute('/favicon.svg', 'faviconSvg', 'image/svg+xml', FAVICON_SVG),
    iconRoute('/favicon.ico', 'faviconIco', 'image/x-icon', FAVICON_ICO),
  ]);
}
