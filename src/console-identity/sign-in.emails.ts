import { layout } from '../accounts/accounts.emails.js';
import type { NewOutboxEmail } from '../accounts/email-outbox.service.js';
import { escapeText } from '../accounts/text.js';

// The messages asking for a sign-in link sends: the link for a known address, and for an unknown
// one a note saying so (the answer on the page is the same either way; only the mailbox's owner
// learns which it was). Plain text and HTML say the same thing; every value is escaped.

export function signInLinkEmail(to: { name: string; email: string }, link: string, ttlMinutes: number): NewOutboxEmail {
  return {
    kind: 'sign_in_link',
    to: to.email,
    subject: 'Your sign-in link',
    text: [
      `Hello ${to.name},`,
      '',
      'Open this link to sign in to the console:',
      '',
      link,
      '',
      `The link works once and expires in ${ttlMinutes} minutes. If you did not ask to sign in, ignore this message.`,
    ].join('\n'),
    html: layout(
      `<p>Hello ${escapeText(to.name)},</p>
<p>Open this link to sign in to the console:</p>
<p><a href="${escapeText(link)}" style="display:inline-block;padding:.6rem 1.2rem;background:#0a58ca;color:#fff;border-radius:6px;text-decoration:none">Sign in</a></p>
<p style="word-break:break-all;font-size:.9rem">${escapeText(link)}</p>
<p>The link works once and expires in ${ttlMinutes} minutes. If you did not ask to sign in, ignore this message.</p>`,
    ),
  };
}

/** Sent when a sign-in link is asked for an address that has no account: where to sign up instead. */
export function noAccountEmail(address: string, baseUrl: string): NewOutboxEmail {
  return {
    kind: 'sign_in_no_account',
    to: address,
    subject: 'Sign-in requested',
    text: [
      'Someone (probably you) asked to sign in to the console with this email address, which has no account.',
      '',
      'To create one, sign up here:',
      '',
      `${baseUrl}/console/sign-up`,
      '',
      'If this was not you, you can ignore this message.',
    ].join('\n'),
    html: layout(
      `<p>Someone (probably you) asked to sign in to the console with this email address, which has no account.</p>
<p>To create one, sign up here: <a href="${escapeText(`${baseUrl}/console/sign-up`)}">${escapeText(`${baseUrl}/console/sign-up`)}</a></p>
<p>If this was not you, you can ignore this message.</p>`,
    ),
  };
}
