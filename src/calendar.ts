// Calendar arithmetic in UTC, beside the clock: billing periods are calendar months, named by their
// key "YYYY-MM"; days are UTC days, named "YYYY-MM-DD".

const MONTH_KEY = /^(\d{4})-(0[1-9]|1[0-2])$/;

export interface Month {
  key: string;
  /** Inclusive start, 00:00 UTC on the 1st. */
  start: Date;
  /** Exclusive end: the start of the next month. */
  end: Date;
}

export function monthOf(at: Date): Month {
  return monthFromParts(at.getUTCFullYear(), at.getUTCMonth());
}

function monthFromParts(year: number, monthIndex: number): Month {
  const start = new Date(Date.UTC(year, monthIndex, 1));
  const end = new Date(Date.UTC(year, monthIndex + 1, 1));
  const key = `${start.getUTCFullYear()}-${String(start.getUTCMonth() + 1).padStart(2, '0')}`;
  return { key, start, end };
}

/** The month `delta` months after (negative: before) the given one. */
export function addMonths(month: Month, delta: number): Month {
  return monthFromParts(month.start.getUTCFullYear(), month.start.getUTCMonth() + delta);
}

export function parseMonthKey(key: string): Month | undefined {
  const m = MONTH_KEY.exec(key);
  if (!m) return undefined;
  return monthFromParts(Number(m[1]), Number(m[2]) - 1);
}

/** 00:00 UTC of the day containing `at`. */
export function startOfUtcDay(at: Date): Date {
  return new Date(Date.UTC(at.getUTCFullYear(), at.getUTCMonth(), at.getUTCDate()));
}

/** "YYYY-MM-DD" of a UTC day. */
export function dayKey(at: Date): string {
  return at.toISOString().slice(0, 10);
}

/** A "YYYY-MM-DD" date (already format-checked) as 00:00 UTC of that day. */
export function parseDay(key: string): Date {
  return new Date(`${key}T00:00:00.000Z`);
}

export const addDays = (day: Date, n: number): Date => new Date(day.getTime() + n * 86_400_000);

export const unixSeconds = (d: Date): number => Math.floor(d.getTime() / 1000);
