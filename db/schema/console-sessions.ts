import type { ColumnType, Generated } from 'kysely';

export interface SignInTokensTable {
  id: Generated<string>;
  account_id: string;
  /** SHA-256 of the token in the emailed link, hex. */
  token_hash: string;
  /** Where the browser goes once signed in: a same-origin path. */
  return_to: string;
  expires_at: Date;
  used_at: Date | null;
  created_at: ColumnType<Date, Date | undefined, never>;
}

export interface ConsoleSessionsTable {
  id: Generated<string>;
  account_id: string;
  /** SHA-256 of the session cookie's value, hex. */
  id_hash: string;
  created_at: Date;
  last_seen_at: Date;
  /** The absolute end of the session, whatever its activity. */
  expires_at: Date;
  revoked_at: Date | null;
  /** The key a verification issued, encrypted with the cookie's key, until shown once. */
  pending_api_key: string | null;
}
