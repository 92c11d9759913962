import { randomBytes } from 'node:crypto';

/** A Stripe object as JSON: the fake keeps objects in their wire shape and mutates them in place. */
export type Obj = Record<string, any>;

const BASE62 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';

/** An id in Stripe's style: the object's prefix and random base62 characters. */
export function randomId(prefix: string, length = 24): string {
  const bytes = randomBytes(length);
  let s = '';
  for (const b of bytes) s += BASE62[b % 62];
  return `${prefix}${s}`;
}

/** A deep copy, so what a caller or an event holds does not change with the stored object. */
export const clone = <T>(o: T): T => JSON.parse(JSON.stringify(o)) as T;
