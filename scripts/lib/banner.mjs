// What `npm start` says about the Postgres and Redis it chose. Two checkouts on one machine
// otherwise share the default database and key prefix without a word.
// Plain JavaScript, like setup.mjs: it runs before anything is built.
import path from 'node:path';

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
 * The ports an instance binds, as src/config.ts reads them: the web tier's PORT (8080 by default)
 * and each metrics port that is set. A second instance on the machine needs another of each.
 */
export function boundPorts(env) {
  const ports = [{ variable: 'PORT', port: Number(env.PORT?.trim() || 8080) }];
  for (const variable of ['WORKER_METRICS_PORT', 'SCHEDULER_METRICS_PORT']) {
    const value = env[variable]?.trim();
    if (value) ports.push({ variable, port: Number(value) });
  }
  // Port 0 asks the system for any free port: nothing to keep apart.
  return ports.filter((p) => Number.isInteger(p.port) && p.port > 0);
}

/**
 * The start-up lines: the database, the Redis server and key prefix, where each choice came from,
 * and the command that starts a second checkout beside this one: its own database, key prefix and
 * ports, and its own mail outbox when this one's is an absolute path (a relative one is per checkout).
 * `postgres` and `redis` are { url, chosen } as ensurePostgres() and ensureRedis() return them;
 * `freePorts` maps each of boundPorts(env)'s variables to a port free now (default: the next one).
 */
export function storesBanner({ postgres, redis, env, freePorts = {} }) {
  const prefix = redisPrefix(env);
  const second = [`DATABASE_URL=${anotherDatabase(postgres.url)}`, `REDIS_PREFIX=${prefix}_b`];
  const ports = boundPorts(env);
  for (const { variable, port } of ports) second.push(`${variable}=${freePorts[variable] ?? port + 1}`);
  const own = ['DATABASE_URL', 'REDIS_PREFIX', ...ports.map((p) => p.variable)];
  const mailDir = env.MAIL_DEV_DIR?.trim();
  if (mailDir && path.isAbsolute(mailDir)) {
    second.push(`MAIL_DEV_DIR=${mailDir.replace(/\/+$/, '')}_b`);
    own.push('MAIL_DEV_DIR');
  }
  if (env.PUBLIC_BASE_URL?.trim()) {
    const host = env.HOST?.trim() || '127.0.0.1';
    second.push(
      `PUBLIC_BASE_URL=http://${host === '0.0.0.0' ? '127.0.0.1' : host}:${freePorts.PORT ?? ports[0].port + 1}`,
    );
    own.push('PUBLIC_BASE_URL');
  }
  const named = `${own.slice(0, -1).join(', ')} and ${own[own.length - 1]}`;
  return [
    `Postgres: ${printable(postgres.url)} (${postgres.chosen})`,
    redis.clusterNodes
      ? `Redis Cluster: seed nodes ${redis.clusterNodes}, key prefix "${prefix}" (${redis.chosen})`
      : `Redis: ${printable(redis.url)}, key prefix "${prefix}" (${redis.chosen})`,
    `A second checkout on this machine needs its own ${named} (otherwise it shares this one's data or fails on a port in use), e.g.`,
    `  ${second.join(' ')} npm start`,
  ];
}
