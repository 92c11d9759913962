import { createHash } from 'node:crypto';
import { asciiEmailAddress } from '../email-address.js';
import ipaddr from 'ipaddr.js';
import { RateLimiterRedis, RateLimiterRes } from 'rate-limiter-flexible';
import type { Clock } from '../clock.js';
import type { Config } from '../config.js';
import { dependencyDown, type OutageLog } from '../infra/outage.js';
import { AppError, describeReset, retryAdvice } from '../errors.js';
import { redisKey, type RedisClient } from '../infra/redis.js';

const HOUR_SECONDS = 3600;

/** What an address is limited for: each of them sends an email. */
export type MailingPurpose = 'signup' | 'sign-in';

const WORDS: Record<MailingPurpose, { what: string; refusal: string; unavailable: string }> = {
  signup: {
    what: 'sign-up limits',
    refusal: 'Too many sign-up attempts for this email address or from your network.',
    unavailable: 'Sign-up is temporarily unavailable. Please retry shortly.',
  },
  'sign-in': {
    what: 'sign-in limits',
    refusal: 'Too many sign-in links asked for this email address or from your network.',
    unavailable: 'Signing in is temporarily unavailable. Please retry shortly.',
  },
};

/**
 * Sign-up (and asking for a console sign-in link, by the same rule, with counters and limits of
 * its own) sends an email, so it is limited per destination mailbox (a mailbox cannot be flooded
 * with verification emails) and per client network (one client cannot sign up thousands of
 * addresses). Both are counted in Redis, shared by every web process, in windows of an hour
 * from the first attempt. The trade-off: anyone can use up an address's attempts for an hour;
 * the links already sent keep working.
 */
export class SignupLimits {
  private readonly byAddress: RateLimiterRedis;
  private readonly byClient: RateLimiterRedis;

  constructor(
    private readonly deps: {
      redis: RedisClient;
      clock: Clock;
      config: Pick<Config, 'redis' | 'limits'>;
      outages: { redis: OutageLog };
    },
    private readonly purpose: MailingPurpose = 'signup',
  ) {
    const { perAddressPerHour, perClientPerHour } =
      purpose === 'signup' ? deps.config.limits.signup : deps.config.limits.signIn;
    const make = (what: string, points: number) =>
      new RateLimiterRedis({
        storeClient: deps.redis,
        keyPrefix: redisKey(deps.config.redis.prefix, purpose, what),
        points,
        duration: HOUR_SECONDS,
        rejectIfRedisNotReady: true,
      });
    this.byAddress = make('address', perAddressPerHour);
    this.byClient = make('client', perClientPerHour);
  }

  /**
   * Counts one sign-up attempt against both limits, or refuses it: 429 with the same message
   * whether the address is known or not. Redis unreachable: 503, since sign-up without its limit
   * would let anyone flood a mailbox.
   */
  async admit(input: { email: string; clientIp: string }): Promise<void> {
    try {
      await this.byClient.consume(clientNetworkKey(input.clientIp));
      await this.byAddress.consume(mailboxKey(input.email));
    } catch (err) {
      if (err instanceof RateLimiterRes) {
        throw new AppError(
          'rate_limited',
          `${WORDS[this.purpose].refusal} Try again ${describeReset(this.deps.clock.now().getTime(), err.msBeforeNext)}.`,
          {
            code: 'rate_limit_exceeded',
            headers: retryAdvice(err.msBeforeNext),
          },
        );
      }
      throw dependencyDown(
        err,
        { log: this.deps.outages.redis, source: WORDS[this.purpose].what },
        WORDS[this.purpose].unavailable,
      );
    }
  }
}

/** Domains whose mailboxes ignore dots in the name (Gmail's rule): a.da@ and ada@ are one mailbox. */
const DOTLESS_DOMAINS = new Set(['gmail.com', 'googlemail.com']);

/**
 * The mailbox an address delivers to, as far as the service can tell: letter case, a `+tag`, the
 * spelling of an internationalised domain (exämple.com or xn--exmple-cua.com) and, at Gmail, dots
 * in the name do not make another mailbox. Hashed: raw addresses do not belong in Redis keys.
 */
export function mailboxKey(email: string): string {
  const [local = '', domain = ''] = asciiEmailAddress(email)
    .toLowerCase()
    .split(/@(?=[^@]*$)/);
  const name = local.replace(/\+.*$/, '');
  const mailbox = DOTLESS_DOMAINS.has(domain) ? `${name.replaceAll('.', '')}@gmail.com` : `${name}@${domain}`;
  return createHash('sha256').update(mailbox).digest('hex').slice(0, 32);
}

/**
 * The network a client address stands for: an IPv4 address, or the /64 of an IPv6 one (what a
 * single subscriber is usually given, so rotating through it does not escape the limit).
 */
export function clientNetworkKey(ip: string): string {
  if (!ipaddr.isValid(ip)) return `other:${ip}`;
  const addr = ipaddr.process(ip);
  if (addr.kind() === 'ipv4') return addr.toString();
  return `${(addr as ipaddr.IPv6).parts
    .slice(0, 4)
    .map((p) => p.toString(16))
    .join(':')}::/64`;
}
