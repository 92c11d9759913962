import type { Context } from 'koa';
import { isAppError } from '../../errors.js';
import { consoleJwtAvailable, issueConsoleJwt } from '../../console-identity/console-jwt.service.js';
import {
  ConsoleSessionResponse,
  ConsoleTokenResponse,
  NewKeyResponse,
  SignInRequest,
  SignInResponse,
  TokenForm,
} from '../../console-identity/identity.schema.js';
import {
  checkSignInLink,
  confirmSignIn,
  requestSignInLink,
  SIGN_IN_LINK_ERRORS,
} from '../../console-identity/sign-in.service.js';
import {
  csrfMatches,
  liveSession,
  signOut,
  signOutEverywhere,
  takeNewApiKey,
} from '../../console-identity/sessions.service.js';
import { AppError } from '../../errors.js';
import { sendButtonPage, sendLinkErrorPage } from '../console-pages.js';
import { prefersHtml } from '../html.js';
import { clearSessionCookie, sessionCookie, setSessionCookie } from '../middleware/console-session.js';
import { accountOf, defineRoutes, type HttpContext, type RouteSpec } from '../route.js';

const SIGN_IN_PAGE = '/console/sign-in';

const sessionOf = (ctx: HttpContext) => {
  const s = ctx.state.session;
  if (!s) throw new Error(`route ${ctx.path} read the session without authenticating`);
  return s;
};

const LINK_TITLES: Record<keyof typeof SIGN_IN_LINK_ERRORS, string> = {
  invalid_token: 'This sign-in link is not valid',
  token_used: 'This sign-in link was already used',
  token_expired: 'This sign-in link has expired',
};

/** A form post from a browser is answered with pages; a JSON client with the error envelope. */
const fromBrowserForm = (ctx: Pick<Context, 'is' | 'accepts' | 'get'>): boolean =>
  Boolean(ctx.is('urlencoded')) || prefersHtml(ctx);

/** The console's session endpoints (docs/api.md#console-sessions, docs/console.md). */
export function consoleSessionRoutes(): RouteSpec[] {
  return defineRoutes([
    {
      method: 'get',
      path: '/console/session',
      operationId: 'consoleSession',
      summary: 'Who is signed in to the console in this browser, and its CSRF token',
      description:
        'Always 200: `signed_in` says whether the session cookie names a live session. `jwt_available` is false when the service verifies JWTs from an external identity provider (JWT_JWKS_URL only): the console cannot issue them and stays off. `billing_configured` is false when the service has no Stripe key, so the billing page says so before anyone tries to pay. Never cached.',
      tag: 'console',
      auth: 'none',
      responses: {
        200: {
          description: 'The session, or signed_in: false',
          schema: ConsoleSessionResponse,
          headers: { 'Cache-Control': 'no-store' },
        },
      },
      handler: async (ctx, app) => {
        ctx.set('Cache-Control', 'no-store');
        const jwt_available = consoleJwtAvailable(app.config);
        const live = await liveSession(app, sessionCookie(ctx, app.config));
        if (!live) {
          ctx.body = { signed_in: false, jwt_available };
          return;
        }
        const { id, email, name, organization, tier } = live.account;
        ctx.body = {
          signed_in: true,
          account: { id, email, name, organization, tier },
          csrf_token: live.csrfToken,
          jwt_available,
          billing_configured: app.config.stripe.secretKey !== undefined,
        };
      },
    },
    {
      method: 'post',
      path: '/console/sign-in',
      operationId: 'consoleSignIn',
      summary: 'Email a one-time sign-in link (15 minutes)',
      description:
        'The answer is 202 `{"status":"sent"}` whether or not the address has an account; the email says which applies (a sign-in link, a fresh verification link for an unverified account, or a note that there is no account). Limited per mailbox and per client network like sign-up. Needs a same-origin Origin header (403 otherwise).',
      tag: 'console',
      auth: 'none',
      sameOrigin: true,
      body: SignInRequest,
      bodyLimitBytes: 8 * 1024,
      responses: {
        202: { description: 'The email is on its way (whatever the address)', schema: SignInResponse },
        403: { description: 'The Origin header is missing or not this service (`cross_site_request`)' },
        429: {
          description:
            'Too many sign-in links for this mailbox or from this network within the hour (the same answer whether the address is known or not)',
          headers: { 'x-should-retry': 'false (the wait is up to an hour; the message says when)' },
        },
      },
      handler: async (ctx, app) => {
        ctx.status = 202;
        ctx.body = await requestSignInLink(app, ctx.state.body as { email: string; return_to?: string }, {
          ip: ctx.ip,
        });
      },
    },
    {
      method: 'get',
      path: '/console/sign-in/confirm',
      operationId: 'consoleSignInPage',
      summary: 'The page a sign-in link opens: a button that signs in (the link is not spent by opening it)',
      description:
        'HTML, no script, never cached. Opening the link (as a mail scanner does) spends nothing; the button POSTs the token to the same URL. A used, expired or unknown link shows a page saying so.',
      tag: 'console',
      auth: 'none',
      query: TokenForm,
      responses: {
        200: {
          description: 'The sign-in button page',
          alsoAs: ['text/html'],
          headers: { 'Cache-Control': 'no-store' },
        },
        400: { description: 'The link is unknown, used or expired (a page saying so)', alsoAs: ['text/html'] },
      },
      handler: async (ctx, app) => {
        const { token } = ctx.state.query as { token: string };
        const problem = await checkSignInLink(app, token);
        if (problem) {
          sendLinkErrorPage(ctx, 400, LINK_TITLES[problem], SIGN_IN_LINK_ERRORS[problem], SIGN_IN_PAGE);
          return;
        }
        sendButtonPage(ctx, {
          title: 'Sign in to the console',
          lead: 'Press the button to sign in in this browser.',
          action: '/console/sign-in/confirm',
          token,
          button: 'Sign in',
        });
      },
    },
    {
      method: 'post',
      path: '/console/sign-in/confirm',
      operationId: 'consoleSignInConfirm',
      summary: 'Spend a sign-in link: start a session (cookie) and go to the return path',
      description:
        'A browser form (`token` field) or JSON `{"token": …}`; needs a same-origin Origin header. On success: a new session (any session the browser presented is ended), the session cookie, and 303 to the return path asked for with the link (default /console/). A used, expired or unknown token: 400, as a page for a form and as the error envelope for JSON.',
      tag: 'console',
      auth: 'none',
      sameOrigin: true,
      formBody: true,
      body: TokenForm,
      bodyLimitBytes: 4 * 1024,
      responses: {
        303: {
          description: 'Signed in; Location is the return path',
          headers: { 'Set-Cookie': 'The session cookie (HttpOnly; SameSite=Lax; Path=/; Secure behind https)' },
        },
        400: {
          description: 'The token is unknown (`invalid_token`), used (`token_used`) or expired (`token_expired`)',
          alsoAs: ['text/html'],
        },
        403: { description: 'The Origin header is missing or not this service (`cross_site_request`)' },
      },
      handler: async (ctx, app) => {
        const { token } = ctx.state.body as { token: string };
        const browser = fromBrowserForm(ctx);
        try {
          const started = await confirmSignIn(app, token, sessionCookie(ctx, app.config));
          setSessionCookie(ctx, app.config, started.value);
          ctx.set('Cache-Control', 'no-store');
          ctx.status = 303;
          ctx.redirect(started.returnTo);
        } catch (err) {
          if (browser && isAppError(err) && err.status === 400 && err.code && err.code in LINK_TITLES) {
            const code = err.code as keyof typeof LINK_TITLES;
            sendLinkErrorPage(ctx, 400, LINK_TITLES[code], err.message, SIGN_IN_PAGE);
            return;
          }
          throw err;
        }
      },
    },
    {
      method: 'post',
      path: '/console/token',
      operationId: 'consoleToken',
      summary: 'A short-lived JWT for the signed-in account, for the /v1 JWT endpoints',
      description:
        'Signed with the service’s own JWT configuration (JWT_SECRET, or the development secret under var/), living CONSOLE_JWT_TTL_SECONDS (5 minutes by default): the console calls the public /v1 API with it like any frontend. Needs the session cookie, X-CSRF-Token and a same-origin Origin. With JWT_JWKS_URL only: 501 `console_jwt_unavailable`.',
      tag: 'console',
      auth: 'session',
      responses: {
        200: { description: 'The token', schema: ConsoleTokenResponse, headers: { 'Cache-Control': 'no-store' } },
        403: {
          description: 'Cross-site (`cross_site_request`) or without the session’s CSRF token (`csrf_token_invalid`)',
        },
        501: {
          description: 'The service verifies JWTs from an external identity provider (`console_jwt_unavailable`)',
        },
      },
      handler: async (ctx, app) => {
        ctx.set('Cache-Control', 'no-store');
        ctx.body = await issueConsoleJwt(app, accountOf(ctx));
      },
    },
    {
      method: 'post',
      path: '/console/sign-out',
      operationId: 'consoleSignOut',
      summary: 'End this browser’s session',
      description: 'Needs the session cookie, X-CSRF-Token and a same-origin Origin. 204; the cookie is cleared.',
      tag: 'console',
      auth: 'session',
      responses: {
        204: { description: 'Signed out' },
        403: { description: 'Cross-site, or without the session’s CSRF token' },
      },
      handler: async (ctx, app) => {
        await signOut(app, sessionOf(ctx).value);
        clearSessionCookie(ctx, app.config);
        ctx.status = 204;
      },
    },
    {
      method: 'post',
      path: '/console/sign-out-everywhere',
      operationId: 'consoleSignOutEverywhere',
      summary: 'End every console session of the account, in every browser',
      description:
        'Needs the session cookie, X-CSRF-Token and a same-origin Origin. 204; the cookie is cleared. Sign-in links already sent stop working, and so does every JWT issued for the account until now (console tokens, operator-minted ones, an identity provider’s): 401 `token_revoked`.',
      tag: 'console',
      auth: 'session',
      responses: {
        204: { description: 'Every session ended' },
        403: { description: 'Cross-site, or without the session’s CSRF token' },
      },
      handler: async (ctx, app) => {
        await signOutEverywhere(app, accountOf(ctx).id);
        clearSessionCookie(ctx, app.config);
        ctx.status = 204;
      },
    },
    {
      method: 'get',
      path: '/console/new-key',
      operationId: 'consoleNewKey',
      summary: 'The API key the verification that started this session issued, shown once',
      description:
        'Once per verification: later calls answer 404 `no_new_api_key`. Needs the session cookie and X-CSRF-Token (so a link from elsewhere cannot spend it). `model` names a model the account may use, for the example. Never cached.',
      tag: 'console',
      auth: 'session',
      responses: {
        200: { description: 'The key', schema: NewKeyResponse, headers: { 'Cache-Control': 'no-store' } },
        403: { description: 'Without the session’s CSRF token (`csrf_token_invalid`)' },
        404: { description: 'Already shown, or the session did not start with a verification (`no_new_api_key`)' },
      },
      handler: async (ctx, app) => {
        ctx.set('Cache-Control', 'no-store');
        const session = sessionOf(ctx);
        if (!csrfMatches(session.live, ctx.get('x-csrf-token') || undefined))
          throw new AppError(
            'permission',
            "Refused: the X-CSRF-Token header is missing or not this session's (read it from GET /console/session).",
            { code: 'csrf_token_invalid' },
          );
        const api_key = await takeNewApiKey(app, session.live, session.value);
        const model = app.catalog.forTier(accountOf(ctx).tier)[0]?.id;
        ctx.body = model === undefined ? { api_key } : { api_key, model };
      },
    },
  ]);
}
