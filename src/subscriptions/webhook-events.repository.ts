import type { Db, Trx } from '../infra/db.js';

export async function isWebhookEventProcessed(db: Db | Trx, eventId: string): Promise<boolean> {
  const row = await db
    .selectFrom('processed_webhook_events')
    .select('event_id')
    .where('event_id', '=', eventId)
    .executeTakeFirst();
  return row !== undefined;
}

/**
 * Claims an event id inside the transaction that applies its effect. False when it was already
 * claimed: a concurrent delivery of the same event waits on the key and then sees the conflict.
 */
export async function claimWebhookEvent(trx: Trx, eventId: string, type: string, at: Date): Promise<boolean> {
  const row = await trx
    .insertInto('processed_webhook_events')
    .values({ event_id: eventId, type, received_at: at })
    .onConflict((oc) => oc.column('event_id').doNothing())
    .returning('event_id')
    .executeTakeFirst();
  return row !== undefined;
}
