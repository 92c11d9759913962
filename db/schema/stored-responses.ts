import type { ColumnType } from 'kysely';

/** A stored status of a Responses API object (OpenAI's `Response.status`). */
export type StoredResponseStatus = 'queued' | 'in_progress' | 'completed' | 'incomplete' | 'failed' | 'cancelled';

// jsonb: pg returns it parsed; Kysely is given JSON text on the way in.
type Json<T> = ColumnType<T, string, string>;

export interface StoredResponsesTable {
  /** `resp_…` */
  id: string;
  account_id: string;
  status: StoredResponseStatus;
  response: Json<Record<string, unknown>>;
  input_items: Json<Record<string, unknown>[]>;
  created_at: Date;
  updated_at: Date;
  expires_at: Date;
}
