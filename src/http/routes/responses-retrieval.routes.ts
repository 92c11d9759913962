import { resumeCompletion } from '../../chat/stream/resumed-completion.js';
import { sleep } from '../../clock.js';
import { AppError, retryAdvice } from '../../errors.js';
import {
  deleteResponse,
  findResponse,
  markCancelled,
  inputItemsPage,
  type InputItemsQuery,
} from '../../responses/stored-responses.service.js';
import type { StoredResponseRow } from '../../responses/stored-responses.repository.js';
import type { AppContext } from '../../context.js';
import { cancelRequest } from '../../chat/relay/request-cancel.js';
import { originOf, requestStateKey, runningTtlSeconds } from '../../chat/relay/protocol.js';
import { dependencyDown } from '../../infra/outage.js';
import type { JsonSchema } from '../../validation.js';
import { sendCompletion } from '../completion-response.js';
import { accountOf, defineRoutes, type HttpContext, type RouteSpec } from '../route.js';

// Stored Responses API objects (store: true, the default), read back and deleted by the account
// that made them, on any web process, for RESPONSES_RETENTION_DAYS.

const ResponseParams: JsonSchema = {
  type: 'object',
  required: ['response_id'],
  properties: {
    response_id: {
      type: 'string',
      maxLength: 64,
      'x-text': 'line',
      description: 'The `id` of the response',
      example: 'resp_…',
    },
  },
};

// A stream event's sequence number: a non-negative integer that a JavaScript number holds exactly.
const SEQUENCE_NUMBER = '^(0|[1-9][0-9]{0,14})$';

const RetrieveQuery: JsonSchema = {
  type: 'object',
  properties: {
    stream: {
      type: 'string',
      enum: ['true', 'false'],
      description:
        "`true`: the response's stream events from its relay log, then live as they are generated, on any web process",
    },
    starting_after: {
      type: 'string',
      pattern: SEQUENCE_NUMBER,
      description: 'With `stream=true`: the events after the one with this `sequence_number` (default: from the first)',
      example: '12',
    },
    include: {
      description: "OpenAI's extra fields to include. Accepted; a Response here has none to add.",
      type: 'string',
      maxLength: 200,
      'x-text': 'line',
    },
    include_obfuscation: {
      type: 'string',
      enum: ['true', 'false'],
      description: 'Accepted; events carry no obfuscation padding.',
    },
  },
};

/** How often a reader of a queued background response looks again for its worker's start. */
const START_POLL_MS = 250;

/**
 * A response's stream events after `starting_after` (a sequence number), replayed from its relay log
 * and followed live: every Responses stream is resumable, foreground ones included, until
 * RELAY_LOG_TTL_SECONDS after it ended. Event `id:` lines count from 1 (sequence_number + 1). A
 * background response still queued has no events yet: its reader waits for a worker to start it
 * (a queued job is started or expired within QUEUE_PICKUP_TIMEOUT_MS), as OpenAI's does.
 */
async function resumeResponse(ctx: HttpContext, app: AppContext, id: string, startingAfter: string | undefined) {
  const after = startingAfter === undefined ? 0 : Number(startingAfter) + 1;
  const left = new AbortController();
  ctx.req.once('close', () => left.abort());
  const deadline = performance.now() + app.config.queue.pickupTimeoutMs + START_POLL_MS;
  let stream;
  for (;;) {
    try {
      stream = await resumeCompletion(app, accountOf(ctx).id, id, after);
      break;
    } catch (err) {
      if (!(err instanceof AppError)) throw err;
      if (err.code === 'completion_not_streamed') throw responseNotStreamed(id);
      if (err.status !== 404) throw err;
      const row = await findResponse(app, accountOf(ctx).id, id);
      if (row?.status !== 'queued' || performance.now() > deadline) throw notStarted(id, row);
      await sleep(START_POLL_MS, left.signal);
      if (left.signal.aborted) return;
    }
  }
  await sendCompletion(ctx, app, stream, { asSse: true, wire: 'responses' });
}

const responseNotStreamed = (id: string) =>
  new AppError(
    'invalid_request',
    `The response '${id}' was not streamed, so it has no events to resume: read it without stream=true.`,
    { code: 'response_not_streamed', param: 'stream' },
  );

/** Why a response has no events to read: unknown here, still queued with no worker about, or ended (cancelled, expired) before a worker started it. */
function notStarted(id: string, row: StoredResponseRow | undefined): AppError {
  if (!row) return responseNotFound(id);
  if (row.status === 'queued')
    return new AppError('unavailable', `No worker has started the response '${id}' yet; please retry shortly.`, {
      code: 'no_worker',
      headers: retryAdvice(1000),
    });
  return new AppError(
    'invalid_request',
    `The response '${id}' ended ${row.status} before a worker started it, so it has no events: read it without stream=true.`,
    { code: 'response_not_streamed', param: 'stream' },
  );
}

const InputItemsQuerySchema: JsonSchema = {
  type: 'object',
  properties: {
    limit: {
      type: 'string',
      pattern: '^([1-9]|[1-9][0-9]|100)$',
      description: 'How many items a page holds, 1 to 100. Default 20.',
      example: '20',
    },
    order: {
      type: 'string',
      enum: ['asc', 'desc'],
      description: 'Oldest first (`asc`) or newest first (`desc`, the default).',
    },
    after: {
      type: 'string',
      minLength: 1,
      maxLength: 64,
      'x-text': 'line',
      description: 'An item `id`: the page starts after it, in the order asked for',
      example: 'msg_…',
    },
    include: {
      description: "OpenAI's extra fields to include. Accepted; no item this service stores has any to add.",
      type: 'string',
      maxLength: 200,
      'x-text': 'line',
    },
  },
};

const StoredResponseSchema: JsonSchema = {
  type: 'object',
  description: "OpenAI's Response object, as the client last saw it",
  required: ['id', 'object', 'created_at', 'status', 'model', 'output'],
  properties: {
    id: { type: 'string' },
    object: { type: 'string', const: 'response' },
    created_at: { type: 'integer' },
    status: { type: 'string', enum: ['queued', 'in_progress', 'completed', 'incomplete', 'failed', 'cancelled'] },
    model: { type: 'string' },
    output: { type: 'array', items: { type: 'object' } },
  },
};

const InputItemListSchema: JsonSchema = {
  type: 'object',
  required: ['object', 'data', 'first_id', 'last_id', 'has_more'],
  properties: {
    object: { type: 'string', const: 'list' },
    data: { type: 'array', items: { type: 'object' } },
    first_id: { type: ['string', 'null'] },
    last_id: { type: ['string', 'null'] },
    has_more: { type: 'boolean' },
  },
};

const DeletedResponseSchema: JsonSchema = {
  type: 'object',
  required: ['id', 'object', 'deleted'],
  properties: {
    id: { type: 'string' },
    object: { type: 'string', const: 'response' },
    deleted: { type: 'boolean', const: true },
  },
};

/** OpenAI's answer for an id the account has no response with (unknown, another account's, expired or deleted). */
export function responseNotFound(id: string): AppError {
  return new AppError('not_found', `Response with id '${id}' not found.`, { param: 'response_id' });
}

/**
 * The response id the path names, once the read is admitted: every call here spends one of the
 * account's COMPLETION_READS_PER_MINUTE, as chat's retrievals do, whatever it answers.
 */
async function admittedResponseId(ctx: HttpContext, app: AppContext): Promise<string> {
  ctx.set(await app.limiter.admitCompletionRead(accountOf(ctx).id));
  return (ctx.state.params as { response_id: string }).response_id;
}

const READ_LIMITED = {
  description: 'Past COMPLETION_READS_PER_MINUTE for this account (`rate_limit_exceeded`); see Retry-After',
};

/**
 * Stops a background response that has not ended: the cancel is recorded with its request, so the
 * worker running it stops now (billing what it produced) and one that has yet to claim it never
 * starts it, then the stored status says cancelled. Its worker's end, with the output and usage,
 * replaces that object. One that has ended is answered as it is, as OpenAI does.
 */
async function cancelBackground(app: AppContext, row: StoredResponseRow): Promise<Record<string, unknown>> {
  if (row.status !== 'queued' && row.status !== 'in_progress') return row.response;
  const prefix = app.config.redis.prefix;
  const origin = originOf(row.id);
  if (origin !== undefined) {
    try {
      await cancelRequest(
        app.redis,
        prefix,
        requestStateKey(prefix, origin, row.id),
        row.id,
        runningTtlSeconds(app.config),
      );
    } catch (err) {
      throw dependencyDown(err, { log: app.outages.redis, source: 'response cancel' });
    }
  }
  const cancelled = await markCancelled(app, row);
  if (cancelled) return cancelled;
  // It ended meanwhile (or its worker stored the cancelled end already): the stored object is the answer.
  return (await findResponse(app, row.account_id, row.id))?.response ?? row.response;
}

export const responsesRetrievalRoutes: RouteSpec[] = defineRoutes([
  {
    method: 'get',
    path: '/v1/responses/:response_id',
    operationId: 'getResponse',
    summary: 'A stored response, for RESPONSES_RETENTION_DAYS after it was created; or its stream, resumed',
    description:
      'The Response object of a request made with `store: true` (the default), as the client last saw it: its status, output and usage (with `cost`). ' +
      "An unknown id, another account's, a deleted one or one past its retention gives 404. " +
      'With `stream=true`: the stream events of a streamed response after `starting_after`, from its relay log and then live, on any web process, until RELAY_LOG_TTL_SECONDS after it ended (stored or not).',
    tag: 'responses',
    auth: 'api_key',
    params: ResponseParams,
    query: RetrieveQuery,
    responses: {
      200: { description: 'The response', schema: StoredResponseSchema, alsoAs: ['text/event-stream'] },
      400: {
        description:
          'stream=true for a response that was not streamed, or that ended before a worker started it (`response_not_streamed`)',
      },
      404: { description: "No such response for this account (unknown, another account's, deleted or expired)" },
      429: READ_LIMITED,
      503: {
        description:
          'stream=true for a background response still queued after QUEUE_PICKUP_TIMEOUT_MS with no worker to start it (`no_worker`); see Retry-After',
      },
    },
    handler: async (ctx, app) => {
      const id = await admittedResponseId(ctx, app);
      const query = ctx.state.query as { stream?: string; starting_after?: string };
      if (query.stream === 'true') return resumeResponse(ctx, app, id, query.starting_after);
      const row = await findResponse(app, accountOf(ctx).id, id);
      if (!row) throw responseNotFound(id);
      ctx.body = row.response;
    },
  },
  {
    method: 'get',
    path: '/v1/responses/:response_id/input_items',
    operationId: 'listResponseInputItems',
    summary: "A stored response's input items, a page at a time",
    description:
      'The items the request was given (its `input`, each with an `id`), newest first unless `order=asc`. ' +
      'Page with `after` set to the `last_id` of the previous page while `has_more` is true.',
    tag: 'responses',
    auth: 'api_key',
    params: ResponseParams,
    query: InputItemsQuerySchema,
    responses: {
      200: { description: 'A page of input items', schema: InputItemListSchema },
      404: { description: 'No such response for this account, or `after` names no item of it' },
      429: READ_LIMITED,
    },
    handler: async (ctx, app) => {
      const id = await admittedResponseId(ctx, app);
      const query = ctx.state.query as { limit?: string; order?: 'asc' | 'desc'; after?: string };
      const row = await findResponse(app, accountOf(ctx).id, id);
      if (!row) throw responseNotFound(id);
      const q: InputItemsQuery = { limit: Number(query.limit ?? 20), order: query.order ?? 'desc', after: query.after };
      const page = inputItemsPage(row.input_items, q);
      if (!page)
        throw new AppError('not_found', `Response '${id}' has no input item with id '${query.after}'.`, {
          param: 'after',
        });
      ctx.body = page;
    },
  },
  {
    method: 'post',
    path: '/v1/responses/:response_id/cancel',
    operationId: 'cancelResponse',
    summary: 'Cancel a background response',
    description:
      'Stops a response made with `background: true` that is queued or in progress: its job stops, what it produced is billed, and its status becomes `cancelled` ' +
      '(the output and usage it had are filled in once its worker has stopped). A response that has ended is answered as it is.',
    tag: 'responses',
    auth: 'api_key',
    params: ResponseParams,
    responses: {
      200: { description: 'The response, cancelled (or as it ended)', schema: StoredResponseSchema },
      400: { description: 'The response was not made with `background: true` (`response_not_background`)' },
      404: { description: "No such response for this account (unknown, another account's, deleted or expired)" },
      429: READ_LIMITED,
      503: { description: 'Redis is unreachable; see Retry-After' },
    },
    handler: async (ctx, app) => {
      const id = await admittedResponseId(ctx, app);
      const row = await findResponse(app, accountOf(ctx).id, id);
      if (!row) throw responseNotFound(id);
      if (row.response.background !== true)
        throw new AppError('invalid_request', 'Only responses created with background set to true can be cancelled.', {
          code: 'response_not_background',
          param: 'response_id',
        });
      ctx.body = await cancelBackground(app, row);
    },
  },
  {
    method: 'delete',
    path: '/v1/responses/:response_id',
    operationId: 'deleteResponse',
    summary: 'Delete a stored response',
    description:
      'Deletes the response and its input items at once; its id then answers 404 everywhere, and a request with it as `previous_response_id` gets 404.',
    tag: 'responses',
    auth: 'api_key',
    params: ResponseParams,
    responses: {
      200: { description: 'Deleted', schema: DeletedResponseSchema },
      404: {
        description: "No such response for this account (unknown, another account's, already deleted or expired)",
      },
    },
    handler: async (ctx, app) => {
      const id = await admittedResponseId(ctx, app);
      if (!(await deleteResponse(app, accountOf(ctx).id, id))) throw responseNotFound(id);
      ctx.body = { id, object: 'response', deleted: true };
    },
  },
]);
