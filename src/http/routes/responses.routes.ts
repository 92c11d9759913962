import { CHAT_BODY_LIMIT_BYTES } from '../../chat/chat.schema.js';
import { admitResponse } from '../../chat/responses-admission.js';
import { CreateResponseSchema, ResponseSchema, type CreateResponseRequest } from '../../chat/responses.schema.js';
import type { PriorItems } from '../../chat/responses-request.js';
import { AppError } from '../../errors.js';
import { priorItems } from '../../responses/stored-responses.service.js';
import { sendCompletion } from '../completion-response.js';
import { accountOf, defineRoutes, type RouteSpec } from '../route.js';

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
          'A Response (status completed, or incomplete at max_output_tokens); with `stream: true`, server-sent events, each `event: <type>` and `data: <event JSON>`',
        schema: ResponseSchema,
        alsoAs: ['text/event-stream'],
      },
      400: {
        description: 'A field the service does not take (unknown, or a feature it does not offer), named in `param`',
      },
      403: { description: 'The model needs the paid tier' },
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
        request,
        unconfirmed: ctx.state.keyCheck,
        prior,
      });
      ctx.set(headers);
      if (refusal) throw refusal;
      await sendCompletion(ctx, app, await app.dispatcher.dispatch(job), { asSse: job.stream, wire: 'responses' });
    },
  },
]);
