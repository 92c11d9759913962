import type { RedisClient } from '../infra/redis.js';
import type { Clock } from '../clock.js';
import type { Config } from '../config.js';
import type { Logger } from '../logger.js';
import type { Limiter } from '../limits/limiter.service.js';
import { AppError, describeReset, retryAdvice } from '../errors.js';
import { onCommit, transaction, type Db, type Trx } from '../infra/db.js';
import { invalidateAccountKeys, prepareKeyRevocation } from './auth.service.js';
import { generateApiKey } from './api-keys.js';
import { accountExistsEmail, verificationEmail } from './accounts.emails.js';
import {
  closeVerificationTokens,
  findAccountByEmail,
  findAccountById,
  findVerificationToken,
  insertAccountIfAbsent,
  insertApiKey,
  insertVerificationToken,
  lockAccount,
  markAccountVerified,
  revokeDefaultApiKey,
  setTokensNotBefore,
  useVerificationToken,
} from './accounts.repository.js';
import type { Account } from './account.js';
import type { IssuedKeyResult, SignupInput } from './accounts.schema.js';
import { queueEmail } from './email-outbox.service.js';
import type { SignupLimits } from './signup-limits.js';
import { generateVerificationToken, hashVerificationToken } from './verification-tokens.js';

/** What account management works with. */
export interface AccountsDeps {
  db: Db;
  redis: RedisClient;
  clock: Clock;
  log: Logger;
  config: Pick<Config, 'http' | 'auth' | 'redis'>;
}

/** The account, or 404 account_not_found (for endpoints acting on the caller's own account). */
export async function getAccount(app: Pick<AccountsDeps, 'db'>, accountId: string): Promise<Account> {
  const account = await findAccountById(app.db, accountId);
  if (!account) throw new AppError('not_found', 'Account not found', { code: 'account_not_found' });
  return account;
}

/** The account with that address (any letter case), if there is one. */
export async function findAccountForEmail(db: Db | Trx, email: string): Promise<Account | undefined> {
  return findAccountByEmail(db, email);
}

export const verificationLink = (app: Pick<AccountsDeps, 'config'>, token: string): string =>
  `${app.config.http.publicBaseUrl}/v1/auth/verify?token=${encodeURIComponent(token)}`;

/**
 * Sign-up. One answer whatever the address's history, so the endpoint never reveals whether an
 * address is known:
 * - new address: the account is created unverified on the free tier, with a verification email;
 * - known, unverified: a fresh link is emailed (earlier links keep working until they expire or
 *   one of them is used, so emails that arrive out of order all work); name and organization
 *   are not changed by an unauthenticated caller;
 * - known, verified: an "you already have an account" email, with no link and no key.
 * The email goes into the outbox in the same transaction, so sign-up never waits on the provider.
 * Attempts are limited per mailbox and per client network first (signup-limits.ts).
 */
export async function signUp(
  app: AccountsDeps & { signupLimits: SignupLimits },
  input: SignupInput,
  client: { ip: string },
): Promise<{ message: string; email: string }> {
  await app.signupLimits.admit({ email: input.email, clientIp: client.ip });
  const now = app.clock.now();
  await transaction(app.db, async (trx) => {
    const created = await insertAccountIfAbsent(trx, {
      name: input.name,
      email: input.email,
      organization: input.organization,
      now,
    });
    // The insert did nothing: the address exists (possibly committed a moment ago by a concurrent sign-up).
    const account = created ?? (await findAccountByEmail(trx, input.email));
    if (!account) throw new Error('sign-up found neither a new nor an existing account for the address');
    if (account.verified_at === null) await sendVerificationLink(app, trx, account, now);
    else await queueEmail(trx, accountExistsEmail(account, app.config.http.publicBaseUrl), now);
  });
  return {
    message: 'Account created. Check your email for a link to verify your address; opening it shows your API key.',
    email: input.email,
  };
}

/** Emails a fresh verification link to an unverified account, inside the caller's transaction. */
export async function sendVerificationLink(
  app: Pick<AccountsDeps, 'config'>,
  trx: Trx,
  account: Account,
  now: Date,
): Promise<void> {
  const { token, hash } = generateVerificationToken();
  const ttl = app.config.auth.verifyTokenTtlMs;
  await insertVerificationToken(trx, {
    accountId: account.id,
    tokenHash: hash,
    expiresAt: new Date(now.getTime() + ttl),
    now,
  });
  const email = verificationEmail(account, verificationLink(app, token), Math.round(ttl / 3_600_000));
  await queueEmail(trx, { ...email, linkToken: token }, now);
}

/** Why a verification token was turned down; every case is 400 with its own code. */
export const TOKEN_ERRORS = {
  invalid_token:
    'This verification link is not valid. Check that the whole link was opened, or sign up again with the same email address to get a new one.',
  token_used:
    'This verification link was already used. The API key was shown when it was first opened; if it is lost, regenerate it.',
  token_expired: 'This verification link has expired. Sign up again with the same email address to get a new one.',
} as const;

/**
 * What a verification token would do, read without using it (the page a browser, or a mail
 * scanner, opens from the link): undefined when it can be used, or why not.
 */
export async function checkVerificationToken(
  app: Pick<AccountsDeps, 'db' | 'clock'>,
  token: string,
): Promise<keyof typeof TOKEN_ERRORS | undefined> {
  const row = await findVerificationToken(app.db, hashVerificationToken(token));
  if (!row) return 'invalid_token';
  if (row.used_at !== null) return 'token_used';
  return row.expires_at.getTime() <= app.clock.now().getTime() ? 'token_expired' : undefined;
}

const tokenError = (code: keyof typeof TOKEN_ERRORS) =>
  new AppError('invalid_request', TOKEN_ERRORS[code], { code, param: 'token' });

/**
 * Verification: in one transaction the token is used (an UPDATE guarded by used_at IS NULL, so
 * of two concurrent uses only one wins), the account is marked verified, its other open links are
 * closed, and its API key is issued. The key is returned here once and stored only as a hash.
 */
export async function verifyEmail(
  app: AccountsDeps,
  token: string,
  /** Runs in the verification's transaction with the new key (the console starts a session there). */
  onVerified?: (trx: Trx, account: Account, apiKey: string) => Promise<void>,
): Promise<IssuedKeyResult> {
  const hash = hashVerificationToken(token);
  const now = app.clock.now();
  return transaction(app.db, async (trx) => {
    const used = await useVerificationToken(trx, hash, now);
    if (!used) {
      const row = await findVerificationToken(trx, hash);
      throw tokenError(!row ? 'invalid_token' : row.used_at !== null ? 'token_used' : 'token_expired');
    }
    // Another link of the same account may have verified it a moment ago.
    const account = await markAccountVerified(trx, used.account_id, now);
    if (!account) throw tokenError('token_used');
    await closeVerificationTokens(trx, account.id, now);
    const apiKey = await replaceApiKey(app, trx, account.id, now);
    if (onVerified) await onVerified(trx, account, apiKey);
    app.log.info({ accountId: account.id }, 'account verified; API key issued');
    return {
      message: 'Email verified. This is your API key: save it now, it will not be shown again.',
      email: account.email,
      api_key: apiKey,
    };
  });
}

/**
 * Revokes the account's default key (if any) and issues a new default key in its place, with its
 * name, models and limits (a rotation after a leak must not widen what the key may do); its
 * expiry and disabled flag do not carry over. The account's other keys are untouched.
 */
async function replaceApiKey(app: AccountsDeps, trx: Trx, accountId: string, now: Date): Promise<string> {
  const old = await revokeDefaultApiKey(trx, accountId, now);
  // Web processes may hold the old key in their caches: they re-read it, and find it revoked.
  onCommit(trx, () => invalidateAccountKeys(app, accountId));
  const key = generateApiKey();
  await insertApiKey(trx, {
    account_id: accountId,
    key_hash: key.hash,
    display_prefix: key.displayPrefix,
    last4: key.last4,
    is_default: true,
    created_at: now,
    ...(old
      ? {
          name: old.name,
          models: old.models,
          requests_per_minute: old.requests_per_minute,
          monthly_spend_limit_usd: old.monthly_spend_limit_usd,
        }
      : {}),
  });
  return key.key;
}

/**
 * A new default key for the account; the old one is revoked in the same transaction and, once that has
 * committed, its version is bumped, so it stops working on every web instance at once.
 * Tier, limits, subscription and billing hang off the account, so they are untouched.
 * The rate limit (1 per 2 hours per account) is checked before anything changes; an allowed call
 * counts even if the transaction then fails, which errs on the side of the limit.
 */
export async function regenerateApiKey(
  app: AccountsDeps & { limiter: Limiter },
  accountId: string,
): Promise<IssuedKeyResult> {
  const admission = await app.limiter.admitKeyRegeneration(accountId);
  if (!admission.allowed) {
    const retryAfter = Math.max(1, Math.ceil(admission.retryAfterSeconds));
    throw new AppError(
      'rate_limited',
      `An API key can be regenerated once every 2 hours. Try again ${describeReset(app.clock.now().getTime(), retryAfter * 1000)}.`,
      {
        code: 'rate_limit_exceeded',
        headers: { ...retryAdvice(retryAfter * 1000), ...regenerationLimitHeaders(retryAfter) },
      },
    );
  }
  const now = app.clock.now();
  return transaction(app.db, async (trx) => {
    const account = await lockAccount(trx, accountId);
    if (!account) throw new AppError('authentication', 'The account no longer exists', { code: 'unknown_account' });
    // A closure under way revoked the keys; a new one would outlive it until the closure is repeated.
    if (account.closing_at !== null)
      throw new AppError('conflict', 'The account is being closed: no new key is issued.', { code: 'account_closing' });
    if (account.verified_at === null)
      throw new AppError('permission', 'Verify your email address before using the API', {
        code: 'email_not_verified',
      });
    const apiKey = await replaceApiKey(app, trx, account.id, now);
    // Last before the commit: if Redis refuses, nothing is committed and the old key stays the key.
    await prepareKeyRevocation(app, account.id);
    app.log.info({ accountId: account.id }, 'default API key regenerated; the previous one is revoked');
    return {
      message:
        "New default API key issued; the previous default key no longer works (the account's other keys still do). Save this key now, it will not be shown again.",
      email: account.email,
      api_key: apiKey,
    };
  });
}

/** The interface's rate-limit headers for the regeneration limit: 1 per window, none left until it resets. */
export function regenerationLimitHeaders(resetSeconds: number): Record<string, string> {
  return { 'X-RateLimit-Limit': '1', 'X-RateLimit-Remaining': '0', 'X-RateLimit-Reset': String(resetSeconds) };
}

/**
 * Every JWT issued for the account before `at` stops working (sign out everywhere). Checked where
 * a JWT is authenticated, which reads the account row anyway, so it costs no extra round trip.
 */
export async function revokeJwtsIssuedBefore(trx: Trx, accountId: string, at: Date): Promise<void> {
  await setTokensNotBefore(trx, accountId, at);
}
