import type { UsageStatus } from '../../../db/schema/index.js';
import type { TokenUsage } from '../../providers/types.js';
import type { UsageEvent } from '../../usage/usage-event.js';
import { usageOf, type CompletionJob } from '../relay/completion-job.js';
import { tokensOf, type ChoiceState } from '../stream/choices.js';

// What a completion job is billed: what was produced, cut to what reached its client where that is
// known to be less. Every end of a job, a run's or a take-over's, is billed by `billable`.

/** No tokens: the usage of a request that ran for nobody. */
export const NOTHING: TokenUsage = Object.freeze({ prompt_tokens: 0, completion_tokens: 0 });

/** A usage's prompt and its parts, without its completion. */
export function promptPartOf(u: TokenUsage): Omit<TokenUsage, 'completion_tokens' | 'reasoning_tokens'> {
  const { completion_tokens: _completion, reasoning_tokens: _reasoning, ...prompt } = u;
  return prompt;
}

/** Completion tokens of a partial answer: each choice's whole text and tool calls counted, as its reader would. */
export function countChoices(choices: readonly Pick<ChoiceState, 'text' | 'calls'>[]): number {
  let total = 0;
  for (const c of choices) total += tokensOf(c);
  return total;
}

/**
 * What reached the client: all that was produced (or billed as if it had: nothing says otherwise),
 * none of it, or each choice as the relay log shows it was sent.
 */
export type Delivered = 'all' | 'none' | { choices: readonly ChoiceState[] };

/**
 * What an upstream call produced, as the ledger counts it: the provider's counts when it finished
 * normally; otherwise each choice's whole text, as the client counts what it received. A request
 * the upstream refused before producing anything bills no prompt tokens (providers do not charge
 * them). A cut answer's reasoning is not known (the provider counts it at the end): only its text is.
 */
export function producedUsage(
  job: Pick<CompletionJob, 'promptTokens'>,
  status: UsageStatus,
  answer: { upstreamUsage: TokenUsage | undefined; produced: boolean; choices: readonly ChoiceState[] },
): TokenUsage {
  const { upstreamUsage } = answer;
  if (status === 'completed' && upstreamUsage) return upstreamUsage;
  return {
    ...(upstreamUsage ? promptPartOf(upstreamUsage) : { prompt_tokens: answer.produced ? job.promptTokens : 0 }),
    completion_tokens: countChoices(answer.choices),
  };
}

/**
 * The billing rule: what was produced, given what was delivered. A cut answer bills its prompt and
 * the choices its client was sent; an answer none of which reached its client bills nothing, and a
 * whole one that did not reach it counts as cancelled, like a request whose client left before it began.
 */
export function billable(
  job: CompletionJob,
  status: UsageStatus,
  produced: TokenUsage,
  delivered: Delivered,
): UsageEvent {
  if (delivered === 'all') return usageOf(job, status, produced);
  if (delivered === 'none') return usageOf(job, status === 'completed' ? 'cancelled' : status, NOTHING);
  return usageOf(job, status, { ...promptPartOf(produced), completion_tokens: countChoices(delivered.choices) });
}

/**
 * The last message a job stopped for its web process's death bills through. A web process that
 * acknowledges what it hands its clients (relay/acks.ts) has handed each client at most the message
 * after its acknowledgement, and that one only if it reached the process: billed through it, a
 * client is billed at most one relay message beyond what it received, and never less, however
 * many messages the process held unwritten when it died. A process that acknowledged nothing
 * handed its client no part of the answer. For a job of a web process that does not acknowledge,
 * what its subscription took.
 */
export function billedThrough(acks: boolean, acked: number | undefined, received: number): number {
  if (!acks) return received;
  if (acked === undefined) return 0;
  return Math.min(acked + 1, Math.max(received, acked));
}
