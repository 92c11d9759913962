import type { ChainableCommander, Redis } from 'ioredis';
import { encodeRelay, type RelayKind } from './relay-protocol.js';

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

type Replies = [Error | null, unknown][];

/**
 * Publishing for every request of a worker process, one pipeline per event-loop turn. Each
 * pipeline is one socket write; writing one per token per stream cost a worker about a sixth of
 * its CPU in system calls. With the streams of a turn batched together, a busy worker writes once
 * per turn whatever the number of streams.
 */
export class RelayBatch {
  private dirty: RelayPublisher[] = [];
  private scheduled = false;

  constructor(readonly redis: Redis) {}

  add(publisher: RelayPublisher): void {
    this.dirty.push(publisher);
    if (!this.scheduled) {
      this.scheduled = true;
      setImmediate(() => this.flush());
    }
  }

  private flush(): void {
    this.scheduled = false;
    const publishers = this.dirty;
    this.dirty = [];
    const tx = this.redis.pipeline();
    const spans: { publisher: RelayPublisher; start: number; count: number; publishes: number }[] = [];
    let commands = 0;
    for (const publisher of publishers) {
      const added = publisher.appendFlush(tx, false);
      if (added.count === 0) continue;
      spans.push({ publisher, start: commands, ...added });
      commands += added.count;
    }
    if (commands === 0) return;
    tx.exec().then(
      (replies) => {
        for (const sp of spans) sp.publisher.checkReplies((replies ?? []).slice(sp.start, sp.start + sp.count), sp.publishes);
      },
      (err) => {
        for (const sp of spans) sp.publisher.fail(err);
      },
    );
  }
}

/**
 * The worker's end of one request's relay. SSE events are coalesced per event-loop turn into one
 * message and published through the process's RelayBatch; the progress record rides along now and
 * then. A PUBLISH that reaches no subscriber means the web process is gone: `onGone` fires so the
 * worker can stop the upstream request.
 */
export class RelayPublisher {
  private seq: number;
  private pending: string[] = [];
  private queued = false;
  private sentText = false;
  private progressSentText = false;
  private lastProgressAt = 0;
  /** Counts the tokens produced so far; called only when the progress record is written. */
  tokensSoFar: () => { promptTokens: number; completionTokens: number } = () => ({ promptTokens: 0, completionTokens: 0 });
  /** The first failure to publish, if any: the client cannot be reached any more. */
  failure: unknown;

  constructor(
    private readonly batch: RelayBatch,
    private readonly channel: string,
    private readonly progressKey: string,
    private readonly onGone: () => void,
    startSeq = 0,
  ) {
    this.seq = startSeq;
  }

  /** Queues one ready-to-write SSE event (`data: …\n\n`), published at the end of this turn. */
  sse(event: string, visibleText: boolean): void {
    this.pending.push(event);
    if (visibleText) this.sentText = true;
    if (!this.queued) {
      this.queued = true;
      this.batch.add(this);
    }
  }

  /**
   * Adds what is pending to `tx`: the SSE message, and the progress record when the first visible
   * text goes out, every PROGRESS_EVERY_MS after, or when `exact` is asked (before recording).
   */
  appendFlush(tx: ChainableCommander, exact: boolean): { count: number; publishes: number } {
    this.queued = false;
    const now = performance.now();
    const progress = exact || (this.sentText && !this.progressSentText) || now - this.lastProgressAt >= PROGRESS_EVERY_MS;
    let count = 0;
    let publishes = 0;
    if (this.pending.length > 0) {
      this.addPublish(tx, 'sse', this.pending.join(''));
      this.pending = [];
      count++;
      publishes++;
    }
    if (progress) {
      this.lastProgressAt = now;
      this.progressSentText = this.sentText;
      this.addProgress(tx);
      count++;
    }
    return { count, publishes };
  }

  /** Publishes what is pending now, with an exact progress record, and waits for Redis. */
  async flush(exact = false): Promise<void> {
    const tx = this.batch.redis.pipeline();
    const { count, publishes } = this.appendFlush(tx, exact);
    if (count === 0) return;
    try {
      this.checkReplies((await tx.exec()) ?? [], publishes);
    } catch (err) {
      this.fail(err);
    }
  }

  /**
   * Publishes the last message(s) of the request together with `extra` commands (usage record,
   * quota settlement) in ONE atomic MULTI, after anything still pending. Resolves with the errors
   * of the `extra` commands (null where they succeeded), for the caller to act on.
   */
  async finish(kind: 'done' | 'final' | 'error', payload: string, extra: (tx: ChainableCommander) => void): Promise<(Error | null)[]> {
    const tx = this.batch.redis.multi();
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

  /**
   * Every publish reply is checked for "no subscriber": the web process (and its client) is gone.
   * A failed command means the same. Either way `onGone` stops the upstream request.
   */
  checkReplies(replies: Replies, publishes: number): void {
    for (const [err, n] of replies.slice(0, publishes)) if (err === null && n === 0) this.onGone();
    const failed = replies.find(([err]) => err);
    if (failed) this.fail(failed[0]);
  }

  fail(err: unknown): void {
    this.failure ??= err;
    this.onGone();
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
}
