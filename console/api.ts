// How the console talks to the service: the session (cookie) endpoints under /console/, and the
// public /v1 API with a short-lived JWT the session hands out, as any frontend would.

export interface Account {
  id: string;
  email: string;
  name: string;
  organization: string;
  tier: 'free' | 'paid';
}

export type Session =
  | { signed_in: true; account: Account; csrf_token: string; jwt_available: true; billing_configured: boolean }
  | { signed_in: false; jwt_available: boolean; csrf_token?: string };

/** One field's problem in a 422 answer (the interface's `detail`): where it is, and what is wrong. */
export interface FieldIssue {
  loc: (string | number)[];
  msg: string;
}

/** An answer other than 2xx, with the service's error envelope read out. */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string | null,
    message: string,
    readonly headers: Headers,
    readonly detail: FieldIssue[] = [],
  ) {
    super(message);
  }
}

let session: Session | undefined;
let jwt: { token: string; renewAt: number } | undefined;
const signedOutListeners = new Set<() => void>();

/** Called when the session turns out to be over (a 401 the token could not fix). */
export function onSignedOut(listener: () => void): () => void {
  signedOutListeners.add(listener);
  return () => signedOutListeners.delete(listener);
}

async function readError(res: Response): Promise<ApiError> {
  let code: string | null = null;
  let message = `The service answered ${res.status}`;
  let detail: FieldIssue[] = [];
  try {
    const body = (await res.json()) as {
      error?: { message?: string; code?: string | null };
      detail?: FieldIssue[];
    };
    if (body.error?.message) message = body.error.message;
    code = body.error?.code ?? null;
    if (Array.isArray(body.detail)) detail = body.detail;
  } catch {
    // Not JSON (a proxy's page): the status says enough.
  }
  return new ApiError(res.status, code, message, res.headers, detail);
}

async function parse<T>(res: Response): Promise<T> {
  if (!res.ok) throw await readError(res);
  if (res.status === 204) return undefined as T;
  return (await res.json()) as T;
}

export async function loadSession(): Promise<Session> {
  const res = await fetch('/console/session', { headers: { accept: 'application/json' }, cache: 'no-store' });
  session = await parse<Session>(res);
  jwt = undefined;
  return session;
}

export const currentSession = (): Session | undefined => session;

/** A call to the public API that takes no credential (sign-up), as any client makes it. */
export async function publicCall<T>(method: 'POST', path: string, body: unknown): Promise<T> {
  const res = await fetch(path, {
    method,
    headers: { accept: 'application/json', 'content-type': 'application/json' },
    cache: 'no-store',
    body: JSON.stringify(body),
  });
  return parse<T>(res);
}

/** A state-changing call to the session endpoints: same origin, with the session's CSRF token. */
export async function consoleCall<T>(method: 'GET' | 'POST', path: string, body?: unknown): Promise<T> {
  const headers: Record<string, string> = { accept: 'application/json' };
  if (session?.csrf_token) headers['x-csrf-token'] = session.csrf_token;
  if (body !== undefined) headers['content-type'] = 'application/json';
  const res = await fetch(path, {
    method,
    headers,
    cache: 'no-store',
    ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
  });
  return parse<T>(res);
}

interface TokenAnswer {
  token: string;
  expires_at: string;
  expires_in: number;
}

/** The session's JWT, renewed a minute before it expires (or at half its life, if shorter). */
async function token(): Promise<string> {
  if (jwt && Date.now() < jwt.renewAt) return jwt.token;
  const answer = await consoleCall<TokenAnswer>('POST', '/console/token');
  const margin = Math.min(60, answer.expires_in / 2) * 1000;
  jwt = { token: answer.token, renewAt: Date.now() + answer.expires_in * 1000 - margin };
  return answer.token;
}

export interface ApiAnswer<T> {
  body: T;
  headers: Headers;
}

/** A call to the public API with the session's JWT; a refused token is renewed once. */
export async function apiCall<T>(method: string, path: string, body?: unknown): Promise<ApiAnswer<T>> {
  for (let attempt = 0; ; attempt++) {
    let bearer: string;
    try {
      bearer = await token();
    } catch (err) {
      if (err instanceof ApiError && (err.status === 401 || err.status === 403)) signedOut();
      throw err;
    }
    const headers: Record<string, string> = { accept: 'application/json', authorization: `Bearer ${bearer}` };
    if (body !== undefined) headers['content-type'] = 'application/json';
    const res = await fetch(path, {
      method,
      headers,
      cache: 'no-store',
      ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
    });
    if (res.status === 401 && attempt === 0) {
      jwt = undefined;
      continue;
    }
    if (res.status === 401) signedOut();
    return { body: await parse<T>(res), headers: res.headers };
  }
}

export const api = async <T>(path: string): Promise<T> => (await apiCall<T>('GET', path)).body;

/** The session ended on the service's side (the account was closed): the console shows sign-in. */
export const markSignedOut = (): void => signedOut();

function signedOut(): void {
  session = { signed_in: false, jwt_available: true };
  jwt = undefined;
  for (const l of signedOutListeners) l();
}

export async function signOut(everywhere = false): Promise<void> {
  await consoleCall('POST', everywhere ? '/console/sign-out-everywhere' : '/console/sign-out');
  signedOut();
}

/** What to tell the person about a failed call. */
export function describeError(err: unknown): string {
  if (err instanceof ApiError) return err.message;
  if (err instanceof TypeError) return 'The service could not be reached. Check your connection and try again.';
  return 'Something went wrong. Try again.';
}

export const isBillingOff = (err: unknown): boolean => err instanceof ApiError && err.code === 'billing_not_configured';
