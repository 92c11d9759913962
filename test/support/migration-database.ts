import { Kysely, Migrator, PostgresDialect, type MigrationResultSet } from 'kysely';
import pg from 'pg';
import { migrations } from '../../db/migrations/index.js';

/**
 * A database of its own for a migration test, made before the suite's tests and dropped after
 * them: `migrateTo` applies the named migrations (the ones before the migration under test, then
 * all). Named after the run's database, so `npm test` drops it even if the file cannot.
 * Kysely<unknown>, as the migrations see it: the schema is what they make it.
 */
export function migrationDatabase(suffix: string): {
  db: () => Kysely<unknown>;
  /** Its connection URL, for a process of its own (a container's DATABASE_URL). */
  url: () => string;
  migrateTo: (names: string[]) => Promise<MigrationResultSet>;
} {
  const runDatabase = new URL(process.env.DATABASE_URL!).pathname.slice(1);
  const database = `${runDatabase}_${suffix}`;
  let admin: pg.Client | undefined;
  let db: Kysely<unknown> | undefined;
  let url: string | undefined;

  before(async () => {
    const server = new URL(process.env.PG_SERVER_URL ?? process.env.DATABASE_URL!);
    server.pathname = '/postgres';
    admin = new pg.Client({ connectionString: server.toString() });
    await admin.connect();
    await admin.query(`drop database if exists "${database}" with (force)`);
    await admin.query(`create database "${database}"`);
    server.pathname = `/${database}`;
    url = server.toString();
    const pool = new pg.Pool({ connectionString: url });
    // The forced drop at the end ends any connection still open; that is expected, not a failure.
    pool.on('error', () => {});
    pool.on('connect', (client) => client.on('error', () => {}));
    db = new Kysely({ dialect: new PostgresDialect({ pool }) });
  });
  after(async () => {
    await db?.destroy();
    await admin?.query(`drop database if exists "${database}" with (force)`);
    await admin?.end();
  });

  return {
    db: () => db!,
    url: () => url!,
    migrateTo: (names) =>
      new Migrator({
        db: db!,
        provider: { getMigrations: () => Promise.resolve(Object.fromEntries(names.map((n) => [n, migrations[n]!]))) },
      }).migrateToLatest(),
  };
}
