import type { RouterContext } from '@koa/router';
import type { AppContext } from '../context.js';
import type { JsonSchema } from '../validation.js';
import type { Account } from '../accounts/account.js';
import type { ApiKeyGrant, KeyedAccount } from '../accounts/key-grant.js';
import type { LiveSession } from '../console-identity/sessions.service.js';
import type { BudgetSubject } from '../limits/abuse-budget.service.js';

/**
 * Which credential an endpoint takes (the interface's Authentication section), or `session`: the
 * console's session cookie, with the same-origin and CSRF checks on state-changing requests.
 */
export type AuthMode = 'none' | 'api_key' | 'jwt' | 'api_key_or_jwt' | 'session';

export interface AppState {
  requestId: string;
  /** The request's trace id, when tracing is on and its trace is sampled (for log lines). */
  traceId?: string;
  /** When the request reached this process (performance.now()), for the time to first token the client sees. */
  arrivedAt?: number;
  /** The matched route's path, for metrics labels. */
  route?: string;
  account?: Account;
  /** With an API key: what the key itself allows (its allow-list, limits, expiry). */
  apiKey?: ApiKeyGrant;
  /** How the caller authenticated, when it did. */
  credential?: 'api_key' | 'jwt';
  /** On auth: 'session' routes, the console session and its cookie value. */
  session?: { live: LiveSession; value: string };
  /**
   * On a route with deferKeyCheck, when the account came from this process's cache unconfirmed:
   * the version the handler must confirm in its own Redis script, and how to read the account
   * afresh (or answer 401/403) when that finds it changed.
   */
  keyCheck?: { versionKey: string; version: string | null; refresh: () => Promise<KeyedAccount> };
  /** Whose abuse budget the request spent, and the body bytes it announced (counted before reading). */
  budget?: { subject: BudgetSubject; announcedBytes: number };
  body?: unknown;
  query?: unknown;
  /** The request headers a route declares, validated against its `headers` schema. */
  headers?: unknown;
  /** The path parameters, validated against the route's `params` schema. */
  params?: unknown;
  rawBody?: string;
  /** The code of the error the request was answered with, for the access log line. */
  errorCode?: string;
}

export type HttpContext = RouterContext<AppState>;

export interface ResponseSpec {
  description: string;
  schema?: JsonSchema;
  /** Media types other than JSON the endpoint can answer with. */
  alsoAs?: ('text/html' | 'text/event-stream' | 'text/plain')[];
  headers?: Record<string, string>;
}

/**
 * One endpoint: everything the router needs and everything the OpenAPI document says about it,
 * declared once. Schemas here are the single source of truth for validation and documentation.
 */
export interface RouteSpec {
  method: 'get' | 'post' | 'put' | 'patch' | 'delete';
  /** Koa's form, `/v1/models/:model`; the OpenAPI document writes it `/v1/models/{model}`. */
  path: string;
  operationId: string;
  summary: string;
  description?: string;
  tag: string;
  auth: AuthMode;
  query?: JsonSchema;
  /** Request headers the route reads: an object schema keyed by lower-case header name, validated (422 at ['header', name]) and documented. */
  headers?: JsonSchema;
  /**
   * An object schema with one required property per `:name` in the path: validated (422 at
   * ['path', name]) and documented as `in: path` parameters.
   */
  params?: JsonSchema;
  body?: JsonSchema;
  /** The body is required (422 when absent) rather than optional. */
  bodyRequired?: boolean;
  /** The body may also come as a browser's form (application/x-www-form-urlencoded), validated by the same schema. */
  formBody?: boolean;
  /**
   * A browser's state-changing request outside a session (sign-in, its confirmation, verification
   * by form): refused with 403 unless its Origin is this service's own, before anything is read.
   */
  sameOrigin?: boolean;
  /**
   * The largest body this route reads (413 beyond it), sized to its largest valid request so an
   * unauthenticated caller cannot make the process buffer megabytes. Default DEFAULT_BODY_LIMIT_BYTES.
   */
  bodyLimitBytes?: number;
  /** Keep the exact request bytes in ctx.state.rawBody (signature checks). */
  rawBody?: boolean;
  /**
   * The handler confirms a cached API key itself (ctx.state.keyCheck), inside a Redis script it
   * runs anyway, so authentication costs no round trip of its own.
   */
  deferKeyCheck?: boolean;
  responses: Record<number, ResponseSpec>;
  /** Left out of the OpenAPI document (the docs page itself). */
  hidden?: boolean;
  handler: (ctx: HttpContext, app: AppContext) => Promise<void> | void;
}

export const defineRoutes = (routes: RouteSpec[]): RouteSpec[] => routes;

/** A route's body limit when it declares none: small, so a route that forgets is not an opening. */
export const DEFAULT_BODY_LIMIT_BYTES = 64 * 1024;

const PATH_PARAM = /:([A-Za-z_][A-Za-z0-9_]*)/g;

/** The names of a Koa path's parameters, in order. */
export const pathParamNames = (path: string): string[] => [...path.matchAll(PATH_PARAM)].map((m) => m[1]!);

/** A Koa path as an OpenAPI path template: `:model` becomes `{model}`. */
export const openApiPath = (path: string): string => path.replace(PATH_PARAM, '{$1}');

/**
 * Throws unless `params` requires exactly the path's parameters, so the router, validation and the
 * OpenAPI document cannot disagree about them.
 */
export function checkPathParams(spec: Pick<RouteSpec, 'method' | 'path' | 'params'>): void {
  const where = `${spec.method.toUpperCase()} ${spec.path}`;
  const inPath = pathParamNames(spec.path);
  const declared = Object.keys(spec.params?.properties ?? {});
  const list = (names: string[]) => `[${names.join(', ')}]`;
  if (inPath.length !== declared.length || inPath.some((n) => !declared.includes(n))) {
    throw new Error(`${where}: path parameters ${list(inPath)} but params declares ${list(declared)}`);
  }
  const required = (spec.params?.required ?? []) as string[];
  const optional = inPath.filter((n) => !required.includes(n));
  if (optional.length)
    throw new Error(`${where}: params must require every path parameter (${optional.join(', ')} is optional)`);
}

/** The account an authenticated route runs for; the auth middleware guarantees it. */
export function accountOf(ctx: HttpContext): Account {
  const account = ctx.state.account;
  if (!account) throw new Error(`route ${ctx.path} read the account without authenticating`);
  return account;
}
