// What the three upstream adapters share: request deadlines, error classification, Retry-After,
// and the 422 an adapter raises for a field its provider cannot honour.
import { AppError } from '../errors.js';
import { abortError } from './abort.js';
import { ProviderError, type ChatMessage } from './types.js';

export interface UpstreamSettings {
  apiKey: string;
  /** Overrides the provider's public endpoint (a proxy, a self-hosted server, a test fake). */
  baseUrl?: string | undefined;
  /** Longest silence allowed from the upstream: before its headers, and between two stream events. */
  timeoutMs: number;
}

/**
 * One upstream request's signal: aborted when the caller aborts or when the upstream stays
 * silent for `timeoutMs`. The deadline is an idle one, reset on every event, so a long answer
 * that keeps streaming is never cut while a stalled connection is.
 */
export class UpstreamCall {
  private readonly controller = new AbortController();
  private readonly timer: NodeJS.Timeout;
  private readonly onAbort = () => this.controller.abort();
  timedOut = false;
  private completed = false;

  constructor(
    private readonly caller: AbortSignal,
    private readonly timeoutMs: number,
  ) {
    caller.addEventListener('abort', this.onAbort, { once: true });
    this.timer = setTimeout(() => {
      this.timedOut = true;
      this.controller.abort();
    }, timeoutMs);
  }

  get signal(): AbortSignal {
    return this.controller.signal;
  }

  /** The upstream said something: restart the idle deadline. */
  touch(): void {
    this.timer.refresh();
  }

  /** The answer was read to its end: the connection can go back to the keep-alive pool. */
  complete(): void {
    this.completed = true;
  }

  /**
   * Ends the call. An answer not read to its end (the consumer stopped early, or failed) is
   * aborted, which closes its connection; a completed one is left alone, so its keep-alive
   * connection is reused instead of a new one being opened for every request.
   */
  done(): void {
    clearTimeout(this.timer);
    this.caller.removeEventListener('abort', this.onAbort);
    if (!this.completed) this.controller.abort();
  }

  /**
   * What to throw for `err` raised while talking to the upstream: the caller's abort, a
   * timeout, or `classify(err)` for everything else.
   */
  failure(err: unknown, provider: string, classify: (err: unknown) => ProviderError): Error {
    if (this.caller.aborted) return abortError();
    if (this.timedOut)
      return new ProviderError(`${provider} sent nothing for ${this.timeoutMs} ms`, 504, true, undefined, {
        cause: err,
      });
    if (err instanceof ProviderError) return err;
    return classify(err);
  }
}

/**
 * One whole-answer upstream request (see Provider.complete) under an UpstreamCall: the caller's
 * abort and the timeout apply to all of it, and a failure is thrown as `failure()` words it.
 */
export async function wholeAnswer<T>(
  signal: AbortSignal,
  timeoutMs: number,
  provider: string,
  classify: (err: unknown) => ProviderError,
  request: (signal: AbortSignal) => Promise<T>,
): Promise<T> {
  const call = new UpstreamCall(signal, timeoutMs);
  try {
    const answer = await request(call.signal);
    call.complete();
    return answer;
  } catch (err) {
    throw call.failure(err, provider, classify);
  } finally {
    call.done();
  }
}

/** 408, 409, 429 and 5xx (Anthropic's 529 included) can succeed on a later try; other 4xx cannot. */
export function isRetryableStatus(status: number): boolean {
  return status === 408 || status === 409 || status === 429 || status >= 500;
}

/** `retry-after-ms` (OpenAI, Anthropic) or `retry-after` in seconds or as an HTTP date. */
export function retryAfterMs(headers: Headers | undefined, now: number = Date.now()): number | undefined {
  if (!headers) return undefined;
  const ms = headers.get('retry-after-ms');
  if (ms !== null && /^\d+(\.\d+)?$/.test(ms.trim())) return Math.ceil(Number(ms));
  const after = headers.get('retry-after');
  if (after === null) return undefined;
  if (/^\d+(\.\d+)?$/.test(after.trim())) return Math.ceil(Number(after) * 1000);
  const date = Date.parse(after);
  return Number.isNaN(date) ? undefined : Math.max(0, date - now);
}

/** A ProviderError for an upstream HTTP error status, retryable or not by status. */
export function httpFailure(
  provider: string,
  status: number,
  message: string,
  retryAfter?: number,
  cause?: unknown,
): ProviderError {
  return new ProviderError(
    `${provider} answered ${status}: ${message}`,
    status,
    isRetryableStatus(status),
    retryAfter,
    { cause },
  );
}

/** A ProviderError for a connection that failed or broke before the answer was complete. */
export function connectionFailure(provider: string, err: unknown): ProviderError {
  const reason = err instanceof Error ? err.message : String(err);
  return new ProviderError(`${provider} connection failed: ${reason}`, 502, true, undefined, { cause: err });
}

/** The 422 for a request field the provider cannot honour, shaped like the web tier's own 422s. */
export function unsupported(field: string, msg: string, loc: (string | number)[] = [field]): AppError {
  return new AppError('validation', msg, {
    param: field,
    detail: [{ loc: ['body', ...loc], msg, type: 'value_error' }],
  });
}

/** Roles every upstream understands; others are rejected up front rather than by the upstream. */
export function checkRoles(messages: readonly ChatMessage[], allowed: readonly string[], provider: string): void {
  messages.forEach((m, i) => {
    if (!allowed.includes(m.role)) {
      throw unsupported(
        'messages',
        `Role "${m.role}" is not supported by ${provider} models; use one of ${allowed.join(', ')}`,
        ['messages', i, 'role'],
      );
    }
  });
}

/**
 * Raises when the upstream's stream ended without finishing every choice it started: a cut
 * connection must become an error the client sees, never a silently short answer.
 */
export function assertComplete(provider: string, expected: number, finished: ReadonlySet<number>): void {
  if (finished.size < expected) {
    throw new ProviderError(`${provider} stream ended before the answer was complete`, 502, true);
  }
}

/**
 * For providers that take a tool call's input as an object (Anthropic's tool_use, Gemini's
 * functionCall): the arguments of every tool call in the messages must be a JSON object.
 */
export function checkToolCallArguments(messages: readonly ChatMessage[], provider: string): void {
  messages.forEach((m, i) =>
    m.tool_calls?.forEach((call, j) => {
      let value: unknown;
      try {
        value = call.function.arguments.trim() === '' ? {} : JSON.parse(call.function.arguments);
      } catch {
        value = undefined;
      }
      if (value === null || typeof value !== 'object' || Array.isArray(value))
        throw unsupported(
          'messages',
          `${provider} models take a tool call's arguments as a JSON object; these are not one`,
          ['messages', i, 'tool_calls', j, 'function', 'arguments'],
        );
    }),
  );
}
