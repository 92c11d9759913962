import { fileURLToPath } from 'node:url';
import { spawn, type ChildProcess } from 'node:child_process';
import { withInvoicingLock } from '../../src/billing/invoicing-lock.repository.js';
import { createDb } from '../../src/infra/db.js';
import { withRunClaim } from '../../src/scheduler/scheduler-runs.repository.js';
import { isMain } from '../../src/lifecycle.js';
import type { Env } from '../../src/config.js';
import { testConfig, testEnv } from './env.js';

// The holder that dies: a process that takes a lock the way the service does and holds it until
// it is killed, so a test can show what Postgres (and a pooler in front of it) make of its death.

export type HeldWhat = { lock: 'invoicing'; accountId: string } | { lock: 'run'; job: string; period: string };

export interface LockHolder {
  proc: ChildProcess;
  /** SIGKILL, as a crash: no rollback, no goodbye to the server; resolves once the process is gone. */
  kill(): Promise<void>;
}

const holders = new Set<LockHolder>();

/** Kills every holder a test left running: no process outlives the run. */
export async function killAllLockHolders(): Promise<void> {
  await Promise.all([...holders].map((h) => h.kill()));
}

/** Starts a holder of `what` with the database of `env` (DATABASE_URL, DB_*), resolving once it holds the lock. */
export async function holdLockInAnotherProcess(what: HeldWhat, env: Env = {}): Promise<LockHolder> {
  const proc = spawn(process.execPath, [fileURLToPath(import.meta.url), JSON.stringify(what)], {
    env: testEnv(env),
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const exited = new Promise<void>((resolve) => proc.once('exit', () => resolve()));
  let out = '';
  await new Promise<void>((resolve, reject) => {
    const onData = (chunk: Buffer) => {
      out += chunk.toString();
      if (out.includes('held\n')) resolve();
    };
    proc.stdout.on('data', onData);
    proc.stderr.on('data', onData);
    void exited.then(() => reject(new Error(`the lock holder exited before it held the lock:\n${out}`)));
  });
  const holder: LockHolder = {
    proc,
    async kill() {
      holders.delete(holder);
      proc.kill('SIGKILL');
      await exited;
    },
  };
  holders.add(holder);
  return holder;
}

if (isMain(import.meta.url)) {
  const what = JSON.parse(process.argv[2]!) as HeldWhat;
  const db = createDb(testConfig());
  // Held until the process is killed: the interval keeps it alive, the promise never settles.
  const forever = () => {
    process.stdout.write('held\n');
    setInterval(() => undefined, 60_000);
    return new Promise<never>(() => undefined);
  };
  const outcome =
    what.lock === 'invoicing'
      ? await withInvoicingLock(db, what.accountId, 0, forever)
      : await withRunClaim(db, what.job, what.period, forever);
  process.stdout.write(`not held: ${String(outcome)}\n`);
  process.exit(1);
}
