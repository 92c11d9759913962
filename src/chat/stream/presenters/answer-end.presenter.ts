// What ends an answer, framed once by its wire format's presenter when the upstream is done: a
// completed stream's last events (with the usage logged beside them), a whole answer's JSON body,
// or the error of one that failed or was stopped. A re-run reads the same figures back from the
// relay log, so it ends the request with exactly what its first worker had framed.
import type { UsageStatus } from '../../../../db/schema/index.js';
import { longestCacheTtl } from '../../../providers/cache-control.js';
import type { CompletionParams, TokenUsage } from '../../../providers/types.js';
import { requestCostUsd } from '../../../usage/usage-cost.js';
import type { UsageEvent } from '../../../usage/usage-event.js';
import type { CompletionJob } from '../../relay/completion-job.js';
import type { LoggedUsage } from '../../relay/log.js';
import type { RelayError } from '../../relay/protocol.js';
import type { ChoiceState } from '../choices.js';
import type { AnswerPresenter, AnswerUsage } from './answer-presenter.js';

/**
 * The usage a presenter frames: the ledger's figures, and their cost in USD. `cost` follows
 * OpenRouter's usage.cost, exact as the ledger has it (a JSON number keeps its at most 12 decimals
 * to well under a cent for any single request).
 */
export function answerUsage(usage: UsageEvent): AnswerUsage {
  return {
    prompt_tokens: usage.prompt_tokens,
    completion_tokens: usage.completion_tokens,
    total_tokens: usage.prompt_tokens + usage.completion_tokens,
    prompt_tokens_details: {
      cached_tokens: usage.cached_tokens ?? 0,
      cache_write_tokens: usage.cache_write_tokens ?? 0,
    },
    completion_tokens_details: { reasoning_tokens: usage.reasoning_tokens ?? 0 },
    cost: Number(requestCostUsd(usage)),
  };
}

/** The last message of an answer: its kind and payload, and for a completed stream the usage to log before it. */
export interface AnswerEnd {
  kind: 'done' | 'final' | 'error';
  payload: string;
  /**
   * A completed stream's usage (LoggedUsage), logged beside its text: its client has seen text, so
   * should its worker die before the record, a re-run ends the stream and bills exactly that.
   */
  logged?: string;
}

/** How the upstream ended, with the usage billed for it and, unless it completed, the error its client is told. */
export type AnswerOutcome = { choices: readonly ChoiceState[]; usage: UsageEvent } & (
  { status: 'completed' } | { status: Exclude<UsageStatus, 'completed'>; error: RelayError }
);

/** Frames the end of an answer in the job's wire format. */
export function answerEnd(
  present: AnswerPresenter,
  job: Pick<CompletionJob, 'stream'>,
  outcome: AnswerOutcome,
): AnswerEnd {
  const { choices } = outcome;
  const usage = answerUsage(outcome.usage);
  // Failed or stopped: should a client still be there (its web process was only thought gone), it
  // must not take the cut answer for a whole one.
  if (outcome.status !== 'completed')
    return { kind: 'error', payload: present.errorPayload(outcome.error, choices, usage) };
  if (!job.stream) return { kind: 'final', payload: present.body(choices, usage) };
  const done = present.done(choices, usage);
  const oneHour = outcome.usage.cache_write_1h_tokens;
  const logged: LoggedUsage = { usage, done, ...(oneHour ? { cache_write_1h_tokens: oneHour } : {}) };
  return { kind: 'done', payload: done, logged: JSON.stringify(logged) };
}

/**
 * The counts an answer's usage reports, in chat's names or the Responses API's (its relay log or
 * its stored body). The wire does not say which cache writes had the 1-hour TTL: `oneHour` does.
 */
export function countsOfAnswerUsage(
  usage: Partial<AnswerUsage> & {
    input_tokens?: number;
    output_tokens?: number;
    input_tokens_details?: { cached_tokens?: number; cache_write_tokens?: number };
    output_tokens_details?: { reasoning_tokens?: number };
  },
  oneHour = 0,
): TokenUsage {
  const prompt = usage.prompt_tokens_details ?? usage.input_tokens_details;
  return {
    prompt_tokens: usage.prompt_tokens ?? usage.input_tokens ?? 0,
    completion_tokens: usage.completion_tokens ?? usage.output_tokens ?? 0,
    cached_tokens: prompt?.cached_tokens ?? 0,
    cache_write_tokens: prompt?.cache_write_tokens ?? 0,
    cache_write_1h_tokens: oneHour,
    reasoning_tokens: (usage.completion_tokens_details ?? usage.output_tokens_details)?.reasoning_tokens ?? 0,
  };
}

/** The tokens a whole answer's body bills: chat's `usage` names, or the Responses API's. */
export function usageInBody(body: string, params: Pick<CompletionParams, 'tools' | 'messages'>): TokenUsage {
  const { usage } = JSON.parse(body) as { usage: Parameters<typeof countsOfAnswerUsage>[0] };
  // The body does not say which cache writes had the 1-hour TTL: a request that marked one is
  // billed them all at that price, the most they can cost (its reservation's own assumption).
  const counts = countsOfAnswerUsage(usage);
  return longestCacheTtl(params) === '1h' ? { ...counts, cache_write_1h_tokens: counts.cache_write_tokens } : counts;
}

/** A completed stream's logged usage, read back: the tokens it bills and the `done` payload that ends it. */
export function loggedEnd(payload: string): { counts: TokenUsage; done: string } {
  const { usage, done, cache_write_1h_tokens: oneHour } = JSON.parse(payload) as LoggedUsage;
  return { counts: countsOfAnswerUsage(usage, oneHour), done };
}
