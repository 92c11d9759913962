import { sql } from 'kysely';
import type { Db } from '../infra/db.js';

/** The cheapest query that proves Postgres answers on this pool. */
export async function pingDatabase(db: Db): Promise<void> {
  await sql`select 1`.execute(db);
}
