import { randomBytes } from 'node:crypto';
import type { Redis } from 'ioredis';
import type { Config } from '../config.js';
import { Heartbeat, webAliveKey } from './liveness.js';
import { cancelChannel, decodeRelay, relayChannel, type RelayMessage } from './relay-protocol.js';

export interface RelayHandler {
  /** A message for this request (undefined: one that could not be read). */
  message(message: RelayMessage | undefined): void;
  /** The subscription was lost and is back: anything published meanwhile is read from the log. */
  resync(): void;
}

// After a reconnect the pattern subscription is restored by ioredis on its own schedule; reading
// the logs at once and again a little later covers whatever was published before it was back.
const RESYNC_AFTER_MS = [0, 500, 2000];
const CANCELLED_MEMORY = 1000;

/**
 * The web process's end of the relay. One subscriber connection and ONE pattern subscription
 * (`<prefix>:relay:<this process>:*`) serve every open request, so opening a stream costs no
 * SUBSCRIBE round trip. The process keeps a liveness key: a worker whose client's web process is
 * gone stops working for it.
 */
export class RelayHub {
  /** Identifies this web process in job data, so workers publish to the right pattern. */
  readonly instance = randomBytes(6).toString('base64url');
  private readonly handlers = new Map<string, RelayHandler>();
  private readonly sub: Redis;
  private readonly prefix: string;
  private readonly heartbeat: Heartbeat;
  /** Requests a cancel was sent for because their messages still came after they ended. */
  private readonly cancelled = new Set<string>();
  private ready: Promise<void> | undefined;
  private connectedBefore = false;

  constructor(private readonly deps: { redis: Redis; subscriber: Redis; config: Pick<Config, 'redis' | 'queue'> }) {
    this.prefix = relayChannel(deps.config.redis.prefix, this.instance, '');
    this.sub = deps.subscriber;
    this.heartbeat = new Heartbeat(deps.redis, webAliveKey(deps.config.redis.prefix, this.instance), deps.config.queue.livenessTtlMs);
    this.sub.on('pmessage', (_pattern: string, channel: string, message: string) => {
      const requestId = channel.slice(this.prefix.length);
      const handler = this.handlers.get(requestId);
      if (handler) handler.message(decodeRelay(message));
      else this.cancelOrphan(requestId);
    });
    this.sub.on('ready', () => {
      if (!this.connectedBefore) {
        this.connectedBefore = true;
        return;
      }
      for (const delay of RESYNC_AFTER_MS) setTimeout(() => this.resyncAll(), delay).unref();
    });
  }

  /** Subscribes once (ioredis re-subscribes by itself after a reconnect) and starts the liveness key. */
  start(): Promise<void> {
    return (this.ready ??= Promise.all([this.sub.psubscribe(`${this.prefix}*`), this.heartbeat.start()]).then(() => undefined));
  }

  /** Deletes the liveness key: workers stop what they run for this process at once. */
  async stop(): Promise<void> {
    await this.heartbeat.stop();
  }

  register(requestId: string, handler: RelayHandler): () => void {
    this.handlers.set(requestId, handler);
    return () => {
      if (this.handlers.get(requestId) === handler) this.handlers.delete(requestId);
    };
  }

  /** Tells whichever worker runs `requestId` to stop (the client went away). */
  async cancel(requestId: string): Promise<void> {
    await this.deps.redis.publish(cancelChannel(this.deps.config.redis.prefix, requestId), '1').catch(() => undefined);
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
    if (this.cancelled.has(requestId)) return;
    this.cancelled.add(requestId);
    if (this.cancelled.size > CANCELLED_MEMORY) this.cancelled.delete(this.cancelled.values().next().value!);
    void this.cancel(requestId);
  }
}
