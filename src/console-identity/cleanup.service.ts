import type { Clock } from '../clock.js';
import type { Config } from '../config.js';
import type { Db } from '../infra/db.js';
import { deleteEndedSessions } from './sessions.repository.js';
import { deleteExpiredSignInTokens } from './sign-in-tokens.repository.js';

export interface SignInCleanupDeps {
  db: Db;
  clock: Clock;
  config: Pick<Config, 'console'>;
}

/**
 * How long an ended session or a spent sign-in link is kept before it is deleted: long enough for
 * an operator to look into a sign-in from yesterday, short enough that the tables stay the size
 * of the live sessions.
 */
export const KEEP_ENDED_MS = 24 * 3_600_000;

/**
 * Deletes the sign-in links and console sessions that ended more than a day ago (the scheduler's
 * daily `sign-ins` job): a session that nobody can use again and a link that cannot be followed
 * again are of no use to anyone.
 */
export async function purgeEndedSignIns(app: SignInCleanupDeps): Promise<{ signInLinks: number; sessions: number }> {
  const now = app.clock.now().getTime();
  const endedBefore = new Date(now - KEEP_ENDED_MS);
  const idleBefore = new Date(now - app.config.console.sessionIdleMs - KEEP_ENDED_MS);
  const [signInLinks, sessions] = await Promise.all([
    deleteExpiredSignInTokens(app.db, endedBefore),
    deleteEndedSessions(app.db, { endedBefore, idleBefore }),
  ]);
  return { signInLinks, sessions };
}
