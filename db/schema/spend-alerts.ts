import type { ColumnType } from 'kysely';

/** 80: the month's spend reached 80% of the limit; 100: it reached the limit, or the limit refused a request. */
export type SpendAlertThreshold = 80 | 100;

/** One row per account, UTC month and threshold: the alert email of that threshold was queued. */
export interface SpendAlertsTable {
  account_id: string;
  /** First day of the UTC month. */
  month: ColumnType<Date, Date | string, Date | string>;
  threshold_percent: SpendAlertThreshold;
  /** The limit when the alert was queued (numeric, "25.00"). */
  monthly_limit_usd: string;
  /** The month's spend the alert was decided on (numeric, exact). */
  spent_usd: string;
  created_at: ColumnType<Date, Date | undefined, never>;
}
