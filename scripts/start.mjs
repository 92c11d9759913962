// `npm start`: install, build, make sure Postgres and Redis are there, migrate, then supervise the
// web tier, one completion worker and the scheduler. One Ctrl-C stops all of them cleanly.
import { spawn } from 'node:child_process';
import path from 'node:path';
import { storesBanner } from './lib/banner.mjs';
import { ROOT, build, ensureDependencies, ensurePostgres, ensureRedis, main, migrate, say } from './lib/setup.mjs';

const ROLES = [
  ['web', 'dist/src/http/server.js'],
  ['worker', 'dist/workers/worker.js'],
  ['scheduler', 'dist/workers/scheduler.js'],
];

await main(async () => {
  ensureDependencies();
  build();
  const postgres = await ensurePostgres('completions_dev');
  const redis = await ensureRedis();
  for (const line of storesBanner({ postgres, redis, env: process.env })) say(line);
  const env = { ...process.env, DATABASE_URL: postgres.url, ...(redis.clusterNodes ? {} : { REDIS_URL: redis.url }) };
  await migrate(env);

  const children = new Map();
  let stopping = false;
  const stopAll = async (code) => {
    if (stopping) return;
    stopping = true;
    say('stopping web, worker and scheduler');
    const exits = [...children.values()].map(
      (child) =>
        new Promise((resolve) =>
          child.exitCode !== null || child.signalCode !== null ? resolve() : child.once('exit', resolve),
        ),
    );
    for (const child of children.values()) if (child.exitCode === null) child.kill('SIGTERM');
    await Promise.all(exits);
    await postgres.stop();
    await redis.stop();
    process.exit(code);
  };

  for (const [role, entry] of ROLES) {
    // Own process group: the terminal's Ctrl-C reaches only this supervisor, which then stops
    // each child once, gracefully, instead of every process receiving the signal at once.
    const child = spawn(process.execPath, ['--enable-source-maps', path.join(ROOT, entry)], {
      cwd: ROOT,
      env,
      stdio: 'inherit',
      detached: true,
    });
    children.set(role, child);
    child.once('exit', (code, signal) => {
      if (!stopping) {
        say(`${role} exited unexpectedly (${signal ?? `code ${code}`}); stopping the rest`);
        void stopAll(1);
      }
    });
  }
  process.on('SIGINT', () => void stopAll(0));
  process.on('SIGTERM', () => void stopAll(0));

  const port = process.env.PORT || '8080';
  const host = process.env.HOST || '127.0.0.1';
  const base = `http://${host === '0.0.0.0' ? '127.0.0.1' : host}:${port}`;
  for (let i = 0; i < 300 && !stopping; i++) {
    try {
      const res = await fetch(`${base}/health`);
      await res.arrayBuffer();
      process.stdout.write(
        `\nService running at ${base}  (API under ${base}/v1, docs at ${base}/docs; Ctrl-C stops everything)\n\n`,
      );
      return;
    } catch {
      await new Promise((r) => setTimeout(r, 100));
    }
  }
});
