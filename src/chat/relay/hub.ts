import { randomBytes } from 'node:crypto';
import type { Config } from '../../config.js';
import type { DispatchMetrics } from '../../metrics.js';
import { onResubscribed, type RedisClient } from '../../infra/redis.js';
import { Heartbeat, webAliveKey } from './liveness.js';
import { leaveReader } from './readers.js';
import { RelayAcks } from './acks.js';
import { cancelRequest } from './request-cancel.js';
import {
  decodeRelay,
  INSTANCE_LENGTH,
  runningTtlSeconds,
  relayChannel,
  requestStateKey,
  type RelayMessage,
} from './protocol.js';

export interface RelayHandler {
  /** A message for this request (undefined: one that could not be read). */
  message(message: RelayMessage | undefined): void;
  /** The subscription was lost and is back: anything published meanwhile is read from the log. */
  resync(): void;
}

// After a reconnect the subscription is restored by ioredis on its own schedule; reading the logs
// at once and again a little later covers whatever was published before it was back.
const RESYNC_AFTER_MS = [0, 500, 2000];
const MEMORY = 1000;

/** Adds to a set that keeps only the latest MEMORY entries. */
function remember(set: Set<string>, requestId: string): void {
  set.add(requestId);
  if (set.size > MEMORY) set.delete(set.values().next().value!);
}

/**
 * The web process's end of the relay. One subscriber connection and ONE sharded subscription (this
 * process's channel, every message naming its request) serve every open request, so opening a
 * stream costs no SUBSCRIBE round trip, and on a Redis Cluster the process's messages travel only
 * within the shard that owns its channel. The process keeps a liveness key: a worker whose
 * client's web process is gone stops working for it.
 */
export class RelayHub {
  /** Identifies this web process in job data, so workers publish to its channel. */
  readonly instance = randomBytes((INSTANCE_LENGTH * 3) / 4).toString('base64url');
  private readonly handlers = new Map<string, RelayHandler>();
  private readonly sub: RedisClient;
  private readonly prefix: string;
  private readonly channel: string;
  private readonly heartbeat: Heartbeat;
  /** What this process handed to its clients, told to the workers (relay/acks.ts). */
  readonly acks: RelayAcks;
  /** Requests a cancel was sent for because their messages still came after they ended. */
  private readonly cancelled = new Set<string>();
  /**
   * Resumable requests whose client left: their messages may still come for a moment (until the
   * worker hears of it and publishes only to the log), and must not be taken for orphans.
   */
  private readonly detached = new Set<string>();
  private ready: Promise<void> | undefined;

  constructor(
    private readonly deps: {
      redis: RedisClient;
      subscriber: RedisClient;
      config: Pick<Config, 'redis' | 'queue' | 'providers'>;
      metrics: Pick<DispatchMetrics, 'relaying'>;
    },
  ) {
    this.prefix = deps.config.redis.prefix;
    this.channel = relayChannel(this.prefix, this.instance);
    this.sub = deps.subscriber;
    this.heartbeat = new Heartbeat(
      deps.redis,
      webAliveKey(this.prefix, this.instance),
      deps.config.queue.livenessTtlMs,
    );
    this.acks = new RelayAcks({
      redis: deps.redis,
      prefix: this.prefix,
      instance: this.instance,
      intervalMs: deps.config.queue.relayAckIntervalMs,
    });
    this.sub.on('smessage', (channel: string, raw: string) => {
      if (channel !== this.channel) return;
      const { requestId, message } = decodeRelay(raw);
      const handler = this.handlers.get(requestId);
      if (handler) handler.message(message);
      else if (requestId !== '') this.cancelOrphan(requestId);
    });
    onResubscribed(this.sub, () => {
      for (const delay of RESYNC_AFTER_MS) setTimeout(() => this.resyncAll(), delay).unref();
    });
  }

  /** Subscribes once (ioredis subscribes again by itself after a reconnect) and starts the liveness key. */
  start(): Promise<void> {
    return (this.ready ??= Promise.all([this.sub.ssubscribe(this.channel), this.heartbeat.start()]).then(
      () => undefined,
    ));
  }

  /** Deletes the liveness key: workers stop what they run for this process at once. */
  async stop(): Promise<void> {
    this.acks.stop();
    await this.heartbeat.stop();
  }

  register(requestId: string, handler: RelayHandler): () => void {
    this.handlers.set(requestId, handler);
    this.deps.metrics.relaying.set(this.handlers.size);
    return () => {
      if (this.handlers.get(requestId) === handler) {
        this.handlers.delete(requestId);
        this.deps.metrics.relaying.set(this.handlers.size);
      }
    };
  }

  /**
   * The client of `requestId` went away: the cancel is recorded with the request (a worker that
   * claims it later, first or taking it over, honours it) and whichever worker runs it now is told
   * to stop, on the channel of its own that the request's state names.
   */
  async cancel(requestId: string): Promise<void> {
    try {
      await cancelRequest(
        this.deps.redis,
        this.prefix,
        requestStateKey(this.prefix, this.instance, requestId),
        requestId,
        runningTtlSeconds(this.deps.config),
      );
    } catch {
      // Redis is away: the worker learns it another way (this process's messages for the request
      // come back unclaimed and are cancelled again, or the job ends on its own).
    }
  }

  /**
   * The client of a resumable request went away: it is counted out as a reader, and the worker
   * running it starts the grace period in which a resumed stream may pick it up.
   */
  async detach(requestId: string): Promise<void> {
    remember(this.detached, requestId);
    try {
      await leaveReader(
        this.deps.redis,
        this.prefix,
        requestStateKey(this.prefix, this.instance, requestId),
        requestId,
        this.instance,
        runningTtlSeconds(this.deps.config),
      );
    } catch {
      // Redis is away: the request runs to its end, and is billed for what it produced.
    }
  }

  get openRequests(): number {
    return this.handlers.size;
  }

  private resyncAll(): void {
    for (const handler of this.handlers.values()) handler.resync();
  }

  /**
   * A message for a request that has ended here: its client left, and the cancel sent then may
   * have been lost (Redis was restarting). Sent again, once per request.
   */
  private cancelOrphan(requestId: string): void {
    if (this.cancelled.has(requestId) || this.detached.has(requestId)) return;
    remember(this.cancelled, requestId);
    void this.cancel(requestId);
  }
}
