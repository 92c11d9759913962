import { RateLimiterRedis, RateLimiterRes } from 'rate-limiter-flexible';
import type { Clock } from '../clock.js';
import type { Config } from '../config.js';
import { AppError, describeReset, retryAdvice } from '../errors.js';
import { dependencyDown, type OutageLog } from '../infra/outage.js';
import { redisKey, type RedisClient } from '../infra/redis.js';
import { clientNetworkKey } from '../accounts/signup-limits.js';

// What keeps the Stripe-bound routes from spending the deployment's Stripe budget for anyone who
// asks: the checkout returns take no credential, so they are limited per client network and per
// session id, and they only ask Stripe about a session this service opened and has not finished;
// an account opens a bounded number of setup intents and card-change sessions a day, and is
// handed its open one again before a new one is made.

const MINUTE_SECONDS = 60;
const DAY_SECONDS = 86_400;

/** After a checkout session's own expiry, how long its return is still recognised (the card change refuses it past this). */
export const LATE_RETURN_MS = 3_600_000;

/** Which return a checkout session was opened for. */
export type CheckoutPurpose = 'upgrade' | 'card';

/** A checkout session this service opened, as remembered until its return can no longer be used. */
export interface OpenedCheckout {
  accountId: string;
  purpose: CheckoutPurpose;
  /** Set once its return did its work: a reload is answered from the account, without Stripe. */
  applied?: boolean;
}

/** Stripe objects an account may have several of in flight, each capped per day. */
export type InFlightKind = 'setup-intent' | 'card-checkout';

const CAP_WORDS: Record<InFlightKind, { what: string; code: string; setting: string }> = {
  'setup-intent': {
    what: 'setup intents',
    code: 'too_many_setup_intents',
    setting: 'STRIPE_SETUP_INTENTS_PER_ACCOUNT_PER_DAY',
  },
  'card-checkout': {
    what: 'card-change checkout sessions',
    code: 'too_many_card_checkouts',
    setting: 'STRIPE_CARD_CHECKOUTS_PER_ACCOUNT_PER_DAY',
  },
};

export interface StripeGuardDeps {
  redis: RedisClient;
  clock: Clock;
  config: Pick<Config, 'redis' | 'stripe'>;
  outages: { redis: OutageLog };
}

export class StripeGuards {
  private readonly returnsByClient: RateLimiterRedis;
  private readonly returnsBySession: RateLimiterRedis;
  private readonly newObjects: Record<InFlightKind, RateLimiterRedis>;

  constructor(private readonly deps: StripeGuardDeps) {
    const { stripe } = deps.config;
    const make = (what: string, points: number, duration: number) =>
      new RateLimiterRedis({
        storeClient: deps.redis,
        keyPrefix: redisKey(deps.config.redis.prefix, 'stripe-guard', what),
        points,
        duration,
        rejectIfRedisNotReady: true,
      });
    this.returnsByClient = make('return-client', stripe.returnsPerClientPerMinute, MINUTE_SECONDS);
    this.returnsBySession = make('return-session', stripe.returnsPerSessionPerMinute, MINUTE_SECONDS);
    this.newObjects = {
      'setup-intent': make('new-setup-intent', stripe.setupIntentsPerAccountPerDay, DAY_SECONDS),
      'card-checkout': make('new-card-checkout', stripe.cardCheckoutsPerAccountPerDay, DAY_SECONDS),
    };
  }

  /**
   * Counts one checkout return against its client network's and its session id's limits, or
   * refuses it with 429 before anything else is read. Redis unreachable: 503, since the limit
   * is what stands between the route and Stripe.
   */
  async admitReturn(input: { clientIp: string; sessionId: string }): Promise<void> {
    try {
      await this.returnsByClient.consume(clientNetworkKey(input.clientIp));
      await this.returnsBySession.consume(input.sessionId);
    } catch (err) {
      throw this.refusal(
        err,
        'Too many checkout returns from your network or for this checkout session.',
        'rate_limit_exceeded',
      );
    }
  }

  /** Remembers a checkout session the service opened, until its return can no longer be used. */
  async rememberCheckout(sessionId: string, opened: OpenedCheckout, expiresAtSeconds: number): Promise<void> {
    const ttlMs = Math.max(1000, expiresAtSeconds * 1000 + LATE_RETURN_MS - this.deps.clock.now().getTime());
    await this.redisCall(() => this.deps.redis.set(this.checkoutKey(sessionId), JSON.stringify(opened), 'PX', ttlMs));
  }

  /** The checkout session as the service opened it, or undefined when it opened none by that id (or long ago). */
  async openedCheckout(sessionId: string): Promise<OpenedCheckout | undefined> {
    const raw = await this.redisCall(() => this.deps.redis.get(this.checkoutKey(sessionId)));
    return raw === null ? undefined : (JSON.parse(raw) as OpenedCheckout);
  }

  /** Marks a session's return as done; its remaining lifetime is kept. */
  async markApplied(sessionId: string, opened: OpenedCheckout): Promise<void> {
    await this.redisCall(() =>
      this.deps.redis.set(this.checkoutKey(sessionId), JSON.stringify({ ...opened, applied: true }), 'KEEPTTL'),
    );
  }

  /** The id of the account's latest open object of this kind, if one was made in the last day. */
  async latestInFlight(kind: InFlightKind, accountId: string): Promise<string | undefined> {
    return (await this.redisCall(() => this.deps.redis.get(this.inFlightKey(kind, accountId)))) ?? undefined;
  }

  /** Counts a new object of this kind against the account's daily cap, or refuses it with 429. */
  async admitNew(kind: InFlightKind, accountId: string): Promise<void> {
    try {
      await this.newObjects[kind].consume(accountId);
    } catch (err) {
      const { what, code, setting } = CAP_WORDS[kind];
      const cap =
        kind === 'setup-intent'
          ? this.deps.config.stripe.setupIntentsPerAccountPerDay
          : this.deps.config.stripe.cardCheckoutsPerAccountPerDay;
      throw this.refusal(
        err,
        `This account has opened ${cap} ${what} in the last 24 hours, the most allowed (${setting}), and none of them is still open to reuse.`,
        code,
      );
    }
  }

  /** Remembers the account's latest object of this kind, so the next request is handed it while it is open. */
  async rememberInFlight(kind: InFlightKind, accountId: string, id: string): Promise<void> {
    await this.redisCall(() => this.deps.redis.set(this.inFlightKey(kind, accountId), id, 'EX', DAY_SECONDS));
  }

  private checkoutKey(sessionId: string): string {
    return redisKey(this.deps.config.redis.prefix, 'stripe-guard', 'checkout', sessionId);
  }

  private inFlightKey(kind: InFlightKind, accountId: string): string {
    return redisKey(this.deps.config.redis.prefix, 'stripe-guard', 'in-flight', kind, accountId);
  }

  private refusal(err: unknown, message: string, code: string): AppError {
    if (err instanceof RateLimiterRes) {
      return new AppError(
        'rate_limited',
        `${message} Try again ${describeReset(this.deps.clock.now().getTime(), err.msBeforeNext)}.`,
        { code, headers: retryAdvice(err.msBeforeNext) },
      );
    }
    return this.down(err);
  }

  private down(err: unknown): AppError {
    return dependencyDown(
      err,
      { log: this.deps.outages.redis, source: 'Stripe guards' },
      'Billing is temporarily unavailable. Please retry shortly.',
    );
  }

  private async redisCall<T>(call: () => Promise<T>): Promise<T> {
    try {
      return await call();
    } catch (err) {
      throw this.down(err);
    }
  }
}
