import { AppError, isAppError, validationError } from '../errors.js';
import { transaction } from '../infra/db.js';
import {
  beginClosing,
  confirmsAccount,
  eraseClosingAccount,
  lockClosingAccount,
  type ClosingDeps,
} from '../accounts/account-closing.service.js';
import { getAccount } from '../accounts/accounts.service.js';
import type { Account } from '../accounts/account.js';
import { endAccountSessions } from '../console-identity/sessions.service.js';
import { invoiceBeforeClosing, type InvoicingDeps } from '../billing/invoicing.service.js';
import type { InvoiceView } from '../billing/invoices.presenter.js';
import { cancelSubscriptionForClosing, type PaidTierDeps } from '../subscriptions/paid-tier.service.js';
import { changeTier } from '../subscriptions/tier.service.js';
import { deleteAllResponses } from '../responses/stored-responses.service.js';
import type { CloseAccountInput } from './account-closing.schema.js';

/*
 * Closing an account (docs/accounts.md#closing-an-account), in the order that lets any step fail
 * and the whole request be repeated:
 * 1. access ends: every key revoked on every web process, the closure marked under way;
 * 2. money is settled: the subscription cancelled in Stripe, the usage not yet invoiced invoiced;
 * 3. the person goes: sessions, sign-in links and JWTs ended, stored responses deleted, mail to
 *    the address dropped, name, organisation and address erased, the account marked closed.
 * Steps 2 and 3 only run after 1 has committed, so no request is admitted while the final invoice
 * is made. A failure in 2 leaves the account closing (keys revoked, data and console session
 * kept): repeating the request repeats 1 and 2, which are idempotent, and finishes.
 */

export type CloseAccountDeps = ClosingDeps & InvoicingDeps & Pick<PaidTierDeps, 'stripe'>;

export interface CloseAccountResult {
  status: 'closed';
  message: string;
  account_id: string;
  subscription_cancelled: boolean;
  final_invoice: InvoiceView | null;
}

export async function closeAccount(
  app: CloseAccountDeps,
  accountId: string,
  input: CloseAccountInput,
): Promise<CloseAccountResult> {
  const account = await getAccount(app, accountId);
  if (account.closed_at === null && !confirmsAccount(account, input.confirm_email))
    throw validationError([
      {
        loc: ['body', 'confirm_email'],
        msg: "Type the account's email address exactly to confirm closing it",
        type: 'value_error',
      },
    ]);
  const closing = await beginClosing(app, accountId);
  if (closing.closed_at !== null) return closed(closing, false, null);
  const { cancelled, invoice } = await settle(app, closing);
  await transaction(app.db, async (trx) => {
    const locked = await lockClosingAccount(trx, accountId);
    // A concurrent request finished first.
    if (!locked || locked.closed_at !== null) return;
    const now = app.clock.now();
    await endAccountSessions(trx, accountId, now);
    await deleteAllResponses(trx, accountId);
    await changeTier(app, trx, accountId, 'free', 'account_closed', now);
    await eraseClosingAccount(app, trx, locked, now);
  });
  app.log.info({ accountId, cancelled, invoiceId: invoice?.id ?? null }, 'account closed; personal data erased');
  return closed(account, cancelled, invoice);
}

/** Step 2; a failure says the account is closing, not closed, and that repeating finishes it. */
async function settle(
  app: CloseAccountDeps,
  account: Account,
): Promise<{ cancelled: boolean; invoice: InvoiceView | null }> {
  let doing = 'cancelling the subscription';
  try {
    const cancelled = await cancelSubscriptionForClosing(app, account);
    doing = 'issuing the final invoice';
    const invoice = await invoiceBeforeClosing(app, account);
    return { cancelled, invoice };
  } catch (err) {
    if (!isAppError(err)) throw err;
    app.log.warn({ err, accountId: account.id }, `closing the account stopped at ${doing}`);
    throw new AppError(
      err.kind,
      `The account is not closed yet: ${doing} failed (${err.message}) Its API keys no longer work; its data is kept until it closes. Repeat the request to finish closing it.`,
      { status: err.status, code: err.code ?? 'account_not_closed', headers: err.headers, cause: err },
    );
  }
}

function closed(account: Account, cancelled: boolean, invoice: InvoiceView | null): CloseAccountResult {
  return {
    status: 'closed',
    message:
      'The account is closed: its API keys and console sessions no longer work, and its personal data is erased. ' +
      (invoice ? `The usage not yet invoiced is on invoice ${invoice.stripe_invoice_id}. ` : '') +
      'The address can sign up again.',
    account_id: account.id,
    subscription_cancelled: cancelled,
    final_invoice: invoice,
  };
}
