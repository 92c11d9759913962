import type { Clock } from '../clock.js';
import type { Config } from '../config.js';
import type { Logger } from '../logger.js';
import type { EmailMetrics } from '../metrics.js';
import { transaction, type Db, type Trx } from '../infra/db.js';
import { MailSendError, type MailTransport } from '../infra/mail.js';
import {
  claimDueEmail,
  insertOutboxEmail,
  markEmailAttemptFailed,
  markEmailSent,
  type NewOutboxEmail,
} from './email-outbox.repository.js';

// The outbox pattern: a request that must send mail writes the message into email_outbox in its
// own transaction and returns; a worker delivers it. The request never waits on the provider,
// and a message is never lost between "committed" and "sent".

export type { NewOutboxEmail } from './email-outbox.repository.js';

/** What delivering the outbox works with. */
export interface OutboxDeps {
  db: Db;
  clock: Clock;
  log: Logger;
  config: Pick<Config, 'mail'>;
  metrics: { email: EmailMetrics };
}

/** Queues a message inside the caller's transaction; it is sent only if that transaction commits. */
export async function queueEmail(trx: Trx | Db, email: NewOutboxEmail, now: Date): Promise<string> {
  return insertOutboxEmail(trx, email, now);
}

const BACKOFF_BASE_MS = 10_000;
const BACKOFF_CAP_MS = 60 * 60_000;

/**
 * Delay before attempt n+1 after n failed attempts: exponential (10 s, 20 s, 40 s, ... capped at
 * 1 h) with "equal jitter" (half fixed, half random), so replicas retrying after one outage do
 * not all hit the provider at the same moment, and the delay never drops below half the step.
 */
export function retryDelayMs(failedAttempts: number, random: () => number = Math.random): number {
  const step = Math.min(BACKOFF_CAP_MS, BACKOFF_BASE_MS * 2 ** Math.max(0, failedAttempts - 1));
  return Math.round(step / 2 + (step / 2) * random());
}

/** The longest delay retryDelayMs can return for that many failures (tests move the clock by this). */
export const maxRetryDelayMs = (failedAttempts: number): number => retryDelayMs(failedAttempts, () => 1);

export const DELIVERY_OUTCOMES = ['sent', 'retry', 'failed'] as const;
export type DeliveryOutcome = (typeof DELIVERY_OUTCOMES)[number];

/**
 * Claims one due message, sends it, and records the outcome in the same transaction that holds
 * the row lock: marked sent only after the provider accepted it, so no other replica can send it
 * meanwhile and a crash before commit means another attempt, never a lost message.
 * Returns undefined when nothing is due.
 */
export async function deliverOneEmail(app: OutboxDeps, transport: MailTransport): Promise<DeliveryOutcome | undefined> {
  const outcome = await transaction(app.db, async (trx): Promise<DeliveryOutcome | undefined> => {
    const row = await claimDueEmail(trx, app.clock.now());
    if (!row) return undefined;
    const attempts = row.attempts + 1;
    try {
      const { messageId } = await transport.send({
        id: row.id,
        to: row.to_address,
        subject: row.subject,
        text: row.text_body,
        html: row.html_body,
        kind: row.kind,
      });
      await markEmailSent(trx, row, { providerMessageId: messageId, attempts, now: app.clock.now() });
      app.log.info({ outboxId: row.id, kind: row.kind, attempts, providerMessageId: messageId }, 'email sent');
      return 'sent';
    } catch (err) {
      const permanent = err instanceof MailSendError && err.permanent;
      const giveUp = permanent || attempts >= app.config.mail.maxAttempts;
      const now = app.clock.now();
      const nextAttemptAt = giveUp ? now : new Date(now.getTime() + retryDelayMs(attempts));
      const message = err instanceof Error ? err.message : String(err);
      await markEmailAttemptFailed(trx, row, { attempts, error: message, nextAttemptAt, giveUp });
      const log = { outboxId: row.id, kind: row.kind, attempts, error: message, ...(giveUp ? {} : { nextAttemptAt }) };
      if (giveUp)
        app.log.error(
          log,
          permanent ? 'email rejected by the provider; not retrying' : 'email failed too many times; giving up',
        );
      else app.log.warn(log, 'email send failed; will retry');
      return giveUp ? 'failed' : 'retry';
    }
  });
  // Counted once the outcome is committed: a rolled-back attempt is sent again.
  if (outcome !== undefined) app.metrics.email.sends.inc({ transport: transport.name, outcome });
  return outcome;
}

/**
 * Delivers due messages until none is left, with `parallel` claimers (each holds one row and one
 * connection while its send is in flight). Returns how many messages were attempted. The others
 * start only once a first claim found something, so a poll of an empty outbox (nearly every
 * poll) costs one transaction, not one per claimer.
 */
export async function deliverDueEmails(
  app: OutboxDeps,
  transport: MailTransport,
  opts: { parallel?: number; max?: number } = {},
): Promise<number> {
  const max = opts.max ?? 1000;
  if (max < 1 || (await deliverOneEmail(app, transport)) === undefined) return 0;
  let attempted = 1;
  const claimer = async () => {
    while (attempted < max) {
      const outcome = await deliverOneEmail(app, transport);
      if (outcome === undefined) return;
      attempted++;
    }
  };
  await Promise.all(Array.from({ length: Math.max(1, opts.parallel ?? 4) }, claimer));
  return attempted;
}
