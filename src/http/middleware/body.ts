import type { Context, Middleware } from 'koa';
import { parse as parseJsonText } from '@hapi/bourne';
import { koaBody } from 'koa-body';
import type { AppContext } from '../../context.js';
import { AppError, validationError } from '../../errors.js';
import { readBodyText, type BodyBytesGate } from '../body-reader.js';
import type { AppState } from '../route.js';

/**
 * Parses a JSON body into ctx.state.body (undefined when the request has none), holding its bytes
 * in the process's room for bodies until the response is done. Malformed JSON is the client's
 * mistake: 422 naming where it broke, never a 500. Beyond the limit, decompressed: 413, unparsed.
 */
export function jsonBody(
  deps: Pick<AppContext, 'config' | 'metrics' | 'abuseBudget'>,
  gate: BodyBytesGate,
  limitBytes: number,
  keepRaw = false,
): Middleware<AppState> {
  const { http } = deps.metrics;
  return async (ctx, next) => {
    const hasBody = Boolean(ctx.request.length) || ctx.get('transfer-encoding') !== '';
    if (hasBody && !ctx.is('json', '+json')) {
      throw validationError([
        { loc: ['body'], msg: 'Body must be JSON; send Content-Type: application/json', type: 'model_attributes_type' },
      ]);
    }
    const route = ctx.state.route ?? 'unmatched';
    const hold = gate.hold();
    try {
      if (hasBody) {
        let read: { text: string; bytes: number };
        try {
          read = await readBodyText(ctx.req, {
            limitBytes,
            maxInflateRatio: deps.config.http.bodyMaxInflateRatio,
            hold,
            onRefused: (reason, decodedBytes) => {
              http.bodyRefusals.inc({ route, reason });
              http.bodyRefusedBytes.inc({ route, reason }, decodedBytes);
            },
          });
        } finally {
          // A compressed or chunked body took more than it announced, read in full or not: its budget pays the rest.
          const budget = ctx.state.budget;
          if (budget) await deps.abuseBudget.charge(budget.subject, hold.bytes - budget.announcedBytes);
        }
        http.bodyParsedBytes.inc({ route }, read.bytes);
        ctx.state.body = read.text === '' ? undefined : parseJson(read.text);
        if (keepRaw) ctx.state.rawBody = read.text;
      }
      await next();
    } finally {
      hold.release();
    }
  };
}

/** JSON as co-body parsed it: any JSON value, and a `__proto__` key refused (it would reach prototypes on a merge). */
function parseJson(text: string): unknown {
  try {
    return parseJsonText(text, { protoAction: 'error' });
  } catch (err) {
    throw mapParseError({ message: (err as Error).message, body: text });
  }
}

/**
 * A body that is JSON (as jsonBody reads it) or a browser's URL-encoded form, into
 * ctx.state.body; anything else is a 422.
 */
export function jsonOrFormBody(
  deps: Pick<AppContext, 'config' | 'metrics' | 'abuseBudget'>,
  gate: BodyBytesGate,
  limitBytes: number,
): Middleware<AppState> {
  const json = jsonBody(deps, gate, limitBytes);
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
