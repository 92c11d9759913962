import { existsSync, readFileSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { JsonSchema } from '../../validation.js';
import { AppError } from '../../errors.js';
import { FAVICON_LINKS } from '../favicon.js';
import { escapeHtml, prefersHtml } from '../html.js';
import { defineRoutes, type HttpContext, type RouteSpec } from '../route.js';

// The console's files, as scripts/build-console.mjs writes them beside the compiled service:
// <build output>/console/manifest.json and assets/ (this file runs from <build output>/src/http/routes/).
const CONSOLE_DIR = fileURLToPath(new URL('../../../console/', import.meta.url));
const ASSETS_DIR = path.join(CONSOLE_DIR, 'assets');

/** The console's pages: each a real URL, each answered with the same shell (the script draws the page). */
export const CONSOLE_PAGES = [
  '/console/',
  '/console/usage',
  '/console/models',
  '/console/keys',
  // The page's old address: the console sends it on to /console/keys (verification lands there).
  '/console/key',
  '/console/billing',
  '/console/account',
  '/console/sign-in',
  '/console/sign-up',
];

/**
 * Only the service's own files, no inline script or style, never framed. Scripts set styles
 * through the CSSOM (element.style), which style-src does not govern, so no 'unsafe-inline'.
 */
export const CONSOLE_CSP = [
  "default-src 'self'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self' data:",
  "font-src 'self'",
  "connect-src 'self'",
  "object-src 'none'",
  "base-uri 'none'",
  "form-action 'self'",
  "frame-ancestors 'none'",
].join('; ');

const ASSET_TYPES: Record<string, string> = {
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
};
// Every file under assets/ carries its content hash in its name (esbuild's [hash]).
const ASSET_NAME = /^[A-Za-z0-9_-]+\.(js|css)$/;

interface Manifest {
  script: string;
  stylesheet: string;
}

let shell: string | undefined;

/** The page shell naming this build's hashed files; read once, as the build does not change under a running process. */
function consoleShell(): string {
  if (shell) return shell;
  const manifestFile = path.join(CONSOLE_DIR, 'manifest.json');
  if (!existsSync(manifestFile))
    throw new AppError('unavailable', 'The console is not built: `npm start` builds it (scripts/build-console.mjs)', {
      code: 'console_not_built',
    });
  const m = JSON.parse(readFileSync(manifestFile, 'utf8')) as Manifest;
  shell = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>Console</title>
${FAVICON_LINKS}
<link rel="stylesheet" href="/console/assets/${escapeHtml(m.stylesheet)}">
<script type="module" src="/console/assets/${escapeHtml(m.script)}"></script>
</head><body><div id="app"></div>
<noscript><p>The console needs JavaScript. The API works without it: see <a href="/docs">the API documentation</a>.</p></noscript>
</body></html>`;
  return shell;
}

/** Headers every console response carries; pages and anything holding a key are also never stored. */
function hardened(ctx: HttpContext): void {
  ctx.set('Content-Security-Policy', CONSOLE_CSP);
  ctx.set('X-Content-Type-Options', 'nosniff');
  ctx.set('X-Frame-Options', 'DENY');
  ctx.set('Referrer-Policy', 'no-referrer');
}

const ServiceIndexSchema: JsonSchema = {
  type: 'object',
  required: ['object', 'api', 'openapi', 'docs', 'console'],
  properties: {
    object: { type: 'string', const: 'service' },
    api: { type: 'string', description: 'Base URL path of the OpenAI-compatible API', example: '/v1' },
    openapi: { type: 'string', example: '/openapi.json' },
    docs: { type: 'string', example: '/docs' },
    console: { type: 'string', description: 'The console for people, in a browser', example: '/console/' },
  },
};

/** `/` (a browser goes to the console, an API client gets where things are) and the console's pages and files. */
export function consoleAssetRoutes(): RouteSpec[] {
  return defineRoutes([
    {
      method: 'get',
      path: '/',
      operationId: 'serviceIndex',
      summary: 'Where things are: a browser is sent to the console, an API client gets the paths as JSON',
      tag: 'operations',
      auth: 'none',
      responses: {
        200: { description: 'The paths of the API, its documentation and the console', schema: ServiceIndexSchema },
        303: {
          description: 'A browser (Accept preferring text/html) is sent to /console/',
          headers: { Location: '/console/' },
        },
      },
      handler: (ctx) => {
        if (prefersHtml(ctx)) {
          ctx.set('Cache-Control', 'no-store');
          ctx.status = 303;
          ctx.redirect('/console/');
          return;
        }
        ctx.body = { object: 'service', api: '/v1', openapi: '/openapi.json', docs: '/docs', console: '/console/' };
      },
    },
    ...CONSOLE_PAGES.map((page): RouteSpec => ({
      method: 'get',
      path: page,
      operationId: `consolePage${page.replace(/\W/g, '_')}`,
      summary: 'A console page (the single-page app shell)',
      tag: 'console',
      auth: 'none',
      hidden: true,
      responses: { 200: { description: 'HTML page', alsoAs: ['text/html'] } },
      handler: (ctx) => {
        const html = consoleShell();
        hardened(ctx);
        ctx.set('Cache-Control', 'no-store');
        ctx.type = 'text/html; charset=utf-8';
        ctx.body = html;
      },
    })),
    {
      method: 'get',
      path: '/console/assets/:file',
      operationId: 'consoleAsset',
      summary: "The console's scripts and stylesheets (content-hashed names)",
      tag: 'console',
      auth: 'none',
      hidden: true,
      // Any name: one that is not an asset is a 404, not a 422.
      params: { type: 'object', required: ['file'], properties: { file: { type: 'string' } } },
      responses: { 200: { description: 'Asset' } },
      handler: async (ctx) => {
        const { file } = ctx.state.params as { file: string };
        const type = ASSET_TYPES[path.extname(file)];
        const full = path.join(ASSETS_DIR, file);
        if (!type || !ASSET_NAME.test(file) || !existsSync(full))
          throw new AppError('not_found', `No such console asset: ${file}`, { code: 'unknown_asset' });
        hardened(ctx);
        // The name changes whenever the content does, so a copy never goes stale.
        ctx.set('Cache-Control', 'public, max-age=31536000, immutable');
        ctx.vary('Accept-Encoding');
        ctx.type = type;
        // The build's gzipped copy for a client that takes gzip (every browser does).
        const gzipped = `${full}.gz`;
        if (ctx.acceptsEncodings('gzip', 'identity') === 'gzip' && existsSync(gzipped)) {
          ctx.set('Content-Encoding', 'gzip');
          ctx.body = await readFile(gzipped);
        } else {
          ctx.body = await readFile(full);
        }
      },
    },
  ]);
}
