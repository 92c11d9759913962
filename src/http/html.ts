import type { Context } from 'koa';
import { FAVICON_LINKS } from './favicon.js';

/** True when the caller prefers HTML to JSON (a browser following a link); JSON otherwise. */
export function prefersHtml(ctx: Pick<Context, 'accepts' | 'get'>): boolean {
  return ctx.accepts('application/json', 'text/html') === 'text/html' && !/^\s*\*\/\*\s*$/.test(ctx.get('accept'));
}

/**
 * True only when the caller names JSON and prefers it to HTML (`Accept: application/json`). A
 * missing Accept header, the wildcard type and a browser's list all answer false: link scanners, chat
 * previews and plain curl send those, and must get what a person would see.
 */
export function asksForJson(ctx: Pick<Context, 'accepts'>): boolean {
  return ctx.accepts('text/html', 'application/json') === 'application/json';
}

export function escapeHtml(s: string): string {
  return s.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]!);
}

/**
 * One page layout for the few pages a browser sees (verification, checkout return). `body` is
 * HTML the caller built with escapeHtml around every value; `script` runs inline (no CDN: the
 * service works offline).
 */
export function renderPage(opts: { title: string; body: string; script?: string }): string {
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>${escapeHtml(opts.title)}</title>
${FAVICON_LINKS}
<style>
  body { font: 16px/1.5 system-ui, -apple-system, "Segoe UI", sans-serif; max-width: 44rem; margin: 3rem auto; padding: 0 1rem; color: #1d1d1f; }
  h1 { font-size: 1.5rem; }
  .ok { color: #0a7a33; } .error { color: #b3261e; }
  .warning { background: #fff4ce; border: 1px solid #e0b400; padding: .75rem 1rem; border-radius: 6px; }
  code.secret { display: block; word-break: break-all; background: #f4f4f6; padding: .75rem; border-radius: 6px; font-size: .95rem; }
  button { font: inherit; padding: .4rem 1rem; margin-top: .5rem; cursor: pointer; }
</style></head>
<body>${opts.body}${opts.script ? `<script>${opts.script}</script>` : ''}</body></html>`;
}

/** Sends an HTML page that must never be cached (it may carry a secret). */
export function sendPage(ctx: Pick<Context, 'status' | 'type' | 'set' | 'body'>, status: number, html: string): void {
  ctx.status = status;
  ctx.type = 'text/html; charset=utf-8';
  ctx.set('Cache-Control', 'no-store');
  ctx.body = html;
}
