import type { Selectable } from 'kysely';
import type { Db, Trx } from '../infra/db.js';
import type { EmailOutboxTable } from '../../db/schema/email-outbox.js';

export type OutboxRow = Selectable<EmailOutboxTable>;

export interface NewOutboxEmail {
  to: string;
  subject: string;
  text: string;
  html: string;
  kind: string;
  /** The one-time token the message's link carries: kept only until the message is sent or given up. */
  linkToken?: string;
}

/** What stands in a sent message's bodies where its link's token was. */
export const REMOVED_LINK_TOKEN = '[removed once sent]';

/** The row's bodies with its link token cut out, so a sent or abandoned message keeps no usable link. */
function scrubbed(row: Pick<OutboxRow, 'text_body' | 'html_body' | 'link_token'>) {
  const token = row.link_token;
  if (token === null || token.length === 0) return {};
  return {
    text_body: row.text_body.replaceAll(token, REMOVED_LINK_TOKEN),
    html_body: row.html_body.replaceAll(token, REMOVED_LINK_TOKEN),
    link_token: null,
  };
}

export async function insertOutboxEmail(trx: Trx | Db, email: NewOutboxEmail, now: Date): Promise<string> {
  const row = await trx
    .insertInto('email_outbox')
    .values({
      to_address: email.to,
      subject: email.subject,
      text_body: email.text,
      html_body: email.html,
      kind: email.kind,
      link_token: email.linkToken ?? null,
      next_attempt_at: now,
      created_at: now,
    })
    .returning('id')
    .executeTakeFirstOrThrow();
  return row.id;
}

/**
 * The oldest due pending message, row-locked for this transaction. SKIP LOCKED lets several
 * worker replicas drain the outbox side by side without ever taking the same row.
 */
export async function claimDueEmail(trx: Trx, now: Date): Promise<OutboxRow | undefined> {
  return trx
    .selectFrom('email_outbox')
    .selectAll()
    .where('status', '=', 'pending')
    .where('next_attempt_at', '<=', now)
    .orderBy('next_attempt_at')
    .limit(1)
    .forUpdate()
    .skipLocked()
    .executeTakeFirst();
}

export async function markEmailSent(
  trx: Trx,
  row: OutboxRow,
  values: { providerMessageId: string; attempts: number; now: Date },
): Promise<void> {
  await trx
    .updateTable('email_outbox')
    .set({
      ...scrubbed(row),
      status: 'sent',
      provider_message_id: values.providerMessageId,
      attempts: values.attempts,
      sent_at: values.now,
      last_error: null,
    })
    .where('id', '=', row.id)
    .execute();
}

export async function markEmailAttemptFailed(
  trx: Trx,
  row: OutboxRow,
  values: { attempts: number; error: string; nextAttemptAt: Date; giveUp: boolean },
): Promise<void> {
  await trx
    .updateTable('email_outbox')
    .set({
      ...(values.giveUp ? scrubbed(row) : {}),
      status: values.giveUp ? 'failed' : 'pending',
      attempts: values.attempts,
      last_error: values.error.slice(0, 2000),
      next_attempt_at: values.nextAttemptAt,
    })
    .where('id', '=', row.id)
    .execute();
}

/** Deletes every message to the address (any case), whatever its status. */
export async function deleteEmailsTo(trx: Trx | Db, address: string): Promise<number> {
  const r = await trx
    .deleteFrom('email_outbox')
    .where((eb) => eb(eb.fn('lower', ['to_address']), '=', address.toLowerCase()))
    .executeTakeFirst();
  return Number(r.numDeletedRows);
}
