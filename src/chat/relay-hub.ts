import { randomBytes } from 'node:crypto';
import type { Redis } from 'ioredis';
import type { AppContext } from '../context.js';
import { cancelChannel, decodeRelay, type RelayMessage } from './relay-protocol.js';

export type RelayHandler = (message: RelayMessage | undefined) => void;

/**
 * The web process's end of the relay. One subscriber connection and ONE pattern subscription
 * (`<prefix>:relay:<this process>:*`) serve every open request, so opening a stream costs no
 * SUBSCRIBE round trip; messages for requests that already ended are dropped here.
 */
export class RelayHub {
  /** Identifies this web process in job data, so workers publish to the right pattern. */
  readonly instance = randomBytes(6).toString('base64url');
  private readonly handlers = new Map<string, RelayHandler>();
  private readonly sub: Redis;
  private readonly prefix: string;
  private ready: Promise<void> | undefined;

  constructor(private readonly app: AppContext) {
    this.prefix = `${app.config.redis.prefix}:relay:${this.instance}:`;
    this.sub = app.redisConnection('subscriber', 'relay-subscriber');
    this.sub.on('pmessage', (_pattern: string, channel: string, message: string) => {
      const handler = this.handlers.get(channel.slice(this.prefix.length));
      if (handler) handler(decodeRelay(message));
    });
  }

  /** Subscribes once; ioredis re-subscribes by itself after a reconnect. */
  start(): Promise<void> {
    return (this.ready ??= this.sub.psubscribe(`${this.prefix}*`).then(() => undefined));
  }

  /** The channel a worker publishes to for `requestId` (carried in the job as `relayTo` + id). */
  channelFor(requestId: string): string {
    return `${this.prefix}${requestId}`;
  }

  register(requestId: string, handler: RelayHandler): () => void {
    this.handlers.set(requestId, handler);
    return () => {
      if (this.handlers.get(requestId) === handler) this.handlers.delete(requestId);
    };
  }

  /** Tells whichever worker runs `requestId` to stop (the client went away). */
  async cancel(requestId: string): Promise<void> {
    await this.app.redis.publish(cancelChannel(this.app.config.redis.prefix, requestId), '1').catch(() => undefined);
  }

  get openRequests(): number {
    return this.handlers.size;
  }
}

export function relayHubOf(app: AppContext): RelayHub {
  return app.once('relay-hub', () => new RelayHub(app));
}
