import type { Selectable } from 'kysely';
import type { AccountsTable } from '../../db/schema/accounts.js';

/** An account as every room reads it: its row in `accounts`. */
export type Account = Selectable<AccountsTable>;
