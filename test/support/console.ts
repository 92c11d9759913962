import type { AppContext } from '../../src/context.js';
import { latestEmailTo } from './accounts.js';
import { request, type HttpResult } from './http.js';

// A browser's side of the console's sign-in, over real HTTP: its cookie, its Origin, its CSRF token.

/** The sign-in link's token in a message body. */
export function signInTokenIn(text: string): string {
  const link = /https?:\/\/\S+\/console\/sign-in\/confirm\?token=[A-Za-z0-9_%-]+/.exec(text)?.[0];
  if (!link) throw new Error(`no sign-in link in:\n${text}`);
  return new URL(link).searchParams.get('token')!;
}

/** The value of the session cookie a response set ('' when it cleared it), or undefined when it set none. */
export function sessionCookieSet(r: HttpResult): string | undefined {
  for (const line of r.headers.getSetCookie()) {
    const m = /^(?:__Host-)?svc_session=([^;]*)/.exec(line);
    if (m) return m[1];
  }
  return undefined;
}

export interface Browser {
  /** The site's own origin, sent as Origin on every POST unless a test sends another. */
  origin: string;
  cookie?: string;
  csrf?: string;
}

/** A request as a browser on the console's pages sends it: its cookie, Origin on POSTs, and the CSRF token it holds. */
export function fromBrowser(
  b: Browser,
  method: string,
  path: string,
  opts: { json?: unknown; form?: Record<string, string>; headers?: Record<string, string>; csrf?: boolean } = {},
): Promise<HttpResult> {
  const headers: Record<string, string> = { ...(opts.headers ?? {}) };
  if (b.cookie !== undefined) headers.cookie = `svc_session=${b.cookie}`;
  if (method !== 'GET') headers.origin ??= b.origin;
  if ((opts.csrf ?? true) && b.csrf !== undefined) headers['x-csrf-token'] ??= b.csrf;
  if (opts.form) headers['content-type'] = 'application/x-www-form-urlencoded';
  return request(method, `${b.origin}${path}`, {
    headers,
    redirect: 'manual',
    ...(opts.json !== undefined ? { json: opts.json } : {}),
    ...(opts.form ? { raw: new URLSearchParams(opts.form).toString() } : {}),
  });
}

/** Asks for a link for `email` and returns the token the email carries. */
export async function signInLinkFor(app: AppContext, b: Browser, email: string, returnTo?: string): Promise<string> {
  const r = await fromBrowser(b, 'POST', '/console/sign-in', {
    json: returnTo === undefined ? { email } : { email, return_to: returnTo },
  });
  if (r.status !== 202) throw new Error(`sign-in answered ${r.status} ${r.text}`);
  const message = await latestEmailTo(app, email);
  return signInTokenIn(message!.text_body);
}

/** Signs `email` in through a link, as a browser would: its cookie and CSRF token afterwards. */
export async function signIn(app: AppContext, origin: string, email: string): Promise<Required<Browser>> {
  const b: Browser = { origin };
  const token = await signInLinkFor(app, b, email);
  const r = await fromBrowser(b, 'POST', '/console/sign-in/confirm', { form: { token } });
  if (r.status !== 303) throw new Error(`confirm answered ${r.status} ${r.text}`);
  b.cookie = sessionCookieSet(r)!;
  const session = await fromBrowser(b, 'GET', '/console/session');
  return { origin, cookie: b.cookie, csrf: session.body.csrf_token as string };
}
