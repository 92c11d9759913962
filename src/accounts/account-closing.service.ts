import type { RedisClient } from '../infra/redis.js';
import type { Clock } from '../clock.js';
import type { Config } from '../config.js';
import type { Logger } from '../logger.js';
import { AppError } from '../errors.js';
import { dependencyDown } from '../infra/outage.js';
import { onCommit, transaction, type Db, type Trx } from '../infra/db.js';
import { markAccountChanging } from './api-key-cache.js';
import { invalidateAccountKeys } from './auth.service.js';
import {
  closeVerificationTokens,
  eraseAccount,
  lockAccount,
  revokeActiveApiKeys,
  setClosingAt,
} from './accounts.repository.js';
import type { Account } from './account.js';
import { deleteEmailsTo } from './email-outbox.repository.js';

// The accounts' part of closing an account (docs/accounts.md#closing-an-account): its keys stop
// working first, its personal data goes last, once the money is settled. The whole closure is
// orchestrated by src/account-closing.

export interface ClosingDeps {
  db: Db;
  redis: RedisClient;
  clock: Clock;
  log: Logger;
  config: Pick<Config, 'redis'>;
}

/** Where a closed account's address points: a reserved domain (RFC 2606) no mail can reach. */
export const tombstoneEmail = (accountId: string): string => `closed-${accountId}@closed.invalid`;

/** The typed confirmation: the account's address, in any letter case, spaces around it ignored. */
export const confirmsAccount = (account: Account, typed: string): boolean =>
  typed.trim().toLowerCase() === account.email.toLowerCase();

/**
 * Step 1: marks the closure under way and revokes every key, on every web process at once (the
 * account is marked changing in Redis before the commit, as a regeneration does; if Redis refuses,
 * nothing is committed). Repeating it revokes whatever key appeared since. Returns the account.
 */
export async function beginClosing(app: ClosingDeps, accountId: string): Promise<Account> {
  const now = app.clock.now();
  return transaction(app.db, async (trx) => {
    const account = await lockAccount(trx, accountId);
    if (!account) throw new AppError('not_found', 'Account not found', { code: 'account_not_found' });
    if (account.closed_at !== null) return account;
    await setClosingAt(trx, accountId, now);
    await revokeActiveApiKeys(trx, accountId, now);
    onCommit(trx, () => invalidateAccountKeys(app, accountId));
    try {
      await markAccountChanging(app, accountId);
    } catch (err) {
      app.log.error({ err, accountId }, 'could not mark the account changing in Redis; the closure is abandoned');
      throw dependencyDown(
        err,
        undefined,
        'The account was not closed: the service could not make every server forget its API keys. Nothing changed; retry later.',
      );
    }
    return (await lockAccount(trx, accountId))!;
  });
}

/**
 * The last step, in the caller's transaction: keys revoked again (one made meanwhile), links
 * closed, every message to the address deleted, and the person's data erased (eraseAccount).
 */
export async function eraseClosingAccount(app: ClosingDeps, trx: Trx, account: Account, now: Date): Promise<void> {
  await revokeActiveApiKeys(trx, account.id, now);
  await closeVerificationTokens(trx, account.id, now);
  await deleteEmailsTo(trx, account.email);
  await eraseAccount(trx, account.id, tombstoneEmail(account.id), now);
  onCommit(trx, () => invalidateAccountKeys(app, account.id));
}

/** Reads and locks the account for the last step. */
export function lockClosingAccount(trx: Trx, accountId: string): Promise<Account | undefined> {
  return lockAccount(trx, accountId);
}
