import type { Config } from '../../config.js';
import type { RedisClient } from '../../infra/redis.js';
import { parseLogRows, type LogEntry, type LogRows } from './log.js';
import { entryIdAfter, type RelayLogTails } from './log-tail.js';
import type { RelayError } from './protocol.js';
import { eventsAfter, lastEventIdIn } from '../stream/sse.js';
import { realTimers, type Timers } from '../../clock.js';
import { silenceLimitMs } from '../stream/completion-stream.js';

// A resumed stream reads its request's relay log: first what it holds (the replay), then each
// entry as the worker appends it (the live tail, shared by the readers of the request on this
// process: relay/log-tail.ts), to the end. The log is the one record of what the stream carried,
// in order and numbered, so replay and tail neither miss nor repeat an event: the reader joins the
// tail where its replay ended, reads once more what the log gained meanwhile (a tail already
// running may be ahead of it), then takes from the tail only entries past the last it has; and
// events are picked by their sequence number. Following the log rather than a web process's
// channel lets any web process serve the stream, whichever holds (or held) the original
// connection, and a detached request's worker publishes to its log alone.

export type FollowEvent =
  /** Events after the reader's last one, ready to write. */
  | { kind: 'sse'; payload: string }
  /** Everything the log held is out; from here on events are followed as the worker writes them. */
  | { kind: 'live' }
  /** The stream completed: its last events after the reader's (the usage chunk), then [DONE]. */
  | { kind: 'done'; payload: string; lastEventId: number }
  /** The stream ended with an error; `started`: it had carried events before (its headers were sent). */
  | { kind: 'error'; error: RelayError; lastEventId: number; started: boolean }
  /** Nothing came for the silence limit (its worker died and nobody took over). */
  | { kind: 'silence'; lastEventId: number };

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

/**
 * The events of a request's stream after event `afterEventId`, from its relay log, to its end.
 * Stops (returns) when `signal` aborts: the reader went away.
 */
export async function* followRelayLog(
  deps: FollowDeps,
  logKey: string,
  afterEventId: number,
  signal: AbortSignal,
): AsyncGenerator<FollowEvent> {
  let lastEventId = 0;
  let started = false;
  let readThrough: string | undefined;

  /** The page's events as one write, and the end if the page holds it. */
  const take = (entries: (LogEntry & { entryId: string })[]): FollowEvent[] => {
    const out: FollowEvent[] = [];
    let events = '';
    const flush = () => {
      if (events !== '') out.push({ kind: 'sse', payload: events });
      events = '';
    };
    for (const e of entries) {
      readThrough = e.entryId;
      if (e.kind === 'sse') {
        started = true;
        lastEventId = lastEventIdIn(e.payload) ?? lastEventId;
        events += eventsAfter(e.payload, afterEventId);
      } else if (e.kind === 'done' || e.kind === 'final') {
        lastEventId = lastEventIdIn(e.payload) ?? lastEventId;
        flush();
        out.push({ kind: 'done', payload: e.kind === 'done' ? eventsAfter(e.payload, afterEventId) : '', lastEventId });
        return out;
      } else if (e.kind === 'error') {
        flush();
        let error: RelayError;
        try {
          error = JSON.parse(e.payload) as RelayError;
        } catch {
          error = UNREADABLE;
        }
        out.push({ kind: 'error', error, lastEventId, started });
        return out;
      }
    }
    flush();
    return out;
  };
  const ends = (events: FollowEvent[]) => events.some((e) => e.kind !== 'sse' && e.kind !== 'live');

  /** Reads the log from past the last entry taken to its current end, in pages; true once the stream ended. */
  async function* readOn(): AsyncGenerator<FollowEvent, boolean> {
    for (;;) {
      const rows = (await deps.redis.xrange(
        logKey,
        readThrough === undefined ? '-' : after(readThrough),
        '+',
        'COUNT',
        PAGE,
      )) as LogRows;
      const events = take(parseLogRows(rows));
      for (const e of events) yield e;
      if (ends(events)) return true;
      if (rows.length < PAGE || signal.aborted) return false;
    }
  }

  if (yield* readOn()) return;
  if (signal.aborted) return;
  yield { kind: 'live' };

  const arrived: LogRows[] = [];
  let wake: (() => void) | undefined;
  const unfollow = deps.tails.follow(logKey, readThrough ?? '0-0', (rows) => {
    arrived.push(rows);
    wake?.();
  });
  const onAbort = () => wake?.();
  signal.addEventListener('abort', onAbort, { once: true });
  try {
    // What the log gained between the replay and joining the tail.
    if (yield* readOn()) return;
    const timers = deps.timers ?? realTimers;
    const silenceMs = silenceLimitMs(deps.config);
    let tooSilentAt = timers.now() + silenceMs;
    while (!signal.aborted) {
      const rows = arrived.shift();
      if (rows) {
        const fresh = parseLogRows(rows).filter(
          (e) => readThrough === undefined || entryIdAfter(e.entryId, readThrough),
        );
        if (fresh.length === 0) continue;
        tooSilentAt = timers.now() + silenceMs;
        const events = take(fresh);
        for (const e of events) yield e;
        if (ends(events)) return;
        continue;
      }
      const left = tooSilentAt - timers.now();
      if (left <= 0) {
        yield { kind: 'silence', lastEventId };
        return;
      }
      let timer: unknown;
      await new Promise<void>((resolve) => {
        wake = resolve;
        timer = timers.setTimeout(resolve, left);
      });
      timers.clearTimeout(timer);
      wake = undefined;
    }
  } finally {
    signal.removeEventListener('abort', onAbort);
    unfollow();
  }
}
