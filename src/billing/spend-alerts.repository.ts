import { sql } from 'kysely';
import type { Trx } from '../infra/db.js';
import type { SpendAlertThreshold } from '../../db/schema/spend-alerts.js';

// The spend_alerts table: one row per account, UTC month and threshold, inserted in the
// transaction that queues the alert's email, so each email is queued exactly once.

/** An alert row just inserted, with what its email needs. */
export interface NewSpendAlert {
  account_id: string;
  /** "YYYY-MM-DD", the first day of the month. */
  month: string;
  threshold_percent: SpendAlertThreshold;
  monthly_limit_usd: string;
  spent_usd: string;
  email: string;
  name: string;
}

/**
 * For each (account, month) given, the thresholds its paid-tier spend in the ledger's monthly
 * totals has reached against the account's limit (paid accounts with a limit only), inserted
 * unless already there. Returns the rows inserted now: the alerts still to send.
 */
export async function insertReachedSpendAlerts(
  trx: Trx,
  pairs: { accountId: string; month: string }[],
  now: Date,
): Promise<NewSpendAlert[]> {
  if (pairs.length === 0) return [];
  const r = await sql<NewSpendAlert>`
    with pairs as (
      select * from unnest(${pairs.map((p) => p.accountId)}::uuid[], ${pairs.map((p) => p.month)}::date[]) as p(account_id, month)
    ), spend as (
      select t.account_id, t.month, sum(t.cost_usd) as spent
        from usage_monthly_totals t join pairs p on p.account_id = t.account_id and p.month = t.month
       where t.tier = 'paid'
       group by t.account_id, t.month
    ), inserted as (
      insert into spend_alerts (account_id, month, threshold_percent, monthly_limit_usd, spent_usd, created_at)
      select s.account_id, s.month, th.percent, a.monthly_spend_limit_usd, s.spent, ${now}
        from spend s
        join accounts a on a.id = s.account_id
        cross join (values (80), (100)) as th(percent)
       where a.tier = 'paid' and a.monthly_spend_limit_usd is not null
         and s.spent * 100 >= a.monthly_spend_limit_usd * th.percent
       order by s.account_id, s.month, th.percent
      on conflict do nothing
      returning account_id, month, threshold_percent, monthly_limit_usd, spent_usd
    )
    select i.account_id, to_char(i.month, 'YYYY-MM-DD') as month, i.threshold_percent, i.monthly_limit_usd::text, i.spent_usd::text, a.email, a.name
      from inserted i join accounts a on a.id = i.account_id
     order by i.account_id, i.threshold_percent`.execute(trx);
  return r.rows.map((row) => ({ ...row, threshold_percent: Number(row.threshold_percent) as SpendAlertThreshold }));
}

/** Inserts one alert unless the account has it for that month already; true when inserted. */
export async function insertSpendAlert(
  trx: Trx,
  alert: {
    accountId: string;
    month: string;
    threshold: SpendAlertThreshold;
    limitUsd: string;
    spentUsd: string;
    now: Date;
  },
): Promise<boolean> {
  const r = await trx
    .insertInto('spend_alerts')
    .values({
      account_id: alert.accountId,
      month: alert.month,
      threshold_percent: alert.threshold,
      monthly_limit_usd: alert.limitUsd,
      spent_usd: alert.spentUsd,
      created_at: alert.now,
    })
    .onConflict((oc) => oc.doNothing())
    .executeTakeFirst();
  return Number(r.numInsertedOrUpdatedRows ?? 0) === 1;
}
