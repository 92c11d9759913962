import {
  CHAT_BODY_LIMIT_BYTES,
  ChatCompletionRequestSchema,
  ChatCompletionSchema,
  type ChatCompletionRequest,
} from '../../chat/request/chat.schema.js';
import { admitCompletion } from '../../chat/request/admission.js';
import { sendCompletion } from '../completion-response.js';
import { accountOf, defineRoutes, type RouteSpec } from '../route.js';

export const chatRoutes: RouteSpec[] = defineRoutes([
  {
    method: 'post',
    path: '/v1/chat/completions',
    operationId: 'createChatCompletion',
    summary: 'Create a chat completion (JSON, or server-sent events when stream is true)',
    description:
      'Rate-limit headers (X-RateLimit-Limit, X-RateLimit-Remaining, X-RateLimit-Reset and the OpenAI x-ratelimit-* set) are on every response. ' +
      'A stream is a sequence of `data: <chat.completion.chunk JSON>` events ending with `data: [DONE]`, each with `id: <n>`, its sequence number, to resume after with GET /v1/chat/completions/{completion_id}/stream. ' +
      'With `stream_options.resumable` the generation outlives its connection for RESUME_GRACE_SECONDS; without it, a disconnect cancels it at once.',
    tag: 'chat',
    auth: 'api_key',
    // The admission script confirms a cached key's version: no separate Redis read per request.
    deferKeyCheck: true,
    body: ChatCompletionRequestSchema,
    bodyLimitBytes: CHAT_BODY_LIMIT_BYTES,
    responses: {
      200: {
        description:
          'A chat.completion body; with `stream: true`, server-sent events, each `data: <chat.completion.chunk JSON>`, ending with `data: [DONE]`',
        schema: ChatCompletionSchema,
        alsoAs: ['text/event-stream'],
      },
      403: {
        description: "The model needs the paid tier, or is outside the API key's allow-list (model_not_allowed)",
      },
      404: { description: 'Unknown model' },
      429: {
        description:
          'Refused by a rate limit (`rate_limit_exceeded`, with Retry-After when a short wait helps), the daily token quota, or the monthly spending limit ' +
          '(`insufficient_quota`: `Retry-After` of a few seconds when requests still in flight hold the rest of the quota or limit, which frees as they end; ' +
          '`x-should-retry: false` when settled usage alone leaves no room before the reset)',
      },
      502: { description: 'The upstream model provider failed' },
      503: { description: 'No capacity (queue full, no worker, provider not configured); see Retry-After' },
    },
    handler: async (ctx, app) => {
      const { job, headers, refusal } = await admitCompletion(app, {
        account: accountOf(ctx),
        key: ctx.state.apiKey,
        request: ctx.state.body as ChatCompletionRequest,
        unconfirmed: ctx.state.keyCheck,
      });
      ctx.set(headers);
      if (refusal) throw refusal;
      await sendCompletion(ctx, app, await app.dispatcher.dispatch(job), { asSse: job.stream });
    },
  },
]);
