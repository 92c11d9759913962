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

/** Every process whose command name is `comm` (Postgres forks one per connection). */
export function pidsNamed(comm: string): number[] {
  const pids: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      if (readFileSync(`/proc/${entry}/comm`, 'utf8').trim() === comm) pids.push(Number(entry));
    } catch {
      // exited while we looked
    }
  }
  return pids;
}

export type CpuSnapshot = Record<string, number>;

/** Sums CPU ms per role; a role whose processes cannot be read is left out. */
export function snapshot(roles: Record<string, () => number[]>): CpuSnapshot {
  const out: CpuSnapshot = {};
  for (const [role, pids] of Object.entries(roles)) {
    let sum = 0;
    let seen = false;
    for (const pid of pids()) {
      const ms = cpuMsOf(pid);
      if (ms === undefined) continue;
      sum += ms;
      seen = true;
    }
    if (seen) out[role] = sum;
  }
  return out;
}

export function diff(before: CpuSnapshot, after: CpuSnapshot): CpuSnapshot {
  const out: CpuSnapshot = {};
  for (const [role, ms] of Object.entries(after)) if (before[role] !== undefined) out[role] = ms - before[role];
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
    return (((user ?? 0) + (nice ?? 0) + (system ?? 0) + (irq ?? 0) + (softirq ?? 0) + (steal ?? 0)) * 1000) / TICKS_PER_SECOND;
  } catch {
    return undefined;
  }
}
