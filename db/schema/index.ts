import type { AccountsTable, TierChangesTable } from './accounts.js';
import type { ApiKeysTable } from './api-keys.js';
import type { ConsoleSessionsTable, SignInTokensTable } from './console-sessions.js';
import type { EmailOutboxTable } from './email-outbox.js';
import type { EmailVerificationTokensTable } from './email-verification-tokens.js';
import type { InvoiceLinesTable, InvoicesTable } from './invoices.js';
import type { SchedulerRunsTable } from './scheduler-runs.js';
import type { SpendAlertsTable } from './spend-alerts.js';
import type { StoredResponsesTable } from './stored-responses.js';
import type { UsageEventsTable } from './usage-events.js';
import type { UsageMonthlyTotalsTable } from './usage-monthly-totals.js';
import type { UsageDailyTotalsTable } from './usage-daily-totals.js';
import type { ProcessedWebhookEventsTable } from './webhook-events.js';

export interface Database {
  accounts: AccountsTable;
  tier_changes: TierChangesTable;
  api_keys: ApiKeysTable;
  email_verification_tokens: EmailVerificationTokensTable;
  usage_events: UsageEventsTable;
  usage_monthly_totals: UsageMonthlyTotalsTable;
  usage_daily_totals: UsageDailyTotalsTable;
  invoices: InvoicesTable;
  invoice_lines: InvoiceLinesTable;
  processed_webhook_events: ProcessedWebhookEventsTable;
  email_outbox: EmailOutboxTable;
  scheduler_runs: SchedulerRunsTable;
  spend_alerts: SpendAlertsTable;
  sign_in_tokens: SignInTokensTable;
  console_sessions: ConsoleSessionsTable;
  stored_responses: StoredResponsesTable;
}

export type { Tier } from './accounts.js';
export type { UsageApi, UsageStatus } from './usage-events.js';
export type { InvoiceKind } from './invoices.js';
export type { OutboxStatus } from './email-outbox.js';
export type { StoredResponseStatus } from './stored-responses.js';
