import type { Context, Middleware } from 'koa';
import { koaBody } from 'koa-body';
import { AppError, validationError } from '../../errors.js';
import type { AppState } from '../route.js';
import { Utf8Check } from './utf8-check.js';

/**
 * Parses a JSON body into ctx.state.body (undefined when the request has none). Malformed JSON
 * is the client's mistake: 422 naming where it broke, never a 500. Beyond the limit: 413.
 */
export function jsonBody(limitBytes: number, keepRaw = false): Middleware<AppState> {
  const parse = koaBody({
    json: true,
    urlencoded: false,
    text: false,
    multipart: false,
    jsonLimit: limitBytes,
    jsonStrict: false,
    includeUnparsed: keepRaw,
    patchKoa: true,
    onError: (err) => {
      throw mapParseError(err);
    },
  });
  return async (ctx, next) => {
    const hasBody = Boolean(ctx.request.length) || ctx.get('transfer-encoding') !== '';
    if (hasBody && !ctx.is('json', '+json')) {
      throw validationError([
        { loc: ['body'], msg: 'Body must be JSON; send Content-Type: application/json', type: 'model_attributes_type' },
      ]);
    }
    // koa-body's middleware type is loose; it resolves once the body is parsed.
    const parsing = parse(ctx, () => Promise.resolve()) as Promise<void>;
    // The parser reads the same 'data' events (it attached its listener just now, synchronously).
    // A compressed body is checked by the parser alone: its bytes here are not the text.
    const utf8 = (ctx.get('content-encoding') || 'identity') === 'identity' ? new Utf8Check() : undefined;
    if (utf8) ctx.req.on('data', (chunk: Buffer) => utf8.feed(chunk));
    await parsing;
    if (utf8 && !utf8.ok) {
      throw validationError([{ loc: ['body'], msg: 'Body is not valid UTF-8', type: 'json_invalid' }]);
    }
    const body = (ctx.request as { body?: unknown }).body;
    if (keepRaw) {
      // koa-body 7 leaves the exact text on ctx.request.rawBody (older versions used a symbol on the body).
      const raw = (ctx.request as { rawBody?: unknown }).rawBody;
      if (typeof raw === 'string') ctx.state.rawBody = raw;
    }
    ctx.state.body = hasBody ? body : undefined;
    await next();
  };
}

/**
 * A body that is JSON (as jsonBody reads it) or a browser's URL-encoded form, into
 * ctx.state.body; anything else is a 422.
 */
export function jsonOrFormBody(limitBytes: number): Middleware<AppState> {
  const json = jsonBody(limitBytes);
  return async (ctx, next) => {
    if (!ctx.is('urlencoded')) {
      await json(ctx, next);
      return;
    }
    ctx.state.body = await readForm(ctx, limitBytes);
    await next();
  };
}

/**
 * Reads a small URL-encoded form, as a browser posts it, into its fields ({} for any other body).
 * Beyond the limit: 413.
 */
export async function readForm(ctx: Context, limitBytes: number): Promise<Record<string, unknown>> {
  const parse = koaBody({
    json: false,
    urlencoded: true,
    text: false,
    multipart: false,
    formLimit: limitBytes,
    patchKoa: true,
    onError: (err) => {
      const status = (err as { status?: number }).status;
      throw status === 413 || status === 415
        ? mapParseError(err)
        : new AppError('invalid_request', 'The form could not be read', { code: 'invalid_form' });
    },
  });
  // koa-body's middleware type is loose; it resolves once the body is parsed.
  await (parse(ctx, () => Promise.resolve()) as Promise<void>);
  const body = (ctx.request as { body?: unknown }).body;
  return ctx.is('urlencoded') && body !== null && typeof body === 'object' ? (body as Record<string, unknown>) : {};
}

function mapParseError(err: unknown): AppError {
  const e = err as { status?: number; type?: string; message?: string; body?: string };
  if (e.status === 413 || e.type === 'entity.too.large') {
    return new AppError('payload_too_large', 'Request body is too large', { code: 'request_too_large' });
  }
  if (e.status === 415) {
    return new AppError('invalid_request', e.message ?? 'Unsupported content encoding', { status: 415 });
  }
  // FastAPI's entry for a JSON decode error: loc ["body", <character position>], msg "JSON decode
  // error", the parser's reason in ctx.error. V8 says the position in its message, or nothing for
  // a body that ends too soon (then it is the body's length).
  const message = e.message ?? 'invalid JSON';
  const at = /\s+in JSON at position (\d+)/.exec(message);
  const position = at
    ? Number(at[1])
    : /^Unexpected end of JSON input/.test(message) && typeof e.body === 'string'
      ? e.body.length
      : undefined;
  return validationError([
    {
      loc: position === undefined ? ['body'] : ['body', position],
      msg: 'JSON decode error',
      type: 'json_invalid',
      ctx: { error: at ? message.slice(0, at.index) : message },
    },
  ]);
}
