import { RateLimiterRedis, RateLimiterRes } from 'rate-limiter-flexible';
import Stripe from 'stripe';
import { sleep } from '../clock.js';
import type { Config } from '../config.js';
import { redisKey, type RedisClient } from './redis.js';

export type HttpClient = InstanceType<typeof Stripe.HttpClient>;

/**
 * Keeps the whole deployment's Stripe calls under STRIPE_MAX_OPS_PER_SECOND: every call, from any
 * process, takes a point from a one-second window counted in Redis, and waits for the next window
 * when there is none left. Paced per call rather than per job, because one account's invoice
 * makes 3 + (its models) calls. If Redis cannot be asked, the call goes unpaced: Stripe's own 429
 * is the backstop (the invoicing worker backs off on it).
 *
 * With `maxWaitMs` (the web tier: STRIPE_PACE_MAX_WAIT_MS) a call that would wait longer than that
 * for its turn is given up, so a flood of Stripe-bound requests cannot queue without end behind
 * the deployment's budget; workers pass none and wait for their turn, as invoicing expects.
 */
export class StripePacer {
  private readonly window: RateLimiterRedis;

  constructor(
    redis: RedisClient,
    config: Pick<Config, 'redis' | 'stripe'>,
    private readonly maxWaitMs?: number,
  ) {
    this.window = new RateLimiterRedis({
      storeClient: redis,
      keyPrefix: redisKey(config.redis.prefix, 'stripe-pace'),
      points: config.stripe.maxOpsPerSecond,
      duration: 1,
      rejectIfRedisNotReady: true,
    });
  }

  /** Resolves true when a call may go out, false when its turn is further away than the wait allowed. */
  async take(): Promise<boolean> {
    let waited = 0;
    for (;;) {
      try {
        await this.window.consume('calls');
        return true;
      } catch (err) {
        if (!(err instanceof RateLimiterRes)) return true;
        const pause = Math.max(1, err.msBeforeNext);
        if (this.maxWaitMs !== undefined && waited + pause > this.maxWaitMs) return false;
        waited += pause;
        await sleep(pause);
      }
    }
  }
}

/**
 * What a call given up by the pacer answers: Stripe's own 429 shape (so callers see a
 * StripeRateLimitError, answered 503 payment_processor_busy with Retry-After, as for Stripe's
 * own 429), marked not to be retried by the SDK. Nothing reached Stripe.
 */
class PacerRefusal extends Stripe.HttpClientResponse {
  constructor() {
    super(429, { 'stripe-should-retry': 'false' });
  }
  override getRawResponse(): unknown {
    return undefined;
  }
  override toStream(): never {
    throw new Error('the pacer refusal has no stream');
  }
  override toJSON(): Promise<unknown> {
    return Promise.resolve({
      error: {
        type: 'rate_limit_error',
        code: 'rate_limit',
        message: "The deployment's Stripe call budget is in use; the call was not sent.",
      },
    });
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
        if (!(await pacer.take())) return new PacerRefusal();
        const res = await inner.makeRequest(...args);
        if (res.getStatusCode() !== 429 || resend >= RATE_LIMIT_RESENDS) return res;
        await res.toJSON().catch(() => undefined);
        const pause = RATE_LIMIT_FIRST_PAUSE_MS * 2 ** resend;
        await sleep(pause / 2 + Math.random() * pause);
      }
    }
  })();
}
