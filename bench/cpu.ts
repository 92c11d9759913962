// CPU time by process, read from /proc, so the benchmark can say where each request's CPU goes
// (on a 2-core machine the load generator and the upstream compete with the service for it).
import { readdirSync, readFileSync } from 'node:fs';

const TICKS_PER_SECOND = 100;

/** utime + stime of `pid` in ms, or undefined when it cannot be read (gone, or not on this host). */
export function cpuMsOf(pid: number): number | undefined {
  try {
    // The command name is in parentheses and may hold spaces: the fields after it are fixed.
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return ((Number(fields[11]) + Number(fields[12])) * 1000) / TICKS_PER_SECOND;
  } catch {
    return undefined;
  }
}

/**
 * Every process whose command name is `comm` (Postgres forks one per connection), and, given
 * `title`, whose command line (a Postgres process's title: its database and client) it accepts.
 */
export function pidsNamed(comm: string, title?: (cmdline: string) => boolean): number[] {
  const pids: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      if (readFileSync(`/proc/${entry}/comm`, 'utf8').trim() !== comm) continue;
      if (title && !title(readFileSync(`/proc/${entry}/cmdline`, 'utf8').replaceAll('\0', ' '))) continue;
      pids.push(Number(entry));
    } catch {
      // exited while we looked
    }
  }
  return pids;
}

/**
 * The Postgres processes that work for `database`: its client backends, and the server's own
 * (checkpointer, WAL writer and the like), not the backends of other databases on a shared server.
 */
export function postgresPidsFor(database: string): number[] {
  return pidsNamed(
    'postgres',
    (title) =>
      title.includes(` ${database} `) || !/ \S+ (\d{1,3}(\.\d{1,3}){3}|\[?[0-9a-f:]+\]?)\(\d+\)|\[local\]/i.test(title),
  );
}

export type CpuSnapshot = Record<string, number>;

/** CPU ms by role and process id, at one moment. */
export type ProcessTimes = Record<string, Map<number, number>>;

/** Reads CPU ms of every process of every role; a process that cannot be read is left out. */
export function snapshot(roles: Record<string, () => number[]>): ProcessTimes {
  const out: ProcessTimes = {};
  for (const [role, pids] of Object.entries(roles)) {
    const times = new Map<number, number>();
    for (const pid of pids()) {
      const ms = cpuMsOf(pid);
      if (ms !== undefined) times.set(pid, ms);
    }
    out[role] = times;
  }
  return out;
}

/**
 * CPU ms per role between two snapshots, process by process: a process started in between counts
 * whole, one that exited in between is lost (what it used before exiting cannot be read), and
 * neither makes a role's time go negative. A role with no process read at either end is left out.
 */
export function diff(before: ProcessTimes, after: ProcessTimes): CpuSnapshot {
  const out: CpuSnapshot = {};
  for (const [role, times] of Object.entries(after)) {
    if (times.size === 0 && (before[role]?.size ?? 0) === 0) continue;
    let sum = 0;
    for (const [pid, ms] of times) sum += ms - (before[role]?.get(pid) ?? 0);
    out[role] = sum;
  }
  return out;
}

export function add(a: CpuSnapshot, b: CpuSnapshot): CpuSnapshot {
  const out: CpuSnapshot = { ...a };
  for (const [role, ms] of Object.entries(b)) out[role] = (out[role] ?? 0) + ms;
  return out;
}

/**
 * Busy CPU time of the whole machine in ms, summed over its cores (every process, ours or not),
 * from the first line of /proc/stat; undefined when it cannot be read. Set against our own
 * processes' time it shows how much of the machine something else took during a run.
 */
export function machineBusyMs(): number | undefined {
  try {
    const first = readFileSync('/proc/stat', 'utf8').split('\n', 1)[0]!;
    // cpu user nice system idle iowait irq softirq steal guest guest_nice (guest is inside user)
    const [user, nice, system, , , irq, softirq, steal] = first.trim().split(/\s+/).slice(1).map(Number);
    return (
      (((user ?? 0) + (nice ?? 0) + (system ?? 0) + (irq ?? 0) + (softirq ?? 0) + (steal ?? 0)) * 1000) /
      TICKS_PER_SECOND
    );
  } catch {
    return undefined;
  }
}
