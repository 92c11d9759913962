import type { Config } from '../../config.js';
import type { AppError } from '../../errors.js';
import { dependencyDown } from '../../infra/outage.js';
import { lostRelay } from './completion-errors.js';

// A completion as its reader sees it, whether it is followed live from its worker or resumed
// from its relay log: one stream of events, in order, with a state and one end(). The edge pipes
// any of them to SSE or a JSON body; what each source holds (a queued job, a relay handler, a
// counted reader) is released by its owner when the stream ends, whichever side ended it.

export type CompletionEvent =
  /** A worker has the request; its first token may be slow to come (a live stream). */
  | { kind: 'picked' }
  /** Everything the relay log held is out; what follows comes as the worker writes it (a resumed stream). */
  | { kind: 'caught_up' }
  /** Numbered SSE events, ready to write. */
  | { kind: 'events'; payload: string }
  /** The whole answer of a request that does not stream, as its JSON body. */
  | { kind: 'final'; body: string }
  /** The stream completed: its last events (the usage chunk; may be ''), then [DONE]. lastEventId: 0 when unknown. */
  | { kind: 'done'; payload: string; lastEventId: number }
  /**
   * The stream ended without a whole answer. `started`: it had carried events (its headers were
   * sent). `events`: the worker's own framing of the end, written instead of an error event.
   */
  | { kind: 'error'; error: AppError; lastEventId: number; started: boolean; events?: string };

/** How a live stream ends in an error (its event ids are the worker's, not known here: 0). */
export const failedEvent = (error: AppError, started: boolean, events?: string): CompletionEvent => ({
  kind: 'error',
  error,
  lastEventId: 0,
  started,
  ...(events === undefined ? {} : { events }),
});

/** Queued: waiting for a worker. Running: a worker has it, or its log is being read. Ended: see EndReason. */
export type StreamState = 'queued' | 'running' | 'ended';

export type EndReason =
  /** The worker finished the answer. */
  | 'completed'
  /** The worker reported a failure. */
  | 'failed'
  /** No worker took the job in time; it was withdrawn. */
  | 'no_worker'
  /** Nothing came for the silence limit (silenceLimitMs); the client is answered `worker_timeout`. */
  | 'silence'
  /** A relay message was lost and could not be read from the log. */
  | 'relay_gap'
  /** Redis could not be read. */
  | 'redis_down'
  /** The reader went away first. */
  | 'client_left';

/** How a stream ended: why, and the last event its reader is told. */
export interface StreamEnd {
  reason: EndReason;
  last: CompletionEvent;
}

/**
 * A completion read from its relay log (relay/follower.ts): its events, in order, then how it
 * ended; undefined when it stopped because its reader went away.
 */
export type LogRead = AsyncGenerator<CompletionEvent, StreamEnd | undefined>;

/** Whoever feeds a stream. */
export interface StreamOwner {
  /** Told once, when reading begins: a source that reads on demand starts then, not for a reader already gone. */
  reading?(): void;
  /** Told once, as the stream ends, to release what it holds for it. */
  ended(reason: EndReason, was: StreamState, last: CompletionEvent | undefined): void;
}

/** How long a running request may send nothing before its worker is taken for dead (one owner for the live and the resumed stream). */
export const silenceLimitMs = (config: Pick<Config, 'providers'>): number => config.providers.requestTimeoutMs + 10_000;

const noop = (): void => undefined;

export class CompletionStream implements AsyncIterable<CompletionEvent> {
  private current: StreamState;
  private reason: EndReason | undefined;
  /** Events not read yet, each with what its source waits on (see push). */
  private readonly unread: { event: CompletionEvent; taken: () => void }[] = [];
  private wake: (() => void) | undefined;
  private iterated = false;

  constructor(
    readonly requestId: string,
    /** Set for a stream followed live from its worker: it cannot be slowed down, and its first events are the client's time to first token. */
    readonly live: { model: string } | undefined,
    private readonly owner: StreamOwner,
    initial: StreamState = 'queued',
  ) {
    this.current = initial;
  }

  /**
   * A stream read from a relay log, already running: `read` starts when reading begins, and its
   * signal aborts when the stream ends. `owner` is told of the end, as any stream's owner.
   */
  static fromLog(
    requestId: string,
    read: (signal: AbortSignal) => LogRead,
    owner: Pick<StreamOwner, 'ended'>,
    log: { warn(obj: object, msg: string): void },
  ): CompletionStream {
    const gone = new AbortController();
    const stream: CompletionStream = new CompletionStream(
      requestId,
      undefined,
      {
        reading: () => void stream.feedFrom(read(gone.signal), log),
        ended(reason, was, last) {
          gone.abort();
          owner.ended(reason, was, last);
        },
      },
      'running',
    );
    return stream;
  }

  get state(): StreamState {
    return this.current;
  }

  /** Why the stream ended; undefined while it has not. */
  get endReason(): EndReason | undefined {
    return this.reason;
  }

  /**
   * The source's next event. `taken` is called once the reader has dealt with it and asks for the
   * next one (or the stream ended): a source that can wait for its reader (a log being replayed) does.
   */
  push(event: CompletionEvent, taken: () => void = noop): void {
    if (this.current === 'ended') return taken();
    this.current = 'running';
    this.unread.push({ event, taken });
    this.wake?.();
  }

  /**
   * Ends the stream, once: by its source with the last event the reader is told (read after those
   * before it), or by its reader ('client_left'), which drops whatever it had not read.
   */
  end(reason: EndReason = 'client_left', last?: CompletionEvent): void {
    if (this.current === 'ended') return;
    const was = this.current;
    this.current = 'ended';
    this.reason = reason;
    if (reason === 'client_left') for (const { taken } of this.unread.splice(0)) taken();
    if (last) this.unread.push({ event: last, taken: noop });
    this.wake?.();
    this.owner.ended(reason, was, last);
  }

  /** A log's events into the stream, each once the reader has taken the one before, then its end. */
  private async feedFrom(read: LogRead, log: { warn(obj: object, msg: string): void }): Promise<void> {
    // Once the reader has been sent anything, a failure can only be told as an error event.
    let shown = false;
    try {
      for (;;) {
        const next = await read.next();
        if (this.current === 'ended') return void (await read.return(undefined));
        if (next.done) {
          if (next.value) this.end(next.value.reason, next.value.last);
          return;
        }
        await new Promise<void>((taken) => this.push(next.value, taken));
        shown = true;
      }
    } catch (err) {
      if (this.current === 'ended') return;
      log.warn({ requestId: this.requestId, err }, 'a resumed stream could not read its relay log');
      this.end('redis_down', {
        kind: 'error',
        error: shown ? lostRelay() : dependencyDown(err),
        lastEventId: 0,
        started: false,
      });
    }
  }

  /** Read once; a reader that stops reading before the end ends the stream ('client_left'). */
  async *[Symbol.asyncIterator](): AsyncGenerator<CompletionEvent> {
    if (this.iterated) throw new Error('A completion stream is read once');
    this.iterated = true;
    this.owner.reading?.();
    let previous: () => void = noop;
    try {
      for (;;) {
        previous();
        previous = noop;
        const next = this.unread.shift();
        if (next) {
          previous = next.taken;
          yield next.event;
          continue;
        }
        if (this.current === 'ended') return;
        await new Promise<void>((resolve) => (this.wake = resolve));
        this.wake = undefined;
      }
    } finally {
      previous();
      this.end('client_left');
    }
  }
}
