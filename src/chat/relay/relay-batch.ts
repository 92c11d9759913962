import type { RedisClient } from '../../infra/redis.js';
import { untilRedisReady } from '../../infra/retry.js';
import type { RelayTtls } from './protocol.js';
import { RelayCall, type Message, type RelayReply } from './relay-call.js';

/** What the batch asks of a request's publisher (RelayPublisher). */
export interface BatchMember {
  readonly channel: string;
  appendTo(call: RelayCall): Message | undefined | null;
  confirm(through: Message | undefined, failed: string | undefined, receivedSeq?: number): Error | undefined;
  resend(): void;
}

/**
 * Publishing for every request of a worker process: one relay script call (RELAY_LUA) per web
 * process per event-loop turn carries its streams' new messages, each published and appended to its
 * relay log (so what the log holds is exactly what was published); a web process's keys share one
 * slot, so on a cluster each call goes to one shard. When Redis cannot be reached the messages stay with their publishers
 * and the batch tries again once the connection is back: a Redis restart costs the client a pause,
 * not its answer.
 */
export class RelayBatch {
  private dirty = new Set<BatchMember>();
  private scheduled = false;
  private retrying = false;
  /** Publishers whose new events wait for the coalescing timer (see `add`). */
  private waiting = new Set<BatchMember>();
  private timer: NodeJS.Timeout | undefined;

  readonly redis: RedisClient;
  readonly ttls: RelayTtls;
  private readonly onFailure: (err: unknown) => void;
  private readonly coalesceMs: number;

  constructor(deps: {
    redis: RedisClient;
    ttls: RelayTtls;
    onFailure?: (err: unknown) => void;
    /**
     * How long events that are not urgent may wait to share a message (0: to the end of the turn).
     * A stream's first token goes at once; later ones from an upstream faster than one token per
     * `coalesceMs` travel a few at a time, which saves a log append, a publish and a client write
     * each, at the cost of at most `coalesceMs` on their way.
     */
    coalesceMs?: number;
  }) {
    this.redis = deps.redis;
    this.ttls = deps.ttls;
    this.onFailure = deps.onFailure ?? (() => undefined);
    this.coalesceMs = deps.coalesceMs ?? 0;
  }

  add(publisher: BatchMember, urgent = true): void {
    if (!urgent && this.coalesceMs > 0) {
      this.waiting.add(publisher);
      this.timer ??= setTimeout(() => {
        this.timer = undefined;
        for (const p of this.waiting) this.dirty.add(p);
        this.waiting.clear();
        this.schedule();
      }, this.coalesceMs).unref();
      return;
    }
    this.dirty.add(publisher);
    this.schedule();
  }

  private schedule(): void {
    if (!this.scheduled && !this.retrying && this.dirty.size > 0) {
      this.scheduled = true;
      setImmediate(() => void this.flush());
    }
  }

  private async flush(): Promise<void> {
    this.scheduled = false;
    const byChannel = new Map<string, BatchMember[]>();
    for (const publisher of this.dirty) {
      const group = byChannel.get(publisher.channel);
      if (group) group.push(publisher);
      else byChannel.set(publisher.channel, [publisher]);
    }
    this.dirty.clear();
    const failed = (await Promise.all([...byChannel.values()].map((group) => this.send(group)))).some((ok) => !ok);
    if (failed) await this.retryLater();
  }

  /** One script call for one web process's publishers; false when Redis could not take it (they stay dirty). */
  private async send(publishers: BatchMember[]): Promise<boolean> {
    const call = new RelayCall(publishers[0]!.channel);
    const spans: { publisher: BatchMember; through: Message | undefined }[] = [];
    for (const publisher of publishers) {
      const through = publisher.appendTo(call);
      if (through !== null) spans.push({ publisher, through });
    }
    if (spans.length === 0) return true;
    let replies: RelayReply;
    try {
      replies = await call.send(this.redis);
    } catch (err) {
      this.onFailure(err);
      for (const sp of spans) {
        sp.publisher.resend();
        this.dirty.add(sp.publisher);
      }
      return false;
    }
    spans.forEach((sp, i) => {
      const refused = sp.publisher.confirm(sp.through, replies.errors[i], replies.received[i]);
      if (refused) this.onFailure(refused);
    });
    return true;
  }

  /** Waits for the connection to be ready again, then flushes. */
  private async retryLater(): Promise<void> {
    if (this.retrying) return;
    this.retrying = true;
    await untilRedisReady(this.redis);
    this.retrying = false;
    if (this.dirty.size > 0 && !this.scheduled) {
      this.scheduled = true;
      setImmediate(() => void this.flush());
    }
  }
}
