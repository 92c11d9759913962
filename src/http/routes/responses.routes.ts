import { CHAT_BODY_LIMIT_BYTES } from '../../chat/request/chat.schema.js';
import { admitResponse } from '../../chat/request/responses-admission.js';
import {
  CreateResponseSchema,
  ResponseSchema,
  type CreateResponseRequest,
} from '../../chat/request/responses.schema.js';
import type { PriorItems } from '../../chat/request/responses-request.js';
import { AppError } from '../../errors.js';
import { deleteResponse, priorItems, storeAnswer } from '../../responses/stored-responses.service.js';
import type { PreparedJob } from '../../chat/relay/completion-job.js';
import { startingResponse } from '../../chat/stream/presenters/response.presenter.js';
import type { AppContext } from '../../context.js';
import { sendCompletion } from '../completion-response.js';
import { accountOf, defineRoutes, type HttpContext, type RouteSpec } from '../route.js';

/**
 * A background response: kept as queued before its job is queued (a retrieve finds it at once),
 * then its job runs on the queue with nobody attached. Without stream the client has the queued
 * Response at once; with it, the stream as usual, which may be dropped and resumed.
 */
async function startBackground(ctx: HttpContext, app: AppContext, job: PreparedJob, streamed: boolean): Promise<void> {
  const queued = startingResponse({ ...job, shard: 0 }, 'queued');
  await storeAnswer(app, job, queued);
  let stream;
  try {
    stream = await app.dispatcher.dispatch(job);
  } catch (err) {
    // Not queued (its reservation was released): no response will ever run under this id.
    await deleteResponse(app, job.accountId, job.id).catch(() => undefined);
    throw err;
  }
  if (streamed) return sendCompletion(ctx, app, stream, { asSse: true, wire: 'responses' });
  // Nobody follows it here: its worker publishes to its relay log alone, for GET ?stream=true.
  stream.end('client_left');
  ctx.body = queued;
}

export const responsesRoutes: RouteSpec[] = defineRoutes([
  {
    method: 'post',
    path: '/v1/responses',
    operationId: 'createResponse',
    summary: 'Create a model response (the Responses API: JSON, or server-sent events when stream is true)',
    description:
      'The same models, limits, queue and billing as POST /v1/chat/completions, in the Responses API wire format. ' +
      'A stream is OpenAI\'s: `event: <type>` and `data: {…, "sequence_number": n}` from 0, opening with response.created and response.in_progress ' +
      'and ending with exactly one of response.completed, response.incomplete or response.failed, each carrying the usage (with `cost`); no `[DONE]`. ' +
      'With `background: true` (which needs `store`) the answer is at once the Response with status `queued` while its job runs on the queue; ' +
      'GET /v1/responses/{id} follows it (queued, in_progress, then its end) and POST /v1/responses/{id}/cancel stops it. ' +
      'A field the service does not take is a 400 naming it; what maps to what is in docs/api.md.',
    tag: 'responses',
    auth: 'api_key',
    // The admission script confirms a cached key's version: no separate Redis read per request.
    deferKeyCheck: true,
    body: CreateResponseSchema,
    bodyLimitBytes: CHAT_BODY_LIMIT_BYTES,
    responses: {
      200: {
        description:
          'A Response (status completed, or incomplete at max_output_tokens; `queued` with `background: true`); with `stream: true`, server-sent events, each `event: <type>` and `data: <event JSON>`',
        schema: ResponseSchema,
        alsoAs: ['text/event-stream'],
      },
      400: {
        description:
          'A field the service does not take (unknown, or a feature it does not offer), named in `param`; `background: true` with `store: false` (`param: store`)',
      },
      403: {
        description: "The model needs the paid tier, or is outside the API key's allow-list (model_not_allowed)",
      },
      404: { description: 'Unknown model' },
      429: {
        description:
          'Refused by a rate limit, the daily token quota or the monthly spending limit, as for chat completions',
      },
      502: { description: 'The upstream model provider failed' },
      503: { description: 'No capacity (queue full, no worker, provider not configured); see Retry-After' },
    },
    handler: async (ctx, app) => {
      const request = ctx.state.body as CreateResponseRequest;
      const account = accountOf(ctx);
      let prior: PriorItems | undefined;
      if (request.previous_response_id != null) {
        prior = await priorItems(app, account.id, request.previous_response_id);
        if (!prior)
          throw new AppError('not_found', `Previous response with id '${request.previous_response_id}' not found.`, {
            param: 'previous_response_id',
          });
      }
      const { job, headers, refusal } = await admitResponse(app, {
        account,
        key: ctx.state.apiKey,
        request,
        unconfirmed: ctx.state.keyCheck,
        prior,
      });
      ctx.set(headers);
      if (refusal) throw refusal;
      if (job.wire?.background) return startBackground(ctx, app, job, request.stream === true);
      await sendCompletion(ctx, app, await app.dispatcher.dispatch(job), { asSse: job.stream, wire: 'responses' });
    },
  },
]);
