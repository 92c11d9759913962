import type { AppContext } from '../src/context.js';
import { DELIVERY_OUTCOMES, deliverDueEmails } from '../src/accounts/email-outbox.service.js';
import { createMailTransport, type MailTransport } from '../src/infra/mail.js';
import type { BackgroundService } from '../src/lifecycle.js';
import { dependencyOf } from '../src/infra/outage.js';

export interface EmailSender extends BackgroundService {
  /** Delivers everything due now and resolves with how many messages were attempted (tests call this). */
  drainOnce(): Promise<number>;
}

export interface EmailSenderOptions {
  transport?: MailTransport;
  /** How often the outbox is checked; short, so a sign-up's email leaves within a fraction of a second. */
  pollMs?: number;
  /** Messages in flight at once in this process. */
  parallel?: number;
  /** false: no polling loop, only drainOnce() (tests that move a ManualClock). */
  poll?: boolean;
}

/**
 * Sends the email outbox. Every worker replica runs one; row locks with SKIP LOCKED share the
 * rows between them. Polling the partial index of due rows costs one cheap query per interval.
 */
export function startEmailSender(app: AppContext, opts: EmailSenderOptions = {}): EmailSender {
  const transport = opts.transport ?? createMailTransport(app.config, app.log);
  const pollMs = opts.pollMs ?? 300;
  // Present at zero from the start, so that rate() and increase() count this process's first failure too.
  for (const outcome of DELIVERY_OUTCOMES) app.metrics.email.sends.inc({ transport: transport.name, outcome }, 0);
  let stopped = false;
  let timer: NodeJS.Timeout | undefined;
  let running: Promise<number> | undefined;

  const drainOnce = (): Promise<number> => {
    // One drain at a time per process; a second caller waits for the one in flight, then runs.
    const previous = running ?? Promise.resolve(0);
    const next = previous.catch(() => 0).then(() => deliverDueEmails(app, transport, { parallel: opts.parallel ?? 4 }));
    running = next;
    return next;
  };

  const tick = async () => {
    timer = undefined;
    try {
      await drainOnce();
      app.outages.postgres.recovered();
    } catch (err) {
      if (dependencyOf(err) === 'Postgres') app.outages.postgres.failure('email outbox', err);
      else app.log.warn({ err }, 'email sender: could not read the outbox; will try again');
    }
    if (!stopped) timer = setTimeout(() => void tick(), pollMs);
  };
  if (opts.poll !== false) timer = setTimeout(() => void tick(), 0);

  return {
    name: `email-sender (${transport.name})`,
    drainOnce,
    async stop() {
      stopped = true;
      if (timer) clearTimeout(timer);
      // Let a send in flight finish and record its outcome, so it is not sent twice.
      await running?.catch(() => 0);
    },
  };
}
