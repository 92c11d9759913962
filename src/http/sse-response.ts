import { once } from 'node:events';
import type { AppError } from '../errors.js';
import { CHAT_ENDING, HEARTBEAT, lastEventIdIn, type StreamEnding } from '../chat/stream/sse.js';
import type { Timers } from '../clock.js';
import { KeepAlive } from './keep-alive.js';
import type { HttpContext } from './route.js';

export interface SseResponseOptions {
  heartbeatMs: number;
  /** How far the client may fall behind (bytes written, not yet sent). */
  maxBufferedBytes: number;
  /**
   * Past maxBufferedBytes the stream is ended (a live relay cannot slow its worker down, so a
   * client that stops reading would make this process hold the rest of its answer); this is told
   * first. Without it, the writer waits for the client instead (drained()).
   */
  onSlowReader?: (buffered: number) => void;
  /** Told once, as the first events of the answer are written (the time to first token the client sees). */
  onFirstEvents?: () => void;
  /** What the web tier writes at the end, per wire format (chat's [DONE] by default). */
  ending?: StreamEnding;
  /** Tests move time by hand. */
  timers?: Timers;
}

export type FirstOutcome = { committed: true } | { error: AppError } | { closed: true };

/**
 * One server-sent-events response, the same for a new stream and a resumed one. Headers go out
 * with the first event (or the first heartbeat), so a failure before any output still gets a real
 * status; after that a failure is an error event and [DONE]. An idle stream carries a comment
 * every heartbeatMs. The events the web tier adds are numbered after the last one written.
 */
export class SseResponse {
  private committed = false;
  private finished = false;
  private eventsWritten = false;
  private keepAlive: KeepAlive | undefined;
  /** The last run of events written, read only when an event is numbered here (the end). */
  private lastEvents = '';
  private knownEventId = 0;
  private settleFirst!: (v: FirstOutcome) => void;
  /** Settles when the stream starts, fails before it starts, or its client leaves first. */
  readonly first = new Promise<FirstOutcome>((r) => (this.settleFirst = r));

  constructor(
    private readonly ctx: HttpContext,
    private readonly opts: SseResponseOptions,
  ) {
    ctx.res.once('close', () => {
      this.keepAlive?.stop();
      this.settleFirst({ closed: true });
    });
  }

  get isCommitted(): boolean {
    return this.committed;
  }

  commit(): void {
    if (this.committed) return;
    this.committed = true;
    const { ctx } = this;
    // From here on Koa leaves the response to us; its status is kept for metrics and logs.
    ctx.respond = false;
    ctx.status = 200;
    // No Connection header of our own: Node keeps the connection alive, or closes it after the
    // stream when the client asked for Connection: close.
    ctx.res.writeHead(200, {
      'Content-Type': 'text/event-stream; charset=utf-8',
      'Cache-Control': 'no-cache',
      'X-Accel-Buffering': 'no',
    });
    this.keepAlive = new KeepAlive(this.opts.heartbeatMs, () => this.write(HEARTBEAT), this.opts.timers);
    this.settleFirst({ committed: true });
  }

  /** Starts the stream if need be and keeps it alive (a slow first token). */
  heartbeat(): void {
    this.commit();
    this.write(HEARTBEAT);
  }

  /** Numbered events, ready to write. */
  events(payload: string): void {
    this.commit();
    this.firstEvents();
    this.lastEvents = payload;
    this.write(payload);
  }

  /** The end: the last events (may be ''), then [DONE]. `lastEventId`: the stream's last event number, when the caller knows it. */
  end(payload: string, lastEventId = 0): void {
    this.commit();
    if (payload !== '') {
      this.firstEvents();
      this.lastEvents = payload;
    }
    this.knownEventId = Math.max(this.knownEventId, lastEventId);
    this.finish(payload + this.ending.end(this.nextEventId()));
  }

  /**
   * A failure: the error as the response, or, once the stream has started, an error event and
   * [DONE] (chat); `events`, when the worker framed the end itself, take the error event's place.
   */
  fail(err: AppError, lastEventId = 0, events?: string): void {
    if (!this.committed) return this.settleFirst({ error: err });
    this.knownEventId = Math.max(this.knownEventId, lastEventId);
    if (events !== undefined) {
      this.lastEvents = events;
      return this.finish(events + this.ending.end(this.nextEventId()));
    }
    this.finish(this.ending.error(this.nextEventId(), err));
  }

  private get ending(): StreamEnding {
    return this.opts.ending ?? CHAT_ENDING;
  }

  /**
   * Resolves once the client has taken what was written (at most maxBufferedBytes left), or has
   * gone; a client that takes nothing for `timeoutMs` is cut off.
   */
  async drained(timeoutMs: number): Promise<void> {
    const res = this.ctx.res;
    if (res.writableLength <= this.opts.maxBufferedBytes || res.destroyed) return;
    const timeout = AbortSignal.timeout(timeoutMs);
    try {
      await Promise.race([once(res, 'drain', { signal: timeout }), once(res, 'close', { signal: timeout })]);
    } catch {
      res.destroy();
    }
  }

  private firstEvents(): void {
    if (this.eventsWritten) return;
    this.eventsWritten = true;
    this.opts.onFirstEvents?.();
  }

  private nextEventId(): number {
    return Math.max(this.knownEventId, lastEventIdIn(this.lastEvents) ?? 0) + 1;
  }

  private write(s: string): void {
    const res = this.ctx.res;
    this.keepAlive?.wrote();
    res.write(s);
    if (this.opts.onSlowReader && res.writableLength > this.opts.maxBufferedBytes) {
      this.opts.onSlowReader(res.writableLength);
      res.destroy();
    }
  }

  private finish(tail: string): void {
    if (this.finished) return;
    this.finished = true;
    this.keepAlive?.stop();
    this.ctx.res.end(tail);
  }
}
