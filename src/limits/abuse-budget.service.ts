import { RateLimiterMemory, RateLimiterRedis, RateLimiterRes } from 'rate-limiter-flexible';
import type { BudgetAllowance, Config } from '../config.js';
import { AppError, retryAdvice } from '../errors.js';
import type { LimiterMetrics } from '../metrics.js';
import { redisKey, type RedisClient } from '../infra/redis.js';

// The abuse budget: every request counts, whatever its answer (a 422, a 413, a 429 of the tier's
// limits), before its body is read, so refused work is never free. The tier's limits count only
// the completions they admit; this budget is wider and counts everything, so a client within its
// tier's limits never meets it. Counted in Redis (rate-limiter-flexible, as the sign-up limits
// are), shared by every web process, in windows of a minute from the first request.

const MINUTE_SECONDS = 60;
const MIB = 1024 * 1024;

/** Whose budget a request spends: its account's (by tier), or its client network's without a valid credential. */
export type BudgetSubject = { budget: 'free' | 'paid'; accountId: string } | { budget: 'client'; network: string };

type Spent = 'requests' | 'bytes';

export interface AbuseBudgetDeps {
  redis: RedisClient;
  config: Pick<Config, 'redis' | 'limits'>;
  metrics: { limiter: LimiterMetrics };
}

export class AbuseBudget {
  private readonly limiters: Record<BudgetSubject['budget'], Record<Spent, RateLimiterRedis>>;

  constructor(private readonly deps: AbuseBudgetDeps) {
    const make = (budget: string, spent: Spent, points: number) =>
      new RateLimiterRedis({
        storeClient: deps.redis,
        keyPrefix: redisKey(deps.config.redis.prefix, 'abuse-budget', budget, spent),
        points,
        duration: MINUTE_SECONDS,
        rejectIfRedisNotReady: true,
        // Redis unreachable: each process counts on its own rather than let every request through
        // or refuse them all (the completions themselves are refused by the tier's limiter then).
        insuranceLimiter: new RateLimiterMemory({ points, duration: MINUTE_SECONDS }),
      });
    const both = (budget: BudgetSubject['budget'], allowance: BudgetAllowance) => ({
      requests: make(budget, 'requests', allowance.requestsPerMinute),
      bytes: make(budget, 'bytes', allowance.bytesPerMinute),
    });
    const { abuseBudget } = deps.config.limits;
    this.limiters = {
      free: both('free', abuseBudget.free),
      paid: both('paid', abuseBudget.paid),
      client: both('client', abuseBudget.client),
    };
  }

  /**
   * Counts one request and the body bytes it announces (0 when it announces none) against the
   * subject's budget, or refuses it: 429 with Retry-After. Counted either way.
   */
  async admit(subject: BudgetSubject, bytes: number): Promise<void> {
    const limiters = this.limiters[subject.budget];
    const key = keyOf(subject);
    const [requests, body] = await Promise.allSettled([
      limiters.requests.consume(key, 1),
      bytes > 0 ? limiters.bytes.consume(key, bytes) : Promise.resolve(undefined),
    ]);
    const refusal = refusedBy(requests, 'requests') ?? refusedBy(body, 'bytes');
    if (!refusal) return;
    this.deps.metrics.limiter.abuseBudgetRefusals.inc({ budget: subject.budget, spent: refusal.spent });
    throw this.refusal(subject, refusal.spent, refusal.res);
  }

  /** Adds body bytes found beyond what a request announced (a compressed or chunked body) to its subject's budget. */
  async charge(subject: BudgetSubject, bytes: number): Promise<void> {
    if (bytes <= 0) return;
    // Nothing to refuse any more (the body is read): a failure only leaves the budget lower.
    await this.limiters[subject.budget].bytes.penalty(keyOf(subject), bytes).catch(() => undefined);
  }

  private refusal(subject: BudgetSubject, spent: Spent, res: RateLimiterRes): AppError {
    const allowance = this.deps.config.limits.abuseBudget[subject.budget];
    const who = subject.budget === 'client' ? 'your network, without a valid credential,' : 'this account';
    const what =
      spent === 'requests'
        ? `${allowance.requestsPerMinute} requests`
        : `${Math.floor(allowance.bytesPerMinute / MIB)} MiB of request bodies`;
    const resetSeconds = Math.max(1, Math.ceil(res.msBeforeNext / 1000));
    return new AppError(
      'rate_limited',
      `Too many requests: ${who} sent more than ${what} in a minute (every request counts, refused ones too). Retry in ${resetSeconds} s.`,
      {
        code: 'rate_limit_exceeded',
        headers: {
          ...retryAdvice(res.msBeforeNext),
          ...(spent === 'requests'
            ? {
                'X-RateLimit-Limit': String(allowance.requestsPerMinute),
                'X-RateLimit-Remaining': '0',
                'X-RateLimit-Reset': String(resetSeconds),
              }
            : {}),
        },
      },
    );
  }
}

const keyOf = (subject: BudgetSubject): string => (subject.budget === 'client' ? subject.network : subject.accountId);

/** The refusal in a settled consume, if it was one (Redis failures went to the in-memory insurance). */
function refusedBy(
  result: PromiseSettledResult<unknown>,
  spent: Spent,
): { spent: Spent; res: RateLimiterRes } | undefined {
  if (result.status === 'fulfilled') return undefined;
  if (result.reason instanceof RateLimiterRes) return { spent, res: result.reason };
  throw result.reason;
}
