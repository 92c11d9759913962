import type { Clock } from '../clock.js';
import type { Logger } from '../logger.js';
import { transaction, type Db } from '../infra/db.js';
import type { Account } from '../accounts/account.js';
import { paidAccountsWithSpendLimit } from '../accounts/account-billing.service.js';
import { queueEmail } from '../accounts/email-outbox.service.js';
import type { Limiter, SpendRefusal } from '../limits/limiter.service.js';
import type { UsageEvent } from '../usage/usage-event.js';
import { usdOfNano } from '../usage/usage-cost.js';
import { monthOf, parseMonthKey } from '../calendar.js';
import { insertReachedSpendAlerts, insertSpendAlert } from './spend-alerts.repository.js';
import { spendAlertEmail } from './spend-alerts.emails.js';

// Emails at 80% and 100% of a spending limit, once each per account and month. Two places see a
// threshold: metering, each time ledger rows land (the month's spend as billed has reached 80% or
// 100%), and admission, the first time in a month the limit refuses a request that an unspent
// limit would take (reservations keep the spend itself just below 100%, so without this a limit
// that stops traffic might never be "reached"). Both insert the same unique row with the email in
// one transaction: whichever comes first sends it, nothing sends it twice, and the outbox delivers
// it whenever Postmark answers.

/** What the alerts work with: the ledger and outbox, and the time the rows and emails get. */
export interface SpendAlertDeps {
  db: Db;
  clock: Clock;
}

/**
 * After ledger rows were written: queues the alerts their accounts' months have now reached.
 * Decided on levels, not crossings, so a batch delivered again (or a check that failed) is made
 * good by the next look. Returns how many alerts were queued.
 */
export async function queueReachedSpendAlerts(app: SpendAlertDeps, events: readonly UsageEvent[]): Promise<number> {
  const pairs = new Map<string, { accountId: string; month: string }>();
  for (const e of events) {
    if (e.tier !== 'paid') continue;
    const month = monthOf(new Date(e.created_at)).start.toISOString().slice(0, 10);
    pairs.set(`${e.account_id} ${month}`, { accountId: e.account_id, month });
  }
  if (pairs.size === 0) return 0;
  // One cheap read first: most batches hold no account with a limit, and need no transaction.
  const limited = new Set(
    await paidAccountsWithSpendLimit(app.db, [...new Set([...pairs.values()].map((p) => p.accountId))]),
  );
  const candidates = [...pairs.values()].filter((p) => limited.has(p.accountId));
  if (candidates.length === 0) return 0;
  return transaction(app.db, async (trx) => {
    const now = app.clock.now();
    const reached = await insertReachedSpendAlerts(trx, candidates, now);
    for (const a of reached) {
      const month = parseMonthKey(a.month.slice(0, 7))!;
      await queueEmail(
        trx,
        spendAlertEmail({
          to: a,
          threshold: a.threshold_percent,
          month,
          limitUsd: a.monthly_limit_usd,
          spentUsd: a.spent_usd,
        }),
        now,
      );
    }
    return reached.length;
  });
}

/**
 * After the month's first refusal by the spending limit (SpendRefusal.firstThisMonth): the 100%
 * alert, unless metering queued it already. Never throws: a refusal is answered whatever happens
 * here, and when the alert cannot be written the refusal is forgotten, so the next one tries again.
 */
export async function alertSpendLimitReached(
  app: SpendAlertDeps & { limiter: Limiter; log: Logger },
  account: Pick<Account, 'id' | 'name' | 'email' | 'monthly_spend_limit_usd'>,
  refusal: SpendRefusal,
): Promise<void> {
  if (!refusal.firstThisMonth) return;
  const limitUsd = account.monthly_spend_limit_usd ?? usdOfNano(refusal.limitNanoUsd);
  const spentUsd = usdOfNano(refusal.usedNanoUsd);
  try {
    await transaction(app.db, async (trx) => {
      const now = app.clock.now();
      const month = refusal.month.start.toISOString().slice(0, 10);
      if (await insertSpendAlert(trx, { accountId: account.id, month, threshold: 100, limitUsd, spentUsd, now })) {
        await queueEmail(
          trx,
          spendAlertEmail({ to: account, threshold: 100, month: refusal.month, limitUsd, spentUsd }),
          now,
        );
      }
    });
  } catch (err) {
    app.log.warn(
      { err, accountId: account.id },
      'could not queue the spending-limit alert; the next refusal tries again',
    );
    await app.limiter.forgetSpendRefusal(account.id, refusal.month).catch(() => undefined);
  }
}
