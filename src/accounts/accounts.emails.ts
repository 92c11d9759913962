import { escapeText } from './text.js';
import type { NewOutboxEmail } from './email-outbox.service.js';

// The messages sign-up sends (and the page layout every email shares). Plain text and HTML say the
// same thing; every value is escaped.

export const layout = (body: string): string =>
  `<!doctype html><html><body style="font:16px/1.5 system-ui,-apple-system,'Segoe UI',sans-serif;color:#1d1d1f;max-width:36rem;margin:2rem auto;padding:0 1rem">${body}</body></html>`;

export function verificationEmail(to: { name: string; email: string }, link: string, ttlHours: number): NewOutboxEmail {
  const hours = ttlHours === 1 ? '1 hour' : `${ttlHours} hours`;
  return {
    kind: 'verification',
    to: to.email,
    subject: 'Verify your email address',
    text: [
      `Hello ${to.name},`,
      '',
      'Open this link to verify your email address and receive your API key:',
      '',
      link,
      '',
      `The link works once and expires in ${hours}. If you did not sign up, ignore this message.`,
    ].join('\n'),
    html: layout(
      `<p>Hello ${escapeText(to.name)},</p>
<p>Open this link to verify your email address and receive your API key:</p>
<p><a href="${escapeText(link)}" style="display:inline-block;padding:.6rem 1.2rem;background:#0a58ca;color:#fff;border-radius:6px;text-decoration:none">Verify my email address</a></p>
<p style="word-break:break-all;font-size:.9rem">${escapeText(link)}</p>
<p>The link works once and expires in ${hours}. If you did not sign up, ignore this message.</p>`,
    ),
  };
}

/** Sent when someone signs up with an address that already has a verified account: no key, no link. */
export function accountExistsEmail(to: { name: string; email: string }, baseUrl: string): NewOutboxEmail {
  return {
    kind: 'account_exists',
    to: to.email,
    subject: 'You already have an account',
    text: [
      `Hello ${to.name},`,
      '',
      'Someone (probably you) tried to sign up again with this email address, which already has a verified account.',
      'Nothing was changed. If you lost your API key, sign in to the console and regenerate it there:',
      '',
      `${baseUrl}/console/sign-in`,
      '',
      'If this was not you, you can ignore this message.',
    ].join('\n'),
    html: layout(
      `<p>Hello ${escapeText(to.name)},</p>
<p>Someone (probably you) tried to sign up again with this email address, which already has a verified account.</p>
<p>Nothing was changed. If you lost your API key, sign in to the console and regenerate it there: <a href="${escapeText(`${baseUrl}/console/sign-in`)}">${escapeText(`${baseUrl}/console/sign-in`)}</a></p>
<p>If this was not you, you can ignore this message.</p>`,
    ),
  };
}
