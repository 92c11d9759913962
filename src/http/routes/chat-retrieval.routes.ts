import { AppError } from '../../errors.js';
import { ChatCompletionSchema } from '../../chat/request/chat.schema.js';
import { completionNotFound, resumeCompletion } from '../../chat/stream/resumed-completion.js';
import { findCompletion } from '../../chat/stream/stored-completion.js';
import { dependencyDown } from '../../infra/outage.js';
import type { JsonSchema } from '../../validation.js';
import { sendCompletion } from '../completion-response.js';
import { accountOf, defineRoutes, type HttpContext, type RouteSpec } from '../route.js';

// Reading a completion back by its id, on any web process, while its relay log is kept
// (RELAY_LOG_TTL_SECONDS after it ends): the stream from an event on (resumption), or the whole
// answer (OpenAI's stored-completion retrieval). Only the account that made the request can.

const CompletionParams: JsonSchema = {
  type: 'object',
  required: ['completion_id'],
  properties: {
    completion_id: {
      type: 'string',
      maxLength: 64,
      'x-text': 'line',
      description: 'The `id` of the completion (of its chunks, for a stream)',
      example: 'chatcmpl-…',
    },
  },
};

// An event's sequence number, as every event's `id:` line carries it: a non-negative integer that
// a JavaScript number holds exactly.
const EVENT_ID = '^(0|[1-9][0-9]{0,14})$';

const StreamQuery: JsonSchema = {
  type: 'object',
  properties: {
    starting_after: {
      type: 'string',
      pattern: EVENT_ID,
      description:
        'Resume after the event with this `id:` (the Last-Event-ID header, when sent, takes precedence). Default 0: from the first event.',
      example: '12',
    },
  },
};

const ResumeHeaders: JsonSchema = {
  type: 'object',
  properties: {
    'last-event-id': {
      type: 'string',
      pattern: EVENT_ID,
      description:
        'Resume after the event with this `id:`, as EventSource sends it when it reconnects; takes precedence over starting_after.',
      example: '12',
    },
  },
};

const READS_LIMITED =
  'The account read completions back more than COMPLETION_READS_PER_MINUTE times this UTC minute, retrievals and resumed streams together (`rate_limit_exceeded`, with Retry-After and X-RateLimit-*)';

/** The event to resume after: Last-Event-ID, else ?starting_after, else 0 (from the first event). */
function resumeAfter(ctx: HttpContext): number {
  const header = (ctx.state.headers as { 'last-event-id'?: string } | undefined)?.['last-event-id'];
  return Number(header ?? (ctx.state.query as { starting_after?: string }).starting_after ?? 0);
}

export const chatRetrievalRoutes: RouteSpec[] = defineRoutes([
  {
    method: 'get',
    path: '/v1/chat/completions/:completion_id',
    operationId: 'getChatCompletion',
    summary: 'A finished chat completion, streamed or not, for RELAY_LOG_TTL_SECONDS after it ended',
    description:
      "OpenAI's stored-completion retrieval: the answer in the `chat.completion` shape (a stream's chunks put together, its usage with `cost`), for the account that made the request. " +
      "An unknown id, another account's or one past its time gives 404; a request still running gives 409 `completion_in_progress` (follow it with `/stream`); one that ended without a whole answer (cancelled, failed) gives 409 `completion_incomplete` naming the error it ended with.",
    tag: 'chat',
    auth: 'api_key',
    params: CompletionParams,
    responses: {
      200: { description: 'The completion', schema: ChatCompletionSchema },
      404: { description: "No such completion for this account (unknown, another account's, or expired)" },
      409: {
        description:
          'Still running (`completion_in_progress`), or ended without a whole answer (`completion_incomplete`)',
      },
      429: { description: READS_LIMITED },
      503: { description: 'Redis is unreachable; see Retry-After' },
    },
    handler: async (ctx, app) => {
      const { completion_id: id } = ctx.state.params as { completion_id: string };
      ctx.set(await app.limiter.admitCompletionRead(accountOf(ctx).id));
      let found;
      try {
        found = await findCompletion(app.redis, app.config.redis.prefix, accountOf(ctx).id, id);
      } catch (err) {
        throw dependencyDown(err, { log: app.outages.redis, source: 'completion retrieval' });
      }
      if (!found) throw completionNotFound(app.config, id);
      if (found.status === 'running') {
        throw new AppError(
          'conflict',
          `The completion '${id}' is still being generated; follow it with GET /v1/chat/completions/${id}/stream, or ask again once it has ended.`,
          {
            code: 'completion_in_progress',
            param: 'completion_id',
          },
        );
      }
      if (found.status === 'failed') {
        const { code, message } = found.error.error;
        throw new AppError(
          'conflict',
          `The completion '${id}' ended without a whole answer (${code ?? 'error'}: ${message})`,
          {
            code: 'completion_incomplete',
            param: 'completion_id',
            // Asking again gives the same answer: the OpenAI SDKs would otherwise retry a 409.
            headers: { 'x-should-retry': 'false' },
          },
        );
      }
      ctx.type = 'application/json';
      ctx.body = found.body;
    },
  },
  {
    method: 'get',
    path: '/v1/chat/completions/:completion_id/stream',
    operationId: 'resumeChatCompletionStream',
    summary: 'Resume a stream after its last event received (Last-Event-ID), on any web process',
    description:
      "Every event of a stream carries `id: <n>`, its sequence number. This replays the events after `Last-Event-ID` (or `starting_after`) from the request's relay log and then follows the stream as it is generated, to `data: [DONE]`, with the headers, heartbeats and error events of the original stream. " +
      'Works for any streamed completion until RELAY_LOG_TTL_SECONDS after it ended, for the account that made it; several readers may follow one stream at once. ' +
      'A request made with `stream_options: {"resumable": true}` outlives its connection: it runs on for RESUME_GRACE_SECONDS after its last reader left, then is cancelled.',
    tag: 'chat',
    auth: 'api_key',
    params: CompletionParams,
    query: StreamQuery,
    headers: ResumeHeaders,
    responses: {
      200: {
        description: 'Server-sent events: the rest of the stream, ending with `data: [DONE]`',
        alsoAs: ['text/event-stream'],
      },
      400: {
        description:
          'The completion was not streamed (`completion_not_streamed`): read it with GET /v1/chat/completions/{completion_id}',
      },
      404: { description: "No such completion for this account (unknown, another account's, or expired)" },
      429: {
        description: `${READS_LIMITED}; or RESUME_MAX_READERS resumed streams already follow this completion (\`too_many_readers\`, Retry-After: 2)`,
      },
      502: { description: 'The stream had failed before its first event; the error it failed with' },
      503: { description: 'Redis is unreachable; see Retry-After' },
    },
    handler: async (ctx, app) => {
      const { completion_id: id } = ctx.state.params as { completion_id: string };
      ctx.set(await app.limiter.admitCompletionRead(accountOf(ctx).id));
      const stream = await resumeCompletion(app, accountOf(ctx).id, id, resumeAfter(ctx));
      await sendCompletion(ctx, app, stream, { asSse: true });
    },
  },
]);
