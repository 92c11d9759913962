// What `npm start` says about the Postgres and Redis it chose. Two checkouts on one machine
// otherwise share the default database and key prefix without a word.
// Plain JavaScript, like setup.mjs: it runs before anything is built.

const HIDDEN = '***';

/**
 * A connection URL fit for a terminal: the password (user part or a password-like query parameter)
 * replaced by ***. A URL that does not parse is not shown at all, since any part of it could be the
 * password.
 */
function printable(url) {
  let u;
  try {
    u = new URL(url);
  } catch {
    return '(not shown: it does not parse as a URL)';
  }
  if (u.password) u.password = HIDDEN;
  for (const name of [...u.searchParams.keys()]) if (/pass/i.test(name)) u.searchParams.set(name, HIDDEN);
  u.hash = '';
  return u.href;
}

/** REDIS_PREFIX as src/config.ts reads it (trimmed, blank means unset) and its default there. */
function redisPrefix(env) {
  return env.REDIS_PREFIX?.trim() || 'svc';
}

/** The same server with another database (npm start creates it), as an example to copy. */
function anotherDatabase(url) {
  try {
    const u = new URL(url);
    u.pathname = `${u.pathname.replace(/\/+$/, '')}_b`;
    return printable(u.href);
  } catch {
    return '<another database>';
  }
}

/**
 * The start-up lines: the database, the Redis server and key prefix, where each choice came from,
 * and how to keep a second checkout apart.
 * `postgres` and `redis` are { url, chosen } as ensurePostgres() and ensureRedis() return them.
 */
export function storesBanner({ postgres, redis, env }) {
  const prefix = redisPrefix(env);
  return [
    `Postgres: ${printable(postgres.url)} (${postgres.chosen})`,
    redis.clusterNodes
      ? `Redis Cluster: seed nodes ${redis.clusterNodes}, key prefix "${prefix}" (${redis.chosen})`
      : `Redis: ${printable(redis.url)}, key prefix "${prefix}" (${redis.chosen})`,
    'A second checkout on this machine shares both unless it sets its own DATABASE_URL and REDIS_PREFIX, e.g.',
    `  DATABASE_URL=${anotherDatabase(postgres.url)} REDIS_PREFIX=${prefix}_b npm start`,
  ];
}
