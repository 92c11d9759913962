import { sql, type CompiledQuery, type Selectable } from 'kysely';
import type { Db, Trx } from '../infra/db.js';
import type { StoredResponsesTable, StoredResponseStatus } from '../../db/schema/stored-responses.js';

export type StoredResponseRow = Selectable<StoredResponsesTable>;

export interface StoredResponseWrite {
  id: string;
  accountId: string;
  status: StoredResponseStatus;
  /** The Response object as the client last saw it. */
  response: Record<string, unknown>;
  /** The request's input items, each with its id; kept from the first write when omitted. */
  inputItems?: Record<string, unknown>[];
  now: Date;
  expiresAt: Date;
}

/**
 * Writes a response: the first write (at its creation, or at its end) inserts it, later ones (a
 * background response ending, a re-run of its job after a worker died) replace its status and
 * object. A write for an id another account holds changes nothing.
 */
export async function saveStoredResponse(db: Db | Trx, w: StoredResponseWrite): Promise<void> {
  await db
    .insertInto('stored_responses')
    .values({
      id: w.id,
      account_id: w.accountId,
      status: w.status,
      response: JSON.stringify(w.response),
      input_items: JSON.stringify(w.inputItems ?? []),
      created_at: w.now,
      updated_at: w.now,
      expires_at: w.expiresAt,
    })
    .onConflict((oc) =>
      oc
        .column('id')
        .doUpdateSet((eb) => ({
          status: eb.ref('excluded.status'),
          response: eb.ref('excluded.response'),
          updated_at: eb.ref('excluded.updated_at'),
          ...(w.inputItems ? { input_items: eb.ref('excluded.input_items') } : {}),
        }))
        .where('stored_responses.account_id', '=', w.accountId),
    )
    .execute();
}

/** A write that names its input items, as every write of a response's end does. */
export type StoredResponseEndWrite = StoredResponseWrite & { inputItems: Record<string, unknown>[] };

// A worker writes every stored response through saveStoredResponses: its statement is built and
// compiled once per number of rows, and each call only supplies the values (the builder and
// compiler cost more worker time than the write itself).
const batchInserts = new Map<number, CompiledQuery>();

function batchInsert(db: Db | Trx, rows: number): CompiledQuery {
  let compiled = batchInserts.get(rows);
  if (!compiled) {
    const placeholder = { id: '', account_id: '', status: 'completed' as const, response: '', input_items: '' };
    const at = new Date(0);
    compiled = db
      .insertInto('stored_responses')
      .values(Array.from({ length: rows }, () => ({ ...placeholder, created_at: at, updated_at: at, expires_at: at })))
      .onConflict((oc) =>
        oc
          .column('id')
          .doUpdateSet((eb) => ({
            status: eb.ref('excluded.status'),
            response: eb.ref('excluded.response'),
            updated_at: eb.ref('excluded.updated_at'),
            input_items: eb.ref('excluded.input_items'),
          }))
          .whereRef('stored_responses.account_id', '=', 'excluded.account_id'),
      )
      .compile();
    if (compiled.parameters.length !== rows * 8)
      throw new Error('the stored-response insert must take 8 parameters a row');
    batchInserts.set(rows, compiled);
  }
  return compiled;
}

/**
 * Writes several responses in one statement, each as saveStoredResponse writes it (a write for an
 * id another account holds changes nothing). No two writes may name the same id: Postgres updates
 * a row at most once per statement.
 */
export async function saveStoredResponses(db: Db | Trx, ws: readonly StoredResponseEndWrite[]): Promise<void> {
  // In the order of the compiled statement's columns.
  const parameters = ws.flatMap((w) => [
    w.id,
    w.accountId,
    w.status,
    JSON.stringify(w.response),
    JSON.stringify(w.inputItems),
    w.now,
    w.now,
    w.expiresAt,
  ]);
  await db.executeQuery({ ...batchInsert(db, ws.length), parameters });
}

/**
 * Replaces a response's status and object only while its status is one of `from`: a background
 * response's start and its cancel never overwrite the end its worker stored. False when nothing changed.
 */
export async function advanceStoredResponse(
  db: Db | Trx,
  w: {
    id: string;
    accountId: string;
    from: StoredResponseStatus[];
    /** Only a response stored without usage (a cancel's, before its worker's end filled it in). */
    withoutUsage?: boolean;
    status: StoredResponseStatus;
    response: Record<string, unknown>;
    now: Date;
  },
): Promise<boolean> {
  const r = await db
    .updateTable('stored_responses')
    .set({ status: w.status, response: JSON.stringify(w.response), updated_at: w.now })
    .where('id', '=', w.id)
    .where('account_id', '=', w.accountId)
    .where('status', 'in', w.from)
    .$if(w.withoutUsage === true, (qb) => qb.where(sql<boolean>`response -> 'usage' is null`))
    .executeTakeFirst();
  return r.numUpdatedRows > 0n;
}

/** The account's response with that id, unless it has expired (the daily cleanup may not have run yet). */
export async function findStoredResponse(
  db: Db | Trx,
  accountId: string,
  id: string,
  now: Date,
): Promise<StoredResponseRow | undefined> {
  return db
    .selectFrom('stored_responses')
    .selectAll()
    .where('id', '=', id)
    .where('account_id', '=', accountId)
    .where('expires_at', '>', now)
    .executeTakeFirst();
}

/**
 * The account's response with that id and the responses it continued from (previous_response_id),
 * oldest first, while each is kept: one query however long the chain. A chain whose earlier link was
 * deleted or has expired starts after it.
 */
export async function findStoredChain(
  db: Db | Trx,
  accountId: string,
  id: string,
  now: Date,
  maxLinks: number,
): Promise<Pick<StoredResponseRow, 'id' | 'response' | 'input_items'>[]> {
  const { rows } = await sql<Pick<StoredResponseRow, 'id' | 'response' | 'input_items'> & { depth: number }>`
    with recursive chain as (
      select id, response, input_items, 0 as depth from stored_responses
       where id = ${id} and account_id = ${accountId} and expires_at > ${now}
      union all
      select s.id, s.response, s.input_items, chain.depth + 1 from stored_responses s
        join chain on s.id = chain.response->>'previous_response_id'
       where s.account_id = ${accountId} and s.expires_at > ${now} and chain.depth + 1 < ${maxLinks}
    )
    select id, response, input_items, depth from chain order by depth desc`.execute(db);
  return rows.map(({ id: linkId, response, input_items }) => ({ id: linkId, response, input_items }));
}

/** Deletes the account's response with that id; false when it had none. */
export async function deleteStoredResponse(db: Db | Trx, accountId: string, id: string, now: Date): Promise<boolean> {
  const r = await db
    .deleteFrom('stored_responses')
    .where('id', '=', id)
    .where('account_id', '=', accountId)
    .where('expires_at', '>', now)
    .executeTakeFirst();
  return r.numDeletedRows > 0n;
}

/**
 * Deletes up to `limit` responses that expired before `now`, oldest first; returns how many. The
 * caller repeats until fewer come back, so one run never holds a long lock on a large table.
 */
export async function deleteExpiredResponses(db: Db, now: Date, limit: number): Promise<number> {
  const r = await db
    .deleteFrom('stored_responses')
    .where(
      'id',
      'in',
      db.selectFrom('stored_responses').select('id').where('expires_at', '<=', now).orderBy('expires_at').limit(limit),
    )
    .executeTakeFirst();
  return Number(r.numDeletedRows);
}

/** Deletes every stored response of the account (closing it); returns how many. */
export async function deleteAccountResponses(trx: Db | Trx, accountId: string): Promise<number> {
  const r = await trx.deleteFrom('stored_responses').where('account_id', '=', accountId).executeTakeFirst();
  return Number(r.numDeletedRows);
}
