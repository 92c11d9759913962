import type { Config } from '../../config.js';
import type { RedisClient } from '../../infra/redis.js';
import { parseLogRows, type LogEntry, type LogRows } from './log.js';
import { entryIdAfter, type RelayLogTails } from './log-tail.js';
import type { RelayError } from './protocol.js';
import { eventsAfter, lastEventIdIn } from '../stream/sse.js';
import { realTimers, type Timers } from '../../clock.js';
import { relayFailure, silenceError } from '../stream/completion-errors.js';
import { silenceLimitMs, type CompletionEvent, type LogRead, type StreamEnd } from '../stream/completion-stream.js';

// A resumed stream reads its request's relay log: first what it holds (the replay), then each
// entry as the worker appends it (the live tail, shared by the readers of the request on this
// process: relay/log-tail.ts), to the end. The log is the one record of what the stream carried,
// in order and numbered, so replay and tail neither miss nor repeat an event: the reader joins the
// tail where its replay ended, reads once more what the log gained meanwhile (a tail already
// running may be ahead of it), then takes from the tail only entries past the last it has; and
// events are picked by their sequence number. Following the log rather than a web process's
// channel lets any web process serve the stream, whichever holds (or held) the original
// connection, and a detached request's worker publishes to its log alone.

export interface FollowDeps {
  /** The process's command connection: the replay. */
  redis: RedisClient;
  /** The process's live tails of relay logs. */
  tails: RelayLogTails;
  config: Pick<Config, 'providers'>;
  /** Tests move time by hand (the silence timeout). */
  timers?: Timers;
}

/** Entries read per command: a long answer replays in pages, its reader taking each before the next. */
const PAGE = 500;

const UNREADABLE: RelayError = {
  status: 502,
  error: {
    message: 'Part of the response was lost between the worker and this server; please retry.',
    type: 'upstream_error',
    code: 'relay_interrupted',
    param: null,
  },
};

/** The stream entry id right after `id`, for a range that starts past it. */
const after = (id: string): string => {
  const dash = id.indexOf('-');
  return `${id.slice(0, dash)}-${Number(id.slice(dash + 1)) + 1}`;
};

/** What a reader has taken from the log, and what the entries it takes mean for its stream. */
class LogPosition {
  /** The last entry taken; undefined before the first. */
  readThrough: string | undefined;
  lastEventId = 0;
  /** Whether the stream had carried events (its headers were sent), the reader's or not. */
  private started = false;

  constructor(private readonly afterEventId: number) {}

  /** Whether an entry (from a tail that may be behind) is past the last taken. */
  isNew(entryId: string): boolean {
    return this.readThrough === undefined || entryIdAfter(entryId, this.readThrough);
  }

  /** The entries' events past the reader's last, as one write, and the stream's end if they hold it. */
  take(entries: (LogEntry & { entryId: string })[]): { events: CompletionEvent[]; end?: StreamEnd } {
    let payload = '';
    const out = (end?: StreamEnd) => ({
      events: payload === '' ? [] : [{ kind: 'events', payload } as const],
      ...(end ? { end } : {}),
    });
    for (const e of entries) {
      this.readThrough = e.entryId;
      if (e.kind === 'sse') {
        this.started = true;
        this.lastEventId = lastEventIdIn(e.payload) ?? this.lastEventId;
        payload += eventsAfter(e.payload, this.afterEventId);
      } else if (e.kind === 'done' || e.kind === 'final') {
        this.lastEventId = lastEventIdIn(e.payload) ?? this.lastEventId;
        const last = e.kind === 'done' ? eventsAfter(e.payload, this.afterEventId) : '';
        return out({ reason: 'completed', last: { kind: 'done', payload: last, lastEventId: this.lastEventId } });
      } else if (e.kind === 'error') {
        return out({ reason: 'failed', last: this.failed(e.payload) });
      }
    }
    return out();
  }

  /**
   * The worker's failure. A stream that had started ends with the error event, as it did; one
   * that failed before its first event answered with the error's status, and so does this.
   */
  private failed(payload: string): CompletionEvent {
    let error: RelayError;
    try {
      error = JSON.parse(payload) as RelayError;
    } catch {
      error = UNREADABLE;
    }
    return { kind: 'error', error: relayFailure(error), lastEventId: this.lastEventId, started: this.started };
  }

  /** Nothing came for longer than a worker can stay silent (its worker died and nobody took over). */
  silenceEnd(): StreamEnd {
    return {
      reason: 'silence',
      last: { kind: 'error', error: silenceError(), lastEventId: this.lastEventId, started: false },
    };
  }
}

/**
 * The events of a request's stream after event `afterEventId`, from its relay log: what the log
 * holds, then 'caught_up', then what its worker appends; returns how the stream ended, or
 * undefined when `signal` aborts (the reader went away).
 */
export async function* followRelayLog(
  deps: FollowDeps,
  logKey: string,
  afterEventId: number,
  signal: AbortSignal,
): LogRead {
  const at = new LogPosition(afterEventId);
  const replayed = yield* readOn(deps.redis, logKey, at, signal);
  if (replayed || signal.aborted) return replayed;
  yield { kind: 'caught_up' };
  return yield* followTail(deps, logKey, at, signal);
}

/** Reads the log from past the last entry taken to its current end, in pages; returns the stream's end if it came. */
async function* readOn(
  redis: RedisClient,
  logKey: string,
  at: LogPosition,
  signal: AbortSignal,
): AsyncGenerator<CompletionEvent, StreamEnd | undefined> {
  for (;;) {
    const from = at.readThrough === undefined ? '-' : after(at.readThrough);
    const rows = (await redis.xrange(logKey, from, '+', 'COUNT', PAGE)) as LogRows;
    const { events, end } = at.take(parseLogRows(rows));
    for (const e of events) yield e;
    if (end) return end;
    if (rows.length < PAGE || signal.aborted) return undefined;
  }
}

/** What the worker appends once the replay is out, from the log's live tail, to the end or a silence too long. */
async function* followTail(
  deps: FollowDeps,
  logKey: string,
  at: LogPosition,
  signal: AbortSignal,
): AsyncGenerator<CompletionEvent, StreamEnd | undefined> {
  const inbox = new TailInbox(deps.tails, logKey, at.readThrough ?? '0-0', signal);
  try {
    // What the log gained between the replay and joining the tail.
    const gained = yield* readOn(deps.redis, logKey, at, signal);
    if (gained) return gained;
    const timers = deps.timers ?? realTimers;
    const silenceMs = silenceLimitMs(deps.config);
    let tooSilentAt = timers.now() + silenceMs;
    while (!signal.aborted) {
      const rows = inbox.shift();
      if (rows) {
        const fresh = parseLogRows(rows).filter((e) => at.isNew(e.entryId));
        if (fresh.length === 0) continue;
        tooSilentAt = timers.now() + silenceMs;
        const { events, end } = at.take(fresh);
        for (const e of events) yield e;
        if (end) return end;
        continue;
      }
      const left = tooSilentAt - timers.now();
      if (left <= 0) return at.silenceEnd();
      await inbox.wait(timers, left);
    }
    return undefined;
  } finally {
    inbox.close();
  }
}

/** The rows a live tail hands one reader, kept until it takes them. */
class TailInbox {
  private readonly arrived: LogRows[] = [];
  private wake: (() => void) | undefined;
  private readonly unfollow: () => void;
  private readonly onAbort = () => this.wake?.();

  constructor(
    tails: RelayLogTails,
    logKey: string,
    from: string,
    private readonly signal: AbortSignal,
  ) {
    this.unfollow = tails.follow(logKey, from, (rows) => {
      this.arrived.push(rows);
      this.wake?.();
    });
    signal.addEventListener('abort', this.onAbort, { once: true });
  }

  shift(): LogRows | undefined {
    return this.arrived.shift();
  }

  /** Until rows arrive, the reader leaves or `ms` have passed. */
  async wait(timers: Timers, ms: number): Promise<void> {
    let timer: unknown;
    await new Promise<void>((resolve) => {
      this.wake = resolve;
      timer = timers.setTimeout(resolve, ms);
    });
    timers.clearTimeout(timer);
    this.wake = undefined;
  }

  close(): void {
    this.signal.removeEventListener('abort', this.onAbort);
    this.unfollow();
  }
}
