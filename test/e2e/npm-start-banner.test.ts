import { spawn } from 'node:child_process';
import path from 'node:path';
import { expect } from 'chai';
import { testEnv } from '../support/env.js';
import { PROJECT_ROOT } from '../support/project.js';

const LAST_BANNER_LINE = /\[setup\] +DATABASE_URL=.* npm start\n/;

describe('npm start (scripts/start.mjs) itself', function () {
  // Its install and build checks come first: quick when nothing changed, which `npm test` just made sure of.
  this.timeout(60_000);

  it('prints the database, the Redis address and the key prefix it chose, from this run’s environment', async () => {
    const env = testEnv();
    // Own process group, stopped with SIGTERM once it has spoken: before its roles exist that ends it
    // and its migrate child at once; after, its own handler stops the roles it started.
    const proc = spawn(process.execPath, [path.join(PROJECT_ROOT, 'scripts', 'start.mjs')], {
      cwd: PROJECT_ROOT,
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

    expect(spoke, stderr).to.equal(true);
    const lines = stderr.split('\n');
    expect(lines).to.include(`[setup] Postgres: ${new URL(env.DATABASE_URL!).href} (from DATABASE_URL)`);
    expect(lines).to.include(
      `[setup] Redis: ${new URL(env.REDIS_URL!).href}, key prefix "${env.REDIS_PREFIX}" (from REDIS_URL)`,
    );
  });
});
