// `npm test`: the same "make sure" steps as `npm start`, then the whole mocha suite against real
// Postgres and Redis. Each run gets its own database and its own Redis key prefix, removed at the end.
import { spawn } from 'node:child_process';
import path from 'node:path';
import { OUT_DIR, ROOT, build, checkStructure, createDatabase, dropDatabase, ensureChromium, ensureDependencies, ensurePgBouncer, ensurePostgres, ensureRedis, main, migrate, say } from './lib/setup.mjs';

await main(async () => {
  ensureDependencies();
  build();
  checkStructure();
  const runId = `${Date.now().toString(36)}${process.pid.toString(36)}`;
  const dbName = `svc_test_${runId}`;
  const postgres = await ensurePostgres(dbName);
  // With DATABASE_URL set, the run still gets a database of its own on that server, never the one named.
  if (process.env.DATABASE_URL) postgres.url = await createDatabase(postgres.serverUrl, dbName);
  const redis = await ensureRedis();
  const env = {
    ...process.env,
    NODE_ENV: 'test',
    DATABASE_URL: postgres.url,
    PG_SERVER_URL: postgres.serverUrl,
    REDIS_URL: redis.url,
    REDIS_PREFIX: `test_${runId}`,
  };
  await migrate(env);
  ensureChromium();
  ensurePgBouncer();

  // `npm test -- path/to/file.test.js --grep x` runs a part; with no file given, the whole suite.
  const args = process.argv.slice(2);
  const files = args.filter((a) => a.endsWith('.js'));
  // A provider's tests live in its folder under src/providers/ (CONVENTIONS: a provider is one folder).
  const specs = files.length ? [] : [path.join(OUT_DIR, 'test', '**', '*.test.js'), path.join(OUT_DIR, 'src', 'providers', '**', '*.test.js')];
  const mochaArgs = ['--require', path.join(OUT_DIR, 'test', 'support', 'hooks.js'), ...specs, ...args];
  const mocha = spawn(process.execPath, ['--enable-source-maps', path.join(ROOT, 'node_modules', 'mocha', 'bin', 'mocha.js'), ...mochaArgs], {
    cwd: ROOT,
    env,
    stdio: 'inherit',
  });
  const forward = (sig) => mocha.kill(sig);
  process.on('SIGINT', forward);
  process.on('SIGTERM', forward);
  const code = await new Promise((resolve) => mocha.once('exit', (c, s) => resolve(c ?? (s ? 1 : 0))));

  say('cleaning up the test database and Redis keys');
  await dropDatabase(postgres.serverUrl, dbName).catch((err) => say(`could not drop ${dbName}: ${err.message}`));
  await dropTestDatabases(postgres.serverUrl, dbName);
  await clearRedisPrefix(redis.url, env.REDIS_PREFIX);
  await postgres.stop();
  await redis.stop();
  process.exit(code);
});

/** Databases the tests cloned from this run's database are named after it. */
async function dropTestDatabases(serverUrl, prefix) {
  const { default: pg } = await import('pg');
  const u = new URL(serverUrl);
  u.pathname = '/postgres';
  const c = new pg.Client({ connectionString: u.toString() });
  await c.connect();
  try {
    const { rows } = await c.query('select datname from pg_database where datname like $1', [`${prefix}%`]);
    for (const { datname } of rows) await c.query(`drop database if exists "${datname}" with (force)`);
  } finally {
    await c.end();
  }
}

async function clearRedisPrefix(url, prefix) {
  const { Redis } = await import('ioredis');
  const r = new Redis(url, { maxRetriesPerRequest: 1 });
  try {
    let cursor = '0';
    do {
      const [next, keys] = await r.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 1000);
      cursor = next;
      if (keys.length) await r.unlink(...keys);
    } while (cursor !== '0');
  } finally {
    r.disconnect();
  }
}
