// `npm test`: the same "make sure" steps as `npm start`, then the whole mocha suite against real
// Postgres and one Redis server, then the Redis Cluster part of the suite against a private
// three-master cluster on loopback ports. Each run gets its own database and its own Redis key
// prefix, removed at the end.
// First: .env is loaded before any other module reads the environment.
import './lib/env-file.mjs';
import { spawn } from 'node:child_process';
import path from 'node:path';
import {
  OUT_DIR,
  ROOT,
  build,
  checkStructure,
  createDatabase,
  dropDatabase,
  ensureChromium,
  ensureDependencies,
  ensurePgBouncer,
  ensurePostgres,
  ensurePrometheus,
  ensureContainerTools,
  ensureRedis,
  main,
  migrate,
  say,
} from './lib/setup.mjs';

/**
 * The part of the suite that runs again on a Redis Cluster: completions end to end, limits,
 * metering, and the many-process tests. Tests marked ONE_REDIS_SERVER (they watch the server with
 * MONITOR) are left out.
 */
const CLUSTER_SUITE = [
  'test/e2e/chat-local.test.js',
  'test/e2e/chat-limits.test.js',
  'test/e2e/chat-failures.test.js',
  'test/e2e/fleet.test.js',
  'test/integration/limiter.test.js',
  'test/integration/limits-remaining.test.js',
  'test/integration/redis-scripts.test.js',
  'test/integration/metering-totals.test.js',
];

/** Credentials of the paid outside services (model providers, Stripe, Postmark). */
const OUTSIDE_SERVICE_KEY = /^(\w+_API_KEY|STRIPE_SECRET_KEY|STRIPE_WEBHOOK_SECRET|POSTMARK_SERVER_TOKEN)$/;

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
  // The suite replaces the paid outside services with local fakes: keys to the real ones, from
  // .env or the shell, are not passed to it.
  const realKeys = Object.keys(process.env).filter((k) => process.env[k] && OUTSIDE_SERVICE_KEY.test(k));
  if (realKeys.length) say(`not passed to the tests, which use local fakes: ${realKeys.join(', ')}`);
  const env = {
    ...process.env,
    ...Object.fromEntries(realKeys.map((k) => [k, ''])),
    NODE_ENV: 'test',
    DATABASE_URL: postgres.url,
    PG_SERVER_URL: postgres.serverUrl,
    REDIS_URL: redis.url,
    REDIS_PREFIX: `test_${runId}`,
    // The tests' own development JWT secret, apart from the checkout's (var/jwt-secret).
    JWT_SECRET_FILE: path.join(ROOT, 'var', 'test', 'jwt-secret'),
  };
  await migrate(env);
  ensureChromium();
  ensurePgBouncer();
  ensurePrometheus();
  ensureContainerTools();

  // `npm test -- path/to/file.test.js --grep x` runs a part (on one Redis server, or with
  // --cluster on the cluster); with no file given, the whole suite, then its cluster part.
  const args = process.argv.slice(2).filter((a) => a !== '--cluster');
  const clusterOnly = process.argv.includes('--cluster');
  const files = args.filter((a) => a.endsWith('.js'));
  // A provider's tests live in its folder under src/providers/ (CONVENTIONS: a provider is one folder).
  const specs = files.length
    ? []
    : [path.join(OUT_DIR, 'test', '**', '*.test.js'), path.join(OUT_DIR, 'src', 'providers', '**', '*.test.js')];
  let code = clusterOnly ? 0 : await mocha([...specs, ...args], env);
  if (code === 0 && (clusterOnly || files.length === 0))
    code = await clusterRun(
      clusterOnly && files.length ? args : [...CLUSTER_SUITE.map((f) => path.join(OUT_DIR, f)), ...args],
      env,
      runId,
    );

  say('cleaning up the test database and Redis keys');
  await dropDatabase(postgres.serverUrl, dbName).catch((err) => say(`could not drop ${dbName}: ${err.message}`));
  await dropTestDatabases(postgres.serverUrl, dbName);
  await clearRedisPrefix(redis.url, env.REDIS_PREFIX);
  await postgres.stop();
  await redis.stop();
  process.exit(code);
});

/** Runs mocha over `specs` with `env`; resolves with its exit code. */
async function mocha(specs, env) {
  const args = ['--require', path.join(OUT_DIR, 'test', 'support', 'hooks.js'), ...specs];
  const child = spawn(
    process.execPath,
    ['--enable-source-maps', path.join(ROOT, 'node_modules', 'mocha', 'bin', 'mocha.js'), ...args],
    { cwd: ROOT, env, stdio: 'inherit' },
  );
  const forward = (sig) => child.kill(sig);
  process.on('SIGINT', forward);
  process.on('SIGTERM', forward);
  try {
    return await new Promise((resolve) => child.once('exit', (c, s) => resolve(c ?? (s ? 1 : 0))));
  } finally {
    process.off('SIGINT', forward);
    process.off('SIGTERM', forward);
  }
}

/** The cluster part: a private three-master Redis Cluster, REDIS_SHARDS=3, torn down after. */
async function clusterRun(specs, env, runId) {
  const { LocalRedisCluster } = await import(path.join(OUT_DIR, 'test', 'support', 'redis-cluster.js'));
  say('starting a private Redis Cluster (three masters on loopback ports) for the cluster part of the suite');
  const cluster = await new LocalRedisCluster({ masters: 3 }).start();
  try {
    const { REDIS_URL: _oneServer, ...rest } = env;
    const clusterEnv = {
      ...rest,
      REDIS_CLUSTER_NODES: cluster.seeds,
      REDIS_SHARDS: '3',
      REDIS_PREFIX: `test_${runId}_cluster`,
    };
    say(`Redis Cluster part: ${specs.length} file(s) on ${cluster.seeds}`);
    return await mocha([...specs, '--grep', '\\[one Redis server\\]', '--invert'], clusterEnv);
  } finally {
    await cluster.stop();
  }
}

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
