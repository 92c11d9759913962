import { RateLimiterRedis, RateLimiterRes } from 'rate-limiter-flexible';
import Stripe from 'stripe';
import type { Config } from '../config.js';
import { redisKey, type RedisClient } from './redis.js';

export type HttpClient = InstanceType<typeof Stripe.HttpClient>;

/**
 * Keeps the whole deployment's Stripe calls under STRIPE_MAX_OPS_PER_SECOND: every call, from any
 * process, takes a point from a one-second window counted in Redis, and waits for the next window
 * when there is none left. Paced per call rather than per job, because one account's invoice
 * makes 3 + (its models) calls. If Redis cannot be asked, the call goes unpaced: Stripe's own 429
 * is the backstop (the invoicing worker backs off on it).
 */
export class StripePacer {
  private readonly window: RateLimiterRedis;

  constructor(redis: RedisClient, config: Pick<Config, 'redis' | 'stripe'>) {
    this.window = new RateLimiterRedis({
      storeClient: redis,
      keyPrefix: redisKey(config, 'stripe-pace'),
      points: config.stripe.maxOpsPerSecond,
      duration: 1,
      rejectIfRedisNotReady: true,
    });
  }

  /** Resolves when a call may go out. */
  async take(): Promise<void> {
    for (;;) {
      try {
        await this.window.consume('calls');
        return;
      } catch (err) {
        if (!(err instanceof RateLimiterRes)) return;
        await new Promise((resolve) => setTimeout(resolve, Math.max(1, err.msBeforeNext)));
      }
    }
  }
}

/** Resends of a call Stripe answered 429, and the first pause (doubling, with jitter). */
const RATE_LIMIT_RESENDS = 4;
const RATE_LIMIT_FIRST_PAUSE_MS = 200;

/**
 * Stripe's own Node HTTP client, with each request waiting for the pacer first. A 429 means
 * Stripe did nothing with the request, so it is sent again, identical (same idempotency key),
 * after a growing pause: retrying the one call rather than the job that made it keeps a busy
 * moment from turning into every job starting over at once. Past the resends the 429 reaches the
 * caller (the invoicing worker then pauses its queue).
 */
export function pacedHttpClient(pacer: StripePacer, inner: HttpClient = Stripe.createNodeHttpClient()): HttpClient {
  return new (class extends Stripe.HttpClient {
    override getClientName(): string {
      return inner.getClientName();
    }
    override async makeRequest(...args: Parameters<HttpClient['makeRequest']>) {
      for (let resend = 0; ; resend++) {
        await pacer.take();
        const res = await inner.makeRequest(...args);
        if (res.getStatusCode() !== 429 || resend >= RATE_LIMIT_RESENDS) return res;
        await res.toJSON().catch(() => undefined);
        const pause = RATE_LIMIT_FIRST_PAUSE_MS * 2 ** resend;
        await new Promise((resolve) => setTimeout(resolve, pause / 2 + Math.random() * pause));
      }
    }
  })();
}
