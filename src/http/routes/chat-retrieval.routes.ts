import type { AppContext } from '../../context.js';
import { AppError } from '../../errors.js';
import { ChatCompletionSchema } from '../../chat/chat.schema.js';
import { attachReader, leaveReader } from '../../chat/readers.js';
import { followRelayLog } from '../../chat/relay-follower.js';
import { originOf, relayLogKey, requestStateKey, runningTtlSeconds } from '../../chat/relay-protocol.js';
import { findCompletion } from '../../chat/stored-completion.js';
import type { JsonSchema } from '../../validation.js';
import { SseResponse } from '../sse-response.js';
import { accountOf, defineRoutes, type HttpContext, type RouteSpec } from '../route.js';
import { lostRelay, relayFailure, stalled } from './chat-errors.js';

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

const notFound = (app: AppContext, id: string) =>
  new AppError(
    'not_found',
    `No completion found with id '${id}'. A completion can be read back by the account that made it, until ${app.config.queue.relayLogTtlSeconds} s after it ended.`,
    {
      code: 'completion_not_found',
      param: 'completion_id',
    },
  );

const redisDown = (err: unknown) =>
  new AppError('unavailable', 'The service is temporarily unavailable. Please retry shortly.', {
    code: 'service_unavailable',
    headers: { 'Retry-After': '5' },
    cause: err,
  });

/** The event to resume after: Last-Event-ID, else ?starting_after, else 0 (from the first event). */
function resumeAfter(ctx: HttpContext): number {
  const header = (ctx.state.headers as { 'last-event-id'?: string } | undefined)?.['last-event-id'];
  return Number(header ?? (ctx.state.query as { starting_after?: string }).starting_after ?? 0);
}

/**
 * The stream of completion `id` after event `after`: what its relay log holds, then what its
 * worker writes, to [DONE]. A reader of a resumable request that is still running is counted in
 * while connected, so the request is not cancelled for want of one.
 */
async function resumeStream(ctx: HttpContext, app: AppContext, id: string, after: number): Promise<void> {
  const prefix = app.config.redis.prefix;
  const origin = originOf(id);
  if (origin === undefined) throw notFound(app, id);
  const stateKey = requestStateKey(prefix, origin, id);
  const instance = app.relayHub.instance;
  let attached;
  try {
    attached = await attachReader(app.redis, stateKey, accountOf(ctx).id, instance);
  } catch (err) {
    app.outages.redis.failure('resumed stream', err);
    throw redisDown(err);
  }
  if (!attached) throw notFound(app, id);
  if (!attached.stream) {
    throw new AppError(
      'invalid_request',
      `The completion '${id}' was not streamed, so it has no events to resume: read it with GET /v1/chat/completions/${id}.`,
      {
        code: 'completion_not_streamed',
        param: 'completion_id',
      },
    );
  }

  const sse = new SseResponse(ctx, {
    heartbeatMs: app.config.queue.heartbeatMs,
    maxBufferedBytes: app.config.queue.streamMaxBufferedBytes,
  });
  const gone = new AbortController();
  ctx.res.once('close', () => gone.abort());
  const idleMs = app.config.providers.requestTimeoutMs + 10_000;
  const deps = { redis: app.redis, tails: app.relayLogTails, config: app.config };

  // A reader that saw the end has nothing to count out: the request is over (its end is published
  // only once its usage is recorded).
  let sawEnd = false;
  void (async () => {
    try {
      for await (const e of followRelayLog(deps, relayLogKey(prefix, origin, id), after, gone.signal)) {
        if (gone.signal.aborted) return;
        sawEnd = e.kind === 'done' || e.kind === 'error';
        switch (e.kind) {
          case 'sse':
            sse.events(e.payload);
            // The reader takes what was written before more is read: a long replay goes out page by page.
            await sse.drained(idleMs);
            break;
          case 'live':
            sse.commit();
            break;
          case 'done':
            return sse.end(e.payload, e.lastEventId);
          case 'error':
            // A stream that had started ends with the error event, as it did; one that failed
            // before its first event answered with the error's status, and so does this.
            if (e.started) sse.commit();
            return sse.fail(relayFailure(e.error), e.lastEventId);
          case 'idle':
            return sse.fail(stalled(), e.lastEventId);
        }
      }
    } catch (err) {
      if (gone.signal.aborted) return;
      app.log.warn({ requestId: id, err }, 'a resumed stream could not read its relay log');
      sse.fail(sse.isCommitted ? lostRelay() : redisDown(err));
    } finally {
      if (attached.counted && !sawEnd) {
        await leaveReader(app.redis, prefix, stateKey, id, instance, runningTtlSeconds(app.config)).catch(
          () => undefined,
        );
      }
    }
  })();

  const outcome = await sse.first;
  if ('error' in outcome) throw outcome.error;
  if ('closed' in outcome) ctx.respond = false;
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
      503: { description: 'Redis is unreachable; see Retry-After' },
    },
    handler: async (ctx, app) => {
      const { completion_id: id } = ctx.state.params as { completion_id: string };
      let found;
      try {
        found = await findCompletion(app.redis, app.config.redis.prefix, accountOf(ctx).id, id);
      } catch (err) {
        app.outages.redis.failure('completion retrieval', err);
        throw redisDown(err);
      }
      if (!found) throw notFound(app, id);
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
      502: { description: 'The stream had failed before its first event; the error it failed with' },
      503: { description: 'Redis is unreachable; see Retry-After' },
    },
    handler: async (ctx, app) => {
      const { completion_id: id } = ctx.state.params as { completion_id: string };
      await resumeStream(ctx, app, id, resumeAfter(ctx));
    },
  },
]);
