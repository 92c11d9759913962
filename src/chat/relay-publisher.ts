import type { ChainableCommander, Redis } from 'ioredis';
import { encodeRelay, type RelayError, type RelayKind } from './relay-protocol.js';

/** Progress of a request, kept in Redis so a re-run of a stalled job knows what the client already got. */
export interface Progress {
  /** Last sequence number published. */
  seq: number;
  /** Client-visible text was published (a re-run must not stream into the same connection again). */
  sent: boolean;
  /** Usage reported by the upstream, or counted so far. */
  promptTokens: number;
  completionTokens: number;
  /** The usage row was appended: nothing is left to record. */
  recorded: boolean;
}

export const PROGRESS_TTL_SECONDS = 86_400;
/** How stale the progress record may get while a stream runs (it is always exact before recording). */
const PROGRESS_EVERY_MS = 250;

export function parseProgress(h: Record<string, string>): Progress | undefined {
  if (!h || Object.keys(h).length === 0) return undefined;
  return {
    seq: Number(h.seq ?? -1),
    sent: h.sent === '1',
    promptTokens: Number(h.ptoks ?? 0),
    completionTokens: Number(h.ctoks ?? 0),
    recorded: h.recorded === '1',
  };
}

/**
 * A worker's first step with a job, in one round trip: claim its progress record (a record that
 * already exists means this is a re-run of a stalled job), read it, and announce `picked` (seq 0)
 * so the web tier's pickup timer stops. A live first run then publishes from seq 1.
 */
export async function claimJob(redis: Redis, progressKey: string, channel: string, workerId: string): Promise<{ firstRun: boolean; progress: Progress | undefined }> {
  const replies = await redis
    .multi()
    .hsetnx(progressKey, 'worker', workerId)
    .hgetall(progressKey)
    .publish(channel, encodeRelay(0, 'picked'))
    .expire(progressKey, PROGRESS_TTL_SECONDS)
    .exec();
  const [[claimErr, claimed], [readErr, record]] = replies as [[Error | null, number], [Error | null, Record<string, string>]];
  if (claimErr || readErr) throw claimErr ?? readErr;
  return { firstRun: claimed === 1, progress: claimed === 1 ? undefined : parseProgress(record) };
}

/**
 * The worker's end of the relay. SSE events are coalesced per event-loop turn into one message,
 * published together with the progress record in one pipeline (one round trip per flush, not per
 * token). A PUBLISH that reaches no subscriber means the web process is gone: `onGone` fires so the
 * worker can stop the upstream request.
 */
export class RelayPublisher {
  private seq: number;
  private pending: string[] = [];
  private scheduled = false;
  private last: Promise<unknown> = Promise.resolve();
  private sentText = false;
  private progressSentText = false;
  private lastProgressAt = 0;
  /** Counts the tokens produced so far; called only when the progress record is written. */
  tokensSoFar: () => { promptTokens: number; completionTokens: number } = () => ({ promptTokens: 0, completionTokens: 0 });

  constructor(
    private readonly redis: Redis,
    private readonly channel: string,
    private readonly progressKey: string,
    private readonly onGone: () => void,
    startSeq = 0,
  ) {
    this.seq = startSeq;
  }

  get hasSentText(): boolean {
    return this.sentText;
  }

  /** Queues one ready-to-write SSE event (`data: …\n\n`), flushed at the end of this turn. */
  sse(event: string, visibleText: boolean): void {
    this.pending.push(event);
    if (visibleText) this.sentText = true;
    if (!this.scheduled) {
      this.scheduled = true;
      setImmediate(() => void this.flush().catch(() => undefined));
    }
  }

  /**
   * Publishes what is pending now. The progress record rides along when the first visible text
   * goes out, every PROGRESS_EVERY_MS after, and whenever `exact` is asked (before recording).
   */
  flush(exact = false): Promise<unknown> {
    this.scheduled = false;
    const now = performance.now();
    const progress = exact || (this.sentText && !this.progressSentText) || now - this.lastProgressAt >= PROGRESS_EVERY_MS;
    if (this.pending.length === 0 && !progress) return this.last;
    const tx = this.redis.pipeline();
    let publishes = 0;
    if (this.pending.length > 0) {
      this.addPublish(tx, 'sse', this.pending.join(''));
      this.pending = [];
      publishes = 1;
    }
    if (progress) {
      this.lastProgressAt = now;
      this.progressSentText = this.sentText;
      this.addProgress(tx);
    }
    return this.track(tx.exec(), publishes);
  }

  /**
   * Publishes the last message(s) of the request together with `extra` commands (usage record,
   * quota settlement) in ONE atomic MULTI, after anything still pending. Resolves with the errors
   * of the `extra` commands (null where they succeeded), for the caller to act on.
   */
  async finish(kind: 'done' | 'final' | 'error', payload: string, extra: (tx: ChainableCommander) => void): Promise<(Error | null)[]> {
    const tx = this.redis.multi();
    let publishes = 1;
    if (this.pending.length > 0) {
      this.addPublish(tx, 'sse', this.pending.join(''));
      this.pending = [];
      publishes++;
    }
    this.addPublish(tx, kind, payload);
    extra(tx);
    tx.hset(this.progressKey, { recorded: '1' });
    const replies = await tx.exec();
    const own = (replies ?? []).slice(0, publishes);
    if (own.some(([err, n]) => err === null && n === 0)) this.onGone();
    return (replies ?? []).slice(publishes, -1).map(([err]) => err);
  }

  /** An error event for a stream, or the error reply for a plain request. */
  errorPayload(err: RelayError): string {
    return JSON.stringify(err);
  }

  private addPublish(tx: ChainableCommander, kind: RelayKind, payload: string): void {
    tx.publish(this.channel, encodeRelay(this.seq++, kind, payload));
  }

  private addProgress(tx: ChainableCommander): void {
    const t = this.tokensSoFar();
    tx.hset(this.progressKey, {
      seq: String(this.seq - 1),
      sent: this.sentText ? '1' : '0',
      ptoks: String(t.promptTokens),
      ctoks: String(t.completionTokens),
    });
  }

  /** The first failure to publish, if any: the client cannot be reached any more. */
  failure: unknown;

  /**
   * Every publish reply is checked for "no subscriber": the web process (and its client) is gone.
   * A failed publish means the same thing. Either way `onGone` stops the upstream request.
   */
  private track(p: Promise<[Error | null, unknown][] | null>, publishes: number): Promise<unknown> {
    const checked = p.then((replies) => {
      for (const [err, n] of (replies ?? []).slice(0, publishes)) if (err === null && n === 0) this.onGone();
      for (const [err] of replies ?? []) if (err) throw err;
    });
    this.last = checked.catch((err) => {
      this.failure ??= err;
      this.onGone();
    });
    return checked;
  }
}
