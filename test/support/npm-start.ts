import { spawn, type ChildProcess } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { PROJECT_ROOT } from './project.js';

/** `npm start` (scripts/start.mjs) as a child process in its own group, with what it has printed. */
export class NpmStart {
  readonly proc: ChildProcess;
  readonly exited: Promise<number | null>;
  stdout = '';
  stderr = '';
  private waiters: (() => void)[] = [];

  constructor(readonly env: NodeJS.ProcessEnv) {
    this.proc = spawn(process.execPath, [path.join(PROJECT_ROOT, 'scripts', 'start.mjs')], {
      cwd: PROJECT_ROOT,
      env,
      stdio: ['ignore', 'pipe', 'pipe'],
      detached: true,
    });
    const heard = () => this.waiters.splice(0).forEach((w) => w());
    this.proc.stdout!.on('data', (d) => ((this.stdout += d), heard()));
    this.proc.stderr!.on('data', (d) => ((this.stderr += d), heard()));
    this.exited = new Promise((resolve) => this.proc.once('exit', (code) => (heard(), resolve(code))));
  }

  /** Resolves true once `said` matches its output, false if it exits first. */
  async until(said: RegExp): Promise<boolean> {
    for (;;) {
      if (said.test(this.stdout + this.stderr)) return true;
      if (this.proc.exitCode !== null || this.proc.signalCode !== null) return false;
      await new Promise<void>((r) => this.waiters.push(r));
    }
  }

  /** SIGTERM: its own handler stops the roles it started, then it exits. */
  async stop(): Promise<void> {
    try {
      process.kill(-this.proc.pid!, 'SIGTERM');
    } catch {
      // Already gone.
    }
    await this.exited;
  }
}

/** The processes whose parent is `pid` (from /proc), as they are now. */
export function childrenOf(pid: number): number[] {
  return readdirSync('/proc')
    .filter((d) => /^\d+$/.test(d))
    .flatMap((d) => {
      const stat = procStat(Number(d));
      return stat?.ppid === pid ? [Number(d)] : [];
    });
}

/** True while `pid` runs (a zombie left for its new parent to reap counts as ended). */
export function running(pid: number): boolean {
  const stat = procStat(pid);
  return stat !== undefined && stat.state !== 'Z' && stat.state !== 'X';
}

function procStat(pid: number): { state: string; ppid: number } | undefined {
  try {
    // The command name may hold spaces and parentheses: the fields after its last ')' are fixed.
    const text = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const [state, ppid] = text.slice(text.lastIndexOf(')') + 2).split(' ');
    return { state: state!, ppid: Number(ppid) };
  } catch {
    return undefined;
  }
}
