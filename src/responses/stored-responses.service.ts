import type { Clock } from '../clock.js';
import type { Config } from '../config.js';
import type { Db } from '../infra/db.js';
import {
  deleteExpiredResponses,
  deleteStoredResponse,
  findStoredResponse,
  type StoredResponseRow,
} from './stored-responses.repository.js';

/** When a response created at `createdAt` stops being kept (RESPONSES_RETENTION_DAYS later). */
export function storedUntil(config: Pick<Config, 'responses'>, createdAt: Date): Date {
  return new Date(createdAt.getTime() + config.responses.retentionDays * 86_400_000);
}

export interface StoredResponsesDeps {
  db: Db;
  clock: Clock;
}

/** The account's stored response with that id, while it is kept. */
export function findResponse(
  app: StoredResponsesDeps,
  accountId: string,
  id: string,
): Promise<StoredResponseRow | undefined> {
  return findStoredResponse(app.db, accountId, id, app.clock.now());
}

/** Deletes the account's stored response with that id; false when it has none. */
export function deleteResponse(app: StoredResponsesDeps, accountId: string, id: string): Promise<boolean> {
  return deleteStoredResponse(app.db, accountId, id, app.clock.now());
}

export interface InputItemsQuery {
  limit: number;
  order: 'asc' | 'desc';
  /** An item id: the page starts after it, in the order asked for. */
  after?: string;
}

/** OpenAI's `ResponseItemList`: one page of a response's input items. */
export interface InputItemsPage {
  object: 'list';
  data: Record<string, unknown>[];
  first_id: string | null;
  last_id: string | null;
  has_more: boolean;
}

/**
 * One page of input items, as OpenAI lists them: newest first unless `order: asc`, after the item
 * `after` names (undefined when no item has that id, so the route can say which parameter is wrong).
 */
export function inputItemsPage(
  items: readonly Record<string, unknown>[],
  q: InputItemsQuery,
): InputItemsPage | undefined {
  const ordered = q.order === 'desc' ? [...items].reverse() : items;
  let start = 0;
  if (q.after !== undefined) {
    const at = ordered.findIndex((item) => item.id === q.after);
    if (at < 0) return undefined;
    start = at + 1;
  }
  const data = ordered.slice(start, start + q.limit);
  return {
    object: 'list',
    data,
    first_id: (data[0]?.id as string | undefined) ?? null,
    last_id: (data.at(-1)?.id as string | undefined) ?? null,
    has_more: start + data.length < ordered.length,
  };
}

export type ResponsesCleanupDeps = StoredResponsesDeps;

const CLEANUP_BATCH = 1000;

/** Deletes every stored response past its retention (the scheduler's daily `responses` job), in batches. */
export async function purgeExpiredResponses(app: ResponsesCleanupDeps): Promise<number> {
  const now = app.clock.now();
  let total = 0;
  for (;;) {
    const deleted = await deleteExpiredResponses(app.db, now, CLEANUP_BATCH);
    total += deleted;
    if (deleted < CLEANUP_BATCH) return total;
  }
}
