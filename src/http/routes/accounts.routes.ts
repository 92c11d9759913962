import { createHash } from 'node:crypto';
import {
  checkVerificationToken,
  getAccount,
  regenerateApiKey,
  regenerationLimitHeaders,
  signUp,
  TOKEN_ERRORS,
  verifyEmail,
} from '../../accounts/accounts.service.js';
import { consoleJwtAvailable } from '../../console-identity/console-jwt.service.js';
import { verifyAndSignIn } from '../../console-identity/sessions.service.js';
import { sendButtonPage } from '../console-pages.js';
import { sessionCookie, setSessionCookie } from '../middleware/console-session.js';
import {
  RegenerateResponse,
  SignupRequest,
  SignupResponse,
  VerifyQuery,
  VerifyResponse,
  type IssuedKeyResult,
  type SignupInput,
} from '../../accounts/accounts.schema.js';
import { AppError, isAppError } from '../../errors.js';
import { asksForJson, escapeHtml, prefersHtml, renderPage, sendPage } from '../html.js';
import { accountOf, defineRoutes, type HttpContext, type RouteSpec } from '../route.js';

// The copy button: the Clipboard API where the page is a secure context (https or localhost),
// otherwise select the key and fall back to execCommand, and say what happened either way.
const COPY_SCRIPT = `document.getElementById('copy').addEventListener('click', async () => {
  const key = document.getElementById('api-key');
  const status = document.getElementById('copy-status');
  try {
    await navigator.clipboard.writeText(key.textContent);
    status.textContent = 'Copied';
  } catch {
    const range = document.createRange();
    range.selectNodeContents(key);
    const sel = window.getSelection();
    sel.removeAllRanges();
    sel.addRange(range);
    status.textContent = document.execCommand('copy') ? 'Copied' : 'Selected: press Ctrl+C (Cmd+C) to copy';
  }
});`;

// The pages carry a secret: no caching, no referrer (the URL holds the token), no framing, and
// only our own inline script (allowed by its hash) may run.
function secretPageHeaders(ctx: HttpContext, script?: string): void {
  const scriptSrc = script ? `'sha256-${createHash('sha256').update(script).digest('base64')}'` : "'none'";
  ctx.set(
    'Content-Security-Policy',
    `default-src 'none'; style-src 'unsafe-inline'; img-src 'self'; script-src ${scriptSrc}; frame-ancestors 'none'; base-uri 'none'; form-action 'none'`,
  );
  ctx.set('Referrer-Policy', 'no-referrer');
  ctx.set('X-Content-Type-Options', 'nosniff');
}

function keyPage(result: IssuedKeyResult, baseUrl: string, model: string): string {
  return renderPage({
    title: 'Your API key',
    body: `<h1 class="ok">Email verified</h1>
<p>Your API key for <strong>${escapeHtml(result.email)}</strong>:</p>
<code class="secret" id="api-key">${escapeHtml(result.api_key)}</code>
<button id="copy" type="button">Copy key</button> <span id="copy-status" role="status" aria-live="polite"></span>
<p class="warning"><strong>Save it now: it will not be shown again.</strong> Only a hash of the key is stored, so nobody can show it to you later. If you lose it, regenerate it.</p>
<h2>Use it</h2>
<pre><code>curl ${escapeHtml(baseUrl)}/v1/chat/completions \\
  -H "Authorization: Bearer $API_KEY" -H "Content-Type: application/json" \\
  -d '{"model": "${escapeHtml(model)}", "messages": [{"role": "user", "content": "Hello"}]}'</code></pre>`,
    script: COPY_SCRIPT,
  });
}

function tokenErrorPage(err: AppError): string {
  const title =
    err.code === 'token_expired'
      ? 'This link has expired'
      : err.code === 'token_used'
        ? 'This link was already used'
        : 'This link is not valid';
  return renderPage({ title, body: `<h1 class="error">${escapeHtml(title)}</h1>\n<p>${escapeHtml(err.message)}</p>` });
}

const tokenErrorDoc =
  'The token is unknown (`invalid_token`), already used (`token_used`) or expired (`token_expired`): OpenAI error envelope to a client asking for JSON, an HTML page to a browser. Never a key.';

/** Endpoints 1 to 3: sign-up, email verification, API key regeneration. */
export function accountsRoutes(): RouteSpec[] {
  return defineRoutes([
    {
      method: 'post',
      path: '/v1/auth/signup',
      operationId: 'signup',
      summary: 'Create an account (free tier, unverified) and email a verification link',
      description:
        'The answer is the same whether or not the address already has an account, so it reveals nothing. A known unverified address gets a fresh link; a verified one gets an email saying it already has an account (no key).',
      tag: 'accounts',
      auth: 'none',
      body: SignupRequest,
      // Its three bounded fields take under 6 KB even with every character escaped; the rest is room for whitespace.
      bodyLimitBytes: 16 * 1024,
      responses: {
        200: { description: 'Account created (or already there); check the email', schema: SignupResponse },
        429: {
          description:
            'Too many sign-ups for this mailbox or from this network within the hour (the same answer whether the address is known or not)',
        },
      },
      handler: async (ctx, app) => {
        ctx.body = await signUp(app, ctx.state.body as SignupInput, { ip: ctx.ip });
      },
    },
    {
      method: 'get',
      path: '/v1/auth/verify',
      operationId: 'verifyEmail',
      summary: 'Turn the emailed token into the account’s API key (shown once)',
      description:
        'A client that asks for JSON (`Accept: application/json`, preferred to text/html) gets the key as JSON, shown once. Anything else (a browser, or a mail scanner, chat preview or curl sending `*/*` or no Accept) gets a page whose button POSTs the token to /v1/auth/verify, so opening the link spends nothing; a used, expired or unknown link gets a page saying so. HEAD never spends the token. Never cached.',
      tag: 'accounts',
      auth: 'none',
      query: VerifyQuery,
      responses: {
        200: {
          description: 'Verified; the API key, shown once (JSON), or the button page (HTML)',
          schema: VerifyResponse,
          alsoAs: ['text/html'],
          headers: { 'Cache-Control': 'no-store' },
        },
        400: { description: tokenErrorDoc, alsoAs: ['text/html'] },
      },
      handler: async (ctx, app) => {
        const { token } = ctx.state.query as { token: string };
        ctx.set('Cache-Control', 'no-store');
        ctx.set('Vary', 'Accept');
        // Only a client that asks for JSON spends the token here. Anything else that opens the link (a
        // browser, and the mail scanners and chat previews that fetch links before people do, with
        // `*/*` or no Accept at all) gets a page whose button verifies, so opening it spends nothing.
        // HEAD never spends: it is a probe, and its answer has no body to carry a key.
        if (ctx.method === 'GET' && asksForJson(ctx)) {
          ctx.body = await verifyEmail(app, token);
          return;
        }
        const problem = await checkVerificationToken(app, token);
        if (problem) {
          secretPageHeaders(ctx);
          sendPage(ctx, 400, tokenErrorPage(new AppError('invalid_request', TOKEN_ERRORS[problem], { code: problem })));
          return;
        }
        sendButtonPage(ctx, {
          title: 'Verify your email address',
          lead: 'Press the button to verify your address. You will be signed in to the console, which shows your API key once.',
          action: '/v1/auth/verify',
          token,
          button: 'Verify and show my API key',
        });
      },
    },
    {
      method: 'post',
      path: '/v1/auth/verify',
      operationId: 'verifyEmailInBrowser',
      summary: 'Verify from the browser page: signs in and shows the key once in the console',
      description:
        'The button of the page GET /v1/auth/verify shows a browser: a form (`token` field) or JSON `{"token": …}`, with a same-origin Origin header. Verifies as GET does, starts a console session (cookie) and answers 303 to /console/key?new=1, where the console shows the key once (GET /console/new-key). When the console cannot run (JWT_JWKS_URL only), the answer is the key page itself.',
      tag: 'accounts',
      auth: 'none',
      sameOrigin: true,
      formBody: true,
      body: VerifyQuery,
      bodyLimitBytes: 4 * 1024,
      responses: {
        303: {
          description: 'Verified and signed in; Location /console/key?new=1',
          headers: { 'Set-Cookie': 'The session cookie (HttpOnly; SameSite=Lax; Path=/; Secure behind https)' },
        },
        200: { description: 'Verified (console off: JWT_JWKS_URL only): the key page', alsoAs: ['text/html'] },
        400: { description: tokenErrorDoc, alsoAs: ['text/html'] },
        403: { description: 'The Origin header is missing or not this service (`cross_site_request`)' },
      },
      handler: async (ctx, app) => {
        const { token } = ctx.state.body as { token: string };
        const browser = Boolean(ctx.is('urlencoded')) || prefersHtml(ctx);
        ctx.set('Cache-Control', 'no-store');
        try {
          const started = await verifyAndSignIn(app, token, sessionCookie(ctx, app.config));
          setSessionCookie(ctx, app.config, started.value);
          if (consoleJwtAvailable(app.config)) {
            ctx.status = 303;
            ctx.redirect('/console/key?new=1');
            return;
          }
          // The console stays off with an external identity provider: the key is shown here, once.
          const { tier } = await getAccount(app, started.accountId);
          const model = app.catalog.forTier(tier)[0]?.id ?? 'MODEL';
          secretPageHeaders(ctx, COPY_SCRIPT);
          sendPage(
            ctx,
            200,
            keyPage(
              { message: '', email: started.email, api_key: started.apiKey },
              app.config.http.publicBaseUrl,
              model,
            ),
          );
        } catch (err) {
          if (browser && isAppError(err) && err.status < 500) {
            secretPageHeaders(ctx);
            sendPage(ctx, err.status, tokenErrorPage(err));
            return;
          }
          throw err;
        }
      },
    },
    {
      method: 'post',
      path: '/v1/auth/regenerate-api-key',
      operationId: 'regenerateApiKey',
      summary:
        "Issue a new default API key; the old default key stops working at once, the account's other keys keep working",
      description:
        "The new default key keeps the old one's name, models and limits (not its expiry or disabled flag). " +
        'Limited to 1 call per 2 hours per account: a 429 says when the next one is allowed (in the message and X-RateLimit-Reset; x-should-retry: false, since the wait is longer than a retry should sleep). Tier, rate-limit counters, subscription and billing stay with the account.',
      tag: 'accounts',
      auth: 'jwt',
      responses: {
        200: {
          description: 'The new API key, shown once',
          schema: RegenerateResponse,
          headers: {
            'Cache-Control': 'no-store',
            'X-RateLimit-Limit': 'Regenerations allowed per 2 hours (1)',
            'X-RateLimit-Remaining': 'Regenerations left in the window',
          },
        },
        403: { description: 'The account has not verified its email address' },
        429: {
          description: 'Regenerated less than 2 hours ago',
          headers: {
            'X-RateLimit-Reset': 'Seconds until a regeneration is allowed again',
            'x-should-retry': 'false when the wait is over a minute (it almost always is)',
            'X-RateLimit-Limit': 'Regenerations allowed per 2 hours (1)',
            'X-RateLimit-Remaining': '0',
          },
        },
      },
      handler: async (ctx, app) => {
        ctx.set('Cache-Control', 'no-store');
        ctx.body = await regenerateApiKey(app, accountOf(ctx).id);
        ctx.set(regenerationLimitHeaders(Math.ceil(app.config.auth.regenerateWindowMs / 1000)));
      },
    },
  ]);
}
