// One error type for the whole service. Features throw AppError; the web edge maps it to a status
// and an OpenAI-style envelope ({"error":{message,type,code,param}}) so the official SDKs raise
// their matching classes. Validation failures keep the interface's own 422 body (HTTPValidationError).

export type ErrorKind =
  | 'invalid_request'
  | 'validation'
  | 'authentication'
  | 'permission'
  | 'not_found'
  | 'conflict'
  | 'payload_too_large'
  | 'rate_limited'
  | 'insufficient_quota'
  | 'upstream'
  | 'unavailable'
  | 'internal';

const STATUS: Record<ErrorKind, number> = {
  invalid_request: 400,
  validation: 422,
  authentication: 401,
  permission: 403,
  not_found: 404,
  conflict: 409,
  payload_too_large: 413,
  rate_limited: 429,
  insufficient_quota: 429,
  upstream: 502,
  unavailable: 503,
  internal: 500,
};

// The `type` strings OpenAI uses for each family of error.
const OPENAI_TYPE: Record<ErrorKind, string> = {
  invalid_request: 'invalid_request_error',
  validation: 'invalid_request_error',
  authentication: 'authentication_error',
  permission: 'permission_error',
  not_found: 'not_found_error',
  conflict: 'invalid_request_error',
  payload_too_large: 'invalid_request_error',
  rate_limited: 'rate_limit_exceeded',
  insufficient_quota: 'insufficient_quota',
  upstream: 'upstream_error',
  unavailable: 'service_unavailable',
  internal: 'server_error',
};

export interface ValidationIssue {
  loc: (string | number)[];
  msg: string;
  type: string;
  /** More about the failure, as FastAPI puts it (a JSON decode error's reason: `{ error }`). */
  ctx?: Record<string, string>;
}

export interface AppErrorOptions {
  code?: string;
  /** The OpenAI `type` when it was decided elsewhere (an error relayed from a worker). */
  type?: string;
  param?: string | null;
  headers?: Record<string, string>;
  /** Overrides the kind's default status (for example 502 against 503 for upstream). */
  status?: number;
  detail?: ValidationIssue[];
  cause?: unknown;
}

export class AppError extends Error {
  readonly status: number;
  readonly code: string | null;
  readonly param: string | null;
  readonly headers: Record<string, string>;
  readonly detail: ValidationIssue[] | undefined;
  private readonly explicitType: string | undefined;

  constructor(
    readonly kind: ErrorKind,
    message: string,
    opts: AppErrorOptions = {},
  ) {
    super(message, opts.cause === undefined ? undefined : { cause: opts.cause });
    this.name = 'AppError';
    this.status = opts.status ?? STATUS[kind];
    this.code = opts.code ?? null;
    this.param = opts.param ?? null;
    this.headers = opts.headers ?? {};
    this.detail = opts.detail;
    this.explicitType = opts.type;
  }

  get type(): string {
    return this.explicitType ?? OPENAI_TYPE[this.kind];
  }

  /**
   * The JSON body a client sees. A 422 keeps the interface's `detail` and also carries an OpenAI
   * `error` naming the first failing field, because the SDKs read only `error` (openai-node
   * would otherwise report "422 status code (no body)").
   */
  toBody(): unknown {
    if (this.kind === 'validation') {
      const detail = this.detail ?? [];
      const first = detail[0];
      const more = detail.length > 1 ? ` (and ${detail.length - 1} more: see detail)` : '';
      // A JSON decode error's loc ends with a character position (as FastAPI's does), not a field.
      const position = first?.type === 'json_invalid' ? first.loc[1] : undefined;
      if (typeof position === 'number') {
        const message = `Invalid JSON in the request body at position ${position} (characters from its start): ${first!.ctx?.error ?? first!.msg}${more}`;
        return { detail, error: { message, type: 'invalid_request_error', code: first!.type, param: null } };
      }
      const param = first ? paramOf(first.loc) : null;
      const reason = first?.ctx?.error ? `${first.msg}: ${first.ctx.error}` : first?.msg;
      const message = first ? `Invalid ${param ? `'${param}'` : 'request body'}: ${reason}${more}` : this.message;
      return { detail, error: { message, type: 'invalid_request_error', code: first?.type ?? null, param } };
    }
    return { error: { message: this.message, type: this.type, code: this.code, param: this.param } };
  }
}

/** A validation location as OpenAI names a parameter: `messages[0].content` (the source, body or query, left out). */
function paramOf(loc: (string | number)[]): string | null {
  const path = loc.slice(1);
  if (path.length === 0) return null;
  return path.map((p, i) => (typeof p === 'number' ? `[${p}]` : i === 0 ? p : `.${p}`)).join('');
}

/** The kind of error a status stands for (the inverse of STATUS), for errors that arrive as a status. */
export function kindForStatus(status: number): ErrorKind {
  if (status === 422) return 'validation';
  const kind = (Object.keys(STATUS) as ErrorKind[]).find((k) => STATUS[k] === status && k !== 'validation');
  return kind ?? (status >= 500 ? 'internal' : 'invalid_request');
}

export function validationError(detail: ValidationIssue[]): AppError {
  return new AppError('validation', 'Request validation failed', { detail });
}

export const isAppError = (e: unknown): e is AppError => e instanceof AppError;

/**
 * The longest wait a Retry-After may ask for. The SDKs sleep for whatever it says (openai-node 6
 * has no cap), so a longer value would hang a default client for hours.
 */
export const MAX_RETRY_AFTER_SECONDS = 60;

/**
 * What a refusal tells a client about retrying: `Retry-After` in whole seconds when a wait of at
 * most a minute will help; otherwise (a longer wait, or `null`: no wait helps) `x-should-retry:
 * false`, the convention the OpenAI SDKs read to raise at once instead of retrying. The message
 * and the X-RateLimit-Reset* headers carry the reset time then.
 */
export function retryAdvice(waitMs: number | null): Record<string, string> {
  if (waitMs === null) return { 'x-should-retry': 'false' };
  const seconds = Math.max(1, Math.ceil(waitMs / 1000));
  return seconds <= MAX_RETRY_AFTER_SECONDS ? { 'Retry-After': String(seconds) } : { 'x-should-retry': 'false' };
}

/**
 * The rule above applied to headers built elsewhere (an upstream's Retry-After relayed by a
 * worker): the one error mapper calls it, so no response can ask for a longer wait.
 */
export function boundedRetryHeaders(headers: Record<string, string>): Record<string, string> {
  const key = Object.keys(headers).find((k) => k.toLowerCase() === 'retry-after');
  if (key === undefined) return headers;
  const seconds = Number(headers[key]);
  if (Number.isFinite(seconds) && seconds <= MAX_RETRY_AFTER_SECONDS) return headers;
  const { [key]: _dropped, ...rest } = headers;
  return { ...rest, 'x-should-retry': 'false' };
}

/** A wait in words for messages: "40 s", "55 min", "4 h 0 min". */
export function describeWait(ms: number): string {
  const seconds = Math.max(1, Math.ceil(ms / 1000));
  if (seconds < 60) return `${seconds} s`;
  const minutes = Math.ceil(seconds / 60);
  return minutes < 60 ? `${minutes} min` : `${Math.floor(minutes / 60)} h ${minutes % 60} min`;
}

/** "at 2026-11-02T01:00:00Z (in 55 min)": when a window resets, for a message that says not to wait for it. */
export function describeReset(nowMs: number, waitMs: number): string {
  const at = new Date(Math.ceil((nowMs + waitMs) / 1000) * 1000).toISOString().replace('.000Z', 'Z');
  return `at ${at} (in ${describeWait(waitMs)})`;
}
