import type { ColumnType, Generated } from 'kysely';

export interface EmailVerificationTokensTable {
  id: Generated<string>;
  account_id: string;
  /** SHA-256 of the token, hex. */
  token_hash: string;
  expires_at: Date;
  used_at: Date | null;
  created_at: ColumnType<Date, Date | undefined, never>;
}
