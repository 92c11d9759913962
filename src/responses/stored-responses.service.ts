import type { Clock } from '../clock.js';
import type { Config } from '../config.js';
import type { Db, Trx } from '../infra/db.js';
import type { CompletionJob } from '../chat/relay/completion-job.js';
import type { StoredResponseStatus } from '../../db/schema/stored-responses.js';
import {
  advanceStoredResponse,
  deleteAccountResponses,
  deleteExpiredResponses,
  deleteStoredResponse,
  findStoredChain,
  findStoredResponse,
  saveStoredResponse,
  type StoredResponseEndWrite,
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

/** Deletes every stored response of the account, in the caller's transaction (closing the account). */
export function deleteAllResponses(trx: Trx, accountId: string): Promise<number> {
  return deleteAccountResponses(trx, accountId);
}

/** The most responses a previous_response_id chain reaches back through. */
export const MAX_CHAIN_LINKS = 100;

/**
 * What a request with previous_response_id continues from: every response of the chain, oldest
 * first, each its input items and then its output. Undefined when the account has no such response.
 */
export async function priorItems(
  app: StoredResponsesDeps,
  accountId: string,
  id: string,
): Promise<Record<string, unknown>[] | undefined> {
  const chain = await findStoredChain(app.db, accountId, id, app.clock.now(), MAX_CHAIN_LINKS);
  if (chain.length === 0) return undefined;
  return chain.flatMap((link) => [
    ...link.input_items,
    ...((link.response.output as Record<string, unknown>[] | undefined) ?? []),
  ]);
}

/** The write that keeps a Responses API answer (store: true) with its input, for RESPONSES_RETENTION_DAYS. */
export function answerWrite(
  app: Pick<StoredResponsesDeps, 'clock'> & { config: Pick<Config, 'responses'> },
  job: Pick<CompletionJob, 'id' | 'accountId' | 'created' | 'wire'>,
  response: Record<string, unknown>,
): StoredResponseEndWrite {
  return {
    id: job.id,
    accountId: job.accountId,
    status: response.status as StoredResponseStatus,
    response,
    inputItems: job.wire?.input ?? [],
    now: app.clock.now(),
    expiresAt: storedUntil(app.config, new Date(job.created * 1000)),
  };
}

/** Keeps a Responses API answer (store: true) with its input, for RESPONSES_RETENTION_DAYS. */
export async function storeAnswer(
  app: StoredResponsesDeps & { config: Pick<Config, 'responses'> },
  job: Pick<CompletionJob, 'id' | 'accountId' | 'created' | 'wire'>,
  response: Record<string, unknown>,
): Promise<void> {
  await saveStoredResponse(app.db, answerWrite(app, job, response));
}

/** A background response a worker has started: in_progress, unless it was cancelled or has ended meanwhile. */
export async function markStarted(
  app: StoredResponsesDeps,
  job: Pick<CompletionJob, 'id' | 'accountId'>,
  response: Record<string, unknown>,
): Promise<void> {
  await advanceStoredResponse(app.db, {
    id: job.id,
    accountId: job.accountId,
    from: ['queued'],
    status: 'in_progress',
    response,
    now: app.clock.now(),
  });
}

/**
 * A background response ended with no answer framed (never started, or ended by a take-over):
 * its stored object with that status and error, unless it has ended already. One its client
 * cancelled while no worker ran it (its worker had died) stays cancelled, and takes the output and
 * usage of the take-over's end, as a running one takes its worker's: the cancel stored neither.
 */
export async function markEnded(
  app: StoredResponsesDeps,
  job: Pick<CompletionJob, 'id' | 'accountId'>,
  response: Record<string, unknown>,
): Promise<void> {
  const at = { id: job.id, accountId: job.accountId, now: app.clock.now() };
  const status = response.status as StoredResponseStatus;
  const ended = await advanceStoredResponse(app.db, { ...at, from: ['queued', 'in_progress'], status, response });
  if (ended || response.usage === undefined || status === 'cancelled') return;
  await advanceStoredResponse(app.db, {
    ...at,
    from: ['cancelled'],
    withoutUsage: true,
    status: 'cancelled',
    response: { ...response, status: 'cancelled', error: null },
  });
}

/**
 * A cancelled background response as it stands at the cancel: its stored object with status
 * cancelled, unless it has ended meanwhile. Its worker's end, with what it produced and its usage,
 * replaces it. Undefined when it had ended: the stored object is the answer.
 */
export async function markCancelled(
  app: StoredResponsesDeps,
  row: Pick<StoredResponseRow, 'id' | 'account_id' | 'response'>,
): Promise<Record<string, unknown> | undefined> {
  const response = { ...row.response, status: 'cancelled' };
  const changed = await advanceStoredResponse(app.db, {
    id: row.id,
    accountId: row.account_id,
    from: ['queued', 'in_progress'],
    status: 'cancelled',
    response,
    now: app.clock.now(),
  });
  return changed ? response : undefined;
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
