import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { chownSync, existsSync, mkdtempSync, writeFileSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { freePort } from './private-redis.js';

/** Where Debian puts it (/usr/sbin is often not on a user's PATH), then the PATH. */
const candidates = (): string[] => [
  '/usr/sbin/pgbouncer',
  ...(process.env.PATH ?? '')
    .split(path.delimiter)
    .filter(Boolean)
    .map((dir) => path.join(dir, 'pgbouncer')),
];

/**
 * Debian's PgBouncer, or an error saying how to get it: a test that needs the pooler fails with
 * that reason, it is never skipped. `npm test` installs it itself where it runs as root with
 * apt-get (scripts/lib/setup.mjs).
 */
export function pgbouncerBinary(): string {
  const places = process.env.PGBOUNCER_PATH ? [process.env.PGBOUNCER_PATH] : candidates();
  const found = places.find((c) => existsSync(c));
  if (found) return found;
  const where = process.env.PGBOUNCER_PATH ? `PGBOUNCER_PATH (${process.env.PGBOUNCER_PATH})` : '/usr/sbin or the PATH';
  throw new Error(
    `this test needs PgBouncer, not found in ${where}: install it (apt-get install pgbouncer, or brew install pgbouncer) or set PGBOUNCER_PATH to the binary`,
  );
}

const running = new Set<PrivatePgBouncer>();

/** Stops every PgBouncer a test started and did not stop (a failed before hook): no process outlives the run. */
export async function stopAllPgBouncers(): Promise<void> {
  await Promise.all([...running].map((b) => b.stop()));
}

export interface PgBouncerOptions {
  /** Databases of the server, served under the same names. */
  databases: string[];
  /** Server sessions per database at most; clients beyond it take turns. */
  poolSize?: number;
}

/**
 * A PgBouncer of a test's own, in transaction mode, on a free loopback port in front of the
 * Postgres server `serverUrl` names: between transactions a client's statements move between
 * server sessions. With server_round_robin and a pool that holds several sessions (start() opens
 * them), they move every time, so whatever depends on session state fails every time, not now
 * and then. Logs are kept for failure reports (output()).
 */
export class PrivatePgBouncer {
  private readonly dir = mkdtempSync(path.join(os.tmpdir(), 'svc-pgbouncer-'));
  private proc: ChildProcess | undefined;
  private log = '';
  private readonly user: string;
  port = 0;

  constructor(
    private readonly serverUrl: string,
    private readonly opts: PgBouncerOptions,
  ) {
    this.user = decodeURIComponent(new URL(serverUrl).username) || 'postgres';
  }

  async start(): Promise<this> {
    const bin = pgbouncerBinary();
    this.port = await freePort();
    const server = new URL(this.serverUrl);
    const password = decodeURIComponent(server.password);
    const target = (db: string) =>
      [
        `host=${server.hostname}`,
        `port=${server.port || '5432'}`,
        `dbname=${db}`,
        `user=${this.user}`,
        ...(password ? [`password='${password}'`] : []),
      ].join(' ');
    const poolSize = this.opts.poolSize ?? 8;
    const ini = path.join(this.dir, 'pgbouncer.ini');
    const users = path.join(this.dir, 'users.txt');
    writeFileSync(users, `"${this.user}" ""\n`);
    writeFileSync(
      ini,
      [
        '[databases]',
        ...this.opts.databases.map((db) => `${db} = ${target(db)}`),
        '[pgbouncer]',
        'listen_addr = 127.0.0.1',
        `listen_port = ${this.port}`,
        'unix_socket_dir =',
        'auth_type = trust',
        `auth_file = ${users}`,
        'pool_mode = transaction',
        `default_pool_size = ${poolSize}`,
        'max_client_conn = 500',
        // First in, first out: each transaction takes the session idle longest, never the last one used.
        'server_round_robin = 1',
        `admin_users = ${this.user}`,
        'logfile =',
        'pidfile =',
        '',
      ].join('\n'),
    );
    // PgBouncer refuses to run as root: as root it takes the postgres user's identity.
    const asRoot = typeof process.getuid === 'function' && process.getuid() === 0;
    if (asRoot) {
      const uid = Number(execFileSync('id', ['-u', 'postgres'], { encoding: 'utf8' }).trim());
      const gid = Number(execFileSync('id', ['-g', 'postgres'], { encoding: 'utf8' }).trim());
      for (const p of [this.dir, ini, users]) chownSync(p, uid, gid);
    }
    const proc = spawn(bin, [...(asRoot ? ['-u', 'postgres'] : []), ini], { stdio: ['ignore', 'pipe', 'pipe'] });
    this.proc = proc;
    running.add(this);
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`PgBouncer did not start within 10 s:\n${this.log}`)), 10_000);
      const onData = (chunk: Buffer) => {
        this.log += chunk.toString();
        if (this.log.includes('process up')) {
          clearTimeout(timer);
          resolve();
        }
      };
      proc.stdout?.on('data', onData);
      proc.stderr?.on('data', onData);
      proc.once('exit', (code) => {
        clearTimeout(timer);
        reject(new Error(`PgBouncer exited with ${code} before it was up:\n${this.log}`));
      });
    });
    for (const db of this.opts.databases) await this.openSessions(db, Math.min(3, poolSize));
    return this;
  }

  /** A client's URL for `database` through the pooler. */
  url(database: string): string {
    return `postgres://${encodeURIComponent(this.user)}@127.0.0.1:${this.port}/${database}`;
  }

  /** The client connections PgBouncer holds now (its admin console's SHOW CLIENTS). */
  async clients(): Promise<{ database: string; application_name: string; state: string }[]> {
    const console = new pg.Client({ connectionString: this.url('pgbouncer') });
    await console.connect();
    try {
      return (await console.query<{ database: string; application_name: string; state: string }>('show clients')).rows;
    } finally {
      await console.end();
    }
  }

  /** What PgBouncer logged (connections opened and closed, and why). */
  output(): string {
    return this.log;
  }

  async stop(): Promise<void> {
    const proc = this.proc;
    this.proc = undefined;
    running.delete(this);
    if (proc && proc.exitCode === null && proc.signalCode === null) {
      const exited = new Promise<void>((resolve) => proc.once('exit', () => resolve()));
      // SIGTERM: PgBouncer's immediate shutdown, every connection closed.
      proc.kill('SIGTERM');
      const timer = setTimeout(() => proc.kill('SIGKILL'), 5000);
      await exited;
      clearTimeout(timer);
    }
    await rm(this.dir, { recursive: true, force: true });
  }

  /** Opens `n` server sessions at once (n transactions open together), so round robin has several to turn through. */
  private async openSessions(database: string, n: number): Promise<void> {
    const clients = Array.from({ length: n }, () => new pg.Client({ connectionString: this.url(database) }));
    try {
      await Promise.all(clients.map((c) => c.connect()));
      await Promise.all(clients.map((c) => c.query('begin')));
      await Promise.all(clients.map((c) => c.query('select 1')));
      await Promise.all(clients.map((c) => c.query('commit')));
    } finally {
      await Promise.all(clients.map((c) => c.end().catch(() => undefined)));
    }
  }
}
