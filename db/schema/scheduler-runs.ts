import type { ColumnType, Generated } from 'kysely';

/** One row per scheduled job and period, so a missed run is found and caught up at start. */
export interface SchedulerRunsTable {
  id: Generated<string>;
  job: string;
  /** The period the run covers, e.g. 2026-10 for a monthly invoicing run. */
  period_key: string;
  status: 'running' | 'succeeded' | 'failed';
  started_at: ColumnType<Date, Date | undefined, Date>;
  finished_at: Date | null;
  details: ColumnType<unknown, string | undefined, string | undefined>;
}
