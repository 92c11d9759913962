// The "make sure" steps shared by `npm start` and `npm test`: dependencies installed, code built,
// Postgres and Redis reachable (starting private ones under var/ when the machine has none).
// Plain JavaScript on purpose: it runs before TypeScript or any dependency is installed.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, chownSync, readFileSync, rmSync, statSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const VAR = path.join(ROOT, 'var');

export const say = (msg) => process.stderr.write(`[setup] ${msg}\n`);

export class SetupError extends Error {}

function run(cmd, args, opts = {}) {
  const r = spawnSync(cmd, args, { cwd: ROOT, stdio: opts.quiet ? 'pipe' : 'inherit', encoding: 'utf8', ...opts });
  if (r.error) throw new SetupError(`${cmd} could not run: ${r.error.message}`);
  if (r.status !== 0) {
    const out = opts.quiet ? `\n${r.stdout ?? ''}${r.stderr ?? ''}` : '';
    throw new SetupError(`${cmd} ${args.join(' ')} exited with ${r.status}${out}`);
  }
  return r;
}

function which(cmd) {
  const r = spawnSync('sh', ['-c', `command -v ${cmd}`], { encoding: 'utf8' });
  return r.status === 0 ? r.stdout.trim() : undefined;
}

const isRoot = () => typeof process.getuid === 'function' && process.getuid() === 0;

/** apt-get install, only where the machine has apt-get and we run as root. */
function aptInstall(pkgs) {
  if (!isRoot() || !which('apt-get')) return false;
  say(`installing ${pkgs.join(' ')} with apt-get`);
  const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
  let r = spawnSync('apt-get', ['install', '-y', '--no-install-recommends', ...pkgs], { stdio: 'inherit', env });
  if (r.status !== 0) {
    spawnSync('apt-get', ['update'], { stdio: 'inherit', env });
    r = spawnSync('apt-get', ['install', '-y', '--no-install-recommends', ...pkgs], { stdio: 'inherit', env });
  }
  return r.status === 0;
}

export function ensureDependencies() {
  const lock = path.join(ROOT, 'package-lock.json');
  const marker = path.join(ROOT, 'node_modules', '.package-lock.json');
  // npm writes node_modules/.package-lock.json on every install: missing or older than the lockfile means stale.
  const stale = !existsSync(marker) || statSync(lock).mtimeMs > statSync(marker).mtimeMs;
  if (stale) {
    // `npm install` rather than `npm ci`: it installs the locked versions just the same, but npm 11
    // leaves other platforms' optional packages (msgpackr-extract's) out of lockfiles written with
    // omit-lockfile-registry-resolved, and `npm ci` then refuses the lockfile as out of sync.
    say('installing dependencies (npm install, from package-lock.json)');
    run('npm', ['install', '--no-audit', '--no-fund']);
  }
}

/** Where the build goes: dist/ by default; OUT_DIR lets several people build and test side by side. */
export const OUT_DIR = path.resolve(ROOT, process.env.OUT_DIR || 'dist');

export function build() {
  say(`building (tsc) into ${path.relative(ROOT, OUT_DIR)}/`);
  const tsc = path.join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc');
  const args = [
    tsc,
    '-p',
    path.join(ROOT, 'tsconfig.json'),
    '--outDir',
    OUT_DIR,
    '--tsBuildInfoFile',
    path.join(OUT_DIR, '.tsbuildinfo'),
  ];
  // BUILD_TOLERATE_ERRORS=1 is for working copies shared with someone mid-change: type errors are
  // printed but the emitted code still runs. CI never sets it, so CI fails on any type error.
  if (process.env.BUILD_TOLERATE_ERRORS === '1') {
    const r = spawnSync(process.execPath, args, { cwd: ROOT, stdio: 'inherit' });
    if (r.status !== 0) say('type errors above (tolerated because BUILD_TOLERATE_ERRORS=1)');
  } else {
    run(process.execPath, args);
  }
  buildConsole();
}

/** The console (console/, bundled by esbuild) into <OUT_DIR>/console/, in a child: esbuild is a dependency, this file runs before any. */
function buildConsole() {
  say(`building the console (esbuild) into ${path.relative(ROOT, OUT_DIR)}/console/`);
  run(process.execPath, [path.join(ROOT, 'scripts', 'build-console.mjs'), OUT_DIR]);
}

// ---------------------------------------------------------------- Chromium

export const CHROMIUM = '/usr/bin/chromium';

/**
 * The browser tests drive Debian's chromium through playwright-core (whose own browser download
 * cannot run here): installed with apt-get when missing and we are root. Elsewhere a message says
 * how to get it; the browser tests then fail with the same advice.
 */
export function ensureChromium() {
  if (process.env.CHROMIUM_PATH ? existsSync(process.env.CHROMIUM_PATH) : existsSync(CHROMIUM)) return;
  if (aptInstall(['chromium']) && existsSync(CHROMIUM)) return;
  say(
    `no Chromium at ${CHROMIUM}: install it (apt-get install chromium) or set CHROMIUM_PATH, or the browser tests fail`,
  );
}

// ---------------------------------------------------------------- PgBouncer

export const PGBOUNCER = '/usr/sbin/pgbouncer';

/**
 * The pooler tests put Debian's PgBouncer (transaction mode) in front of the test Postgres:
 * installed with apt-get when missing and we are root. Elsewhere a message says how to get it;
 * the pooler tests then fail with the same advice (test/support/private-pgbouncer.ts).
 */
export function ensurePgBouncer() {
  if (process.env.PGBOUNCER_PATH) {
    if (!existsSync(process.env.PGBOUNCER_PATH))
      say(`PGBOUNCER_PATH names ${process.env.PGBOUNCER_PATH}, which does not exist: the pooler tests fail`);
    return;
  }
  if (existsSync(PGBOUNCER) || which('pgbouncer')) return;
  if (aptInstall(['pgbouncer']) && existsSync(PGBOUNCER)) return;
  say(
    `no PgBouncer at ${PGBOUNCER}: install it (apt-get install pgbouncer) or set PGBOUNCER_PATH, or the pooler tests fail`,
  );
}

// ---------------------------------------------------------------- Containers

/**
 * The image tests build the Containerfile and run its roles with Debian's podman (runc as its
 * runtime), on a base made from Debian's packages by mmdebstrap, and read compose.yaml with
 * podman-compose; the manifest tests render
 * deploy/kubernetes with kubectl's kustomize. The Debian packages are installed with apt-get when
 * missing and we are root; kubectl is no Debian package: without it a message says so, and the
 * manifest tests fail with the same advice.
 */
export function ensureContainerTools() {
  const missing = ['podman', 'runc', 'mmdebstrap', 'podman-compose'].filter(
    (bin) => !which(bin) && !existsSync(`/usr/sbin/${bin}`),
  );
  if (missing.length && !(aptInstall(missing) && missing.every((bin) => which(bin) || existsSync(`/usr/sbin/${bin}`))))
    say(
      `no ${missing.join(', ')}: install them (apt-get install ${missing.join(' ')}), or the container image tests fail`,
    );
  if (!which('kubectl'))
    say(
      'no kubectl (https://kubernetes.io/docs/tasks/tools/): the Kubernetes manifest tests fail without its kustomize',
    );
}

// ---------------------------------------------------------------- Prometheus

export const PROMETHEUS = '/usr/bin/prometheus';
export const PROMTOOL = '/usr/bin/promtool';

/**
 * The monitoring tests run Debian's Prometheus and its promtool (one package, `prometheus`) on the
 * shipped scrape configuration, alert rules and dashboard (ops/): installed with apt-get when
 * missing and we are root. Elsewhere a message says how to get them; those tests then fail with
 * the same advice (test/support/prometheus.ts).
 */
export function ensurePrometheus() {
  const named = ['PROMETHEUS_PATH', 'PROMTOOL_PATH'].filter((v) => process.env[v]);
  for (const v of named)
    if (!existsSync(process.env[v]))
      say(`${v} names ${process.env[v]}, which does not exist: the monitoring tests fail`);
  if (named.length === 2) return;
  if ((existsSync(PROMETHEUS) || which('prometheus')) && (existsSync(PROMTOOL) || which('promtool'))) return;
  if (aptInstall(['prometheus']) && existsSync(PROMETHEUS) && existsSync(PROMTOOL)) return;
  say(
    `no Prometheus at ${PROMETHEUS} and ${PROMTOOL}: install it (apt-get install prometheus) or set PROMETHEUS_PATH and PROMTOOL_PATH, or the monitoring tests fail`,
  );
}

/**
 * The layout rules (CONVENTIONS, README "Dependency rules") and the lint: dependency-cruiser for
 * which layer may import which and for cycles in the sources (type-only imports included),
 * typescript-eslint for the rest, madge for cycles in the built code (what actually loads).
 * Each fails the run with its own report.
 */
export function checkStructure() {
  // The service's own code is held to the layer rules; the benchmark and the tests are linted too.
  const service = ['src', 'workers', 'db', 'scripts'];
  const run = (what, bin, args) => {
    const r = spawnSync(process.execPath, [path.join(ROOT, 'node_modules', ...bin), ...args], {
      cwd: ROOT,
      encoding: 'utf8',
    });
    if (r.status !== 0) throw new SetupError(`${what}:\n${r.stdout}${r.stderr}`);
  };
  run(
    'imports break the dependency rules (.dependency-cruiser.cjs)',
    ['dependency-cruiser', 'bin', 'dependency-cruise.mjs'],
    ['--config', '.dependency-cruiser.cjs', ...service, 'console'],
  );
  // The console is bundled by esbuild, which does not check types: tsc does, with the DOM's.
  run(
    'type errors in the console (console/tsconfig.json)',
    ['typescript', 'bin', 'tsc'],
    ['-p', 'console/tsconfig.json'],
  );
  run(
    'files not formatted by Prettier (run `npm run format`)',
    ['prettier', 'bin', 'prettier.cjs'],
    ['--check', '--log-level', 'warn', '.'],
  );
  run(
    'lint errors (eslint.config.js)',
    ['eslint', 'bin', 'eslint.js'],
    ['--max-warnings', '0', ...service, 'bench', 'test'],
  );
  run(
    'import cycles in the built code',
    ['madge', 'bin', 'cli.js'],
    ['--circular', '--no-spinner', '--extensions', 'js', ...['src', 'workers', 'db'].map((d) => path.join(OUT_DIR, d))],
  );
}

// ---------------------------------------------------------------- Ports

/** Whether host:port can be bound now: null when it can, else the error code (EADDRINUSE, EACCES). */
function bindProblem(host, port) {
  return new Promise((resolve) => {
    const server = net.createServer();
    server.once('error', (err) => resolve(err.code ?? 'error'));
    server.listen({ host, port, exclusive: true }, () => server.close(() => resolve(null)));
  });
}

/** The first port after `port` that can be bound now and is not in `taken`. */
/** A port the system says is free on `host` now (what binding port 0 gets). */
export async function anyFreePort(host) {
  const server = net.createServer();
  await new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, host, resolve);
  });
  const { port } = server.address();
  await new Promise((resolve) => server.close(resolve));
  return port;
}

export async function freePortAfter(host, port, taken = []) {
  for (let p = port + 1; p < Math.min(port + 200, 65536); p++)
    if (!taken.includes(p) && (await bindProblem(host, p)) === null) return p;
  return port + 1;
}

/**
 * Fails with one clear line when a port the service is about to bind ({ variable, port }, see
 * boundPorts in banner.mjs) is taken: otherwise the role dies on it after start-up, and whatever
 * holds the port (often another instance) answers in its place.
 */
export async function ensurePortsFree(host, ports) {
  for (const { variable, port } of ports) {
    const problem = await bindProblem(host, port);
    if (problem === null) continue;
    const other = await freePortAfter(
      host,
      port,
      ports.map((p) => p.port),
    );
    const why =
      problem === 'EADDRINUSE'
        ? 'is already in use (another instance of this service, or another program)'
        : `cannot be bound (${problem})`;
    throw new SetupError(
      `${variable}=${port}: ${host}:${port} ${why}. Stop what holds it, or choose another port, e.g. ${variable}=${other} npm start`,
    );
  }
}

// ---------------------------------------------------------------- Redis

/** Sends PING over a plain socket: no client library, no reconnect loop, an answer or not in `ms`. */
export function redisPing(host, port, ms = 1000) {
  return new Promise((resolve) => {
    const s = net.connect({ host, port });
    const done = (ok) => {
      s.destroy();
      resolve(ok);
    };
    s.setTimeout(ms, () => done(false));
    s.once('error', () => done(false));
    s.once('connect', () => s.write('PING\r\n'));
    s.once('data', (d) => done(d.toString().startsWith('+PONG') || d.toString().startsWith('-NOAUTH')));
  });
}

const PRIVATE_REDIS_PORT = 6390;

/** Returns { url, chosen, stop } for a Redis that answers; `chosen` says which one, for the start-up lines. */
export async function ensureRedis() {
  if (process.env.REDIS_CLUSTER_NODES) {
    // A Redis Cluster of the operator's: nothing to start; one seed node answering is enough to begin.
    const nodes = process.env.REDIS_CLUSTER_NODES.split(',')
      .map((s) => s.trim())
      .filter(Boolean);
    const answers = await Promise.all(
      nodes.map((n) => {
        const i = n.lastIndexOf(':');
        return redisPing(n.slice(0, i).replace(/^\[|\]$/g, ''), Number(n.slice(i + 1)), 3000);
      }),
    );
    if (!answers.some(Boolean))
      throw new SetupError(
        `REDIS_CLUSTER_NODES is set to ${process.env.REDIS_CLUSTER_NODES} but no node answers there`,
      );
    return { url: '', clusterNodes: nodes.join(','), chosen: 'from REDIS_CLUSTER_NODES', stop: async () => {} };
  }
  if (process.env.REDIS_URL) {
    const u = new URL(process.env.REDIS_URL);
    if (!(await redisPing(u.hostname, Number(u.port || 6379), 3000))) {
      throw new SetupError(`REDIS_URL is set to ${process.env.REDIS_URL} but nothing answers there`);
    }
    return { url: process.env.REDIS_URL, chosen: 'from REDIS_URL', stop: async () => {} };
  }
  if (await redisPing('127.0.0.1', 6379))
    return { url: 'redis://127.0.0.1:6379', chosen: 'the server on 127.0.0.1:6379', stop: async () => {} };
  if (await redisPing('127.0.0.1', PRIVATE_REDIS_PORT)) {
    // Possibly another checkout's: the port is the same for every checkout.
    return {
      url: `redis://127.0.0.1:${PRIVATE_REDIS_PORT}`,
      chosen: `a private server already running on 127.0.0.1:${PRIVATE_REDIS_PORT}`,
      stop: async () => {},
    };
  }

  let bin = which('redis-server');
  if (!bin && aptInstall(['redis-server'])) bin = which('redis-server');
  if (!bin) {
    throw new SetupError(
      'no Redis found: install Redis (apt-get install redis-server, or brew install redis) or set REDIS_URL',
    );
  }
  const dir = path.join(VAR, 'redis');
  mkdirSync(dir, { recursive: true });
  say(`starting a private Redis on 127.0.0.1:${PRIVATE_REDIS_PORT} (data in var/redis)`);
  // Append-only so queued jobs and unmetered usage survive a restart of the private server.
  run(
    bin,
    [
      '--port',
      String(PRIVATE_REDIS_PORT),
      '--bind',
      '127.0.0.1',
      '--dir',
      dir,
      '--daemonize',
      'yes',
      '--pidfile',
      path.join(dir, 'redis.pid'),
      '--logfile',
      path.join(dir, 'redis.log'),
      '--appendonly',
      'yes',
      '--save',
      '',
      '--maxmemory-policy',
      'noeviction',
    ],
    { quiet: true },
  );
  for (let i = 0; i < 100; i++) {
    if (await redisPing('127.0.0.1', PRIVATE_REDIS_PORT, 200)) break;
    await new Promise((r) => setTimeout(r, 50));
  }
  return {
    url: `redis://127.0.0.1:${PRIVATE_REDIS_PORT}`,
    chosen: `a private server started now under var/redis`,
    stop: async () => {
      const cli = which('redis-cli');
      if (cli) spawnSync(cli, ['-p', String(PRIVATE_REDIS_PORT), 'shutdown'], { stdio: 'ignore' });
      else {
        const pid = Number(readFileSync(path.join(dir, 'redis.pid'), 'utf8'));
        if (pid) process.kill(pid, 'SIGTERM');
      }
    },
  };
}

// ---------------------------------------------------------------- Postgres

const PRIVATE_PG_PORT = 54329;

async function pgConnects(url) {
  const { default: pg } = await import('pg');
  const c = new pg.Client({ connectionString: url, connectionTimeoutMillis: 2000 });
  try {
    await c.connect();
    await c.query('select 1');
    return true;
  } catch (err) {
    return err?.code === '3D000' ? 'no-database' : false;
  } finally {
    await c.end().catch(() => {});
  }
}

function withDatabase(url, db) {
  const u = new URL(url);
  u.pathname = `/${db}`;
  return u.toString();
}

export async function createDatabase(serverUrl, name, template) {
  const { default: pg } = await import('pg');
  const c = new pg.Client({ connectionString: withDatabase(serverUrl, 'postgres'), connectionTimeoutMillis: 3000 });
  await c.connect();
  try {
    const exists = await c.query('select 1 from pg_database where datname = $1', [name]);
    if (exists.rowCount === 0) await c.query(`create database "${name}"${template ? ` template "${template}"` : ''}`);
  } finally {
    await c.end();
  }
  return withDatabase(serverUrl, name);
}

export async function dropDatabase(serverUrl, name) {
  const { default: pg } = await import('pg');
  const c = new pg.Client({ connectionString: withDatabase(serverUrl, 'postgres'), connectionTimeoutMillis: 3000 });
  await c.connect();
  try {
    await c.query(`drop database if exists "${name}" with (force)`);
  } finally {
    await c.end();
  }
}

function findPgBin(name) {
  const onPath = which(name);
  if (onPath) return onPath;
  const base = '/usr/lib/postgresql';
  if (!existsSync(base)) return undefined;
  const versions = readdirSync(base)
    .filter((v) => existsSync(path.join(base, v, 'bin', name)))
    .sort((a, b) => Number(b) - Number(a));
  return versions[0] ? path.join(base, versions[0], 'bin', name) : undefined;
}

/**
 * Returns { serverUrl, url, chosen, stop } where url names `dbName` (created when missing) and
 * `chosen` says which server, for the start-up lines.
 * DATABASE_URL wins; then a server on localhost:5432; then a private cluster under var/postgres.
 */
export async function ensurePostgres(dbName) {
  if (process.env.DATABASE_URL) {
    const state = await pgConnects(process.env.DATABASE_URL);
    if (state === false) throw new SetupError(`DATABASE_URL is set but Postgres does not answer there`);
    const name = new URL(process.env.DATABASE_URL).pathname.slice(1);
    if (state === 'no-database') await createDatabase(process.env.DATABASE_URL, name);
    return {
      serverUrl: process.env.DATABASE_URL,
      url: process.env.DATABASE_URL,
      chosen: 'from DATABASE_URL',
      stop: async () => {},
    };
  }
  const users = [...new Set([process.env.PGUSER, 'postgres', os.userInfo().username].filter(Boolean))];
  for (const user of users) {
    const serverUrl = `postgres://${encodeURIComponent(user)}@127.0.0.1:5432/postgres`;
    if ((await pgConnects(serverUrl)) === true) {
      return {
        serverUrl,
        url: await createDatabase(serverUrl, dbName),
        chosen: 'the server on 127.0.0.1:5432',
        stop: async () => {},
      };
    }
  }
  const privateUrl = `postgres://postgres@127.0.0.1:${PRIVATE_PG_PORT}/postgres`;
  if ((await pgConnects(privateUrl)) === true) {
    // Possibly another checkout's: the port is the same for every checkout.
    const chosen = `a private server already running on 127.0.0.1:${PRIVATE_PG_PORT}`;
    return { serverUrl: privateUrl, url: await createDatabase(privateUrl, dbName), chosen, stop: async () => {} };
  }
  return startPrivatePostgres(dbName);
}

async function startPrivatePostgres(dbName) {
  let initdb = findPgBin('initdb');
  if (!initdb && aptInstall(['postgresql'])) initdb = findPgBin('initdb');
  const pgCtl = findPgBin('pg_ctl');
  if (!initdb || !pgCtl) {
    throw new SetupError(
      'no PostgreSQL found: install PostgreSQL (apt-get install postgresql, or brew install postgresql) or set DATABASE_URL',
    );
  }
  const dir = path.join(VAR, 'postgres');
  const data = path.join(dir, 'data');
  mkdirSync(dir, { recursive: true });
  // Postgres refuses to run as root: as root, run it as the `postgres` system user.
  let asUser = [];
  if (isRoot()) {
    const id = spawnSync('id', ['-u', 'postgres'], { encoding: 'utf8' });
    if (id.status !== 0)
      throw new SetupError(
        'running as root, Postgres needs a `postgres` system user: install PostgreSQL (apt-get install postgresql) or set DATABASE_URL',
      );
    const uid = Number(id.stdout.trim());
    const gid = Number(spawnSync('id', ['-g', 'postgres'], { encoding: 'utf8' }).stdout.trim());
    chownSync(dir, uid, gid);
    asUser = ['runuser', '-u', 'postgres', '--'];
  }
  const exec = (bin, args) =>
    asUser.length
      ? run(asUser[0], [...asUser.slice(1), bin, ...args], { quiet: true })
      : run(bin, args, { quiet: true });
  if (!existsSync(path.join(data, 'PG_VERSION'))) {
    say('initialising a private Postgres cluster in var/postgres');
    rmSync(data, { recursive: true, force: true });
    exec(initdb, ['-D', data, '-U', 'postgres', '-A', 'trust', '--no-sync', '-E', 'UTF8']);
  }
  say(`starting the private Postgres on 127.0.0.1:${PRIVATE_PG_PORT}`);
  exec(pgCtl, [
    '-D',
    data,
    '-l',
    path.join(dir, 'postgres.log'),
    '-w',
    '-t',
    '60',
    '-o',
    `-p ${PRIVATE_PG_PORT} -k ${dir} -c listen_addresses=127.0.0.1`,
    'start',
  ]);
  const serverUrl = `postgres://postgres@127.0.0.1:${PRIVATE_PG_PORT}/postgres`;
  return {
    serverUrl,
    url: await createDatabase(serverUrl, dbName),
    chosen: 'a private cluster started now under var/postgres',
    stop: async () => {
      exec(pgCtl, ['-D', data, '-m', 'fast', '-w', 'stop']);
    },
  };
}

export async function migrate(env) {
  run(process.execPath, [path.join(OUT_DIR, 'scripts', 'migrate.js')], { env: { ...process.env, ...env } });
}

/** Runs `fn` and turns a SetupError into the one clear line the issue asks for. */
export async function main(fn) {
  try {
    await fn();
  } catch (err) {
    if (err instanceof SetupError) {
      process.stderr.write(`\nsetup failed: ${err.message}\n`);
      process.exit(1);
    }
    throw err;
  }
}
