export interface HttpResult<T = any> {
  status: number;
  headers: Headers;
  text: string;
  body: T;
}

export interface RequestOptions {
  headers?: Record<string, string>;
  json?: unknown;
  raw?: string | Buffer;
  bearer?: string;
  signal?: AbortSignal;
  /** 'manual' answers a redirect itself instead of following it (the default). */
  redirect?: 'follow' | 'manual';
}

/** A plain HTTP call over a real connection; the body is parsed when it is JSON. */
export async function request<T = any>(method: string, url: string, opts: RequestOptions = {}): Promise<HttpResult<T>> {
  const headers: Record<string, string> = { ...(opts.headers ?? {}) };
  let body: string | Buffer | undefined;
  if (opts.json !== undefined) {
    headers['content-type'] ??= 'application/json';
    body = JSON.stringify(opts.json);
  } else if (opts.raw !== undefined) {
    body = opts.raw;
  }
  if (opts.bearer) headers.authorization = `Bearer ${opts.bearer}`;
  const res = await fetch(url, { method, headers, body, signal: opts.signal, redirect: opts.redirect ?? 'follow' });
  const text = await res.text();
  let parsed: unknown = undefined;
  if ((res.headers.get('content-type') ?? '').includes('json')) {
    try {
      parsed = JSON.parse(text);
    } catch {
      parsed = undefined;
    }
  }
  return { status: res.status, headers: res.headers, text, body: parsed as T };
}

export const get = <T = any>(url: string, opts?: RequestOptions) => request<T>('GET', url, opts);
export const post = <T = any>(url: string, json?: unknown, opts: RequestOptions = {}) =>
  request<T>('POST', url, json === undefined ? opts : { ...opts, json });

/** Polls `probe` until it returns a value (not undefined) or the deadline passes: waiting on a condition, never on a fixed time. */
export async function eventually<T>(
  probe: () => Promise<T | undefined>,
  what: string,
  timeoutMs = 15_000,
  everyMs = 50,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let lastError: unknown;
  for (;;) {
    try {
      const v = await probe();
      if (v !== undefined) return v;
    } catch (err) {
      lastError = err;
    }
    if (Date.now() > deadline)
      throw new Error(
        `timed out waiting for ${what}${lastError ? `: ${lastError instanceof Error ? lastError.message : JSON.stringify(lastError)}` : ''}`,
      );
    await new Promise((r) => setTimeout(r, everyMs));
  }
}
