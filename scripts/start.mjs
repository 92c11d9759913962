// `npm start`: install, build, make sure Postgres and Redis are there, migrate, then supervise the
// web tier, one completion worker and the scheduler. One Ctrl-C stops all of them, gracefully for up
// to SHUTDOWN_TIMEOUT_MS and by SIGKILL after; a second Ctrl-C kills them at once. Then the private
// Postgres and Redis this script started are stopped too.
// First: .env is loaded before any other module reads the environment.
import './lib/env-file.mjs';
import { spawn } from 'node:child_process';
import path from 'node:path';
import { boundPorts, storesBanner } from './lib/banner.mjs';
import {
  ROOT,
  build,
  ensureDependencies,
  ensurePortsFree,
  anyFreePort,
  ensurePostgres,
  ensureRedis,
  freePortAfter,
  main,
  migrate,
  OUT_DIR,
  say,
} from './lib/setup.mjs';

const ROLES = [
  ['web', 'dist/src/http/server.js'],
  ['worker', 'dist/workers/worker.js'],
  ['scheduler', 'dist/workers/scheduler.js'],
];

const host = process.env.HOST?.trim() || '127.0.0.1';
const ports = boundPorts(process.env);

await main(async () => {
  // First, so a taken port fails at once rather than after the build.
  await ensurePortsFree(host, ports);
  ensureDependencies();
  build();
  const { supervisorSettings } = await import(path.join(OUT_DIR, 'src', 'config.js'));
  const postgres = await ensurePostgres('completions_dev');
  const redis = await ensureRedis();
  const freePorts = {};
  for (const { variable, port } of ports)
    freePorts[variable] = await freePortAfter(host, port, [...ports.map((p) => p.port), ...Object.values(freePorts)]);
  for (const line of storesBanner({ postgres, redis, env: process.env, freePorts })) say(line);
  const env = {
    ...process.env,
    DATABASE_URL: postgres.url,
    ...(redis.clusterNodes ? {} : { REDIS_URL: redis.url }),
    // Each role watches for this process: once it is gone, however it died, the role exits too.
    SUPERVISOR_PID: String(process.pid),
  };
  const { killAfterMs } = supervisorSettings(env);
  // PORT=0 (any free port) is chosen here, so the address announced is the one the web tier binds.
  if (/^0+$/.test(env.PORT?.trim() ?? '')) env.PORT = String(await anyFreePort(host));
  await migrate(env);
  // Again just before the roles bind them: the build and migrations leave time for another to.
  await ensurePortsFree(host, ports);

  const children = new Map();
  let stopping = false;
  const running = () => [...children.values()].filter((c) => c.exitCode === null && c.signalCode === null);
  const killAll = () => {
    for (const child of running()) child.kill('SIGKILL');
  };
  const stopAll = async (code) => {
    if (stopping) return;
    stopping = true;
    say('stopping web, worker and scheduler (Ctrl-C again to kill them at once)');
    const exits = running().map((child) => new Promise((resolve) => child.once('exit', resolve)));
    for (const child of running()) child.kill('SIGTERM');
    // Each role bounds its own shutdown a second sooner; this is for one that cannot (a blocked event loop).
    const escalation = setTimeout(() => {
      const left = running();
      if (left.length === 0) return;
      const roles = [...children].filter(([, c]) => left.includes(c)).map(([role]) => role);
      say(`${roles.join(', ')} still running ${killAfterMs} ms after SIGTERM: killing`);
      killAll();
    }, killAfterMs);
    await Promise.all(exits);
    clearTimeout(escalation);
    await postgres.stop();
    await redis.stop();
    process.exit(code);
  };
  const onSignal = () => {
    if (!stopping) return void stopAll(0);
    say('second signal: killing web, worker and scheduler now');
    killAll();
  };

  // A worker killed (its watchdog ends one whose event loop stalled; its jobs are failed, not run
  // again) is replaced, a few times: the fleet recovers as it would under an orchestrator.
  let workerRestarts = 0;
  const startRole = (role, entry) => {
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
      if (stopping) return;
      if (role === 'worker' && signal === 'SIGKILL' && workerRestarts < 5) {
        workerRestarts++;
        say(`worker was killed (SIGKILL); starting another (${workerRestarts} of at most 5)`);
        startRole(role, entry);
        return;
      }
      say(`${role} exited unexpectedly (${signal ?? `code ${code}`}); stopping the rest`);
      void stopAll(1);
    });
  };
  for (const [role, entry] of ROLES) startRole(role, entry);
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);

  const port = env.PORT?.trim() || '8080';
  const base = `http://${host === '0.0.0.0' ? '127.0.0.1' : host}:${port}`;
  // The port was free just before the web tier started, so what answers here is this web tier.
  for (let i = 0; i < 300 && !stopping; i++) {
    try {
      const res = await fetch(`${base}/health`);
      await res.arrayBuffer();
      if (stopping) return;
      // 503 until the worker has registered: announced once a completion can be answered.
      if (!res.ok) throw new Error('not ready');
      process.stdout.write(
        `\nService running at ${base}  (API under ${base}/v1, docs at ${base}/docs; Ctrl-C stops everything)\n\n`,
      );
      return;
    } catch {
      await new Promise((r) => setTimeout(r, 100));
    }
  }
  if (!stopping) say(`${base}/health has not answered 200 within 30 s: see its log lines above`);
});
