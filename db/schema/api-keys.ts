import type { ColumnType, Generated } from 'kysely';

export interface ApiKeysTable {
  id: Generated<string>;
  account_id: string;
  /** SHA-256 of the whole key, hex. The key itself is never stored. */
  key_hash: string;
  /** The first characters of the key, safe to show so a user can tell keys apart. */
  display_prefix: string;
  /** The last 4 characters of the key, for its redacted value; null on keys issued before it was kept. */
  last4: string | null;
  name: ColumnType<string, string | undefined, string>;
  /** The interface's key (issued at verification, replaced by regeneration): one live per account. */
  is_default: ColumnType<boolean, boolean | undefined, boolean>;
  created_at: ColumnType<Date, Date | undefined, never>;
  /** Updated at most once a minute per key and web process (key-last-used.ts). */
  last_used_at: Date | null;
  expires_at: Date | null;
  /** The models the key may use, or null for every model of the account's tier. */
  models: string[] | null;
  requests_per_minute: number | null;
  /** numeric(9,2), e.g. "25.00", or null for none. */
  monthly_spend_limit_usd: ColumnType<string | null, string | null | undefined, string | null>;
  disabled: ColumnType<boolean, boolean | undefined, boolean>;
  revoked_at: Date | null;
}
