import type { Obj } from './objects.js';
import { invalid } from './errors.js';

/** Stripe's form encoding: `a[b][0][c]=x` becomes {a:{b:[{c:'x'}]}}; `a[]=x` appends. */
export function parseStripeForm(text: string): Obj {
  const root: Obj = {};
  for (const [rawKey, value] of new URLSearchParams(text)) {
    const keys = rawKey.split(/\[|\]\[|\]/).filter((k, i, all) => !(k === '' && i === all.length - 1));
    let node: any = root;
    keys.forEach((key, i) => {
      const last = i === keys.length - 1;
      const nextIsIndex = !last && /^\d*$/.test(keys[i + 1]!);
      const slot = Array.isArray(node) && key === '' ? node.length : key;
      if (last) node[slot] = value;
      else node = node[slot] ??= nextIsIndex ? [] : {};
    });
  }
  return root;
}

// Every form value arrives as a string; these read one the way Stripe validates it.

/** NaN when absent, so a caller can tell "not sent" without a second check. */
export const asInt = (v: unknown, param: string): number => {
  if (v === undefined) return NaN;
  // A form value is a string, or an object/array for bracketed keys: that is never an integer.
  const text = typeof v === 'string' || typeof v === 'number' ? String(v) : JSON.stringify(v);
  if (!/^-?\d+$/.test(text)) throw invalid(`Invalid integer: ${text}`, param);
  return Number(v);
};
export const asBool = (v: unknown): boolean | undefined => (v === undefined ? undefined : v === 'true' || v === true);

/** Stripe's metadata update: keys merge, an empty value deletes its key, an empty string clears all. */
export function mergeMetadata(current: Obj, update: unknown): Obj {
  if (update === undefined) return current;
  if (update === '') return {};
  const next = { ...current };
  for (const [k, v] of Object.entries(update as Obj)) {
    if (v === '') delete next[k];
    else next[k] = String(v);
  }
  return next;
}
