import type { ColumnType } from 'kysely';

export interface ProcessedWebhookEventsTable {
  event_id: string;
  type: string;
  received_at: ColumnType<Date, Date | undefined, never>;
}
