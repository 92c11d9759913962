import type { Selectable } from 'kysely';
import type { Db, Trx } from '../infra/db.js';
import type { ConsoleSessionsTable } from '../../db/schema/console-sessions.js';

export type ConsoleSession = Selectable<ConsoleSessionsTable>;

export async function insertSession(
  trx: Trx | Db,
  values: { accountId: string; idHash: string; now: Date; expiresAt: Date; pendingApiKey: string | null },
): Promise<ConsoleSession> {
  return trx
    .insertInto('console_sessions')
    .values({
      account_id: values.accountId,
      id_hash: values.idHash,
      created_at: values.now,
      last_seen_at: values.now,
      expires_at: values.expiresAt,
      pending_api_key: values.pendingApiKey,
    })
    .returningAll()
    .executeTakeFirstOrThrow();
}

/** The live session with that id hash: not revoked, within its absolute and idle lifetimes. */
export async function findLiveSession(
  db: Db | Trx,
  idHash: string,
  at: { now: Date; idleSince: Date },
): Promise<ConsoleSession | undefined> {
  return db
    .selectFrom('console_sessions')
    .selectAll()
    .where('id_hash', '=', idHash)
    .where('revoked_at', 'is', null)
    .where('expires_at', '>', at.now)
    .where('last_seen_at', '>', at.idleSince)
    .executeTakeFirst();
}

export async function touchSession(db: Db, id: string, now: Date): Promise<void> {
  await db.updateTable('console_sessions').set({ last_seen_at: now }).where('id', '=', id).execute();
}

export async function revokeSessionByHash(db: Db | Trx, idHash: string, now: Date): Promise<void> {
  await db
    .updateTable('console_sessions')
    .set({ revoked_at: now, pending_api_key: null })
    .where('id_hash', '=', idHash)
    .where('revoked_at', 'is', null)
    .execute();
}

export async function revokeAccountSessions(db: Db | Trx, accountId: string, now: Date): Promise<number> {
  const r = await db
    .updateTable('console_sessions')
    .set({ revoked_at: now, pending_api_key: null })
    .where('account_id', '=', accountId)
    .where('revoked_at', 'is', null)
    .executeTakeFirst();
  return Number(r.numUpdatedRows);
}

/** Takes the session's pending key: returned once, cleared in the same transaction. */
export async function takePendingApiKey(trx: Trx, sessionId: string): Promise<string | undefined> {
  const row = await trx
    .selectFrom('console_sessions')
    .select('pending_api_key')
    .where('id', '=', sessionId)
    .forUpdate()
    .executeTakeFirst();
  if (!row?.pending_api_key) return undefined;
  await trx.updateTable('console_sessions').set({ pending_api_key: null }).where('id', '=', sessionId).execute();
  return row.pending_api_key;
}

/** Deletes sessions that ended (revoked, past their absolute end, or idle) before `endedBefore`. */
export async function deleteEndedSessions(db: Db, at: { endedBefore: Date; idleBefore: Date }): Promise<number> {
  const r = await db
    .deleteFrom('console_sessions')
    .where((eb) =>
      eb.or([
        eb('revoked_at', '<', at.endedBefore),
        eb('expires_at', '<', at.endedBefore),
        eb('last_seen_at', '<', at.idleBefore),
      ]),
    )
    .executeTakeFirst();
  return Number(r.numDeletedRows);
}
