import { layout } from '../accounts/accounts.emails.js';
import type { NewOutboxEmail } from '../accounts/email-outbox.service.js';
import { escapeText } from '../accounts/text.js';
import type { SpendAlertThreshold } from '../../db/schema/spend-alerts.js';
import { centsToAmount } from './money.js';
import type { Month } from '../calendar.js';
import { nanoUsdOf } from '../usage/usage-cost.js';

/** A USD amount for people: rounded half up to the cent ("20.123456" -> "20.12"). */
const dollars = (usd: string): string => `$${centsToAmount((nanoUsdOf(usd) + 5_000_000n) / 10_000_000n)}`;

const monthName = (m: Month): string =>
  m.start.toLocaleString('en-US', { month: 'long', year: 'numeric', timeZone: 'UTC' });
const resetAt = (m: Month): string => `${m.end.toISOString().slice(0, 10)} 00:00 UTC`;

export interface SpendAlertFacts {
  to: { name: string; email: string };
  threshold: SpendAlertThreshold;
  month: Month;
  /** Decimal USD strings. */
  limitUsd: string;
  spentUsd: string;
}

/** The email of an 80% or 100% spending-limit alert (kind spend_limit_80 or spend_limit_100). */
export function spendAlertEmail(f: SpendAlertFacts): NewOutboxEmail {
  const limit = dollars(f.limitUsd);
  const spent = dollars(f.spentUsd);
  const month = monthName(f.month);
  const change =
    'You can raise or remove the limit at any time on the Billing page of the console (sign in at /console/sign-in), or with PUT or DELETE /v1/billing/spend-limit.';
  const [subject, lines] =
    f.threshold === 80
      ? [
          `You have used 80% of your monthly spending limit`,
          [
            `${spent} of your ${limit} monthly spending limit is spent in ${month} (UTC).`,
            `Once what is left cannot cover a request, requests are refused (HTTP 429, insufficient_quota) until the limit resets at ${resetAt(f.month)}.`,
          ],
        ]
      : [
          `Your monthly spending limit is reached`,
          [
            `Your ${limit} monthly spending limit for ${month} (UTC) is reached: ${spent} is spent or held by requests in flight.`,
            `Requests that may cost more than what is left are refused (HTTP 429, insufficient_quota) until the limit resets at ${resetAt(f.month)}.`,
          ],
        ];
  return {
    kind: `spend_limit_${f.threshold}`,
    to: f.to.email,
    subject,
    text: [`Hello ${f.to.name},`, '', ...lines, '', change].join('\n'),
    html: layout(
      `<p>Hello ${escapeText(f.to.name)},</p>\n${lines.map((l) => `<p>${escapeText(l)}</p>`).join('\n')}\n<p>${escapeText(change)}</p>`,
    ),
  };
}
