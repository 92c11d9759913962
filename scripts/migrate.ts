import { loadConfigOrExit } from '../src/config.js';
import { createDb } from '../src/infra/db.js';
import { migrateToLatest } from '../db/migrate.js';

// The `release` role: bring the schema up to date, then exit. Safe to run on every deploy.
const config = loadConfigOrExit();
const db = createDb(config);
try {
  const applied = await migrateToLatest(db);
  process.stdout.write(
    applied.length ? `migrations applied: ${applied.join(', ')}\n` : 'migrations: already up to date\n',
  );
} catch (err) {
  process.stderr.write(`migration failed: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exitCode = 1;
} finally {
  await db.destroy();
}
