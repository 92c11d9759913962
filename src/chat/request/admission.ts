import type { Account } from '../../accounts/account.js';
import type { ApiKeyGrant, KeyedAccount } from '../../accounts/key-grant.js';
import { alertSpendLimitReached, type SpendAlertDeps } from '../../billing/spend-alerts.service.js';
import { AppError } from '../../errors.js';
import type { Logger } from '../../logger.js';
import {
  admissionError,
  GuardChanged,
  type Admission,
  type AdmitInput,
  type Limiter,
} from '../../limits/limiter.service.js';
import { nanoUsdOf } from '../../usage/usage-cost.js';
import type { ChatCompletionRequest } from './chat.schema.js';
import { prepareCompletion, spendCheckOf, type PrepareDeps } from './chat.service.js';
import type { PreparedJob } from '../relay/completion-job.js';
import { traceAdmission } from '../relay/completion-tracing.js';
import type { Dispatcher } from './dispatch.service.js';
import type { ResponsesWire } from '../relay/completion-job.js';

/** What admitting a request works with: preparing it, the queue's room, the limits, the spend alerts. */
export interface AdmissionDeps extends PrepareDeps, SpendAlertDeps {
  limiter: Limiter;
  dispatcher: Pick<Dispatcher, 'assertRoom'>;
  relayHub: { readonly instance: string };
  log: Logger;
}

/** The API key's own limits as the limiter takes them; nothing for a key without any. */
function keyLimitsOf(key: ApiKeyGrant | undefined): Pick<AdmitInput, 'key'> {
  if (!key || (key.requests_per_minute === null && key.monthly_spend_limit_usd === null)) return {};
  return {
    key: {
      id: key.id,
      ...(key.requests_per_minute !== null ? { requestsPerMinute: key.requests_per_minute } : {}),
      ...(key.monthly_spend_limit_usd !== null ? { spendLimitNanoUsd: nanoUsdOf(key.monthly_spend_limit_usd) } : {}),
    },
  };
}

/**
 * An API key taken from this process's cache, not yet confirmed: `versionKey` holds its current
 * version, which the admission script checks; `refresh` reads the account afresh.
 */
export interface UnconfirmedKey {
  versionKey: string;
  version: string | null;
  refresh(): Promise<KeyedAccount>;
}

export interface AdmissionResult {
  job: PreparedJob;
  /** The rate-limit headers, for the answer whichever it is. */
  headers: Record<string, string>;
  /** Set when the limits refused the request (429); its spend alert, if due, is already queued. */
  refusal?: AppError;
}

/**
 * The request as a job to queue, admitted or refused by the rate limits. An unconfirmed account
 * is confirmed by the admission script, and a model refused on its tier waits for a fresh read
 * (the account may have just left that tier). A changed account is read afresh and the request
 * decided again. Throws when the request is invalid or the queue has no room.
 */
export async function admitCompletion(
  deps: AdmissionDeps,
  input: {
    account: Account;
    /** The API key's own settings, when an API key made the request. */
    key?: ApiKeyGrant;
    request: ChatCompletionRequest;
    unconfirmed?: UnconfirmedKey;
    wire?: ResponsesWire;
  },
): Promise<AdmissionResult> {
  let key = input.key;
  const prepare = (account: Account) =>
    prepareCompletion(deps, account, input.request, deps.relayHub.instance, input.wire, key);
  const admitFor = (account: Account, job: PreparedJob, guard?: { key: string; value: string | null }) =>
    traceAdmission(job, () =>
      deps.limiter.admit({
        accountId: account.id,
        tier: account.tier,
        requestId: job.id,
        reserveTokens: job.reservedTokens,
        guard,
        spend: spendCheckOf(account, job, key),
        ...keyLimitsOf(key),
      }),
    );
  let check = input.unconfirmed;
  const confirmed = async () => {
    check = undefined;
    const fresh = await input.unconfirmed!.refresh();
    key = fresh.apiKey;
    return fresh;
  };
  let account = input.account;
  let job: PreparedJob;
  try {
    job = prepare(account);
  } catch (err) {
    // Of prepare's refusals only the 403s (a model the tier or the key may not use) depend on the
    // account and its key, which may have changed since they were cached.
    if (!check || !(err instanceof AppError && err.status === 403)) throw err;
    account = await confirmed();
    job = prepare(account);
  }
  deps.dispatcher.assertRoom();
  let admission: Admission;
  try {
    admission = await admitFor(account, job, check && { key: check.versionKey, value: check.version });
  } catch (err) {
    if (!(err instanceof GuardChanged) || !check) throw err;
    account = await confirmed();
    job = prepare(account);
    admission = await admitFor(account, job);
  }
  if (admission.allowed) return { job, headers: admission.headers };
  // The account's alert is for the account's limit; a key's own limit is the key owner's business.
  if (admission.spend && !admission.spend.ofKey) await alertSpendLimitReached(deps, account, admission.spend);
  return { job, headers: admission.headers, refusal: admissionError(admission) };
}
