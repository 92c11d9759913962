import { mkdir, rename, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { ServerClient } from 'postmark';
import type { Config } from '../config.js';
import { asciiEmailAddress } from '../email-address.js';
import type { Logger } from '../logger.js';

/** One message as the outbox holds it; `id` is the outbox row id (a stable name for files and logs). */
export interface OutgoingEmail {
  id: string;
  to: string;
  subject: string;
  text: string;
  html: string;
  /** What the message is for (verification, account_exists, invoice, ...). */
  kind: string;
}

export interface MailTransport {
  readonly name: string;
  /** Resolves once the provider accepted the message; rejects otherwise (MailSendError says whether to retry). */
  send(message: OutgoingEmail): Promise<{ messageId: string }>;
}

/** A failed send. `permanent` means the same request can never succeed, so retrying is pointless. */
export class MailSendError extends Error {
  constructor(
    message: string,
    readonly permanent: boolean,
    options?: { cause?: unknown },
  ) {
    super(message, options);
    this.name = 'MailSendError';
  }
}

export function createMailTransport(config: Config, log: Logger): MailTransport {
  return config.mail.transport === 'postmark' ? postmarkTransport(config) : devOutboxTransport(config, log);
}

/**
 * Postmark's official client. POSTMARK_API_BASE moves it to another host (a local fake in tests):
 * the client builds its URLs from `useHttps` and `requestHost` (host, port and any path prefix).
 */
export function postmarkTransport(config: Config): MailTransport {
  const token = config.mail.postmark.serverToken;
  if (token === undefined) throw new Error('POSTMARK_SERVER_TOKEN is required for the postmark mail transport');
  const options: { timeout: number; useHttps?: boolean; requestHost?: string } = {
    timeout: config.mail.sendTimeoutMs / 1000,
  };
  if (config.mail.postmark.apiBase !== undefined) {
    const base = new URL(config.mail.postmark.apiBase);
    options.useHttps = base.protocol === 'https:';
    options.requestHost = `${base.host}${base.pathname.replace(/\/+$/, '')}`;
  }
  const client = new ServerClient(token, options);
  return {
    name: 'postmark',
    async send(message) {
      try {
        const res = await client.sendEmail({
          From: config.mail.from,
          // An internationalised domain goes as punycode, the form the provider's address check takes.
          To: asciiEmailAddress(message.to),
          Subject: message.subject,
          TextBody: message.text,
          HtmlBody: message.html,
          MessageStream: 'outbound',
          Tag: message.kind,
        });
        if (res.ErrorCode !== 0)
          throw new MailSendError(`Postmark refused the message: ${res.Message} (ErrorCode ${res.ErrorCode})`, false);
        return { messageId: res.MessageID };
      } catch (err) {
        if (err instanceof MailSendError) throw err;
        const e = err as { statusCode?: number; code?: number; message?: string };
        // 422 is Postmark saying this very request is wrong (bad address, inactive recipient, ...):
        // sending it again gets the same answer. 401, 429, 5xx and network errors can clear up.
        const permanent = e.statusCode === 422;
        const detail = e.statusCode ? `HTTP ${e.statusCode}, ErrorCode ${e.code ?? 0}` : 'no response';
        throw new MailSendError(`Postmark send failed (${detail}): ${e.message ?? String(err)}`, permanent, {
          cause: err,
        });
      }
    },
  };
}

/**
 * For local use without a mail account: each message becomes two files under MAIL_DEV_DIR
 * (<time>-<id>.json with the headers and text, <time>-<id>.html to open in a browser), and the
 * first link in the message is logged, so whoever runs `npm start` can follow the verification link.
 */
export function devOutboxTransport(config: Config, log: Logger): MailTransport {
  const dir = path.resolve(config.mail.devDir);
  return {
    name: 'dev-outbox',
    async send(message) {
      await mkdir(dir, { recursive: true });
      const stem = `${new Date().toISOString().replace(/[:.]/g, '-')}-${message.id}`;
      const envelope = {
        id: message.id,
        from: config.mail.from,
        to: message.to,
        subject: message.subject,
        kind: message.kind,
        text: message.text,
      };
      // Written whole, then renamed: whoever watches the folder never reads half a message.
      const put = async (file: string, content: string) => {
        await writeFile(`${file}.partial`, content);
        await rename(`${file}.partial`, file);
      };
      await put(path.join(dir, `${stem}.html`), message.html);
      await put(path.join(dir, `${stem}.json`), `${JSON.stringify(envelope, null, 2)}\n`);
      const link = /https?:\/\/\S+/.exec(message.text)?.[0];
      log.info(
        { to: message.to, subject: message.subject, file: path.join(dir, `${stem}.json`), ...(link ? { link } : {}) },
        link
          ? `dev-outbox: "${message.subject}" for ${message.to}; open ${link}`
          : `dev-outbox: "${message.subject}" for ${message.to}`,
      );
      return { messageId: `dev-${stem}` };
    },
  };
}
