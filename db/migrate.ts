import { type Kysely, Migrator, type MigrationProvider } from 'kysely';
import { migrations } from './migrations/index.js';

const provider: MigrationProvider = { getMigrations: () => Promise.resolve(migrations) };

// Kysely<any>: the migrator runs against a schema the migrations themselves are creating.
/** Applies every pending migration; a no-op when all have run. Kysely's lock makes concurrent runs safe. */
// eslint-disable-next-line @typescript-eslint/no-explicit-any -- see above
export async function migrateToLatest(db: Kysely<any>): Promise<string[]> {
  const migrator = new Migrator({ db, provider });
  const { error, results } = await migrator.migrateToLatest();
  if (error) throw error instanceof Error ? error : new Error(JSON.stringify(error));
  return (results ?? []).filter((r) => r.status === 'Success').map((r) => r.migrationName);
}
