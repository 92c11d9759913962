import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { expect } from 'chai';
import pg from 'pg';
import { isolatedPrefix, testEnv } from '../support/env.js';
import { NpmStart } from '../support/npm-start.js';
import { PROJECT_ROOT } from '../support/project.js';

const LAST_BANNER_LINE = /\[setup\] +DATABASE_URL=.* npm start\n/;

describe('npm start (scripts/start.mjs) itself', function () {
  // Its install and build checks come first: quick when nothing changed, which `npm test` just made sure of.
  this.timeout(60_000);

  it('prints the database, the Redis address and the key prefix it chose, from this run’s environment and its .env', async () => {
    // The key prefix only in .env; DATABASE_URL in both, where the environment's wins. npm runs
    // it from the project root; here it runs from a directory holding this .env instead.
    const { REDIS_PREFIX, ...env } = testEnv();
    const dir = mkdtempSync(path.join(os.tmpdir(), 'npm-start-env-'));
    writeFileSync(
      path.join(dir, '.env'),
      `REDIS_PREFIX=${REDIS_PREFIX}\nDATABASE_URL=postgres://nobody@192.0.2.1/nowhere\n`,
    );
    // Own process group, stopped with SIGTERM once it has spoken: before its roles exist that ends it
    // and its migrate child at once; after, its own handler stops the roles it started.
    const proc = spawn(process.execPath, [path.join(PROJECT_ROOT, 'scripts', 'start.mjs')], {
      cwd: dir,
      env,
      stdio: ['ignore', 'pipe', 'pipe'],
      detached: true,
    });
    const exited = new Promise((resolve) => proc.once('exit', resolve));
    let stderr = '';
    const spoke = await new Promise<boolean>((resolve) => {
      const timer = setTimeout(() => resolve(false), 45_000);
      proc.stderr.on('data', (d) => {
        stderr += d;
        if (LAST_BANNER_LINE.test(stderr)) {
          clearTimeout(timer);
          resolve(true);
        }
      });
      proc.stdout.resume();
      void exited.then(() => {
        clearTimeout(timer);
        resolve(false);
      });
    });
    try {
      process.kill(-proc.pid!, 'SIGTERM');
    } catch {
      // Already gone.
    }
    await exited;
    rmSync(dir, { recursive: true, force: true });

    expect(spoke, stderr).to.equal(true);
    const lines = stderr.split('\n');
    expect(lines[0]).to.equal('[env] loaded .env: REDIS_PREFIX; already set in the environment, so kept: DATABASE_URL');
    expect(lines).to.include(`[setup] Postgres: ${new URL(env.DATABASE_URL!).href} (from DATABASE_URL)`);
    expect(lines).to.include(
      `[setup] Redis: ${new URL(env.REDIS_URL!).href}, key prefix "${REDIS_PREFIX}" (from REDIS_URL)`,
    );
  });
});

/**
 * A port free now, below Linux's ephemeral range (32768 and up): the advice under test names the
 * next free ports after these, and ports in that range can be handed to any outgoing connection
 * between the advice and the second start.
 */
const freePort = async (): Promise<number> => {
  for (;;) {
    const port = 20_000 + Math.floor(Math.random() * 12_000);
    const bound = await new Promise<boolean>((resolve) => {
      const s = net.createServer();
      s.once('error', () => resolve(false));
      s.listen(port, '127.0.0.1', () => s.close(() => resolve(true)));
    });
    if (bound) return port;
  }
};

describe('npm start twice on one machine (two checkouts)', function () {
  // Each start builds (quick when nothing changed), creates and migrates its database, and starts three roles.
  this.timeout(240_000);
  const running: NpmStart[] = [];
  const databases: string[] = [];
  let mailDir: string;
  let first: NpmStart;

  const runDatabase = new URL(process.env.DATABASE_URL!);
  const database = (name: string) => {
    databases.push(name);
    const u = new URL(runDatabase);
    u.pathname = `/${name}`;
    return u.href;
  };
  const start = (env: NodeJS.ProcessEnv) => {
    const s = new NpmStart(env);
    running.push(s);
    return s;
  };
  const ANNOUNCED = /Service running at (http:\/\/\S+)/;

  before(async () => {
    mailDir = mkdtempSync(path.join(os.tmpdir(), 'npm-start-mail-'));
    first = start(
      testEnv({
        LOG_LEVEL: 'warn',
        PORT: String(await freePort()),
        WORKER_METRICS_PORT: String(await freePort()),
        DATABASE_URL: database(`${runDatabase.pathname.slice(1)}_start`),
        REDIS_PREFIX: isolatedPrefix(),
        MAIL_DEV_DIR: mailDir,
      }),
    );
    expect(await first.until(ANNOUNCED), first.stderr).to.equal(true);
  });
  after(async () => {
    await Promise.all(running.map((s) => s.stop()));
    rmSync(mailDir, { recursive: true, force: true });
    rmSync(`${mailDir}_b`, { recursive: true, force: true });
    rmSync(`${mailDir}_any`, { recursive: true, force: true });
    const server = new pg.Client({ connectionString: process.env.PG_SERVER_URL ?? process.env.DATABASE_URL });
    await server.connect();
    for (const name of databases) await server.query(`drop database if exists "${name}" with (force)`);
    await server.end();
  });

  /** The command the banner advises for a second checkout, as environment variables. */
  const advice = (s: NpmStart): Record<string, string> => {
    const command = /\[setup\] +(\S+=.*) npm start\n/.exec(s.stderr)?.[1];
    expect(command, s.stderr).to.be.a('string');
    return Object.fromEntries(
      command!.split(' ').map((kv) => [kv.slice(0, kv.indexOf('=')), kv.slice(kv.indexOf('=') + 1)]),
    );
  };

  it('advises a second checkout a command naming each port, database, key prefix and outbox it needs', () => {
    const second = advice(first);
    expect(Object.keys(second)).to.have.members([
      'DATABASE_URL',
      'REDIS_PREFIX',
      'PORT',
      'WORKER_METRICS_PORT',
      'MAIL_DEV_DIR',
    ]);
    for (const name of Object.keys(second)) expect(second[name], name).not.to.equal(first.env[name]);
  });

  it('starts a second instance that follows that advice, beside the first, and announces its own address', async () => {
    const env = advice(first);
    databases.push(new URL(env.DATABASE_URL!).pathname.slice(1));
    const second = start({ ...first.env, ...env });
    expect(await second.until(ANNOUNCED), second.stderr).to.equal(true);
    expect(ANNOUNCED.exec(second.stdout)![1]).to.equal(`http://127.0.0.1:${env.PORT}`);
    for (const instance of [first, second]) {
      const base = ANNOUNCED.exec(instance.stdout)![1]!;
      expect((await fetch(`${base}/health`)).status, base).to.equal(200);
    }
    expect(second.proc.exitCode).to.equal(null);
  });

  it('announces the port the system chose when PORT=0 asks for any free one, and answers there', async () => {
    const any = start({
      ...first.env,
      DATABASE_URL: database(`${runDatabase.pathname.slice(1)}_start_any`),
      REDIS_PREFIX: isolatedPrefix(),
      MAIL_DEV_DIR: `${mailDir}_any`,
      PORT: '0',
      WORKER_METRICS_PORT: '0',
    });
    expect(await any.until(ANNOUNCED), any.stderr).to.equal(true);
    const base = ANNOUNCED.exec(any.stdout)![1]!;
    expect(Number(new URL(base).port)).to.be.above(0);
    expect((await fetch(`${base}/health`)).status, base).to.equal(200);
  });

  it('refuses, with one clear line and before announcing anything, a port another instance holds', async () => {
    // The old advice: another database and prefix, the same port.
    const { DATABASE_URL, REDIS_PREFIX } = advice(first);
    const third = start({ ...first.env, DATABASE_URL, REDIS_PREFIX });
    const code = await third.exited;
    expect(code).to.equal(1);
    expect(third.stdout).not.to.match(ANNOUNCED);
    expect(third.stderr).to.include(
      `setup failed: PORT=${first.env.PORT}: 127.0.0.1:${first.env.PORT} is already in use (another instance of this service, or another program).`,
    );
    expect(third.stderr).to.match(/choose another port, e\.g\. PORT=\d+ npm start/);
  });
});
