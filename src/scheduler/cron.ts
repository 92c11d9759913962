import { createTask } from 'node-cron';
import { addDays, addMonths, dayKey, monthOf, startOfUtcDay } from '../calendar.js';

/**
 * The first time at or after `at` that a cron expression fires, in UTC. node-cron has no public
 * "next run from a given time"; its task's matcher does exactly that, with a minute-by-minute
 * scan over the public match() as the fallback should that internal ever move.
 */
export function nextFireAtOrAfter(expression: string, at: Date): Date {
  const task = createTask(expression, () => undefined, { timezone: 'UTC' });
  try {
    const matcher = (task as unknown as { timeMatcher?: { getNextMatch?: (from: Date) => Date } }).timeMatcher;
    // getNextMatch looks strictly after its argument, to the second.
    if (typeof matcher?.getNextMatch === 'function')
      return matcher.getNextMatch(new Date(Math.ceil(at.getTime() / 1000) * 1000 - 1000));
    const start = Math.ceil(at.getTime() / 60_000) * 60_000;
    for (let t = start; t < start + 400 * 86_400_000; t += 60_000) if (task.match(new Date(t))) return new Date(t);
    throw new Error(`cron expression "${expression}" never fires`);
  } finally {
    void task.destroy();
  }
}

export type Granularity = 'month' | 'day';

/**
 * The period whose run is due most recently at `now`. A monthly job works on the month before the
 * one in which it fires (invoicing October runs on 1 November); a daily job on the day it fires.
 * Before this month's (today's) fire time, the latest due period is the one before.
 */
export function latestDuePeriod(granularity: Granularity, expression: string, now: Date): string {
  if (granularity === 'month') {
    const month = monthOf(now);
    const fired = nextFireAtOrAfter(expression, month.start).getTime() <= now.getTime();
    return addMonths(month, fired ? -1 : -2).key;
  }
  const day = startOfUtcDay(now);
  const fired = nextFireAtOrAfter(expression, day).getTime() <= now.getTime();
  return dayKey(fired ? day : addDays(day, -1));
}
