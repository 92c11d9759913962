import type { ColumnType, Generated } from 'kysely';

export interface ApiKeysTable {
  id: Generated<string>;
  account_id: string;
  /** SHA-256 of the whole key, hex. The key itself is never stored. */
  key_hash: string;
  /** The first characters of the key, safe to show so a user can tell keys apart. */
  display_prefix: string;
  created_at: ColumnType<Date, Date | undefined, never>;
  revoked_at: Date | null;
}
