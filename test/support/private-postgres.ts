import { execFile } from 'node:child_process';
import { chownSync, mkdtempSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { freePort } from './private-redis.js';

const run = promisify(execFile);

/**
 * A Postgres cluster of its own (the machine's initdb and pg_ctl, a temporary directory, a free
 * port), for tests that stop Postgres as a crash would and start it again. Run as the postgres
 * user when this process is root, since Postgres refuses root.
 */
export class PrivatePostgres {
  private readonly dir = mkdtempSync(path.join(os.tmpdir(), 'svc-postgres-'));
  port = 0;
  private readonly asUser =
    typeof process.getuid === 'function' && process.getuid() === 0 ? ['runuser', '-u', 'postgres', '--'] : [];

  private exec(bin: string, args: string[]): Promise<unknown> {
    const [cmd, ...rest] = this.asUser.length > 0 ? [...this.asUser, bin, ...args] : [bin, ...args];
    return run(cmd!, rest, { maxBuffer: 16 * 1024 * 1024 });
  }

  async start(): Promise<this> {
    if (this.port === 0) {
      this.port = await freePort();
      if (this.asUser.length > 0) {
        const uid = Number((await run('id', ['-u', 'postgres'])).stdout.trim());
        const gid = Number((await run('id', ['-g', 'postgres'])).stdout.trim());
        chownSync(this.dir, uid, gid);
      }
      await this.exec('initdb', [
        '-D',
        path.join(this.dir, 'data'),
        '-U',
        'postgres',
        '-A',
        'trust',
        '--no-sync',
        '-E',
        'UTF8',
      ]);
    }
    await this.exec('pg_ctl', [
      '-D',
      path.join(this.dir, 'data'),
      '-l',
      path.join(this.dir, 'postgres.log'),
      '-w',
      '-t',
      '60',
      '-o',
      `-p ${this.port} -k ${this.dir} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200`,
      'start',
    ]);
    return this;
  }

  /** `immediate` stops as a crash would: no checkpoint, every connection cut. */
  async stop(mode: 'immediate' | 'fast' = 'fast'): Promise<void> {
    await this.exec('pg_ctl', ['-D', path.join(this.dir, 'data'), '-m', mode, '-w', 'stop']).catch(() => undefined);
  }

  url(database = 'postgres'): string {
    return `postgres://postgres@127.0.0.1:${this.port}/${database}`;
  }

  async destroy(): Promise<void> {
    await this.stop('immediate');
    await rm(this.dir, { recursive: true, force: true });
  }
}
