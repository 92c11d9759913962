import type { Config } from '../config.js';
import { AppError, validationError } from '../errors.js';
import { transaction } from '../infra/db.js';
import { findAccountForEmail, getAccount, sendVerificationLink } from '../accounts/accounts.service.js';
import { queueEmail } from '../accounts/email-outbox.service.js';
import type { SignupLimits } from '../accounts/signup-limits.js';
import { DEFAULT_RETURN_PATH, isSafeReturnPath } from './return-path.js';
import { noAccountEmail, signInLinkEmail } from './sign-in.emails.js';
import { findSignInToken, insertSignInToken, useSignInToken } from './sign-in-tokens.repository.js';
import { startSession, type SessionDeps, type StartedSession } from './sessions.service.js';
import { generateSecret, hashSecret } from './secrets.js';

export interface SignInDeps extends SessionDeps {
  config: Pick<Config, 'console' | 'http' | 'auth' | 'redis'>;
  signInLimits: SignupLimits;
}

export const signInLink = (app: Pick<SignInDeps, 'config'>, token: string): string =>
  `${app.config.http.publicBaseUrl}/console/sign-in/confirm?token=${encodeURIComponent(token)}`;

/**
 * Asks for a sign-in link. The answer is the same whatever the address (enumeration-safe); the
 * email says what applies: a known verified address gets a one-time link, a known unverified one
 * a fresh verification link (which signs in too), an unknown one a note that it has no account.
 * Every case queues one email in one transaction, so the work, and the time, are alike.
 * Limited per mailbox and per client network first, as sign-up is.
 */
export async function requestSignInLink(
  app: SignInDeps,
  input: { email: string; return_to?: string | undefined },
  client: { ip: string },
): Promise<{ status: 'sent' }> {
  if (input.return_to !== undefined && !isSafeReturnPath(input.return_to)) {
    throw validationError([
      {
        loc: ['body', 'return_to'],
        msg: 'Must be a path on this service, starting with one "/" (for example /console/usage)',
        type: 'value_error',
      },
    ]);
  }
  await app.signInLimits.admit({ email: input.email, clientIp: client.ip });
  const now = app.clock.now();
  const ttl = app.config.console.signInLinkTtlMs;
  await transaction(app.db, async (trx) => {
    const account = await findAccountForEmail(trx, input.email);
    if (!account) {
      await queueEmail(trx, noAccountEmail(input.email, app.config.http.publicBaseUrl), now);
      return;
    }
    if (account.verified_at === null) {
      await sendVerificationLink(app, trx, account, now);
      return;
    }
    const { value, hash } = generateSecret();
    await insertSignInToken(trx, {
      accountId: account.id,
      tokenHash: hash,
      returnTo: input.return_to ?? DEFAULT_RETURN_PATH,
      expiresAt: new Date(now.getTime() + ttl),
      now,
    });
    const email = signInLinkEmail(account, signInLink(app, value), Math.round(ttl / 60_000));
    await queueEmail(trx, { ...email, linkToken: value }, now);
  });
  return { status: 'sent' };
}

/** Why a sign-in link was turned down; every case is 400 with its own code. */
export const SIGN_IN_LINK_ERRORS = {
  invalid_token: 'This sign-in link is not valid. Check that the whole link was opened, or ask for a new one.',
  token_used: 'This sign-in link was already used. Ask for a new one on the sign-in page.',
  token_expired: 'This sign-in link has expired (links work for 15 minutes). Ask for a new one on the sign-in page.',
} as const;
export type SignInLinkError = keyof typeof SIGN_IN_LINK_ERRORS;

const linkError = (code: SignInLinkError) =>
  new AppError('invalid_request', SIGN_IN_LINK_ERRORS[code], { code, param: 'token' });

/**
 * What a sign-in link would do, read without spending it (the confirmation page a mail scanner may
 * fetch): undefined when it can be used, or why not.
 */
export async function checkSignInLink(app: SignInDeps, token: string): Promise<SignInLinkError | undefined> {
  const row = await findSignInToken(app.db, hashSecret(token));
  if (!row) return 'invalid_token';
  if (row.used_at !== null) return 'token_used';
  return row.expires_at.getTime() <= app.clock.now().getTime() ? 'token_expired' : undefined;
}

/**
 * Spends the link and starts a session for the account it was sent to, in one transaction: of two
 * concurrent uses only one signs in. The session the browser presented is revoked (no fixation).
 */
export async function confirmSignIn(
  app: SignInDeps,
  token: string,
  presented: string | undefined,
): Promise<StartedSession & { returnTo: string }> {
  const now = app.clock.now();
  return transaction(app.db, async (trx) => {
    const used = await useSignInToken(trx, hashSecret(token), now);
    if (!used) {
      const row = await findSignInToken(trx, hashSecret(token));
      throw linkError(!row ? 'invalid_token' : row.used_at !== null ? 'token_used' : 'token_expired');
    }
    const account = await getAccount({ db: trx }, used.account_id);
    const started = await startSession(app, trx, { accountId: account.id, presented, now });
    return { ...started, returnTo: isSafeReturnPath(used.return_to) ? used.return_to : DEFAULT_RETURN_PATH };
  });
}
