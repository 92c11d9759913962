import type { Migration } from 'kysely';
import * as initialSchema from './2026-11-22T130000-initial-schema.js';
import * as usageMonthlyTotals from './2026-11-22T140000-usage-monthly-totals.js';
import * as spendLimits from './2026-11-23T100000-spend-limits.js';
import * as usageDailyTotals from './2026-11-24T100000-usage-daily-totals.js';
import * as consoleSessions from './2026-11-26T150000-console-sessions.js';
import * as outboxLinkTokens from './2026-11-28T140000-outbox-link-tokens.js';
import * as accountTokensNotBefore from './2026-11-28T150000-account-tokens-not-before.js';
import * as storedResponses from './2026-11-28T170000-stored-responses.js';
import * as usageApi from './2026-11-28T200000-usage-api.js';
import * as accountClosing from './2026-11-28T210000-account-closing.js';
import * as namedApiKeys from './2026-11-28T220000-named-api-keys.js';
import * as usageByKey from './2026-11-28T230000-usage-by-key.js';
import * as usageDailyPaidRequests from './2026-11-28T233000-usage-daily-paid-requests.js';
import * as usageCacheTokens from './2026-11-29T030000-usage-cache-tokens.js';

// Listed explicitly (not read from the folder) so the build, not the file system, decides what runs.
export const migrations: Record<string, Migration> = {
  '2026-11-22T130000-initial-schema': initialSchema,
  '2026-11-22T140000-usage-monthly-totals': usageMonthlyTotals,
  '2026-11-23T100000-spend-limits': spendLimits,
  '2026-11-24T100000-usage-daily-totals': usageDailyTotals,
  '2026-11-26T150000-console-sessions': consoleSessions,
  '2026-11-28T140000-outbox-link-tokens': outboxLinkTokens,
  '2026-11-28T150000-account-tokens-not-before': accountTokensNotBefore,
  '2026-11-28T170000-stored-responses': storedResponses,
  '2026-11-28T200000-usage-api': usageApi,
  '2026-11-28T210000-account-closing': accountClosing,
  '2026-11-28T220000-named-api-keys': namedApiKeys,
  '2026-11-28T230000-usage-by-key': usageByKey,
  '2026-11-28T233000-usage-daily-paid-requests': usageDailyPaidRequests,
  '2026-11-29T030000-usage-cache-tokens': usageCacheTokens,
};
