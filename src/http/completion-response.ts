import type { AppContext } from '../context.js';
import { lostRelay } from '../chat/stream/completion-errors.js';
import { silenceLimitMs, type CompletionStream } from '../chat/stream/completion-stream.js';
import { CHAT_ENDING, RESPONSES_ENDING } from '../chat/stream/sse.js';
import { SseResponse } from './sse-response.js';
import type { HttpContext } from './route.js';

/**
 * Sends a completion stream, live or resumed, as server-sent events or as one JSON body. A client
 * that goes away ends the stream ('client_left'); what that does to the request is the stream's
 * business. Headers go out with the first event, so a failure before any output (an upstream
 * outage after its retries, no worker) still gets its own status through the error mapper.
 */
export async function sendCompletion(
  ctx: HttpContext,
  app: AppContext,
  stream: CompletionStream,
  { asSse, wire = 'chat' }: { asSse: boolean; wire?: 'chat' | 'responses' },
): Promise<void> {
  // A client that left while the stream was being set up (a resumed one's reader lease taken) is
  // already gone: 'close' will not come again, and what the stream holds must still be released.
  if (ctx.res.destroyed) stream.end('client_left');
  else ctx.res.once('close', () => stream.end('client_left'));
  if (!asSse) return sendJson(ctx, stream);
  const ending = wire === 'responses' ? RESPONSES_ENDING : CHAT_ENDING;
  const sse = new SseResponse(ctx, { ...sseOptions(ctx, app, stream), ending });
  pipeToSse(ctx, app, stream, sse).catch((err: unknown) =>
    app.log.warn({ requestId: stream.requestId, err }, 'a completion stream could not be written'),
  );
  const outcome = await sse.first;
  if ('error' in outcome) throw outcome.error;
  if ('closed' in outcome) ctx.respond = false;
}

async function sendJson(ctx: HttpContext, stream: CompletionStream): Promise<void> {
  for await (const e of stream) {
    switch (e.kind) {
      case 'final':
        ctx.type = 'application/json';
        ctx.body = e.body;
        return;
      case 'error':
        throw e.error;
      case 'done':
        // A stream's end where a whole answer was due: the answer is not here.
        throw lostRelay();
    }
  }
  // The client left: there is nobody to answer.
  ctx.respond = false;
}

/**
 * A live stream cannot slow its worker down, so a client that stops reading is cut off rather
 * than have this process hold the rest of its answer; its first events are the client's time to
 * first token. A resumed one is read from its log page by page, as fast as its client takes it.
 */
function sseOptions(ctx: HttpContext, app: AppContext, stream: CompletionStream) {
  const base = { heartbeatMs: app.config.queue.heartbeatMs, maxBufferedBytes: app.config.queue.streamMaxBufferedBytes };
  const live = stream.live;
  if (!live) return base;
  return {
    ...base,
    // The close that follows ends the stream: its job is cancelled, which stops the upstream and
    // bills what was produced; a resumable one runs on for its grace period instead.
    onSlowReader: (buffered: number) =>
      app.log.info(
        { requestId: stream.requestId, traceId: ctx.state.traceId, buffered },
        'stream client stopped reading; ending the stream',
      ),
    onFirstEvents: () =>
      app.metrics.dispatch.clientTtft.observe(
        { model: live.model },
        (performance.now() - (ctx.state.arrivedAt ?? performance.now())) / 1000,
      ),
  };
}

async function pipeToSse(ctx: HttpContext, app: AppContext, stream: CompletionStream, sse: SseResponse): Promise<void> {
  const heartbeatMs = app.config.queue.heartbeatMs;
  const drainMs = silenceLimitMs(app.config);
  let firstTokenWait: NodeJS.Timeout | undefined;
  ctx.res.once('close', () => clearTimeout(firstTokenWait));
  for await (const e of stream) {
    clearTimeout(firstTokenWait);
    switch (e.kind) {
      case 'picked':
        // A slow first token: commit after one heartbeat interval and keep the connection alive.
        firstTokenWait = setTimeout(() => sse.heartbeat(), heartbeatMs);
        break;
      case 'caught_up':
        sse.commit();
        break;
      case 'events':
        sse.events(e.payload);
        // What was written is taken before more is read: a long replay goes out page by page (a
        // live stream's slow reader is cut off instead).
        if (!stream.live) await sse.drained(drainMs);
        break;
      case 'final':
        sse.end('');
        break;
      case 'done':
        sse.end(e.payload, e.lastEventId);
        break;
      case 'error':
        if (e.started) sse.commit();
        sse.fail(e.error, e.lastEventId, e.events);
        break;
    }
  }
}
