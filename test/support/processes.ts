import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type { Env } from '../../src/config.js';
import { testEnv } from './env.js';

export type Role = 'web' | 'worker' | 'scheduler';

const ENTRY: Record<Role, string> = {
  web: '../../src/http/server.js',
  worker: '../../workers/worker.js',
  scheduler: '../../workers/scheduler.js',
};

export interface RoleProcess {
  role: Role;
  proc: ChildProcess;
  /** The web tier's base URL (web role only). */
  url: string;
  /** Everything the process wrote, for assertions and for failure reports. */
  output(): string;
  /** SIGTERM, and wait for exit; returns the exit code. */
  stop(signal?: NodeJS.Signals): Promise<number | null>;
  exited: Promise<number | null>;
}

const running = new Set<RoleProcess>();

/** Starts a role's real compiled entry point as a child process and waits until it says it is ready. */
export async function startRole(role: Role, env: Env = {}, readyTimeoutMs = 20_000): Promise<RoleProcess> {
  const entry = fileURLToPath(new URL(ENTRY[role], import.meta.url));
  const proc = spawn(process.execPath, ['--enable-source-maps', entry], {
    env: testEnv({ LOG_LEVEL: 'info', ...env }),
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  const exited = new Promise<number | null>((resolve) => proc.once('exit', (code) => resolve(code)));
  const ready = new Promise<string>((resolve, reject) => {
    const timer = setTimeout(
      () => reject(new Error(`${role} not ready within ${readyTimeoutMs} ms:\n${out}`)),
      readyTimeoutMs,
    );
    const onData = (chunk: Buffer) => {
      out += chunk.toString();
      const m = /listening on (http:\/\/[^\s"]+)/.exec(out) ?? /"msg":"(worker|scheduler): running/.exec(out);
      if (m) {
        clearTimeout(timer);
        resolve(m[1]!.startsWith('http') ? m[1]! : '');
      }
    };
    proc.stdout.on('data', onData);
    proc.stderr.on('data', onData);
    void exited.then((code) => {
      clearTimeout(timer);
      reject(new Error(`${role} exited with ${code} before it was ready:\n${out}`));
    });
  });
  const handle: RoleProcess = {
    role,
    proc,
    url: '',
    output: () => out,
    exited,
    async stop(signal = 'SIGTERM') {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill(signal);
      const code = await exited;
      running.delete(handle);
      return code;
    },
  };
  running.add(handle);
  try {
    handle.url = await ready;
  } catch (err) {
    // A role that never became ready is stopped now: left running to the end of the run it adds
    // load to a machine that was already too slow, and later starts fail in turn.
    await handle.stop('SIGKILL');
    throw err;
  }
  return handle;
}

/** Runs an entry point to completion (for processes expected to exit), returning code and output. */
export async function runToExit(
  role: Role,
  env: Env,
): Promise<{ code: number | null; stderr: string; stdout: string }> {
  const entry = fileURLToPath(new URL(ENTRY[role], import.meta.url));
  const proc = spawn(process.execPath, [entry], { env: testEnv(env), stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  proc.stdout.on('data', (d) => (stdout += d));
  proc.stderr.on('data', (d) => (stderr += d));
  const code = await new Promise<number | null>((resolve) => proc.once('exit', resolve));
  return { code, stdout, stderr };
}

/** Kills whatever a failed test left running, so the suite never leaves processes behind. */
export async function stopAllRoles(): Promise<void> {
  await Promise.all([...running].map((p) => p.stop('SIGKILL')));
}

/**
 * For a describe block whose tests start their own processes: returns a `start` that remembers
 * what it started, and registers an afterEach that kills it all.
 */
export function rolesPerTest(): (role: Role, env?: Env) => Promise<RoleProcess> {
  const started: RoleProcess[] = [];
  afterEach(async () => {
    await Promise.all(started.splice(0).map((p) => p.stop('SIGKILL')));
  });
  return async (role, env = {}) => {
    const p = await startRole(role, env);
    started.push(p);
    return p;
  };
}
