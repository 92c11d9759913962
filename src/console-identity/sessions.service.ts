import type { Clock } from '../clock.js';
import type { Config } from '../config.js';
import type { Logger } from '../logger.js';
import { AppError } from '../errors.js';
import { transaction, type Db, type Trx } from '../infra/db.js';
import { getAccount, revokeJwtsIssuedBefore, verifyEmail, type AccountsDeps } from '../accounts/accounts.service.js';
import type { Account } from '../accounts/account.js';
import { voidAccountSignInTokens } from './sign-in-tokens.repository.js';
import {
  findLiveSession,
  insertSession,
  revokeAccountSessions,
  revokeSessionByHash,
  takePendingApiKey,
  touchSession,
  type ConsoleSession,
} from './sessions.repository.js';
import { csrfTokenFor, generateSecret, hashSecret, openForSession, sameSecret, sealForSession } from './secrets.js';

// Console sessions: a random cookie value in the browser, its SHA-256 in console_sessions. A
// session ends when it is revoked (sign out, sign out everywhere, a new sign-in in the same
// browser), after CONSOLE_SESSION_IDLE_MINUTES without a request, or CONSOLE_SESSION_MAX_HOURS
// after it began. Every sign-in makes a new value: a value the browser already had is never adopted.

export interface SessionDeps {
  db: Db;
  clock: Clock;
  log: Logger;
  config: Pick<Config, 'console'>;
}

/** A session just started: the cookie value goes to the browser and is never stored. */
export interface StartedSession {
  value: string;
  accountId: string;
  expiresAt: Date;
}

export interface LiveSession {
  session: ConsoleSession;
  account: Account;
  /** The CSRF token the page sends back in X-CSRF-Token. */
  csrfToken: string;
}

/** last_seen_at is written at most this often, so reading pages is not a write per request. */
const TOUCH_EVERY_MS = 60_000;

/**
 * Starts a session for the account inside the caller's transaction. The session the browser
 * presented, if any, is revoked: it may have been planted, and one browser holds one session.
 */
export async function startSession(
  app: SessionDeps,
  trx: Trx,
  input: { accountId: string; presented: string | undefined; now: Date; pendingApiKey?: string },
): Promise<StartedSession> {
  if (input.presented !== undefined) await revokeSessionByHash(trx, hashSecret(input.presented), input.now);
  const { value, hash } = generateSecret();
  const expiresAt = new Date(input.now.getTime() + app.config.console.sessionMaxMs);
  await insertSession(trx, {
    accountId: input.accountId,
    idHash: hash,
    now: input.now,
    expiresAt,
    pendingApiKey: input.pendingApiKey === undefined ? null : sealForSession(value, input.pendingApiKey),
  });
  app.log.info({ accountId: input.accountId }, 'console session started');
  return { value, accountId: input.accountId, expiresAt };
}

/** The live session the cookie value names, with its account; undefined for none (or an ended one). */
export async function liveSession(app: SessionDeps, value: string | undefined): Promise<LiveSession | undefined> {
  if (value === undefined || value.length === 0 || value.length > 100) return undefined;
  const now = app.clock.now();
  const session = await findLiveSession(app.db, hashSecret(value), {
    now,
    idleSince: new Date(now.getTime() - app.config.console.sessionIdleMs),
  });
  if (!session) return undefined;
  const account = await getAccount(app, session.account_id).catch(() => undefined);
  if (!account) return undefined;
  if (now.getTime() - session.last_seen_at.getTime() >= TOUCH_EVERY_MS) await touchSession(app.db, session.id, now);
  return { session, account, csrfToken: csrfTokenFor(value) };
}

/** True when `sent` is the session's CSRF token. */
export const csrfMatches = (live: LiveSession, sent: string | undefined): boolean =>
  sent !== undefined && sameSecret(live.csrfToken, sent);

/** Ends the session the cookie value names (nothing to do for an unknown or ended one). */
export async function signOut(app: SessionDeps, value: string): Promise<void> {
  await revokeSessionByHash(app.db, hashSecret(value), app.clock.now());
}

/**
 * Ends every session of the account, in every browser, and with them what could start or stand
 * in for one: sign-in links already sent, and every JWT issued until now. One transaction.
 */
export async function signOutEverywhere(app: SessionDeps, accountId: string): Promise<number> {
  const now = app.clock.now();
  const { ended, links } = await transaction(app.db, (trx) => endAccountSessions(trx, accountId, now));
  app.log.info({ accountId, ended, links }, 'signed out everywhere: sessions, sign-in links and JWTs ended');
  return ended;
}

/** Sign out everywhere inside the caller's transaction (closing an account does it with its erasure). */
export async function endAccountSessions(
  trx: Trx,
  accountId: string,
  now: Date,
): Promise<{ ended: number; links: number }> {
  const ended = await revokeAccountSessions(trx, accountId, now);
  const links = await voidAccountSignInTokens(trx, accountId, now);
  await revokeJwtsIssuedBefore(trx, accountId, now);
  return { ended, links };
}

/**
 * The key the verification that started this session issued: returned once, then gone (404).
 * It was sealed with the cookie's value, so the row alone never yields it.
 */
export async function takeNewApiKey(app: SessionDeps, live: LiveSession, value: string): Promise<string> {
  const sealed = await transaction(app.db, (trx) => takePendingApiKey(trx, live.session.id));
  const key = sealed === undefined ? undefined : openForSession(value, sealed);
  if (key === undefined)
    throw new AppError('not_found', 'There is no new API key to show: it is shown once, right after verification.', {
      code: 'no_new_api_key',
    });
  return key;
}

/**
 * Verification from a browser: the email is verified and the key issued as for an API client,
 * and in the same transaction a session starts holding that key (sealed) for the console to show once.
 */
export async function verifyAndSignIn(
  app: AccountsDeps & SessionDeps,
  token: string,
  presented: string | undefined,
): Promise<StartedSession & { email: string; apiKey: string }> {
  let started: StartedSession | undefined;
  const result = await verifyEmail(app, token, async (trx, account, apiKey) => {
    started = await startSession(app, trx, {
      accountId: account.id,
      presented,
      now: app.clock.now(),
      pendingApiKey: apiKey,
    });
  });
  if (!started) throw new Error('verification committed without starting its session');
  return { ...started, email: result.email, apiKey: result.api_key };
}
