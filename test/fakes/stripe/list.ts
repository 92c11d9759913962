import type { Obj } from './objects.js';
import { missing } from './errors.js';
import { asInt } from './form.js';

/** One page of a Stripe list (`limit`, `starting_after`), in the order given. */
export function listPage(items: Obj[], path: string, query: Obj): Obj {
  const limit = query.limit === undefined ? 10 : Math.min(100, Math.max(1, asInt(query.limit, 'limit')));
  let start = 0;
  if (query.starting_after) {
    start = items.findIndex((i) => i.id === query.starting_after) + 1;
    if (start === 0) throw missing('object', String(query.starting_after), 'starting_after');
  }
  const page = items.slice(start, start + limit);
  return { object: 'list', data: page, has_more: start + limit < items.length, url: path };
}
