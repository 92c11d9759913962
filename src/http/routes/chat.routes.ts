import type { AppContext } from '../../context.js';
import { AppError } from '../../errors.js';
import {
  CHAT_BODY_LIMIT_BYTES,
  ChatCompletionRequestSchema,
  ChatCompletionSchema,
  type ChatCompletionRequest,
} from '../../chat/chat.schema.js';
import { prepareCompletion, spendCheckOf } from '../../chat/chat.service.js';
import { alertSpendLimitReached } from '../../billing/spend-alerts.service.js';
import type { PreparedJob } from '../../chat/completion-job.js';
import type { Dispatch, DispatchEvent } from '../../chat/dispatch.service.js';
import { SseResponse } from '../sse-response.js';
import { lostRelay, relayFailure, stalled } from './chat-errors.js';
import { admissionError, GuardChanged, type Admission } from '../../limits/limiter.service.js';
import type { Account } from '../../accounts/accounts.repository.js';
import { accountOf, defineRoutes, type HttpContext, type RouteSpec } from '../route.js';
import { traceAdmission } from '../../chat/completion-tracing.js';

async function plainCompletion(ctx: HttpContext, app: AppContext, job: PreparedJob): Promise<void> {
  let settle!: (e: DispatchEvent) => void;
  const outcome = new Promise<DispatchEvent>((r) => (settle = r));
  const d = await app.dispatcher.dispatch(job, (e) => {
    if (e.kind !== 'picked' && e.kind !== 'sse') settle(e);
  });
  watchDisconnect(ctx, d, false);
  await d.pickedUp;
  const e = await outcome;
  if (e.kind === 'final') {
    ctx.type = 'application/json';
    ctx.body = e.payload;
    return;
  }
  throw e.kind === 'error' ? relayFailure(e.error) : e.kind === 'idle' ? stalled() : lostRelay();
}

/**
 * Headers are sent with the first chunk, so a failure before any output (an upstream outage after
 * its retries) still gets a proper status. If nothing arrives for a heartbeat interval, the stream
 * is committed and kept alive with SSE comments.
 */
async function streamCompletion(ctx: HttpContext, app: AppContext, job: PreparedJob): Promise<void> {
  const heartbeatMs = app.config.queue.heartbeatMs;
  const sse = new SseResponse(ctx, {
    heartbeatMs,
    maxBufferedBytes: app.config.queue.streamMaxBufferedBytes,
    // The close cancels the job (watchDisconnect), which stops the upstream and bills what was
    // produced; a resumable one runs on for its grace period instead.
    onSlowReader: (buffered) =>
      app.log.info(
        { requestId: job.id, traceId: ctx.state.traceId, buffered },
        'stream client stopped reading; ending the stream',
      ),
  });
  let waitTimer: NodeJS.Timeout | undefined;
  const d = await app.dispatcher.dispatch(job, (e) => {
    clearTimeout(waitTimer);
    switch (e.kind) {
      case 'picked':
        // A slow first token: commit after one heartbeat interval and keep the connection alive.
        waitTimer = setTimeout(() => sse.heartbeat(), heartbeatMs);
        return;
      case 'sse':
        return sse.events(e.payload);
      case 'done':
        return sse.end(e.payload);
      case 'final':
        return sse.end('');
      case 'error':
        return sse.fail(relayFailure(e.error));
      case 'idle':
        return sse.fail(stalled());
      case 'gap':
        return sse.fail(lostRelay());
    }
  });
  ctx.res.once('close', () => clearTimeout(waitTimer));
  watchDisconnect(ctx, d, job.resumable);
  await d.pickedUp;
  const outcome = await sse.first;
  if ('error' in outcome) {
    clearTimeout(waitTimer);
    throw outcome.error;
  }
  if ('closed' in outcome) ctx.respond = false;
}

/**
 * A client that goes away mid-request cancels the job: withdrawn if queued, aborted if running.
 * A resumable stream's job runs on instead, for the grace period in which it may be resumed.
 */
function watchDisconnect(ctx: HttpContext, d: Dispatch, resumable: boolean): void {
  ctx.res.once('close', () => {
    if (ctx.res.writableFinished) d.close();
    else if (resumable) d.detach();
    else d.cancel();
  });
}

/**
 * The request as a queued-to-be job, admitted or refused by the rate limits. An account from this
 * process's cache is unconfirmed (ctx.state.keyCheck): the admission script confirms it, and a
 * model refused on its tier waits for a fresh read (the account may have just left that tier).
 * A changed account is read afresh and the request decided again.
 */
async function prepareAndAdmit(
  ctx: HttpContext,
  app: AppContext,
): Promise<{ job: PreparedJob; admission: Admission; account: Account }> {
  const req = ctx.state.body as ChatCompletionRequest;
  const prepare = (account: Account) => prepareCompletion(app, account, req, app.relayHub.instance);
  const admitFor = (account: Account, job: PreparedJob, guard?: { key: string; value: string | null }) =>
    traceAdmission(job, () =>
      app.limiter.admit({
        accountId: account.id,
        tier: account.tier,
        requestId: job.id,
        reserveTokens: job.reservedTokens,
        guard,
        spend: spendCheckOf(account, job),
      }),
    );
  let check = ctx.state.keyCheck;
  const confirmed = async () => {
    check = undefined;
    return ctx.state.keyCheck!.refresh();
  };
  let account = accountOf(ctx);
  let job: PreparedJob;
  try {
    job = prepare(account);
  } catch (err) {
    // Of prepare's refusals only the 403 (a model the tier may not use) depends on the account.
    if (!check || !(err instanceof AppError && err.status === 403)) throw err;
    account = await confirmed();
    job = prepare(account);
  }
  app.dispatcher.assertRoom();
  try {
    return {
      job,
      admission: await admitFor(account, job, check && { key: check.versionKey, value: check.version }),
      account,
    };
  } catch (err) {
    if (!(err instanceof GuardChanged) || !check) throw err;
    account = await confirmed();
    job = prepare(account);
    return { job, admission: await admitFor(account, job), account };
  }
}

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
      403: { description: 'The model needs the paid tier' },
      404: { description: 'Unknown model' },
      429: {
        description:
          'Refused by a rate limit (`rate_limit_exceeded`, with Retry-After when a short wait helps), the daily token quota, or the monthly spending limit ' +
          '(`insufficient_quota` with `x-should-retry: false`: the request may cost more than what is left of the limit this month)',
      },
      502: { description: 'The upstream model provider failed' },
      503: { description: 'No capacity (queue full, no worker, provider not configured); see Retry-After' },
    },
    handler: async (ctx, app) => {
      const { job, admission, account } = await prepareAndAdmit(ctx, app);
      ctx.set(admission.headers);
      if (!admission.allowed) {
        if (admission.spend) await alertSpendLimitReached(app, account, admission.spend);
        throw admissionError(admission);
      }
      await (job.stream ? streamCompletion(ctx, app, job) : plainCompletion(ctx, app, job));
    },
  },
]);
