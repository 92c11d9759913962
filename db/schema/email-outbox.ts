import type { ColumnType, Generated } from 'kysely';

export type OutboxStatus = 'pending' | 'sent' | 'failed';

export interface EmailOutboxTable {
  id: Generated<string>;
  to_address: string;
  subject: string;
  text_body: string;
  html_body: string;
  /** What the message is for (verification, invoice, ...), for logs and metrics. */
  kind: string;
  /** The one-time token the message's link carries, until it is sent or given up; then cut from the bodies. */
  link_token: string | null;
  status: ColumnType<OutboxStatus, OutboxStatus | undefined, OutboxStatus>;
  attempts: ColumnType<number, number | undefined, number>;
  next_attempt_at: ColumnType<Date, Date | undefined, Date>;
  last_error: string | null;
  provider_message_id: string | null;
  sent_at: Date | null;
  created_at: ColumnType<Date, Date | undefined, never>;
}
