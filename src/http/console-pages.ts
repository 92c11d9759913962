import type { Context } from 'koa';
import { escapeHtml, renderPage, sendPage } from './html.js';

// The pages a browser sees on its way into the console: a sign-in or verification link opens a
// page whose button does the work (a mail scanner fetching the link spends nothing), and the
// page that says why a link did not work. No script at all; the form posts to our own origin.

function buttonPageHeaders(ctx: Pick<Context, 'set'>): void {
  ctx.set(
    'Content-Security-Policy',
    "default-src 'none'; style-src 'unsafe-inline'; img-src 'self'; script-src 'none'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
  );
  // same-origin, not no-referrer: under no-referrer a browser sends `Origin: null` with the form's
  // POST, which the same-origin check refuses. Other sites still learn nothing (the URL holds a token).
  ctx.set('Referrer-Policy', 'same-origin');
  ctx.set('X-Content-Type-Options', 'nosniff');
}

/** A page with one button that POSTs the token to `action` (a form, so no script is needed). */
export function sendButtonPage(
  ctx: Context,
  page: { title: string; lead: string; action: string; token: string; button: string },
): void {
  buttonPageHeaders(ctx);
  sendPage(
    ctx,
    200,
    renderPage({
      title: page.title,
      body: `<main><h1>${escapeHtml(page.title)}</h1>
<p>${escapeHtml(page.lead)}</p>
<form method="post" action="${escapeHtml(page.action)}">
<input type="hidden" name="token" value="${escapeHtml(page.token)}">
<button type="submit">${escapeHtml(page.button)}</button>
</form></main>`,
    }),
  );
}

/** The page for a link that cannot be used: why, and what to do instead. */
export function sendLinkErrorPage(ctx: Context, status: number, title: string, message: string, next?: string): void {
  buttonPageHeaders(ctx);
  sendPage(
    ctx,
    status,
    renderPage({
      title,
      body: `<main><h1 class="error">${escapeHtml(title)}</h1>
<p>${escapeHtml(message)}</p>${next ? `\n<p><a href="${escapeHtml(next)}">Ask for a new sign-in link</a></p>` : ''}</main>`,
    }),
  );
}
